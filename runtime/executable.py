"""Compiles an `rt.program` once into a plan over preallocated buffers, and runs it.

`compile_program(program, optimize=True)` runs the program as one generated Python
function per replica (`xl.runtime.plan`); `optimize=False` gives the straightforward
plan: a list of kernel closures run in order, the reference the optimised plan is tested
against. Either way, per step only planned kernels run: no xDSL object, name lookup or
buffer allocation is involved. The resulting `Executable` runs the program with
`run(inputs)`. Lowering a high-level module and the pass pipeline are the compile
driver's (`xl.compiler.compile_module`); the runtime depends on the `rt` dialect only.

Host data layout: stream arrays are `[num_host_transfers, local replicas, *shape]`
with size-1 leading dims dropped (local replicas: all `replication_factor` of them with the
default `LocalComm`); each executed `rt.h2d` consumes the next transfer (wrapping around if
a stream is loaded more often than `num_host_transfers`; the counts are checked at compile
time, see `xl.runtime.transfers`).

Replicas: each local replica has its own buffers, state and step. Without replica
collectives the replicas run one after another. With collectives
(`xl.runtime.kernels.collectives`), each replica's step is a generator that stops at every
collective site (also inside loops); `run` advances every replica to its next stop, checks
that all stopped at the same site (else `ReplicaDivergenceError`: e.g. a collective in a
branch whose condition differs between replicas), runs the site's kernel once over all
replicas' buffers, and resumes them. A comm (`xl.runtime.comm`) whose `local_replicas` is a
subset builds and runs only those replicas; collectives see the others through it.

Threads: the optimised plan of a single-IPU program may run its large kernels in row blocks
and independent kernels side by side on the worker threads, with the bits of its
single-thread plan, where that beats OpenBLAS's own threads (`xl.runtime.parallel_kernels`).

Virtual IPUs (`xl.runtime.concurrent`): the optimised plan of a program placed on two or
more virtual IPUs (without replica collectives) runs one stream of generated code per IPU,
on persistent worker threads, synchronised only where the streams share memory; results
are bit-identical to the serial plan (`compile_program(..., concurrent=False)` or
`XL_SERIAL=1`), which single-IPU programs and the straightforward plan always use.

Seeing a run (`xl.runtime.profile`): every executed op has a `KernelInfo` (the popxl op
and its id, `MatMul.101`, its graph and IPU). An exception raised inside a kernel leaves
`run` as the same exception type whose message starts with the op that failed
(`Gather.104 (popxl.gather in graph main, on IPU 0) failed: ...`), found from the
traceback after the fact (no cost per step). `compile_program(..., profile=True)` records
every kernel execution and each run (`Executable.profile`, a `Recorder`; read it with
`xl.runtime.profile.Profile`).
"""

from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from xdsl.ir import Block, SSAValue

from xl.dialects import rt
from xl.dialects.replica_layout import host_data_shape
from xl.dialects.rt_kernels import kernel_class
from xl.runtime import kernels as _kernels  # noqa: F401  (registers every kernel)
from xl.runtime.aliasing import check_writable, inputs_to_snapshot
from xl.runtime.comm import Comm, LocalComm
from xl.runtime.concurrent import build_concurrent_replica, serial_forced
from xl.runtime.errors import PlanError, diagnostic_props
from xl.runtime.kernels import kernel_factory
from xl.runtime.kernels.collectives import Site, bind_site, collective_factory
from xl.runtime.parallel_kernels import ParallelStep, split_parts, uses_threads
from xl.runtime.placement import op_placement
from xl.runtime.plan import build_replica
from xl.runtime.profile import KernelInfo, Recorder, failure_message, kernel_info, renamed
from xl.runtime.streams import StreamIn, StreamOut
from xl.runtime.transfers import check_transfers
from xl.runtime.walk import ProgramWalk

Step = Callable[[], None]
Values = tuple[SSAValue, ...]


class ReplicaDivergenceError(RuntimeError):
    """The replicas of a step reached different collectives (or some none): a collective
    sits in a branch or loop whose condition differs between replicas."""


