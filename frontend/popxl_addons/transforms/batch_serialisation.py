"""Batch serialisation: run a graph `steps` times over parts of a batch held in remote
buffers or streams (popxl_addons/transforms/batch_serialisation.py).

A remote buffer used by the transform is a matrix of `rows` rows and `steps` columns:
the tensor of batch step `i` in row `n` is entry `n * steps + i`. The returned graph takes
`batch_serial_loop_index` (the row, int32 scalar), optionally `batch_serial_random_seed`,
then the inputs of `graph` that have no load handle (passed through, by reference kept).
Each of its `steps` iterations

    loads the inputs with handles (host_load / remote_load, merged exchange),
    all-gathers those whose RemoteHandle has a shard group,
    calls `graph`,
    slices (replica_sharded_slice) the tensors to store into sharded buffers,
    stores them (host_store / remote_store, merged exchange).

```python
x_buf = batch_serial_buffer(x, steps=4)
result = batch_serialise(fwd, 4, {x: x_stream}, {}, {y: RemoteHandle(y_buf)}, io_mode="io")
result.graph.bind(result.remap_tensors(variables)).call(0)   # row 0
```

`io_mode`: 'compute' (IO on compute tiles), 'io' (IO on the IO tiles, copied to and from
the compute tiles), 'io_overlapped' (IO tiles, loop rotated so that the load of step i+1
and the store of step i-1 can overlap the compute of step i; needs `steps >= 2`, else
falls back to 'io'). On the NumPy runtime all modes compute the same values.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import popxl
import popxl.ops as ops
from popxl import bridge
from popxl.bridge import check_int
from popxl.transforms.autodiff import ExpectedConnectionType
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.remote import create_remote_buffer
from popxl_addons.rts import gather_replica_sharded_tensor
from popxl_addons.transforms.autodiff import remap_grad_info
from xl.dialects.graph import GraphOp

__all__ = [
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "batch_serial_buffer",
    "RemoteHandle",
    "BatchSerialResult",
]

RowOffset = int | None | Callable[[popxl.Tensor], popxl.Tensor]


@dataclass
class RemoteHandle:
    """Where a tensor lives in a remote buffer for `batch_serialise`.

    Args:
        buffer: the remote buffer.
        row_offset: added to the row the transformed graph is called with (`index +
            row_offset * steps`); None: always row 0 (`index % steps`); a callable maps
            the row tensor to the row to use.
        shard_group: replica grouping the buffer is sharded over (gathered after loading,
            sliced before storing); None or a group of one: not sharded.
    """

    buffer: popxl.RemoteBuffer
    row_offset: RowOffset = 0
    shard_group: popxl.ReplicaGrouping | None = None


Handle = popxl.HostToDeviceStream | RemoteHandle


def _as_handles(handles: Mapping[popxl.Tensor, Any], what: str, streams_ok: bool) -> dict:
    """Copy of `handles` with `(buffer, row_offset[, shard_group])` tuples turned into
    RemoteHandles."""
    if not isinstance(handles, Mapping):
        raise TypeError(f"batch_serialise: {what} must be a dict, got {type(handles).__name__}")
    out = {}
    for t, h in handles.items():
        if isinstance(h, RemoteHandle) or (streams_ok and isinstance(h, popxl.HostToDeviceStream)):
            out[t] = h
        elif (
            isinstance(h, tuple)
            and len(h) in (2, 3)
            and isinstance(h[0], popxl.RemoteBuffer)
            and (h[1] is None or isinstance(h[1], int) or callable(h[1]))
            and (len(h) == 2 or h[2] is None or isinstance(h[2], popxl.ReplicaGrouping))
        ):
            out[t] = RemoteHandle(*h)
        else:
            raise TypeError(f"batch_serialise: incompatible handle in {what} for tensor {t}: {h!r}")
    return out


@contextlib.contextmanager
def _null() -> Iterator[None]:
    yield


def _sharded(h: Any) -> bool:
    return isinstance(h, RemoteHandle) and h.shard_group is not None and h.shard_group.group_size > 1


@dataclass
class BatchSerialResult:
    """`graph`: the transformed graph; `stored_buffers`: tensor of the original graph ->
    RemoteHandle of the values stored by the transform."""

    graph: GraphWithNamedArgs
    stored_buffers: dict[popxl.Tensor, RemoteHandle]
    _remap_dict: dict[popxl.Tensor, popxl.Tensor]

    def remap_tensors(self, ts: NamedTensors) -> NamedTensors:
        """`ts` with tensors of the original graph replaced by the transformed graph's."""
        return ts.remap(self._remap_dict)


