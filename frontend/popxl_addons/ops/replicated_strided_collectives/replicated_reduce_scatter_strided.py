"""`replicated_reduce_scatter_strided` (see the package docstring)."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.ops.replicated_strided_collectives._common import checked, checked_op

__all__ = ["replicated_reduce_scatter_strided"]


def replicated_reduce_scatter_strided(
    t: popxl.Tensor,
    op: str = "add",
    group: popxl.ReplicaGrouping | None = None,
    configure_output_for_replicated_tensor_sharding: bool = False,
) -> popxl.Tensor:
    """`t` (flattened, zero-padded to a multiple of the group size) reduced with `op`
    (`add` or `mean`) over the group (default: all replicas); the i-th member gets the
    i-th of the `group_size` equal 1-D shards, `(ceil(t.nelms / group_size),)`.
    Differentiable: the gradient is the all-gather of the gradients.

    With `configure_output_for_replicated_tensor_sharding` the shard is an RTS shard of
    `t`: its `meta_shape` is `t.shape`. That needs `t.nelms` to divide by the group size
    on xl (ValueError otherwise: a padded shard has no meta shape here)."""
    what = "addons.ops.replicated_reduce_scatter_strided"
    group = checked(t, group, what)
    op = checked_op(op, what)
    size = group.group_size
    pad = -t.nelms % size
    if configure_output_for_replicated_tensor_sharding:
        if pad:
            raise ValueError(
                f"{what}: with configure_output_for_replicated_tensor_sharding, the {t.nelms} elements of "
                f"{t.id} must divide by the group size {size}"
            )
        return ops.collectives.replicated_reduce_scatter(
            t, op, group, configure_output_for_replicated_tensor_sharding=True
        )
    flat = t.reshape((t.nelms,)) if t.rank != 1 else t
    if pad:
        flat = ops.concat([flat, popxl.constant(np.zeros(pad, t.dtype.as_numpy()), t.dtype)], axis=0)
    return ops.collectives.replicated_reduce_scatter(flat, op, group)
