"""Compiles an `rt.program` once into a plan over preallocated buffers, and runs it.

`compile_program(program, optimize=True)` runs the program as one generated Python
function per replica (`xl.runtime.plan`); `optimize=False` gives the straightforward
plan: a list of kernel closures run in order, the reference the optimised plan is tested
against. Either way, per step only planned kernels run: no xDSL object, name lookup or
buffer allocation is involved. The resulting `Executable` runs the program with
`run(inputs)`. Lowering a high-level module and the pass pipeline are the compile
driver's (`xl.compiler.compile_module`); the runtime depends on the `rt` dialect only.

Host data layout: stream arrays are `[num_host_transfers, replication_factor, *shape]`
with size-1 leading dims dropped; each executed `rt.h2d` consumes the next transfer
(wrapping around if a stream is loaded more often than `num_host_transfers`; the
counts are checked at compile time, see `xl.runtime.transfers`).
Replicas are simulated one after another, each with its own buffers and state.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from xdsl.ir import Block, SSAValue

from xl.dialects import rt
from xl.runtime import xl_kernels as _xl_kernels  # noqa: F401  (registers xl.* kernels)
from xl.runtime.aliasing import check_writable, inputs_to_snapshot
from xl.runtime.errors import PlanError, diagnostic_props
from xl.runtime.kernels import kernel_factory
from xl.runtime.plan import build_replica
from xl.runtime.streams import StreamIn, StreamOut
from xl.runtime.transfers import check_transfers
from xl.runtime.walk import ProgramWalk

Step = Callable[[], None]


@dataclass
class _Replica:
    steps: list[Step]
    state: dict[str, np.ndarray]
    inputs: dict[str, StreamIn]
    outputs: dict[str, StreamOut]


@dataclass
class Executable:
    """A compiled program. `state` maps variable names to their (replica 0) buffers."""

    num_host_transfers: int
    replication_factor: int
    h2d_streams: dict[str, tuple[tuple[int, ...], np.dtype]]
    d2h_streams: dict[str, tuple[tuple[int, ...], np.dtype]]
    replicas: list[_Replica] = field(repr=False)
    # The generated source of each replica's step (optimised plans only), for inspection.
    sources: list[str] = field(default_factory=list, repr=False)

    # -- state ---------------------------------------------------------------------
    @property
    def state(self) -> dict[str, np.ndarray]:
        return self.replicas[0].state

    def get_state(self, name: str) -> np.ndarray:
        if name not in self.state:
            raise KeyError(f"no variable named \"{name}\" in the program")
        return self.state[name]

    def set_state(self, name: str, value: np.ndarray) -> None:
        """Write a variable on every replica (shape and dtype must match)."""
        buf = self.get_state(name)
        value = np.asarray(value)
        if value.shape != buf.shape:
            raise ValueError(
                f"variable \"{name}\": expected shape {buf.shape}, got {value.shape}"
            )
        if value.dtype != buf.dtype:
            raise ValueError(
                f"variable \"{name}\": expected dtype {buf.dtype}, got {value.dtype}"
            )
        for r in self.replicas:
            np.copyto(r.state[name], value)

    # -- running ---------------------------------------------------------------------
    def full_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        lead = []
        if self.num_host_transfers > 1:
            lead.append(self.num_host_transfers)
        if self.replication_factor > 1:
            lead.append(self.replication_factor)
        return (*lead, *shape)

    def run(self, inputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run the program once; returns one array per d2h stream (full layout)."""
        inputs = dict(inputs or {})
        missing = sorted(set(self.h2d_streams) - set(inputs))
        unexpected = sorted(set(inputs) - set(self.h2d_streams))
        if missing or unexpected:
            parts = []
            if missing:
                parts.append(f"missing inputs for streams {missing}")
            if unexpected:
                parts.append(f"unexpected inputs {unexpected}")
            raise ValueError("; ".join(parts))
        n, reps = self.num_host_transfers, self.replication_factor
        canon: dict[str, np.ndarray] = {}
        for name, (shape, dtype) in self.h2d_streams.items():
            arr = inputs[name]
            if not isinstance(arr, np.ndarray):
                arr = np.asarray(arr)
            full = self.full_shape(shape)
            if arr.shape != full:
                raise ValueError(
                    f"stream \"{name}\": expected input of shape {full} "
                    f"([num_host_transfers={n}, replication_factor={reps}] + {shape}, "
                    f"size-1 dims dropped), got {arr.shape}"
                )
            if arr.dtype != dtype:
                raise ValueError(f"stream \"{name}\": expected dtype {dtype}, got {arr.dtype}")
            canon[name] = arr.reshape((n, reps, *shape))
        outs = {
            name: np.zeros((n, reps, *shape), dtype=dtype)
            for name, (shape, dtype) in self.d2h_streams.items()
        }
        for r, rep in enumerate(self.replicas):
            for name, s in rep.inputs.items():
                s.data = canon[name][:, r]
                s.index = 0
            for name, o in rep.outputs.items():
                o.data = outs[name][:, r]
                o.index = 0
            for step in rep.steps:
                step()
        return {name: a.reshape(self.full_shape(a.shape[2:])) for name, a in outs.items()}