@dataclass
class _Replica:
    index: int  # global replica index
    # the step: a function, or a generator function when the program has collective sites
    step: Callable[[], Any]
    state: dict[str, np.ndarray]
    inputs: dict[str, StreamIn]
    outputs: dict[str, StreamOut]
    # what each kernel is; the collective sites' entries
    infos: list[KernelInfo] = field(default_factory=list)
    site_kernels: list[int] = field(default_factory=list)
    # generated plan: its file name and line number -> kernel; straightforward plan:
    # id of the closure run by a block -> kernel
    filename: str = ""
    lines: dict[int, int] = field(default_factory=dict)
    closures: dict[int, int] = field(default_factory=dict)

    @property
    def steps(self) -> list[Callable[[], Any]]:
        return [self.step]


@dataclass
class Executable:
    """A compiled program. `state` maps variable names to the buffers of the first local
    replica; `get_state` / `set_state` address replicas by global index."""

    num_host_transfers: int
    replication_factor: int
    h2d_streams: dict[str, tuple[tuple[int, ...], np.dtype]]
    d2h_streams: dict[str, tuple[tuple[int, ...], np.dtype]]
    replicas: list[_Replica] = field(repr=False)
    # The generated source of each replica's step (optimised plans only), for inspection.
    sources: list[str] = field(default_factory=list, repr=False)
    # One step function per collective site, over every local replica; descriptions for errors.
    sites: list[Callable[[], None]] = field(default_factory=list, repr=False)
    site_names: list[str] = field(default_factory=list, repr=False)
    comm: Comm = field(default_factory=LocalComm, repr=False)
    # the recorded kernel events when compiled with profile=True (`xl.runtime.profile`)
    profile: Recorder | None = field(default=None, repr=False)
    # the program the plan was built from (memory reports, a profiled plan built later)
    program: rt.ProgramOp | None = field(default=None, repr=False)

    # -- replicas -------------------------------------------------------------------------
    @property
    def workers(self) -> int:
        """The threads a step of each replica runs on: 1 for a serial plan, else one per
        stream of virtual IPUs (`xl.runtime.concurrent`)."""
        return getattr(self.replicas[0].step, "workers", 1)

    @property
    def local_replicas(self) -> range:
        """The global indices of the replicas run by this executable."""
        return range(self.replicas[0].index, self.replicas[-1].index + 1)

    @property
    def local_replication_factor(self) -> int:
        return len(self.replicas)

    def _replica(self, replica: int) -> _Replica:
        if not isinstance(replica, int | np.integer) or isinstance(replica, bool):
            raise TypeError(f"replica must be an int, got {type(replica).__name__}")
        if not 0 <= replica < self.replication_factor:
            raise IndexError(f"replica {replica} does not exist (replication_factor={self.replication_factor})")
        start = self.replicas[0].index
        if not start <= replica < start + len(self.replicas):
            raise IndexError(
                f"replica {replica} runs in another instance (this one runs replicas "
                f"{start}..{start + len(self.replicas) - 1})"
            )
        return self.replicas[replica - start]

    # -- state ---------------------------------------------------------------------
    @property
    def state(self) -> dict[str, np.ndarray]:
        return self.replicas[0].state

    def get_state(self, name: str, replica: int | None = None) -> np.ndarray:
        """The buffer of variable `name` on `replica` (global index; default: the first
        local replica). The array is the live buffer: copy it to keep a value."""
        rep = self.replicas[0] if replica is None else self._replica(replica)
        if name not in rep.state:
            raise KeyError(f'no variable named "{name}" in the program')
        return rep.state[name]

    def gather_state(self, name: str) -> np.ndarray:
        """Variable `name` of every replica, `[replication_factor, *shape]` (remote replicas'
        values through the comm: every instance must call it, in the same order)."""
        local = [self.get_state(name, r.index) for r in self.replicas]
        return np.stack(self.comm.gather(local) if self.comm.num_instances > 1 else local)

    def set_state(self, name: str, value: np.ndarray, replicas: Any = None) -> None:
        """Write a variable on `replicas` (global indices; None: every local replica).
        Shape and dtype must match."""
        targets = self.replicas if replicas is None else [self._replica(r) for r in replicas]
        self._write_state(name, [(t, value) for t in targets])

    def set_state_each(self, name: str, values: Sequence[np.ndarray]) -> None:
        """Write a variable with one value per local replica (`values[i]` to the i-th local
        replica, in `local_replicas` order): one pass, O(replicas)."""
        if len(values) != len(self.replicas):
            raise ValueError(
                f'variable "{name}": expected one value per local replica ({len(self.replicas)}), got {len(values)}'
            )
        self._write_state(name, list(zip(self.replicas, values, strict=True)))

    def _write_state(self, name: str, writes: list[tuple[_Replica, np.ndarray]]) -> None:
        """Check every (replica, value) pair, then write them. A replica-invariant variable
        (one buffer shared by every replica) holds one value: writing another one on some
        replicas only is refused. O(replicas)."""
        buf = self.get_state(name)
        values = [np.asarray(value) for _, value in writes]
        for value in values:
            if value.shape != buf.shape:
                raise ValueError(f'variable "{name}": expected shape {buf.shape}, got {value.shape}')
            if value.dtype != buf.dtype:
                raise ValueError(f'variable "{name}": expected dtype {buf.dtype}, got {value.dtype}')
        targets = {id(t) for t, _ in writes}
        # the buffers of the replicas not written keep their value
        kept = {id(r.state[name]) for r in self.replicas if id(r) not in targets}
        first: dict[int, np.ndarray] = {}  # a buffer -> the first value written to it
        for (t, _), value in zip(writes, values, strict=True):
            b = t.state[name]
            ref = b if id(b) in kept else first.setdefault(id(b), value)
            if ref is not value and ref.tobytes() != value.tobytes():
                raise ValueError(
                    f'variable "{name}" is replica-invariant (one buffer for every replica: '
                    "each update is the same all-reduced one); it cannot take a value on "
                    "some replicas only"
                )
        for (t, _), value in zip(writes, values, strict=True):
            np.copyto(t.state[name], value)

    # -- running ---------------------------------------------------------------------
    def full_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The host array of a stream of `shape` (`[num_host_transfers, local replicas, *shape]`
        with size-1 leading dims dropped)."""
        return host_data_shape(shape, self.num_host_transfers, len(self.replicas))

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
        n, reps = self.num_host_transfers, len(self.replicas)
        what = "replication_factor" if reps == self.replication_factor else "local replicas"
        canon: dict[str, np.ndarray] = {}
        for name, (shape, dtype) in self.h2d_streams.items():
            arr = inputs[name]
            if not isinstance(arr, np.ndarray):
                arr = np.asarray(arr)
            full = self.full_shape(shape)
            if arr.shape != full:
                raise ValueError(
                    f'stream "{name}": expected input of shape {full} '
                    f"([num_host_transfers={n}, {what}={reps}] + {shape}, "
                    f"size-1 dims dropped), got {arr.shape}"
                )
            if arr.dtype != dtype:
                raise ValueError(f'stream "{name}": expected dtype {dtype}, got {arr.dtype}')
            canon[name] = arr.reshape((n, reps, *shape))
        outs = {name: np.zeros((n, reps, *shape), dtype=dtype) for name, (shape, dtype) in self.d2h_streams.items()}
        for r, rep in enumerate(self.replicas):
            for name, s in rep.inputs.items():
                s.data = canon[name][:, r]
                s.index = 0
            for name, o in rep.outputs.items():
                o.data = outs[name][:, r]
                o.index = 0
        rec = self.profile
        t0 = time.perf_counter_ns() if rec is not None else 0
        try:
            if self.sites:
                self._run_lockstep(rec)
            else:
                for rep in self.replicas:
                    rep.step()
        except Exception as e:
            raise self._explain(e) from None
        if rec is not None:
            rec.steps.append((t0, time.perf_counter_ns()))
        return {name: a.reshape(self.full_shape(a.shape[2:])) for name, a in outs.items()}

    def _run_lockstep(self, rec: Recorder | None = None) -> None:
        """Advance every replica to its next collective site, run it, resume; until done.
        `rec`: record each site's time on every replica."""
        gens = [rep.step() for rep in self.replicas]
        sites = self.sites
        first, rest = gens[0], gens[1:]
        try:
            while True:
                k = next(first, None)
                for i, g in enumerate(rest, 1):
                    kk = next(g, None)
                    if kk != k:
                        self._diverged(k, i, kk)
                if k is None:
                    return
                try:
                    if rec is None:
                        sites[k]()
                    else:
                        t = time.perf_counter_ns()
                        sites[k]()
                        t1 = time.perf_counter_ns()
                        for r, rep in enumerate(self.replicas):
                            rec.events[r].append((rep.site_kernels[k], t, t1))
                except Exception as e:
                    rep0 = self.replicas[0]
                    raise self._named(e, rep0, rep0.site_kernels[k], all_replicas=True) from None
        finally:
            for g in gens:
                g.close()

    def _explain(self, e: BaseException) -> BaseException:
        """`e` (raised by a step) naming the kernel it came from, when it came from one:
        the innermost frame of a generated plan line, or of a block of the straightforward
        plan running a kernel closure."""
        if getattr(e, "_xl_kernel", False):
            return e
        by_file = {rep.filename: rep for rep in self.replicas if rep.filename}
        for frame, lineno in reversed(list(traceback.walk_tb(e.__traceback__))):
            code = frame.f_code
            rep = by_file.get(code.co_filename)
            if rep is not None:
                k = rep.lines.get(lineno)
                if k is not None:
                    return self._named(e, rep, k)
            elif code.co_filename == __file__ and code.co_name in _BLOCK_RUNNERS:
                f = frame.f_locals.get("f")
                for rep in self.replicas:
                    k = rep.closures.get(id(f))
                    if k is not None:
                        return self._named(e, rep, k)
        return e

    def _named(self, e: BaseException, rep: _Replica, k: int, all_replicas: bool = False) -> BaseException:
        reps = 1 if all_replicas else self.replication_factor
        new = renamed(e, failure_message(rep.infos[k], rep.index, reps, e))
        new.__dict__["_xl_kernel"] = True
        new.__dict__["xl_kernel"] = rep.infos[k]  # the KernelInfo, for tools
        return new

    def _where(self, k: int | None) -> str:
        return "the end of the step" if k is None else f"collective #{k} ({self.site_names[k]})"

    def _diverged(self, k0: int | None, i: int, k: int | None) -> None:
        raise ReplicaDivergenceError(
            f"the replicas diverged: replica {self.replicas[0].index} reached {self._where(k0)} "
            f"but replica {self.replicas[i].index} reached {self._where(k)}; every replica must "
            "reach the same collectives in the same order (is a collective inside a branch "
            "whose condition differs between replicas?)"
        )


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


