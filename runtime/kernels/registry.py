"""The kernel registry: op class -> kernel factory, and the run-time range checks kernels share.

```python
@kernel(GeluOp)
def _gelu(p: dict[str, Any]) -> Kernel: ...
```

The contract a factory and its kernel follow is described in `xl.runtime.kernels`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xl.dialects.rt_kernels import KernelClass, kernel_class

Kernel = Callable[..., None]
KernelFactory = Callable[[dict[str, Any]], Kernel]

KERNELS: dict[KernelClass, KernelFactory] = {}


def kernel(*classes: KernelClass) -> Callable[[KernelFactory], KernelFactory]:
    """Register the decorated factory as the kernel of each op class.

    What the kernel does to its results is a fact of the class: a kernel that does not
    overwrite every element of its results on every call declares `PartialWrite`
    (`xl.dialects.effects`; the `rt` buffer reuse then keeps the result's storage its own).
    """

    def deco(f: KernelFactory) -> KernelFactory:
        for cls in classes:
            if cls in KERNELS:
                raise TypeError(f"a kernel for {cls.name} is registered twice")
            KERNELS[cls] = f
        return f

    return deco


def kernel_factory(name: str) -> KernelFactory | None:
    """The factory of the kernel an `rt.kernel` of this name runs (None if none)."""
    cls = kernel_class(name)
    return None if cls is None else KERNELS.get(cls)


# ------------------------------------------------------------------------------------
# Values read at run time: indices, labels, classes
# ------------------------------------------------------------------------------------


class DataRangeError(ValueError):
    """An index, label or class read at run time is outside its valid range.

    Raised from `Executable.run` (so from `Session.run` and `xl-run`) instead of
    reading another row's data or failing inside NumPy. The message names the op, the
    tensor (and the host stream it was loaded from, when it was), the bad value and
    the valid range.
    """


def operand(p: dict[str, Any], i: int) -> str:
    """How messages name input `i` of the kernel (the plans put `_operands` in props)."""
    names = p.get("_operands")
    return names[i] if names and i < len(names) else f"operand #{i}"


def op_label(p: dict[str, Any], default: str) -> str:
    return str(p.get("_kernel", default))


def check_range(
    a: np.ndarray,
    lo: int,
    hi: int,
    p: dict[str, Any],
    i: int,
    op: str,
    what: str,
    note: str = "",
    allowed: int | None = None,
) -> None:
    """Raise `DataRangeError` unless every value of `a` is in [lo, hi) (or == `allowed`).

    Two reductions over the indices per call: negligible next to the op itself.
    """
    if a.size == 0:
        return
    mn, mx = a.min(), a.max()
    if lo <= mn and mx < hi:
        return
    bad_mask = (a < lo) | (a >= hi)
    if allowed is not None:
        bad_mask &= a != allowed
    if not bad_mask.any():
        return
    flat = np.flatnonzero(bad_mask.reshape(-1))
    pos = np.unravel_index(int(flat[0]), a.shape) if a.ndim else ()
    bad = a.reshape(-1)[flat[0]].item()
    at = f" at position {tuple(int(x) for x in pos)}" if a.ndim else ""
    extra = f" (or {allowed})" if allowed is not None else ""
    count = f"{flat.size} bad value{'s' if flat.size != 1 else ''}"
    raise DataRangeError(
        f"{op_label(p, op)}: {what} {bad}{at} of {operand(p, i)} is out of range "
        f"[{lo}, {hi}){extra} ({note + '; ' if note else ''}{count})"
    )
