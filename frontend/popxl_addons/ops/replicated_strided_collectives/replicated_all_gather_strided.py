"""`replicated_all_gather_strided` (see the package docstring)."""

from __future__ import annotations

import popxl
import popxl.ops as ops
from popxl_addons.ops.replicated_strided_collectives._common import checked

__all__ = ["replicated_all_gather_strided"]


def replicated_all_gather_strided(t: popxl.Tensor, group: popxl.ReplicaGrouping | None = None) -> popxl.Tensor:
    """The elements of `t` of every replica of the group (default: all replicas), in the
    group's order: flat `(group_size * t.nelms,)`, or reshaped to `t.meta_shape` when `t` is
    a shard of a tensor of that shape (the padding of a reduce-scatter dropped).
    Differentiable: the gradient is this replica's slice of the gradient."""
    what = "addons.ops.replicated_all_gather_strided"
    group = checked(t, group, what)
    flat = t.reshape((t.nelms,)) if t.rank != 1 else t
    out = ops.collectives.replicated_all_gather(flat, 0, group, "concat")
    meta = tuple(t.meta_shape or ())
    if not meta:
        return out
    n = 1
    for d in meta:
        n *= d
    if n > out.shape[0]:
        raise ValueError(f"{what}: {out.shape[0]} gathered elements cannot fill the meta shape {meta} of {t.id}")
    if n < out.shape[0]:
        out = ops.slice(out, start=0, stop=n, axis=0)
    return out.reshape(meta)