def batch_serial_buffer(
    t: popxl.Tensor, steps: int = 1, rows: int = 1, shard_group: popxl.ReplicaGrouping | None = None
) -> popxl.RemoteBuffer:
    """A remote buffer for `t` of `steps * rows` entries (the matrix layout above), sharded
    over `shard_group` when it has more than one replica (its size must divide `t.nelms`)."""
    steps = check_int(steps, "batch_serial_buffer", "steps")
    rows = check_int(rows, "batch_serial_buffer", "rows")
    if steps < 1 or rows < 1:
        raise ValueError(f"batch_serial_buffer: steps and rows must be >= 1, got steps={steps} rows={rows}")
    if shard_group is not None and shard_group.group_size > 1:
        if t.nelms % shard_group.group_size:
            raise ValueError(
                f"batch_serial_buffer: {t} has {t.nelms} elements, not divisible by the shard group "
                f"size {shard_group.group_size}"
            )
        return create_remote_buffer(t.spec, steps * rows, replica_group=shard_group, shard_over=shard_group.group_size)
    return popxl.remote_buffer(t.shape, t.dtype, steps * rows)


class _Plan:
    """Which inputs / outputs of `graph` are loaded, stored and passed through."""

    def __init__(self, graph: GraphWithNamedArgs, steps: int, load: dict, streams: dict, buffers: dict,
                 seed_input: popxl.Tensor | None, rows: int) -> None:  # fmt: skip
        g = graph.graph
        self.graph, self.steps, self.rows = graph, steps, rows
        self.load, self.streams, self.buffers, self.seed_input = load, streams, buffers, seed_input
        # the dicts may be shared by several graphs (forward and gradient): only this
        # graph's tensors count
        load = {t: h for t, h in load.items() if t in g}
        streams = {t: s for t, s in streams.items() if t in g}
        buffers = {t: h for t, h in buffers.items() if t in g}
        self.load, self.streams, self.buffers = load, streams, buffers
        if seed_input is not None and seed_input not in g.inputs:
            raise ValueError(f"batch_serialise: seed_input {seed_input} is not an input of graph {g.name!r}")
        inputs, outputs = list(g.inputs), list(g.outputs)
        for t in load:
            if t not in inputs:
                raise ValueError(f"batch_serialise: load handle for {t}, which is not an input of {g.name!r}")
        for t in list(streams) + list(buffers):
            if t not in inputs and t not in outputs:
                raise ValueError(f"batch_serialise: {t} to store is neither an input nor an output of {g.name!r}")
        self.loaded = [t for t in inputs if t in load]

        def stored(t: popxl.Tensor) -> bool:
            from_buffer = t in load and not isinstance(load[t], popxl.HostToDeviceStream)
            return not from_buffer and (t in streams or t in buffers)

        self.stored = [t for t in inputs + outputs if stored(t)]
        self.passed = [t for t in inputs if t is not seed_input and t not in load]
        g_op = bridge.graph_op(g)
        if not isinstance(g_op, GraphOp):
            raise ValueError(f"batch_serialise: {g.name!r} is the main graph, not a subgraph")
        self.by_ref = [g_op.input_is_by_ref(inputs.index(t)) for t in self.passed]

    # -- offsets ----------------------------------------------------------------------------
    def _entry(self, index: popxl.Tensor, h: RemoteHandle) -> popxl.Tensor:
        steps, rows, off = self.steps, self.rows, h.row_offset
        if off is None:
            entry, size = index % steps, steps
        elif callable(off):
            step = index % steps
            row = index / steps  # non-negative: truncation is floor division
            entry, size = off(row) * steps + step, steps * rows
        elif off != 0:
            entry, size = index + off * steps, steps * (off + rows)
        else:
            entry, size = index, steps * rows
        h.buffer.entries = max(h.buffer.entries, size)
        return entry

    def load_entries(self, index: popxl.Tensor) -> list:
        return [h if isinstance(h := self.load[t], popxl.HostToDeviceStream) else (h, self._entry(index, h))
                for t in self.loaded]  # fmt: skip

    def store_entries(self, index: popxl.Tensor) -> dict:
        return {t: (self.buffers[t], self._entry(index, self.buffers[t])) for t in self.stored if t in self.buffers}

    # -- io -----------------------------------------------------------------------------------
    def do_load(self, entries: list) -> list[popxl.Tensor]:
        out = []
        for t, e in zip(self.loaded, entries, strict=True):
            if isinstance(e, popxl.HostToDeviceStream):
                out.append(ops.host_load(e, t.name))
            else:
                out.append(ops.remote_load(e[0].buffer, e[1], t.name))
        return out

    def gather(self, loaded: list[popxl.Tensor]) -> list[popxl.Tensor]:
        return [
            gather_replica_sharded_tensor(x, replica_group=self.load[t].shard_group) if _sharded(self.load[t]) else x
            for t, x in zip(self.loaded, loaded, strict=True)
        ]

    def slice(self, stored: list[popxl.Tensor]) -> list[popxl.Tensor]:
        out = []
        for t, x in zip(self.stored, stored, strict=True):
            if t in self.buffers and _sharded(self.buffers[t]):
                x = ops.collectives.replica_sharded_slice(x, group=self.buffers[t].shard_group)
            out.append(x)
        return out

    def do_store(self, stored: list[popxl.Tensor], entries: dict) -> None:
        for t, x in zip(self.stored, stored, strict=True):
            if t in self.streams:
                ops.host_store(self.streams[t], x)
            if t in entries:
                h, e = entries[t]
                ops.remote_store(h.buffer, e, x)

    def compute(self, loaded: list, passed: list, seed: popxl.Tensor | None) -> list[popxl.Tensor]:
        inputs = dict(zip(self.loaded, loaded, strict=True))
        inputs.update(zip(self.passed, passed, strict=True))
        if self.seed_input is not None:
            inputs[self.seed_input] = seed
        info = ops.call_with_info(self.graph.graph, inputs_dict=inputs)
        return [info.graph_to_parent(t) for t in self.stored]

    # -- result -------------------------------------------------------------------------------
    def add_inputs(self) -> tuple[popxl.Tensor, popxl.Tensor, list[popxl.Tensor]]:
        index = popxl.graph_input([], popxl.int32, "batch_serial_loop_index")
        if self.seed_input is not None:
            seed = popxl.graph_input((2,), popxl.uint32, "batch_serial_random_seed")
        else:
            seed = popxl.constant([0, 0], popxl.uint32, "dummy_random_seed")
        passed = [popxl.graph_input(t.shape, t.dtype, t.name, by_ref, t.meta_shape or None)
                  for t, by_ref in zip(self.passed, self.by_ref, strict=True)]  # fmt: skip
        return index, seed, passed

    def result(self, graph: popxl.Graph, passed: list[popxl.Tensor]) -> BatchSerialResult:
        remap = dict(zip(self.passed, passed, strict=True))
        named = GraphWithNamedArgs(graph, self.graph.args.remap(remap))
        stored_buffers = {}
        for t in self.buffers:
            h = self.load.get(t)
            stored_buffers[t] = h if isinstance(h, RemoteHandle) else self.buffers[t]
        return BatchSerialResult(named, stored_buffers, remap)


