"""Remote buffers for named tensors and variables; load / store graphs for phased execution
(popxl_addons/remote.py).

```python
facts, layer = Linear(16).create_graph(x_spec)         # NamedVariableFactories
buffers = named_variable_buffers(facts, entries=3)       # one buffer per variable, 3 entries
layers = [facts.init_remote(buffers, i, f"layer{i}") for i in range(3)]
load, names = load_remote_graph(buffers)                 # graph input: load_index (int32)
store = store_remote_graph(buffers)                      # inputs: store_index + one per buffer
for i in range(3):                                       # one phase per layer
    ws = NamedTensors.pack(names, load.call(i))
    ...                                                  # compute with ws, update them
    store.bind(ws).call(i)
```

A variable whose factory has at least `sharded_threshold` elements gets a replica-sharded
buffer when its shard group (default: its replica group restricted to one instance) has
more than one replica and divides its element count; each replica's entry then holds its
1-D shard and `meta_shape` is the full shape (gather with `popxl_addons.rts`).

`named_buffers` fixes upstream's: upstream passes the int threshold where
`replica_sharded_spec` expects the shard grouping, so any call fails; here it builds each
buffer with `create_remote_buffer(t.spec, ...)` like `named_variable_buffers` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.dot_tree import DotTree
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.named_replica_grouping import (
    NamedReplicaGrouping,
    get_instance_replica_grouping,
    is_cross_instance,
)
from popxl_addons.named_tensors import NamedTensors

__all__ = [
    "NamedRemoteBuffers",
    "named_buffers",
    "named_variable_buffers",
    "create_remote_buffer",
    "load_remote_graph",
    "store_remote_graph",
    "load_remote",
    "store_remote",
]


class NamedRemoteBuffers(DotTree[popxl.RemoteBuffer]):
    """A `DotTree` of `popxl.RemoteBuffer`s."""


@contextlib.contextmanager
def _tiles(use_io_tiles: bool) -> Iterator[None]:
    if use_io_tiles:
        with popxl.io_tiles():
            yield
    else:
        yield


def _check_entries(entries: Any, what: str) -> int:
    if isinstance(entries, bool) or not isinstance(entries, int | np.integer) or entries < 1:
        raise ValueError(f"{what}: entries must be a positive int, got {entries!r}")
    return int(entries)


def _check_buffers(buffers: Any, what: str) -> None:
    if not isinstance(buffers, DotTree):
        raise TypeError(f"{what}: buffers must be NamedRemoteBuffers, got {type(buffers).__name__}")
    for name, b in buffers.to_dict().items():
        if not isinstance(b, popxl.RemoteBuffer):
            raise TypeError(f"{what}: buffers[{name!r}] is a {type(b).__name__}, not a popxl.RemoteBuffer")


def create_remote_buffer(
    spec: popxl.TensorSpec,
    entries: int = 1,
    sharded_threshold: int = 1024,
    replica_group: popxl.ReplicaGrouping | None = None,
    shard_group: popxl.ReplicaGrouping | None = None,
) -> popxl.RemoteBuffer:
    """A remote buffer of `entries` entries for tensors like `spec`.

    - `spec` with a meta_shape (already a shard): a buffer of the shard's shape with that
      meta_shape.
    - else, when the shard group has more than one replica and the tensor has at least
      `sharded_threshold` elements, divisible by the shard group size: a replica-sharded
      buffer (`popxl.replica_sharded_buffer`, entries of `(nelms // shard_size,)`).
    - else a plain buffer of `spec.shape`.

    `replica_group` is the variable's grouping (default: all replicas). `shard_group`
    (default: `replica_group` restricted to one instance) must lie in one instance and
    split the variable's groups: same stride, group size dividing the replica group's.
    """
    what = "create_remote_buffer"
    entries = _check_entries(entries, what)
    ir = popxl.gcg().ir
    replica_group = replica_group if replica_group is not None else ir.replica_grouping()
    if shard_group is None:
        shard_group = get_instance_replica_grouping(replica_group)
    if is_cross_instance(shard_group):
        raise ValueError(
            f"{what}: the shard group {shard_group} must be restricted to a single instance "
            f"(instance replication factor {ir.instance_replication_factor}). "
            "Use get_instance_replica_grouping."
        )
    meta = tuple(spec.meta_shape or ())
    if meta:
        buffer = popxl.remote_buffer(spec.shape, spec.dtype, entries)
        buffer.meta_shape = meta
        return buffer
    nelms = int(np.prod(spec.shape))
    size = shard_group.group_size
    if size > 1 and nelms >= sharded_threshold and nelms % size == 0:
        if shard_group.stride != replica_group.stride or replica_group.group_size % size:
            raise ValueError(
                f"{what}: the shard group {shard_group} does not split the replica group "
                f"{replica_group} (it needs the same stride and a group size dividing "
                f"{replica_group.group_size})"
            )
        groups = replica_group.num_groups
        shape = (groups, *spec.shape) if groups > 1 else tuple(spec.shape)
        rg = replica_group if groups > 1 else None
        return popxl.replica_sharded_buffer(shape, spec.dtype, rg, size, entries)
    return popxl.remote_buffer(spec.shape, spec.dtype, entries)


def named_buffers(
    tensors: NamedTensors,
    entries: int = 1,
    sharded_threshold: int = 1024,
    shard_group: popxl.ReplicaGrouping | None = None,
) -> NamedRemoteBuffers:
    """A buffer (`create_remote_buffer`) for each tensor of `tensors`, keyed alike; tensors
    with at least `sharded_threshold` elements get replica-sharded buffers over
    `shard_group` (default: all replicas of one instance)."""
    return NamedRemoteBuffers.from_dict(
        {
            name: create_remote_buffer(t.spec, entries, sharded_threshold, None, shard_group)
            for name, t in tensors.to_dict().items()
        }
    )


def named_variable_buffers(
    factories: Any,
    entries: int = 1,
    sharded_threshold: int = 1024,
    shard_groups: NamedReplicaGrouping | None = None,
) -> NamedRemoteBuffers:
    """A buffer (`create_remote_buffer`) for each factory of `factories`, keyed alike, with
    the factory's replica grouping; `shard_groups` by name (default: each factory's
    grouping restricted to one instance)."""
    ir = popxl.gcg().ir
    facts = factories.to_dict()
    groups = {k: f.replica_grouping if f.replica_grouping is not None else ir.replica_grouping()
              for k, f in facts.items()}  # fmt: skip
    shards = shard_groups.to_dict() if shard_groups is not None else {}
    buffers = {}
    for name, f in facts.items():
        spec = popxl.TensorSpec(f.shape, f.dtype, f.meta_shape)
        sg = shards.get(name)
        if sg is None:
            sg = get_instance_replica_grouping(groups[name])
        buffers[name] = create_remote_buffer(spec, entries, sharded_threshold, groups[name], sg)
    return NamedRemoteBuffers.from_dict(buffers)


def load_remote_graph(
    buffers: NamedRemoteBuffers, entries: int = 1, use_io_tiles: bool = False
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph loading one entry of every buffer: input `load_index` (int32 scalar), one
    output per buffer in sorted key order; returns the graph and those keys. Buffers grow to
    at least `entries` entries. Usage: `NamedTensors.pack(names, graph.call(i))`."""
    what = "load_remote_graph"
    _check_buffers(buffers, what)
    entries = _check_entries(entries, what)
    graph = popxl.gcg().ir.create_empty_graph("load_remote")
    names: list[str] = []
    with graph, popxl.transforms.merge_exchange(), popxl.in_sequence(False), _tiles(use_io_tiles):
        index = popxl.graph_input([], popxl.int32, "load_index")
        for name, buffer in zip(*buffers.unpack()):
            buffer.entries = max(buffer.entries, entries)
            names.append(name)
            popxl.graph_output(ops.remote_load(buffer, index, name))
    return GraphWithNamedArgs(graph), names


