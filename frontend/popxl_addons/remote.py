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

Replicated tensor sharding: `shard_over` is the number of replicas of a variable's replica
group that hold one equal 1-D part each of the flattened variable (`meta_shape` the full
shape; gather with `popxl_addons.rts`). `named_variable_buffers(facts, shard_over_dict=...)`
takes it per variable name (a dict; a name not in it: the whole group), for every variable
(an int), or True (the whole group, the default) / False (no sharding).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.dot_tree import DotTree
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.named_tensors import NamedTensors
from xl.dialects.replica_layout import group_host_shape

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


def _check_shard_over(shard_over: Any, group: popxl.ReplicaGrouping, what: str) -> int:
    if isinstance(shard_over, bool) or not isinstance(shard_over, int | np.integer):
        raise TypeError(f"{what}: shard_over must be an int, got {shard_over!r}")
    if not 1 <= shard_over <= group.group_size:
        raise ValueError(
            f"{what}: shard_over={int(shard_over)} must be between 1 and the replica group size {group.group_size}"
        )
    return int(shard_over)


def create_remote_buffer(
    spec: popxl.TensorSpec | popxl.Tensor,
    entries: int = 1,
    replica_group: popxl.ReplicaGrouping | None = None,
    shard_over: int | None = None,
) -> popxl.RemoteBuffer:
    """A remote buffer of `entries` entries for tensors like `spec` (a TensorSpec or Tensor).

    - `spec` with a meta_shape (already a shard): a buffer of the shard's shape with that
      meta_shape;
    - else, `shard_over` > 1 (default: the size of `replica_group`, itself all replicas by
      default): a replica-sharded buffer (`popxl.replica_sharded_buffer`: entries of
      `(nelms // shard_over,)`, meta_shape `spec.shape`) for one variable per group of
      `replica_group`; the element count must divide by `shard_over` (ValueError);
    - else a plain buffer of `spec.shape`.
    """
    what = "create_remote_buffer"
    entries = _check_entries(entries, what)
    ir = popxl.gcg().ir
    if replica_group is None:
        replica_group = ir.replica_grouping()
    elif not isinstance(replica_group, popxl.ReplicaGrouping):
        raise TypeError(f"{what}: replica_group must be a popxl.ReplicaGrouping, got {type(replica_group).__name__}")
    shard = replica_group.group_size if shard_over is None else _check_shard_over(shard_over, replica_group, what)
    shape, dtype, meta = tuple(spec.shape), spec.dtype, tuple(spec.meta_shape or ())
    if meta:
        buffer = popxl.remote_buffer(shape, dtype, entries)
        buffer.meta_shape = meta
        return buffer
    if shard > 1:
        nelms = int(np.prod(shape))
        if nelms % shard:
            raise ValueError(f"{what}: cannot shard a tensor of {nelms} elements {shape} over {shard} replicas")
        full = group_host_shape(shape, replica_group.num_groups)
        return popxl.replica_sharded_buffer(full, dtype, replica_group, shard, entries)
    return popxl.remote_buffer(shape, dtype, entries)


def named_buffers(tensors: NamedTensors, entries: int = 1) -> NamedRemoteBuffers:
    """A buffer for each tensor of `tensors`, keyed alike, of the tensor's shape (with its
    meta_shape: a replica-sharded tensor gets a buffer for its shards)."""
    if not isinstance(tensors, DotTree):
        raise TypeError(f"named_buffers: tensors must be NamedTensors, got {type(tensors).__name__}")
    entries = _check_entries(entries, "named_buffers")
    buffers = {}
    for name, t in tensors.to_dict().items():
        buffer = popxl.remote_buffer(t.shape, t.dtype, entries)
        if tuple(t.meta_shape or ()):
            buffer.meta_shape = tuple(t.meta_shape)
        buffers[name] = buffer
    return NamedRemoteBuffers.from_dict(buffers)


def named_variable_buffers(
    factories: Any,
    entries: int = 1,
    shard_over_dict: Mapping[str, int] | int | bool = True,
) -> NamedRemoteBuffers:
    """A buffer (`create_remote_buffer`) for each factory of `factories`, keyed alike, with
    the factory's replica grouping.

    `shard_over_dict`: the number of replicas of each variable's replica group it is
    sharded over: a dict by name (a variable not in it: the whole group; names of no
    variable are ignored, as upstream: BERT passes one built for more buffers), one int for every
    variable (1 to the group size), True (the whole group) or False (no sharding).
    """
    what = "named_variable_buffers"
    ir = popxl.gcg().ir
    if not isinstance(shard_over_dict, Mapping | int | np.integer):
        raise ValueError(
            f"{what}: shard_over_dict must be a dict, an int or a bool, got {type(shard_over_dict).__name__}"
        )
    buffers = {}
    for name, f in factories.to_dict().items():
        group = f.replica_grouping if f.replica_grouping is not None else ir.replica_grouping()
        if isinstance(shard_over_dict, Mapping):
            shard_over = shard_over_dict.get(name)
        elif isinstance(shard_over_dict, bool):
            shard_over = group.group_size if shard_over_dict else 1
        else:
            shard_over = shard_over_dict
        if shard_over is not None:
            shard_over = _check_shard_over(shard_over, group, f"{what} ({name!r})")
        spec = popxl.TensorSpec(f.shape, f.dtype, tuple(f.meta_shape or ()))
        try:
            buffers[name] = create_remote_buffer(spec, entries, group, shard_over)
        except ValueError as e:
            raise ValueError(f"{what}: variable {name!r}: {e}") from None
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