def _non_overlapped(plan: _Plan, use_io_tiles: bool) -> BatchSerialResult:
    ir, steps = plan.graph.graph.ir, plan.steps
    tiles = popxl.io_tiles if use_io_tiles else _null
    name = plan.graph.graph.name
    repeat_graph = ir.create_empty_graph(f"{name}_repeat_graph")
    micro = ir.create_empty_graph(f"{name}_batch_serial_step")
    with repeat_graph, popxl.in_sequence():
        index, seed, passed = plan.add_inputs()
        with tiles():
            if use_io_tiles:
                index = ops.io_tile_copy(index)
            index = index * steps
    with micro, popxl.in_sequence(True):
        m_index = popxl.graph_input([], popxl.int32, "index")
        m_seed = popxl.graph_input((2,), popxl.uint32, "seed")
        m_passed = [popxl.graph_input(t.shape, t.dtype, t.name, by_ref, t.meta_shape or None)
                    for t, by_ref in zip(plan.passed, plan.by_ref, strict=True)]  # fmt: skip
        seed_i, next_seed = ops.split_random_seed(m_seed)
        with tiles():
            load_at = plan.load_entries(m_index)
            store_at = plan.store_entries(m_index)
        with tiles(), popxl.transforms.merge_exchange(), popxl.in_sequence(False):
            loaded = plan.do_load(load_at)
        with tiles():
            loaded = plan.gather(loaded)
        if use_io_tiles:
            loaded = [ops.io_tile_copy(t) for t in loaded]
        stored = plan.compute(loaded, m_passed, seed_i)
        if use_io_tiles:
            stored = [ops.io_tile_copy(t) for t in stored]
        with tiles():
            stored = plan.slice(stored)
        with tiles(), popxl.transforms.merge_exchange(), popxl.in_sequence(False):
            plan.do_store(stored, store_at)
        with tiles():
            m_next = m_index + 1
        popxl.graph_output(m_next)
        popxl.graph_output(next_seed)
    with repeat_graph, popxl.in_sequence():
        ops.repeat(micro, steps, index, seed, *passed)
    return plan.result(repeat_graph, passed)


