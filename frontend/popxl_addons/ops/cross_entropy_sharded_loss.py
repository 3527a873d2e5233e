"""Cross-entropy of logits sharded over replicas along the class axis (tensor parallelism):
`popxl_addons.ops.cross_entropy_sharded_loss`.

Each replica of a tensor-parallel group holds its slice of the classes `(n_samples,
n_classes / tp)` and the same labels, already shifted to its slice (a label outside
`[0, n_classes / tp)` belongs to another replica). The loss, the same on every replica, is
`-log_softmax(all logits)[label]` per sample:

```python
loss = cross_entropy_sharded_loss(logits, labels - offset, replica_grouping=rg_tp)
```

Built from popxl ops: the softmax statistics are all-reduced over the group (the maximum,
detached: it only keeps `exp` in range; the sum of `exp`), the true logit is picked with
`gather(..., zero_OOR=True)` on the one replica that holds it and all-reduced. The
all-reduces are `replicated_all_reduce_identical_grad_inputs`: the gradient of the loss
arrives identical on every replica, and each replica's logits get
`dloss * (softmax - onehot(label))` on its own slice, as upstream's gradient op.
"""

from __future__ import annotations

import numbers
from typing import Any, Literal

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.ops.replicated_all_reduce_TP import replicated_all_reduce_identical_grad_inputs

__all__ = ["cross_entropy_sharded_loss"]

REDUCTION_TYPE = Literal["mean", "sum", "none"]


def _check_reduction(reduction: Any, what: str) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{what}: `reduction` should be one of `mean`, `sum` and `none`. Passed: {reduction!r}")


def pick_rows(t: popxl.Tensor, indices: popxl.Tensor) -> popxl.Tensor:
    """`t[i, indices[i]]` for every row `i` of the 2-D `t`; 0 where `indices[i]` is outside
    `[0, t.shape[1])` (differentiable in `t`)."""
    n, c = t.shape
    idx = indices if indices.dtype == popxl.int32 else ops.cast(indices, popxl.int32)
    rows = popxl.constant(np.arange(n, dtype=np.int32) * c, popxl.int32)
    valid = ops.logical_and(
        ops.greater(idx, popxl.constant(np.int32(-1))), ops.greater(popxl.constant(np.int32(c)), idx)
    )
    flat_idx = ops.where(valid, rows + idx, popxl.constant(np.int32(-1)))  # -1: a zero
    return ops.gather(t.reshape((n * c,)), flat_idx, zero_OOR=True)


def cross_entropy_sharded_loss(
    logits: popxl.Tensor,
    indices: popxl.Tensor,
    ignore_index: popxl.Tensor | int | None = None,
    replica_grouping: popxl.ReplicaGrouping | None = None,
    reduction: REDUCTION_TYPE = "mean",
    available_memory_proportion: float = 0.4,
) -> popxl.Tensor:
    """Tensor-parallel cross-entropy: `-log_softmax(logits over all shards)[indices]`.

    Args:
        logits: `(n_samples, sharded_n_classes)`, this replica's slice of the classes.
        indices: `(n_samples,)` integer labels, the same on every replica, already shifted
            to this replica's slice (outside `[0, sharded_n_classes)`: another replica's).
        ignore_index: samples whose (shifted) label equals it add nothing to the loss nor
            to the gradient, and are not counted by `mean` (a number or a Tensor).
        replica_grouping: the tensor-parallel group (default: all replicas).
        reduction: `"mean"` (over the samples not ignored), `"sum"` or `"none"`.
        available_memory_proportion: an IPU tile-memory hint, accepted and not used.

    Returns:
        The loss, the same on every replica of the group: a scalar, or `(n_samples,)` with
        `reduction="none"`; of the dtype of `logits` (computed in float32 for float16).
    """
    what = "addons.ops.cross_entropy_sharded_loss"
    for arg, t in (("logits", logits), ("indices", indices)):
        if not isinstance(t, popxl.Tensor):
            raise TypeError(f"{what}: {arg} must be a popxl Tensor, got {type(t).__name__}")
    if logits.rank != 2:
        raise ValueError(f"{what}: logits must be of rank 2 (n_samples, sharded_n_classes), got shape {logits.shape}")
    if indices.rank != 1 or indices.shape[0] != logits.shape[0]:
        raise ValueError(
            f"{what}: indices must have shape (n_samples,) = ({logits.shape[0]},) like logits {logits.shape}, "
            f"got {indices.shape}"
        )
    if not logits.dtype.is_floating_point:
        raise TypeError(f"{what}: logits must be a float tensor, got {logits.dtype.name}")
    if not indices.dtype.is_int:
        raise TypeError(f"{what}: indices must be an integer tensor, got {indices.dtype.name}")
    _check_reduction(reduction, what)
    if not isinstance(available_memory_proportion, numbers.Real):
        raise TypeError(f"{what}: available_memory_proportion must be a number, got {available_memory_proportion!r}")
    ir = popxl.gcg().ir
    group = ir.replica_grouping() if replica_grouping is None else replica_grouping
    if not isinstance(group, popxl.ReplicaGrouping):
        raise TypeError(f"{what}: replica_grouping must be a popxl.ReplicaGrouping, got {type(group).__name__}")

    x = logits if logits.dtype != popxl.float16 else ops.cast(logits, popxl.float32)
    n = x.shape[0]
    # the maximum over every shard keeps exp in range; detached, it does not change the loss
    top = ops.collectives.replicated_all_reduce(ops.detach(ops.max(x, axis=1)), "max", group)
    shifted = x - top.reshape((n, 1))
    denominator = replicated_all_reduce_identical_grad_inputs(ops.sum(ops.exp(shifted), axis=1), "add", group)
    true_logit = replicated_all_reduce_identical_grad_inputs(pick_rows(shifted, indices), "add", group)
    loss = ops.log(denominator) - true_logit
    if loss.dtype != logits.dtype:
        loss = ops.cast(loss, logits.dtype)

    if ignore_index is not None:
        mask = ops.cast(ops.logical_not(ops.equal(indices, ignore_index)), loss.dtype)
        loss = loss * mask
        if reduction == "mean":
            return ops.sum(loss) / ops.sum(mask)
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    return loss
