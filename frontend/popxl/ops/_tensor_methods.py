"""Tensor's methods and operators, set on `popxl.Tensor` by `popxl.ops` (as JAX's
`array_methods` sets those of `jax.Array`).

`popxl/tensor.py` defines the Tensor class (and declares these methods' types) without
importing the ops; `set_tensor_methods()`, called once by `popxl/ops/__init__.py`, attaches
each method below: its op itself (`t.reshape(shape)` is `ops.reshape(t, shape)`, `t += o`
is `ops.add_(t, o)`), or for a binary operator a call to its op:

```python
y = (x + 1.0) @ w           # ops.matmul(ops.add(x, constant(1.0)), w)
z = y.reshape((4,)).T[0]    # ops.reshape, ops.transpose, indexing (slice / gather)
x += y                      # ops.add_: updates x in place, as in PopXL
```

A binary operator takes a Tensor, a Python number or list, a NumPy array or a torch
tensor; host data becomes a constant of the tensor's dtype. For any other operand it
returns `NotImplemented`, so Python tries the other operand's method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from popxl._host import is_torch
from popxl.ops._ops import (
    _getitem,
    abs,
    add,
    add_,
    detach,
    detach_,
    div,
    flatten,
    flatten_,
    fmod,
    ipu_copy,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    mul,
    negate,
    pow,
    reshape,
    reshape_,
    sub,
    transpose,
    transpose_,
)
from popxl.ops._utils import to_tensor
from popxl.tensor import Tensor

__all__ = ["set_tensor_methods"]

_HOST_OPERANDS = (int, float, bool, np.ndarray, np.generic, list, tuple)


def _operand(self: Tensor, other: Any) -> Tensor | None:
    """`other` as the second operand of a binary operator on `self` (None: not supported)."""
    if isinstance(other, Tensor):
        return other
    if is_torch(other):
        other = np.asarray(other)
    elif not isinstance(other, _HOST_OPERANDS):
        return None
    return to_tensor(other, self.dtype)


def _binary(op: Callable[[Tensor, Tensor], Tensor], reflected: bool = False) -> Callable[[Tensor, Any], Any]:
    """The operator `self <op> other` (reflected: `other <op> self`)."""

    def method(self: Tensor, other: Any) -> Any:
        o = _operand(self, other)
        if o is None:
            return NotImplemented
        return op(o, self) if reflected else op(self, o)

    return method


def _pos(self: Tensor) -> Tensor:
    return self


def _diag(self: Tensor) -> Tensor:
    """The diagonal of a 2d tensor: `t[i, i]` for i < min(t.shape), as one strided slice
    of `t.flatten()`. ValueError for another rank."""
    if self.rank != 2:
        raise ValueError(f"Tensor.diag: expected a 2d tensor, got {self.id} of shape {self.shape}")
    rows, cols = self.shape
    n = min(rows, cols)
    return _getitem(flatten(self), slice(0, n * (cols + 1), cols + 1))


def _iadd(self: Tensor, other: Any) -> Tensor:
    """`self += other`: `ops.add_(self, other)`; the name stays bound to `self` (a variable
    stays that variable), as in PopXL, although `ops.add_` returns a new tensor."""
    add_(self, other)
    return self


_METHODS: dict[str, Any] = {
    # shape
    "reshape": reshape,
    "reshape_": reshape_,
    "flatten": flatten,
    "flatten_": flatten_,
    "transpose": transpose,
    "transpose_": transpose_,
    "T": property(transpose, doc="`ops.transpose(t)`: the dims reversed."),
    "T_": property(transpose_, doc="`ops.transpose_(t)`: the dims reversed, a view of `t`."),
    "detach": detach,
    "detach_": detach_,
    "copy_to_ipu": ipu_copy,
    "diag": _diag,
    "__getitem__": _getitem,
    # arithmetic (`__iadd__` is in place, as in PopXL; no other in-place operator is)
    "__add__": _binary(add),
    "__radd__": _binary(add, reflected=True),
    "__iadd__": _iadd,
    "__sub__": _binary(sub),
    "__rsub__": _binary(sub, reflected=True),
    "__mul__": _binary(mul),
    "__rmul__": _binary(mul, reflected=True),
    "__truediv__": _binary(div),
    "__rtruediv__": _binary(div, reflected=True),
    "__mod__": _binary(fmod),
    "__rmod__": _binary(fmod, reflected=True),
    "__pow__": _binary(pow),
    "__rpow__": _binary(pow, reflected=True),
    "__matmul__": _binary(matmul),
    "__rmatmul__": _binary(matmul, reflected=True),
    # logical
    "__and__": _binary(logical_and),
    "__rand__": _binary(logical_and, reflected=True),
    "__or__": _binary(logical_or),
    "__ror__": _binary(logical_or, reflected=True),
    "__invert__": logical_not,
    # unary
    "__neg__": negate,
    "__pos__": _pos,
    "__abs__": abs,
}


def set_tensor_methods() -> None:
    """Set every method and operator above on `popxl.Tensor`."""
    for name, method in _METHODS.items():
        setattr(Tensor, name, method)