def _overlapped_graph(plan: _Plan) -> BatchSerialResult:
    """load 0; load 1 + compute 0; repeat i = 2..steps-1: store i-2 + load i + compute
    i-1; store steps-2 + compute steps-1; store steps-1."""
    ir, steps = plan.graph.graph.ir, plan.steps
    name = plan.graph.graph.name
    io = popxl.io_tiles

    def io_copy(ts: list[popxl.Tensor]) -> list[popxl.Tensor]:
        return [ops.io_tile_copy(t) for t in ts]

    repeat_graph = ir.create_empty_graph(f"{name}_repeat_graph")
    with repeat_graph, popxl.in_sequence():
        index, seed, passed = plan.add_inputs()
        with io():
            index = ops.io_tile_copy(index)
            index = index * steps
        # load 0 (not overlapped)
        with io():
            load_at = plan.load_entries(index)
        with popxl.transforms.io_tile_exchange():
            loaded_0 = plan.do_load(load_at)
        with io():
            loaded_0 = plan.gather(loaded_0)
        loaded_0 = io_copy(loaded_0)
        with io():
            index = index + 1
        seed_0, seed = ops.split_random_seed(seed)
        # load 1, compute 0
        with io():
            load_at = plan.load_entries(index)
        with popxl.transforms.io_tile_exchange():
            loaded_1 = plan.do_load(load_at)
        stored_0 = plan.compute(loaded_0, passed, seed_0)
        with io():
            loaded_1 = plan.gather(loaded_1)
        loaded_1 = io_copy(loaded_1)
        stored_0 = io_copy(stored_0)
        with io():
            stored_0 = plan.slice(stored_0)
            index = index + 1

    loaded_n, stored_prev = loaded_1, stored_0
    if steps > 2:
        micro = ir.create_empty_graph(f"{name}_batch_serial_step")
        with micro, popxl.in_sequence():
            m_index = popxl.graph_input([], popxl.int32, "index")
            m_seed = popxl.graph_input((2,), popxl.uint32, "seed")
            m_loaded = [popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape or None) for t in loaded_1]
            m_stored = [popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape or None) for t in stored_0]
            m_passed = [popxl.graph_input(t.shape, t.dtype, t.name, by_ref, t.meta_shape or None)
                        for t, by_ref in zip(plan.passed, plan.by_ref, strict=True)]  # fmt: skip
            seed_i, next_seed = ops.split_random_seed(m_seed)
            with io():
                load_at = plan.load_entries(m_index)
                store_at = plan.store_entries(m_index - 2)
            with popxl.transforms.io_tile_exchange():
                loaded_io = plan.do_load(load_at)
                plan.do_store(m_stored, store_at)
            stored = plan.compute(m_loaded, m_passed, seed_i)
            with io():
                loaded_io = plan.gather(loaded_io)
            next_loaded = io_copy(loaded_io)
            stored_io = io_copy(stored)
            with io():
                stored_io = plan.slice(stored_io)
                m_next = m_index + 1
            for t in (m_next, next_seed, *next_loaded, *stored_io):
                popxl.graph_output(t)
        with repeat_graph, popxl.in_sequence():
            index, seed, *rest = ops.repeat(micro, steps - 2, index, seed, *loaded_1, *stored_0, *passed)
            loaded_n = rest[: len(loaded_1)]
            stored_prev = rest[len(loaded_1) : len(loaded_1) + len(stored_0)]

    with repeat_graph, popxl.in_sequence():
        with io():
            store_index = index - 2
        seed_n, seed = ops.split_random_seed(seed)
        # store steps-2, compute steps-1
        with io():
            store_at = plan.store_entries(store_index)
        with popxl.transforms.io_tile_exchange():
            plan.do_store(stored_prev, store_at)
        stored_n = plan.compute(loaded_n, passed, seed_n)
        stored_n = io_copy(stored_n)
        with io():
            stored_n = plan.slice(stored_n)
            store_index = store_index + 1
        # store steps-1 (not overlapped)
        with io():
            store_at = plan.store_entries(store_index)
        with popxl.transforms.io_tile_exchange():
            plan.do_store(stored_n, store_at)
    return plan.result(repeat_graph, passed)


