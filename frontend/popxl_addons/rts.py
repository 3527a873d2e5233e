"""Replicated tensor sharding (RTS) helpers (popxl_addons/rts.py).

A replica-sharded tensor holds, on each replica of its shard group, one equal 1-D part of
the flattened full tensor; its `meta_shape` is the full shape. Gather the parts before
computing, reduce (and re-shard) the gradients after:

```python
g, names = all_gather_replica_sharded_graph(shards)      # one output per tensor: full value
full = NamedTensors.pack(names, g.bind(shards).call())
r, names = reduce_replica_sharded_graph(grads)           # reduce-scatter over the replicas
grad_shards = NamedTensors.pack(names, r.bind(grads).call())
```
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.named_replica_grouping import (
    NamedReplicaGrouping,
    get_ild_replica_grouping,
    get_ild_size_from_popdist,
    is_cross_ild,
)
from popxl_addons.named_tensors import NamedTensors

__all__ = [
    "replica_sharded_spec",
    "gather_replica_sharded_tensor",
    "all_gather_replica_sharded_graph",
    "reduce_replica_sharded_tensor",
    "reduce_replica_sharded_graph",
]


@contextlib.contextmanager
def _tiles(use_io_tiles: bool) -> Iterator[None]:
    if use_io_tiles:
        with popxl.io_tiles():
            yield
    else:
        yield


def _grouping(rg: object, what: str) -> popxl.ReplicaGrouping:
    if rg is None:
        return popxl.gcg().ir.replica_grouping()
    if not isinstance(rg, popxl.ReplicaGrouping):
        raise TypeError(f"{what}: expected a popxl.ReplicaGrouping, got {type(rg).__name__}")
    return rg


def replica_sharded_spec(t: Any, shard_over: Any | None = None, threshold: int | None = None) -> popxl.TensorSpec:
    """The spec of `t` sharded over the groups of `shard_over` (a ReplicaGrouping, default
    all replicas): `((nelms // size,), dtype, meta_shape=t.shape)`. `t`'s own spec when it
    is already sharded (has a meta_shape), when the group has one replica, when its element
    count does not divide by the group size, or when it has fewer than `threshold` elements.

    Both upstream signatures work: `replica_sharded_spec(t, shard_over=group)` and the
    earlier `replica_sharded_spec(t, threshold=512)` (an int second argument is a threshold).
    """
    if isinstance(shard_over, int | np.integer) and not isinstance(shard_over, bool):
        shard_over, threshold = None, int(shard_over)
    shard_over = _grouping(shard_over, "replica_sharded_spec")
    spec = t.spec if isinstance(t, popxl.Tensor) else t
    if tuple(spec.meta_shape or ()):
        return spec
    nelms = int(np.prod(spec.shape))
    size = shard_over.group_size
    if size == 1 or nelms % size or (threshold is not None and nelms < threshold):
        return spec
    return popxl.TensorSpec((nelms // size,), spec.dtype, tuple(spec.shape))


def gather_replica_sharded_tensor(
    t: popxl.Tensor, use_io_tiles: bool = False, replica_group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """The full value of the sharded `t` (all-gathered over `replica_group`, default all
    replicas, reshaped to its meta_shape); `t` itself when it has no meta_shape. With
    `use_io_tiles` the gather runs on the IO tiles and the result is copied to compute tiles."""
    replica_group = _grouping(replica_group, "gather_replica_sharded_tensor")
    if tuple(t.meta_shape or ()):
        with _tiles(use_io_tiles):
            t = ops.collectives.replicated_all_gather(t, group=replica_group, output_shape="meta_shape")
    if use_io_tiles:
        t = ops.io_tile_copy(t)
    return t


def all_gather_replica_sharded_graph(
    tensors: NamedTensors,
    use_io_tiles: bool = False,
    replica_groups: NamedReplicaGrouping | None = None,
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph gathering every tensor of `tensors` (a named input each, shape and meta_shape
    alike), outputs in sorted key order; returns the graph and those keys. `replica_groups`
    by name (default: all replicas of one IPU link domain)."""
    ir = popxl.gcg().ir
    graph = ir.create_empty_graph("all_gather")
    keys = list(tensors.to_dict())
    groups = (replica_groups or NamedReplicaGrouping.build_groups(keys, get_ild_replica_grouping())).to_dict()
    missing = sorted(set(keys) - set(groups))
    if missing:
        raise KeyError(f"all_gather_replica_sharded_graph: no replica grouping for {missing}")
    names: list[str] = []
    args = {}
    with graph, popxl.in_sequence(False):
        for name, t in zip(*tensors.unpack()):
            sg_t = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape or None)
            args[name] = sg_t
            names.append(name)
            out = gather_replica_sharded_tensor(sg_t, use_io_tiles, groups[name].const_rg)
            popxl.graph_output(out)
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args)), names