def _timed(record: Callable[[tuple[int, int, int]], None], k: int, step: Step) -> None:
    t = time.perf_counter_ns()
    step()
    record((k, t, time.perf_counter_ns()))


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


class _Stops:
    """A step of the straightforward plan that stops at collective sites: `gen()` returns
    a generator yielding the index of each site reached."""

    __slots__ = ("gen",)

    def __init__(self, gen: Callable[[], Iterator[int]]) -> None:
        self.gen = gen

    def __call__(self) -> None:
        # A block holding a site runs through `_run_block`, which iterates `gen()` instead.
        raise AssertionError("runtime: a collective site was called outside the lockstep run")


def _run_block(steps: list[Any]) -> Iterator[int]:
    for f in steps:
        if type(f) is _Stops:
            yield from f.gen()
        else:
            f()


def _stop_at(site: int) -> Iterator[int]:
    yield site


def _loop_stops(count: int, body: list[Any]) -> Iterator[int]:
    for _ in range(count):
        yield from _run_block(body)


def _if_stops(cond: np.ndarray, then: list[Any], other: list[Any]) -> Iterator[int]:
    yield from _run_block(then if bool(cond) else other)


# the functions of this module that run the closures of a block (each as local `f`)
_BLOCK_RUNNERS = frozenset({"_loop", "_if", "_run_block"})