def batch_serialise(
    graph: GraphWithNamedArgs,
    steps: int,
    load_handles: Mapping[popxl.Tensor, Any],
    store_streams: Mapping[popxl.Tensor, popxl.DeviceToHostStream],
    store_buffers: Mapping[popxl.Tensor, Any],
    seed_input: popxl.Tensor | None = None,
    rows: int = 1,
    io_mode: str = "io",
) -> BatchSerialResult:
    """`graph` repeated `steps` times (see the module docstring).

    Args:
        graph: the graph to serialise.
        steps: number of batch serialisation steps (>= 1).
        load_handles: input of `graph` -> HostToDeviceStream, RemoteHandle or (buffer,
            row_offset); inputs without a handle are inputs of the returned graph.
        store_streams: input or output of `graph` -> DeviceToHostStream, stored each step.
        store_buffers: input or output -> RemoteHandle or (buffer, row_offset), stored at
            entry `row * steps + step` (an input loaded from a buffer is not stored again).
        seed_input: input of `graph` taking a random seed; the returned graph takes
            `batch_serial_random_seed`, split once per step.
        rows: rows of the buffers (entries grow to `steps * rows`, more with row offsets).
        io_mode: 'compute', 'io' or 'io_overlapped'.
    """
    if not isinstance(graph, GraphWithNamedArgs):
        raise TypeError(f"batch_serialise: graph must be a GraphWithNamedArgs, got {type(graph).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"batch_serialise: steps must be a positive int, got {steps!r}")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"batch_serialise: rows must be >0, got {rows!r}")
    if io_mode not in ("compute", "io", "io_overlapped"):
        raise ValueError(f"batch_serialise: unknown io_mode {io_mode!r}. Supported: (compute, io, io_overlapped)")
    load = _as_handles(load_handles, "load_handles", True)
    buffers = _as_handles(store_buffers, "store_buffers", False)
    streams = dict(store_streams)
    for t, s in streams.items():
        if not isinstance(s, popxl.DeviceToHostStream):
            raise TypeError(f"batch_serialise: store_streams[{t}] must be a DeviceToHostStream, got {s!r}")
    if io_mode == "io_overlapped" and steps < 2:
        logging.warning("batch_serialise: io_mode='io_overlapped' needs at least 2 steps; using io_mode='io'")
        io_mode = "io"
    plan = _Plan(graph, steps, load, streams, buffers, seed_input, rows)
    if io_mode == "io_overlapped":
        return _overlapped_graph(plan)
    return _non_overlapped(plan, io_mode == "io")


def batch_serialise_fwd_and_grad(
    forward_graph: GraphWithNamedArgs,
    gradient_graph: GraphWithNamedArgs,
    named_inputs_for_grad_graph: NamedTensors,
    steps: int,
    load_handles: Mapping[popxl.Tensor, Any],
    store_streams: Mapping[popxl.Tensor, popxl.DeviceToHostStream],
    store_buffers: Mapping[popxl.Tensor, Any],
    seed_input: popxl.Tensor | None = None,
    rows: int = 1,
    io_mode: str = "io",
) -> tuple[BatchSerialResult, BatchSerialResult]:
    """Serialise a forward graph and its gradient graph alike; the activations the gradient
    graph needs are stored by the forward and loaded by the gradient graph.

    Args:
        named_inputs_for_grad_graph: forward tensors (typically the variables, `fwd.args`)
            the gradient graph takes as named inputs instead of loading them.
        store_buffers: as `batch_serialise`; a value may also be a ReplicaGrouping: the
            shard group of an activation's automatic buffer.
        load_handles: must include a handle for every gradient input of the gradient graph
            (its FwdGrad inputs), else ValueError.
    Returns:
        (forward result, gradient result); the gradient result's graph keeps the grad info.
    """
    shard_groups = {t: v for t, v in store_buffers.items() if isinstance(v, popxl.ReplicaGrouping)}
    buffers = _as_handles({t: v for t, v in store_buffers.items() if t not in shard_groups}, "store_buffers", False)
    load = _as_handles(load_handles, "load_handles", True)
    info = gradient_graph.grad_graph_info
    grad_inputs = list(gradient_graph.graph.inputs)
    named_fwd = named_inputs_for_grad_graph.named_tensors
    fwd_names = {t: k for k, t in named_fwd.items()}
    activations = [(i, ec) for i, ec in enumerate(info.expected_inputs)
                   if ec.connection_type == ExpectedConnectionType.Fwd]  # fmt: skip
    for _, ec in activations:
        t = ec.fwd_tensor
        if t in buffers or t in fwd_names:
            continue
        if isinstance(load.get(t), RemoteHandle):
            buffers[t] = load[t]
        else:
            sg = shard_groups.get(t)
            buffers[t] = RemoteHandle(batch_serial_buffer(t, steps, rows, sg), 0, sg)

    fwd_loads = {t: h for t, h in load.items() if t in forward_graph.graph}
    fwd_result = batch_serialise(forward_graph, steps, fwd_loads, store_streams, buffers, seed_input, rows, io_mode)

    grad_loads: dict = {}
    named: dict = {}
    for i, ec in activations:
        t = ec.fwd_tensor
        if t in fwd_names:
            named[fwd_names[t]] = grad_inputs[i]
        elif t in fwd_result.stored_buffers:
            grad_loads[grad_inputs[i]] = fwd_result.stored_buffers[t]
        else:
            raise RuntimeError(
                f"batch_serialise_fwd_and_grad: forward connection {t} missing: give it in "
                "named_inputs_for_grad_graph or load_handles"
            )
    named.update(gradient_graph.args.named_tensors)
    gradient_graph.args = NamedTensors.from_dict(named)
    for i, ec in enumerate(info.expected_inputs):
        if ec.connection_type == ExpectedConnectionType.FwdGrad:
            g = grad_inputs[i]
            if g not in load:
                raise ValueError(
                    f"batch_serialise_fwd_and_grad: FwdGrad input (idx={i} {g}) to the gradient "
                    "graph must have a load_handle specified"
                )
            grad_loads[g] = load[g]
    grad_streams = {t: s for t, s in store_streams.items() if t in gradient_graph.graph}
    grad_buffers = {t: h for t, h in buffers.items() if t in gradient_graph.graph}
    grad_result = batch_serialise(gradient_graph, steps, grad_loads, grad_streams, grad_buffers, None, rows, io_mode)
    grad_result.graph.grad_graph_info = remap_grad_info(info, forward_graph.graph, gradient_graph.graph)
    return fwd_result, grad_result
