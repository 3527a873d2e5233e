"""Layer normalisation helpers for any rank (popxl_addons/ops/layer_norm.py).

`popxl.ops.layer_norm` (and the `LayerNorm` layer) take `(N, C)`; these normalise the
last axis of any tensor by flattening the others around `ops.layer_norm`:

```python
y = addons.ops.layer_norm(x, w, b)        # x (B, S, H), w and b (H,)
y = addons.ops.layer_norm_no_affine(x)    # the same without weight and bias
```
"""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops

__all__ = ["layer_norm", "layer_norm_no_affine"]


def layer_norm(x: popxl.Tensor, weight: popxl.Tensor, bias: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
    """Each vector along the last axis of `x` normalised to mean 0 and variance 1 (biased,
    plus `eps`), then `* weight + bias` (both of shape `(x.shape[-1],)`)."""
    if not isinstance(x, popxl.Tensor):
        raise TypeError(f"addons.ops.layer_norm: expected a Tensor, got {type(x).__name__}")
    if x.rank < 1:
        raise ValueError(f"addons.ops.layer_norm: the input must have rank >= 1, got shape {x.shape}")
    c = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if tuple(t.shape) != (c,):
            raise ValueError(f"addons.ops.layer_norm: {name} must have shape ({c},), got {t.shape}")
    if x.rank == 2:
        return ops.layer_norm(x, weight, bias, eps=eps)
    flat = x.reshape((int(np.prod(x.shape[:-1])), c))
    return ops.layer_norm(flat, weight, bias, eps=eps).reshape(x.shape)


def layer_norm_no_affine(x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
    """`layer_norm` with weight 1 and bias 0."""
    c = x.shape[-1]
    one = popxl.constant(np.ones((c,), x.dtype.as_numpy()), x.dtype)
    zero = popxl.constant(np.zeros((c,), x.dtype.as_numpy()), x.dtype)
    return layer_norm(x, one, zero, eps)