def store_remote_graph(buffers: NamedRemoteBuffers, entries: int = 1, use_io_tiles: bool = False) -> GraphWithNamedArgs:
    """A graph storing one tensor per buffer at one entry: input `store_index` (int32
    scalar) then a named input per buffer (its entry shape and meta_shape). Buffers grow to
    at least `entries` entries. Usage: `graph.bind(tensors).call(i)`."""
    what = "store_remote_graph"
    _check_buffers(buffers, what)
    entries = _check_entries(entries, what)
    graph = popxl.gcg().ir.create_empty_graph("store_remote")
    args = {}
    with graph, popxl.transforms.merge_exchange(), popxl.in_sequence(False), _tiles(use_io_tiles):
        index = popxl.graph_input([], popxl.int32, "store_index")
        for name, buffer in zip(*buffers.unpack()):
            buffer.entries = max(buffer.entries, entries)
            t = popxl.graph_input(buffer.tensor_shape, buffer.tensor_dtype, name, meta_shape=buffer.meta_shape or None)
            ops.remote_store(buffer, index, t)
            args[name] = t
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args))


def load_remote(buffers: NamedRemoteBuffers, entry: int | popxl.Tensor = 0, use_io_tiles: bool = False) -> NamedTensors:
    """Load entry `entry` of every buffer in the current graph; keyed like `buffers`."""
    _check_buffers(buffers, "load_remote")
    loaded = {}
    with popxl.transforms.merge_exchange(), popxl.in_sequence(False), _tiles(use_io_tiles):
        for name, buffer in buffers.to_dict().items():
            loaded[name] = ops.remote_load(buffer, entry, name)
    return NamedTensors.from_dict(loaded)


def store_remote(
    buffers: NamedRemoteBuffers,
    tensors: NamedTensors,
    entry: int | popxl.Tensor = 0,
    use_io_tiles: bool = False,
) -> None:
    """Store each tensor of `tensors` into the buffer of the same key at entry `entry`.
    Every buffer needs a tensor (`KeyError` naming the missing keys)."""
    _check_buffers(buffers, "store_remote")
    missing = sorted(set(buffers.to_dict()) - set(tensors.to_dict()))
    if missing:
        raise KeyError(f"store_remote: no tensor for the buffers {missing}")
    with popxl.transforms.merge_exchange(), popxl.in_sequence(False), _tiles(use_io_tiles):
        for buffer, tensor in buffers.to_mapping(tensors).items():
            ops.remote_store(buffer, entry, tensor)
