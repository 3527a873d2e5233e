"""`LayerNormDistributed`: layer normalisation of an input sharded over replicas along its
hidden axis (popxl_addons/layers/layer_norm_distributed.py)."""

from __future__ import annotations

from functools import partial

import numpy as np

import popxl
from popxl_addons.module import Module
from popxl_addons.ops.layer_norm_distributed import layer_norm_distributed

__all__ = ["LayerNormDistributed"]


class LayerNormDistributed(Module):
    """`layer_norm_distributed(x, weight, bias, eps, group=replica_grouping)` of an input
    `(n, h)` whose hidden axis is sharded over the replicas of each group of
    `replica_grouping` (default: all replicas).

    Variables `weight` (ones) and `bias` (zeros) of shape `(h,)`: a shard of each per
    member of a group, so they are grouped by `replica_grouping.transpose()` (the i-th
    members of every group share the i-th shard)."""

    def __init__(self, replica_grouping: popxl.ReplicaGrouping | None = None):
        super().__init__()
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        """This replica's shard of `x` `(n, h)` normalised over the whole hidden axis (statistics
        all-reduced over the group), scaled by `weight` and shifted by `bias` (sharded likewise)."""
        group = self.replica_grouping if self.replica_grouping is not None else popxl.gcg().ir.replica_grouping()
        shards = group.transpose()
        w = self.add_variable_input("weight", partial(np.ones, x.shape[-1]), x.dtype, replica_grouping=shards)
        b = self.add_variable_input("bias", partial(np.zeros, x.shape[-1]), x.dtype, replica_grouping=shards)
        return layer_norm_distributed(x, w, b, epsilon=eps, group=group)
