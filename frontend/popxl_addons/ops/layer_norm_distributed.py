"""Layer normalisation of a tensor sharded over replicas along its hidden (last) axis:
`popxl_addons.ops.layer_norm_distributed`.

Each replica of the group holds `(n, hidden / group_size)` and its slice of the weight
and bias; the mean and the variance are over the whole hidden axis. Built from popxl
ops: the per-row sums are all-reduced over the group (mean first, then the sum of
squared deviations, as a stable two-pass variance), with the differentiable
`replicated_all_reduce`, so each replica's input gets the gradient of the sum of every
replica's output (its own terms plus the all-reduced statistics' terms), and weight and
bias their local gradients, as upstream's gradient op.

```python
y = layer_norm_distributed(x, w, b, epsilon=1e-5, group=rg_tp)
```
"""

from __future__ import annotations

import numbers

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.ops.replicated_all_reduce_TP import replicated_all_reduce

__all__ = ["layer_norm_distributed"]


def layer_norm_distributed(
    t: popxl.Tensor,
    w: popxl.Tensor,
    b: popxl.Tensor,
    epsilon: float = 1e-5,
    group: popxl.ReplicaGrouping | None = None,
) -> popxl.Tensor:
    """`(t - mean) / sqrt(var + epsilon) * w + b`, mean and (biased) variance over the last
    axis of `t` gathered from every replica of `group`.

    Args:
        t: `(n, h)` this replica's shard of the hidden axis (any rank >= 1: the last axis is
            normalised; upstream takes rank 2).
        w, b: `(h,)` this replica's shards of the scale and shift.
        epsilon: added to the variance.
        group: the replicas the hidden axis is sharded over (default: all replicas).

    Returns:
        The normalised shard, the shape and dtype of `t` (statistics in float32 for
        float16 inputs).
    """
    what = "addons.ops.layer_norm_distributed"
    for arg, x in (("t", t), ("w", w), ("b", b)):
        if not isinstance(x, popxl.Tensor):
            raise TypeError(f"{what}: {arg} must be a popxl Tensor, got {type(x).__name__}")
    if t.rank < 1:
        raise ValueError(f"{what}: t must have rank >= 1, got shape {t.shape}")
    h = t.shape[-1]
    for arg, x in (("w", w), ("b", b)):
        if tuple(x.shape) != (h,):
            raise ValueError(f"{what}: {arg} must have the shape ({h},) of the last axis of t {t.shape}, got {x.shape}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{what}: t must be a float tensor, got {t.dtype.name}")
    if not isinstance(epsilon, numbers.Real) or isinstance(epsilon, bool) or epsilon < 0:
        raise ValueError(f"{what}: epsilon must be a non-negative number, got {epsilon!r}")
    ir = popxl.gcg().ir
    group = ir.replica_grouping() if group is None else group
    if not isinstance(group, popxl.ReplicaGrouping):
        raise TypeError(f"{what}: group must be a popxl.ReplicaGrouping, got {type(group).__name__}")

    x = t if t.dtype != popxl.float16 else ops.cast(t, popxl.float32)
    inv_size = popxl.constant(np.float32(1.0 / (h * group.group_size)), x.dtype)
    mean = replicated_all_reduce(ops.sum(x, axis=-1, keepdims=True), "add", group) * inv_size
    centred = x - mean
    var = replicated_all_reduce(ops.sum(centred * centred, axis=-1, keepdims=True), "add", group) * inv_size
    y = centred / ops.sqrt(var + popxl.constant(np.float32(epsilon), x.dtype))
    if y.dtype != t.dtype:
        y = ops.cast(y, t.dtype)
    return y * w + b