def _stops(steps: list[Any]) -> bool:
    return any(type(f) is _Stops for f in steps)


class _Compiler(ProgramWalk[list[Step]]):
    """The straightforward plan: one closure per op, appended to the list `at`."""

    def __init__(
        self,
        replica: int = 0,
        replication_factor: int = 1,
        shared_state: dict[str, np.ndarray] | None = None,
        profile: list[tuple[int, int, int]] | None = None,
    ) -> None:
        super().__init__(StreamIn, StreamOut, replica, replication_factor, shared_state)
        self.buffers: dict[SSAValue, np.ndarray] = {}
        self.profile = profile
        self.infos: list[KernelInfo] = []
        self.site_kernels: list[int] = []
        self.closures: dict[int, int] = {}  # id(closure) -> `infos` index
        # per op of a function body, walked at each call: (name, kernel, ins, outs), info
        self._kernels: dict[
            rt.KernelOp, tuple[str, Callable[..., None], tuple[SSAValue, ...], tuple[SSAValue, ...]]
        ] = {}
        self._infos: dict[Any, KernelInfo] = {}

    def add(self, op: Any, step: Step, at: list[Step]) -> None:
        """Append the closure running `op` (timed when profiling)."""
        k = len(self.infos)
        info = self._infos.get(op)
        if info is None:
            info = self._infos[op] = kernel_info(op)
        self.infos.append(info)
        if self.profile is not None:
            step = partial(_timed, self.profile.append, k, step)
        self.closures[id(step)] = k
        at.append(step)

    def bind(self, v: SSAValue, arr: np.ndarray, hint: str) -> None:
        self.buffers[v] = arr

    def array(self, v: SSAValue) -> np.ndarray:
        return self.buffers[v]

    def compile_block(self, block: Block) -> list[Step]:
        steps: list[Step] = []
        self.walk(block, steps)
        return steps

    def kernel(self, op: rt.KernelOp, at: list[Step]) -> None:
        known = self._kernels.get(op)
        if known is None:
            # what does not depend on the arrays, once per op (a function's body is
            # walked at each of its calls)
            name = op.kernel.data
            factory = kernel_factory(name)
            if factory is None:
                raise PlanError(f"runtime: no NumPy kernel for '{name}'")
            props: dict[str, Any] = op.params
            props.update(diagnostic_props(op, self.describe))
            known = self._kernels[op] = (name, factory(props), *op.io())
        name, fn, op_ins, op_outs = known
        ins = [self.buffers[v] for v in op_ins]
        outs = [self.buffers[v] for v in op_outs]
        check_writable(name, outs, lambda i: self.describe(op_outs[i]))
        snap = inputs_to_snapshot(name, ins, outs)
        if not snap:
            self.add(op, partial(fn, *ins, *outs), at)
            return
        # inputs overlapping an output are read (copied) before the kernel writes
        copies = [(np.empty_like(ins[j], order="C"), ins[j]) for j in snap]
        for j, (c, _) in zip(snap, copies):
            ins[j] = c
        self.add(op, partial(_snapshot_then, copies, partial(fn, *ins, *outs)), at)

    def copy(self, op: rt.CopyOp, at: list[Step]) -> None:
        self.add(op, partial(np.copyto, self.buffers[op.dest], self.buffers[op.source]), at)

    def h2d(self, op: rt.H2DOp, stream: StreamIn, at: list[Step]) -> None:
        self.add(op, partial(_h2d, self.buffers[op.buffer], stream), at)

    def d2h(self, op: rt.D2HOp, stream: StreamOut, at: list[Step]) -> None:
        self.add(op, partial(_d2h, self.buffers[op.buffer], stream), at)

    def loop(self, op: rt.LoopOp, at: list[Step]) -> None:
        body = self.compile_block(op.body.block)
        if _stops(body):
            at.append(_Stops(partial(_loop_stops, op.count.value.data, body)))
        else:
            at.append(partial(_loop, op.count.value.data, body))

    def branch(self, op: rt.IfOp, at: list[Step]) -> None:
        then = self.compile_block(op.then_region.block)
        other = self.compile_block(op.else_region.block)
        cond = self.buffers[op.condition]
        if _stops(then) or _stops(other):
            at.append(_Stops(partial(_if_stops, cond, then, other)))
        else:
            at.append(partial(_if, cond, then, other))

    def collective(self, op: rt.KernelOp, site: int, at: list[Step]) -> None:
        self.site_kernels.append(len(self.infos))
        self.infos.append(kernel_info(op))
        at.append(_Stops(partial(_stop_at, site)))