def reduce_replica_sharded_tensor(
    t: popxl.Tensor,
    op: str = "add",
    replica_group: popxl.ReplicaGrouping | None = None,
    shard_group: popxl.ReplicaGrouping | None = None,
) -> popxl.Tensor:
    """`t` reduced with `op` over `replica_group` (default all replicas) and, when the shard
    group (default `replica_group`) has several replicas and divides its element count,
    sharded over it (a 1-D shard with meta_shape `t.shape`):

    - reduce group (replica_group restricted to one IPU link domain) equal to the shard
      group: one reduce-scatter;
    - else an all-reduce over the reduce group then this replica's slice in the shard group;
    - a replica group spanning several link domains finishes with an all-reduce across them.

    Not shardable: a plain all-reduce over `replica_group`."""
    what = "reduce_replica_sharded_tensor"
    replica_group = _grouping(replica_group, what)
    shard_group = _grouping(shard_group, what) if shard_group is not None else replica_group
    if shard_group.group_size > 1 and t.nelms % shard_group.group_size == 0:
        ir = popxl.gcg().ir
        second = ir.replica_grouping(stride=get_ild_size_from_popdist()) if is_cross_ild(replica_group) else None
        reduce_group = get_ild_replica_grouping(replica_group)
        if reduce_group == shard_group and reduce_group.group_size > 1:
            t = ops.collectives.replicated_reduce_scatter(
                t, op, reduce_group, configure_output_for_replicated_tensor_sharding=True
            )
        else:
            if reduce_group.group_size > 1:
                t = ops.collectives.replicated_all_reduce(t, op, reduce_group)
            t = ops.collectives.replica_sharded_slice(t, shard_group)
        if second is not None:  # in place: the result stays the shard (keeps its meta_shape)
            t = ops.collectives.replicated_all_reduce_(t, op, second)
        return t
    return ops.collectives.replicated_all_reduce(t, op, replica_group)


def reduce_replica_sharded_graph(
    tensors: NamedTensors,
    op: str = "add",
    use_io_tiles: bool = False,
    shard_groups: NamedReplicaGrouping | None = None,
    replica_group: popxl.ReplicaGrouping | None = None,
    threshold: int | None = None,
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph reducing every tensor of `tensors` with `reduce_replica_sharded_tensor` (a
    named input each), outputs in sorted key order; returns the graph and those keys.
    `shard_groups` by name (default: all replicas of one IPU link domain); `replica_group`
    the data-parallel group (default all replicas). `threshold` (upstream's earlier
    signature): tensors with fewer elements are all-reduced, not sharded."""
    ir = popxl.gcg().ir
    graph = ir.create_empty_graph("replica_reduce")
    keys = list(tensors.to_dict())
    groups = (shard_groups or NamedReplicaGrouping.build_groups(keys, get_ild_replica_grouping())).to_dict()
    if threshold is not None:
        single = ir.replica_grouping(group_size=1)
        sizes = {k: t.nelms for k, t in tensors.to_dict().items()}
        groups = {k: (g if sizes.get(k, threshold) >= threshold else single) for k, g in groups.items()}
    missing = sorted(set(keys) - set(groups))
    if missing:
        raise KeyError(f"reduce_replica_sharded_graph: no shard grouping for {missing}")
    names: list[str] = []
    args = {}
    with graph, popxl.in_sequence(False), _tiles(use_io_tiles):
        for name, t in zip(*tensors.unpack()):
            sg_t = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape or None)
            args[name] = sg_t
            names.append(name)
            x = ops.io_tile_copy(sg_t) if use_io_tiles else sg_t
            popxl.graph_output(reduce_replica_sharded_tensor(x, op, replica_group, groups[name]))
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args)), names
