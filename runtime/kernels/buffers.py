"""What the kernels with a plan template beside them share: where their scratch buffers come
from (allocated per call by the straightforward plan's kernel, the generated plan's shared
scratch for the template, `Gen.scratch`), read-only constants made once, and the one line a
template emits to call the kernel's own function.

```python
from xl.runtime.kernels.buffers import const, empty, ones
assert float(const(0.5, ones(3, "f4").dtype)) == 0.5 and empty((2,), "f4").shape == (2,)
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from xl.runtime.codegen import Gen

Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]

# the dtypes the row kernels compute in; others go through float32 copies
FAST_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """`Alloc` of the straightforward plan's kernels: a new array per call."""
    return np.empty(shape, dtype)


def scratch(g: Gen) -> Alloc:
    """`Alloc` of a template: the generated plan's shared scratch buffers."""
    return lambda shape, dtype: g.scratch(shape, dtype)[0]


@cache
def consts(dtype: np.dtype, *values: float) -> tuple[np.ndarray, ...]:
    """0-d read-only arrays of `dtype`: a ufunc takes them without converting a Python float
    on every call, with the result of the Python float (NumPy converts it to `dtype`)."""
    out = []
    for v in values:
        a = np.array(v, dtype)
        a.flags.writeable = False
        out.append(a)
    return tuple(out)


def const(value: float, dtype: Any) -> np.ndarray:
    return consts(np.dtype(dtype), value)[0]


@cache
def ones(n: int, dtype: Any) -> np.ndarray:
    """A read-only vector of `n` ones (row sums as a matrix-vector product)."""
    a = np.ones(n, dtype)
    a.flags.writeable = False
    return a


def call(g: Gen, fn: Callable[..., None], args: Sequence[np.ndarray | str]) -> list[str]:
    """The one line calling `fn` with `args`: names as given, arrays bound now (`g.view`)."""
    return [f"{g.fn(fn)}({', '.join(a if isinstance(a, str) else g.view(a) for a in args)})"]