MAX_REPLICAS = 1024
"""The most replicas one process simulates. Each runs here, one after another, with its own
copy of every buffer: measured, a 784-512-10 MLP training step (matmul, gelu, gradients,
all-reduce mean, SGD) takes 6.5 MiB and 64 ms per replica per step, so 1024 replicas of
even that small program need 6.5 GiB and a minute per step. Compiling costs about 1 ms and
10 KiB per replica for a program of a few ops, linear in the replicas (`compile_program`)."""


def too_many_replicas() -> str:
    """Why a replica count above `MAX_REPLICAS` is refused (the end of an error message)."""
    return (
        f"more than the {MAX_REPLICAS} replicas xl simulates in one process: every replica runs "
        "in this process with its own copy of every buffer (a 784-512-10 MLP training step "
        "takes 6.5 MiB and 64 ms per replica per step, 6.5 GiB and a minute per step for 1024); "
        "for more, run the replicas as MPI processes (popxl.Ir(replication='popdist'))"
    )


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


def compile_program(
    program: rt.ProgramOp,
    optimize: bool = False,
    comm: Comm | None = None,
    profile: bool = False,
    concurrent: bool = True,
    workers: int | None = None,
) -> Executable:
    """Build the plan of a lowered program.

    `optimize=False`: the straightforward plan (a list of kernel closures, run in order).
    `optimize=True`: one generated function per replica (see `xl.runtime.plan`); the
    program should have been through `rt-optimize` (any `rt` program is accepted).
    `comm` (default `LocalComm()`): which replicas run here and how collectives reach the
    others (`xl.runtime.comm`). `profile=True`: the plan records each kernel's start and
    end (`Executable.profile`, see `xl.runtime.profile`); off, the plan is unchanged.
    `concurrent=True` (optimised plans of programs on two or more virtual IPUs, without
    replica collectives): the virtual IPUs run concurrently on `workers` threads (default
    min(IPUs, cores)), bit-identical to the serial plan (`xl.runtime.concurrent`); an
    optimised plan on one virtual IPU uses `workers` threads (default: the threads NumPy's
    BLAS may use now, at most the cores) for large kernels in row blocks and independent
    kernels side by side, bit-identical to its single-thread plan, when the builder
    estimates that this beats OpenBLAS's own threads (else the serial plan, OpenBLAS at the
    caller's threads; `xl.runtime.parallel_kernels`); `concurrent=False` or `XL_SERIAL=1` in the
    environment: serially, on one thread.
    """
    with gc_paused():
        return _compile_program(
            program,
            optimize,
            comm if comm is not None else LocalComm(),
            profile,
            concurrent and not serial_forced(),
            workers,
        )


