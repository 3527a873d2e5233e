"""`grad_reduce_square_add`: the sum of squares of a loss-scaled gradient, unscaled
(popxl_addons.ops.grad_reduce_square_add), for gradient norms:

```python
grad_norm = ops.sqrt(grad_reduce_square_add(grad, loss_scaling=64))
```
"""

from __future__ import annotations

import numbers

import numpy as np

import popxl
import popxl.ops as ops

__all__ = ["grad_reduce_square_add"]


def grad_reduce_square_add(t: popxl.Tensor, loss_scaling: int | float | popxl.Tensor) -> popxl.Tensor:
    """`sum(t ** 2) / loss_scaling ** 2` over every element of `t`, a float32 scalar.

    Squares and sum are taken in float32 whatever the dtype of `t` (upstream reduces a
    float16 gradient into float32 the same way), and so is `1 / loss_scaling ** 2` when
    `loss_scaling` is a Tensor. Differentiable in `t` (`2 t / loss_scaling ** 2`).

    Args:
        t: the (loss-scaled) gradient, any float dtype and shape.
        loss_scaling: the scale of the values of `t`: a non-zero number or a scalar Tensor.
    """
    what = "addons.ops.grad_reduce_square_add"
    if not isinstance(t, popxl.Tensor):
        raise TypeError(f"{what}: t must be a popxl Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{what}: t must be a float tensor, got {t.dtype.name}")
    if isinstance(loss_scaling, popxl.Tensor):
        if loss_scaling.nelms != 1:
            raise ValueError(f"{what}: loss_scaling must be a scalar tensor, got shape {loss_scaling.shape}")
        ls = ops.cast(loss_scaling, popxl.float32).reshape(())
        scale = popxl.constant(np.float32(1.0), popxl.float32) / (ls * ls)
    elif isinstance(loss_scaling, numbers.Real) and not isinstance(loss_scaling, bool):
        if loss_scaling == 0:
            raise ValueError(f"{what}: loss_scaling must not be 0")
        scale = popxl.constant(np.float32(1.0 / (float(loss_scaling) * float(loss_scaling))), popxl.float32)
    else:
        raise TypeError(f"{what}: loss_scaling must be a number or a popxl Tensor, got {type(loss_scaling).__name__}")
    x = t if t.dtype == popxl.float32 else ops.cast(t, popxl.float32)
    return ops.sum(x * x) * scale