# ------------------------------------------------------------------------------------
# Compilation
# ------------------------------------------------------------------------------------


def _h2d(buf: np.ndarray, s: StreamIn) -> None:
    data = s.data
    assert data is not None
    np.copyto(buf, data[s.index % data.shape[0]])
    s.index += 1


def _d2h(buf: np.ndarray, s: StreamOut) -> None:
    data = s.data
    assert data is not None
    np.copyto(data[s.index % data.shape[0], ...], buf)
    s.index += 1


def _snapshot_then(copies: list[tuple[np.ndarray, np.ndarray]], step: Step) -> None:
    for dst, src in copies:
        np.copyto(dst, src)
    step()


def _loop(count: int, body: list[Step]) -> None:
    for _ in range(count):
        for f in body:
            f()


def _if(cond: np.ndarray, then: list[Step], other: list[Step]) -> None:
    for f in then if bool(cond) else other:
        f()


class _Compiler(ProgramWalk[list[Step]]):
    """The straightforward plan: one closure per op, appended to the list `at`."""

    def __init__(self) -> None:
        super().__init__()
        self.buffers: dict[SSAValue, np.ndarray] = {}

    def bind(self, v: SSAValue, arr: np.ndarray, hint: str) -> None:
        self.buffers[v] = arr

    def array(self, v: SSAValue) -> np.ndarray:
        return self.buffers[v]

    def compile_block(self, block: Block) -> list[Step]:
        steps: list[Step] = []
        self.walk(block, steps)
        return steps

    def kernel(self, op: rt.KernelOp, at: list[Step]) -> None:
        name = op.kernel.data
        factory = kernel_factory(name)
        if factory is None:
            raise PlanError(f"runtime: no NumPy kernel for '{name}'")
        props: dict[str, Any] = op.params
        props.update(diagnostic_props(op, self.describe))
        fn = factory(props)
        op_ins, op_outs = op.io()
        ins = [self.buffers[v] for v in op_ins]
        outs = [self.buffers[v] for v in op_outs]
        check_writable(name, outs, lambda i: self.describe(op_outs[i]))
        snap = inputs_to_snapshot(name, ins, outs)
        if not snap:
            at.append(partial(fn, *ins, *outs))
            return
        # inputs overlapping an output are read (copied) before the kernel writes
        copies = [(np.empty_like(ins[j], order="C"), ins[j]) for j in snap]
        for j, (c, _) in zip(snap, copies):
            ins[j] = c
        at.append(partial(_snapshot_then, copies, partial(fn, *ins, *outs)))

    def copy(self, op: rt.CopyOp, at: list[Step]) -> None:
        at.append(partial(np.copyto, self.buffers[op.dest], self.buffers[op.source]))

    def h2d(self, op: rt.H2DOp, stream: StreamIn, at: list[Step]) -> None:
        at.append(partial(_h2d, self.buffers[op.buffer], stream))

    def d2h(self, op: rt.D2HOp, stream: StreamOut, at: list[Step]) -> None:
        at.append(partial(_d2h, self.buffers[op.buffer], stream))

    def loop(self, op: rt.LoopOp, at: list[Step]) -> None:
        at.append(partial(_loop, op.count.value.data, self.compile_block(op.body.block)))

    def branch(self, op: rt.IfOp, at: list[Step]) -> None:
        then = self.compile_block(op.then_region.block)
        other = self.compile_block(op.else_region.block)
        at.append(partial(_if, self.buffers[op.condition], then, other))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Compiling creates many objects and frees few; the cyclic GC would rescan them again
    and again (superlinear in program size), so it is paused while compiling."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def compile_program(program: rt.ProgramOp, optimize: bool = False) -> Executable:
    """Build the plan of a lowered program.

    `optimize=False`: the straightforward plan (a list of kernel closures, run in order).
    `optimize=True`: one generated function per replica (see `xl.runtime.plan`); the
    program should have been through `rt-optimize` (any `rt` program is accepted).
    """
    with gc_paused():
        return _compile_program(program, optimize)


def _compile_program(program: rt.ProgramOp, optimize: bool) -> Executable:
    check_transfers(program)
    n = program.num_host_transfers
    reps = program.replication_factor
    replicas: list[_Replica] = []
    sources: list[str] = []
    for _ in range(reps):
        if optimize:
            b, marks = build_replica(program, StreamIn, StreamOut)
            fn, src = b.finish(marks)
            sources.append(src)
            replicas.append(_Replica([fn], b.state, b.inputs, b.outputs))
        else:
            c = _Compiler()
            steps = c.compile_block(program.body.block)
            replicas.append(_Replica(steps, c.state, c.inputs, c.outputs))
    first = replicas[0]
    return Executable(
        num_host_transfers=n,
        replication_factor=reps,
        h2d_streams={k: (s.shape, s.dtype) for k, s in first.inputs.items()},
        d2h_streams={k: (s.shape, s.dtype) for k, s in first.outputs.items()},
        replicas=replicas,
        sources=sources,
    )