def _compile_program(
    program: rt.ProgramOp,
    optimize: bool,
    comm: Comm,
    profile: bool = False,
    concurrent: bool = False,
    workers: int | None = None,
) -> Executable:
    check_transfers(program)
    n = program.num_host_transfers
    reps = program.replication_factor
    local = comm.local_replicas(reps)
    if len(local) > MAX_REPLICAS:
        raise PlanError(f"runtime: {len(local)} replicas in one process are {too_many_replicas()}")
    if len(local) == 0 or local.start < 0 or local.stop > reps or local.step != 1:
        raise PlanError(
            f"runtime: {comm!r} runs replicas {list(local)}, not a contiguous non-empty part of 0..{reps - 1}"
        )
    replicas: list[_Replica] = []
    sources: list[str] = []
    walks: list[Any] = []
    shared: dict[str, np.ndarray] = {}  # replica-invariant variables: one buffer for all
    events: list[list[tuple[int, int, int]]] = []
    placement = op_placement(program) if optimize and concurrent and workers != 1 else None
    parts = split_parts(program, workers) if optimize and concurrent and placement is None else 1
    threads = False  # whether the one-IPU plans run blocks and lanes on `parts` threads
    for r in local:
        ev: list[tuple[int, int, int]] | None = [] if profile else None
        if ev is not None:
            events.append(ev)
        if placement is not None:
            cb, cstep, src = build_concurrent_replica(program, placement, StreamIn, StreamOut, r, shared, ev, workers)
            sources.append(src)
            replicas.append(
                _Replica(
                    r, cstep, cb.state, cb.inputs, cb.outputs, cb.infos, cb.site_kernels, cb.filename, cb.line_kernels
                )
            )
            walks.append(cb)
        elif optimize:
            # the first replica's serial plan, with what blocks and lanes would save: kept
            # unless they beat OpenBLAS's own threads (then the plan for `parts` is built)
            b, marks = build_replica(program, StreamIn, StreamOut, r, shared, ev, parts, serial=not threads)
            if parts > 1 and not threads:
                if uses_threads(b.parallel_gain, b.blas_gain):
                    threads = True
                    b, marks = build_replica(program, StreamIn, StreamOut, r, shared, ev, parts)
                else:
                    parts = 1
            fn, src = b.finish(marks)
            if b.split_kernels or b.lane_functions:  # kernels run on `parts` threads
                fn = ParallelStep(fn, b.g.ns["_par"], parts)
            sources.append(src)
            replicas.append(
                _Replica(r, fn, b.state, b.inputs, b.outputs, b.infos, b.site_kernels, b.filename, b.line_kernels)
            )
            walks.append(b)
        else:
            c = _Compiler(r, reps, shared, ev)
            steps = c.compile_block(program.body.block)
            if c.sites:
                step: Callable[[], Any] = partial(_run_block, steps)
            else:
                step = partial(_loop, 1, steps)
            replicas.append(
                _Replica(r, step, c.state, c.inputs, c.outputs, c.infos, c.site_kernels, closures=c.closures)
            )
            walks.append(c)
    sites, names = _bind_sites(walks, local, reps, comm)
    first = replicas[0]
    return Executable(
        num_host_transfers=n,
        replication_factor=reps,
        h2d_streams={k: (s.shape, s.dtype) for k, s in first.inputs.items()},
        d2h_streams={k: (s.shape, s.dtype) for k, s in first.outputs.items()},
        replicas=replicas,
        sources=sources,
        sites=sites,
        site_names=names,
        comm=comm,
        profile=(
            Recorder([rep.index for rep in replicas], [rep.infos for rep in replicas], events) if profile else None
        ),
        program=program,
    )


def _bind_sites(walks: list[Any], local: range, reps: int, comm: Comm) -> tuple[list[Callable[[], None]], list[str]]:
    """One step function per collective site, over the buffers of every local replica."""
    sites: list[Callable[[], None]] = []
    names: list[str] = []
    first = walks[0]
    for k, (op, _, _) in enumerate(first.sites):
        name = op.kernel.data
        cls = kernel_class(name)
        factory = collective_factory(cls, name)
        props: dict[str, Any] = op.params
        if op.ins:
            what = first.describe(op.ins[0])
            names.append(f"{name} of {what}")
        else:
            names.append(name)
        site = Site(
            name=name,
            props=props,
            replication_factor=reps,
            local=local,
            ins=[w.sites[k][1] for w in walks],
            outs=[w.sites[k][2] for w in walks],
            comm=comm,
        )
        sites.append(bind_site(factory, site))
    return sites, names
