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
from popxl_addons.named_replica_grouping import NamedReplicaGrouping
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


def replica_sharded_spec(t: Any, shard_over: popxl.ReplicaGrouping) -> popxl.TensorSpec:
    """The spec of `t` (a Tensor or TensorSpec) sharded over the groups of `shard_over`:
    `((nelms // size,), dtype, meta_shape=t.shape)`. `t`'s own spec when it is already
    sharded (has a meta_shape), when the group has one replica, or when its element count
    does not divide by the group size."""
    shard_over = _grouping(shard_over, "replica_sharded_spec")
    spec = t.spec if isinstance(t, popxl.Tensor) else t
    if tuple(spec.meta_shape or ()):
        return spec
    nelms = int(np.prod(spec.shape))
    size = shard_over.group_size
    if size == 1 or nelms % size:
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
    by name (default: all replicas for every tensor; a KeyError names tensors without one)."""
    ir = popxl.gcg().ir
    graph = ir.create_empty_graph("all_gather")
    keys = list(tensors.to_dict())
    groups = (replica_groups or NamedReplicaGrouping.build_groups(keys, ir.replica_grouping())).to_dict()
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

    - shard group equal to `replica_group`: one reduce-scatter;
    - else an all-reduce over `replica_group`, then this replica's slice in the shard group.

    Not shardable: a plain all-reduce over `replica_group`."""
    what = "reduce_replica_sharded_tensor"
    replica_group = _grouping(replica_group, what)
    shard_group = _grouping(shard_group, what) if shard_group is not None else replica_group
    if shard_group.group_size > 1 and t.nelms % shard_group.group_size == 0:
        if replica_group == shard_group:
            return ops.collectives.replicated_reduce_scatter(
                t, op, replica_group, configure_output_for_replicated_tensor_sharding=True
            )
        if replica_group.group_size > 1:
            t = ops.collectives.replicated_all_reduce(t, op, replica_group)
        return ops.collectives.replica_sharded_slice(t, shard_group)
    return ops.collectives.replicated_all_reduce(t, op, replica_group)


def reduce_replica_sharded_graph(
    tensors: NamedTensors,
    op: str = "add",
    use_io_tiles: bool = False,
    shard_groups: NamedReplicaGrouping | None = None,
    replica_group: popxl.ReplicaGrouping | None = None,
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph reducing every tensor of `tensors` with `reduce_replica_sharded_tensor` (a
    named input each), outputs in sorted key order; returns the graph and those keys.
    `replica_group`: the data-parallel group (default all replicas); `shard_groups` by
    name, a tensor without one is sharded over `replica_group`."""
    ir = popxl.gcg().ir
    graph = ir.create_empty_graph("replica_reduce")
    replica_group = _grouping(replica_group, "reduce_replica_sharded_graph")
    groups = shard_groups.to_dict() if shard_groups is not None else {}
    names: list[str] = []
    args = {}
    with graph, popxl.in_sequence(False), _tiles(use_io_tiles):
        for name, t in zip(*tensors.unpack()):
            sg_t = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape or None)
            args[name] = sg_t
            names.append(name)
            x = ops.io_tile_copy(sg_t) if use_io_tiles else sg_t
            popxl.graph_output(reduce_replica_sharded_tensor(x, op, replica_group, groups.get(name, replica_group)))
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args)), names
