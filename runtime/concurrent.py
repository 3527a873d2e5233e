"""Virtual IPUs run concurrently: one stream of generated code per IPU, on worker threads.

`build_concurrent_replica(program, ...)` walks the program once (the shared `ProgramWalk`,
through `PlanBuilder`, so buffers, kernels, templates and error names are exactly those of
the serial plan), but instead of one straight-line step it records a tree of the executed
ops (`rt.loop` / `rt.if` kept as nodes) and emits one step function per *stream*. A stream
is the code of the virtual IPUs given to one worker: IPU k goes to worker
`rank(k) % workers` (workers = min(number of IPUs, `os.cpu_count()`), so with fewer cores
than IPUs several IPUs share a worker, their ops interleaved in program order). The main
thread runs stream 0; the others run on a process-wide pool of daemon worker threads,
started on first use and shared by every executable (never a thread per step; steps running
at the same time, from several threads, take different workers). NumPy
releases the GIL inside BLAS and ufunc loops, so streams overlap where the kernels are large
enough.

Placement of the ops without an `ipu.id` (the rule, in `op_placement`):

- a kernel without `ipu.id` runs on the IPU of its first output buffer;
- `rt.copy` (IPU copies, pipeline register moves) runs on the IPU of its destination;
- `rt.h2d` / `rt.d2h` run on the IPU of their buffer;
- the IPU of a buffer (seen through views) is its defining op's `ipu.id`, else that of the
  first placed op writing it, else of the first placed op reading it, else, through
  `rt.copy`, that of the buffer it is copied from or into, else 0 (popxl's default IPU).

Synchronisation (results are bit-identical to the serial plan): every executed op has the
set of memory it reads and writes, from the arrays actually bound at compile time (base
array and byte range, so views and reused buffers that share memory are seen as such;
scratch buffers are per stream and never shared; the host stream entries, whose `index`
counts transfers, are one resource each; an `rt.if` condition is read by each stream that
has code in the branch, into a local, just before the `if`). Two accesses from different
streams of which one writes keep their serial order:

- if the first comes before the second in the same iteration (same block instance), the
  second waits for the end of the first's enclosing node in that block;
- otherwise (the first is later in a loop body, or in the other branch of an `rt.if`), the
  second waits, inside the innermost common `rt.loop`, for the first's node at the
  previous iteration (loop-carried), and before that loop for the previous iteration of
  the next enclosing loop, and so on.

Each stream has a monotonic counter, bumped only after the ops another stream waits for
(`_c[s] += 1`); at an `rt.if` the branch with fewer bumps is padded so the count after the
`if` is static. A wait is `if _c[a] < T: _w(a, T)` with T affine in the loop indices
(computed at compile time from the serial order): waits only target the serial past, so
they cannot deadlock, and there is no lock per kernel (a bump takes a lock only when
someone is waiting). A failing stream sets an abort flag and wakes every waiter; the
caller gets the original exception (named after the failing popxl op, as in the serial
plan), and the next run starts clean.

BLAS: OpenBLAS's thread count is one per process, so while streams run concurrently it is
set (threadpoolctl) to `max(1, cores // workers)` threads, i.e. one BLAS thread per worker
on a 2-core machine with 2 workers, and restored to the caller's setting after the step.
OpenBLAS's own results can depend on its thread count (the pipelined MNIST's weights differ
in the last bits between 1 and 2 BLAS threads, serial or not), so "bit-identical" compares
runs with the same BLAS threads per kernel: e.g. `XL_SERIAL=1 OPENBLAS_NUM_THREADS=1`
against the default concurrent run on 2 cores (both 92.90 % on examples/mnist_pipeline.py).

Not concurrent (the serial plan is used): programs with a single virtual IPU, programs with
replica collectives (their steps stop at collective sites) or `rt.call`s (which lowering
only makes for single-IPU programs), the straightforward plan,
`compile_program(..., concurrent=False)`, and `XL_SERIAL=1` in the environment (read when the
program is compiled, e.g. at `Session` creation).
"""

from __future__ import annotations

import itertools
import os
import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from xdsl.ir import Operation, SSAValue

from xl.dialects import rt
from xl.dialects.ipu import placement
from xl.dialects.rt_kernels import kernel_class
from xl.runtime.errors import PlanError
from xl.runtime.kernels.collectives import is_collective
from xl.runtime.placement import BufferPlacement
from xl.runtime.plan import CHUNK_LINES, PlanBuilder, compile_plan, plan_filename, register_source
from xl.runtime.profile import kernel_info

SERIAL_ENV = "XL_SERIAL"
WAIT_POLL_S = 0.05  # a waiting stream re-checks the abort flag this often


def serial_forced() -> bool:
    """Whether `XL_SERIAL` (set and not `0`) asks for serial execution."""
    return os.environ.get(SERIAL_ENV, "").strip() not in ("", "0")


# ------------------------------------------------------------------------------------
# Placement
# ------------------------------------------------------------------------------------


def op_placement(program: rt.ProgramOp) -> dict[Operation, int] | None:
    """The virtual IPU of every executed op (kernels, copies, host transfers) by the rule
    of the module docstring, or None when the program runs serially anyway: fewer than two
    IPUs, replica collectives, or `rt.func` / `rt.call`."""
    ops = [op for op in program.walk() if op is not program]
    for op in ops:
        if isinstance(op, rt.CallOp | rt.FuncOp):
            return None  # rt functions (single-IPU programs by lowering): serial plan
        if isinstance(op, rt.KernelOp):
            cls = kernel_class(op.kernel.data)
            if cls is not None and is_collective(cls):
                return None
    buffer_ipu = BufferPlacement(ops).ipu
    where: dict[Operation, int] = {}
    for op in ops:
        if isinstance(op, rt.KernelOp):
            p = placement(op)
            if p is None:
                outs = op.io()[1]
                p = buffer_ipu(outs[0]) if outs else 0
        elif isinstance(op, rt.CopyOp):
            p = buffer_ipu(op.dest)
        elif isinstance(op, rt.H2DOp | rt.D2HOp):
            p = buffer_ipu(op.buffer)
        else:
            continue
        where[op] = p
    if len(set(where.values())) < 2:
        return None
    return where


def stream_of_ipus(ipus: set[int], workers: int) -> dict[int, int]:
    """IPU -> stream (worker): the IPUs in increasing order, dealt round-robin."""
    return {ipu: i % workers for i, ipu in enumerate(sorted(ipus))}


def default_workers(n_ipus: int) -> int:
    return max(1, min(n_ipus, os.cpu_count() or 1))


# ------------------------------------------------------------------------------------
# The tree of executed ops
# ------------------------------------------------------------------------------------

Region = tuple[Any, int, int]  # (base key, first byte, end byte)


@dataclass(eq=False)
class _Op:
    k: int | None  # `infos` index (None: an `rt.if` condition read)
    stream: int
    lines: list[str]
    acc: list[tuple[Region, bool]]  # (region, writes)
    signal: bool = False
    end: list[int] = field(default_factory=list)
    waits: dict[int, set[tuple[int, Any, Any]]] = field(default_factory=dict)


@dataclass(eq=False)
class _Loop:
    count: int
    body: list[Any]
    var: str
    streams: set[int] = field(default_factory=set)
    per_iter: list[int] = field(default_factory=list)  # bumps per iteration, per stream
    end: list[int] = field(default_factory=list)
    waits: dict[int, set[tuple[int, Any, Any]]] = field(default_factory=dict)


@dataclass(eq=False)
class _If:
    cond: str  # the local holding the condition read
    then: list[Any]
    other: list[Any]
    streams: set[int] = field(default_factory=set)
    pad_then: list[int] = field(default_factory=list)
    pad_other: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    waits: dict[int, set[tuple[int, Any, Any]]] = field(default_factory=dict)


Node = _Op | _Loop | _If


def region(a: np.ndarray) -> Region | None:
    """The memory `a` spans: its base array (by id) and the byte range within it."""
    if a.size == 0:
        return None
    b = a
    while isinstance(b.base, np.ndarray):
        b = b.base
    off = a.__array_interface__["data"][0] - b.__array_interface__["data"][0]
    lo = hi = off
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return id(b), lo, hi + a.itemsize


def _streams_in(nodes: list[Any]) -> set[int]:
    out: set[int] = set()
    for n in nodes:
        if isinstance(n, _Op):
            out.add(n.stream)
        else:
            out |= n.streams
    return out


class StreamBuilder(PlanBuilder):
    """`PlanBuilder` recording a tree of executed ops with their streams and accesses."""

    def __init__(self, placement: dict[Operation, int], stream_of: dict[int, int], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.placement = placement
        self.stream_of = stream_of
        self.root: list[Any] = []
        self._cur = self.root
        self._ids = 0

    def _fresh(self, hint: str) -> str:
        self._ids += 1
        return f"_{hint}{self._ids}"

    def visit(self, op: Operation, at: int) -> None:
        ipu = self.placement.get(op)
        if ipu is not None:
            self.g.stream = self.stream_of[ipu]  # scratch buffers are per stream
        super().visit(op, at)

    def emit(self, line: str, depth: int) -> None:  # pragma: no cover - never reached
        raise AssertionError("the concurrent plan emits per stream")

    def emit_kernel(self, op: Any, lines: list[str], depth: int, name: str) -> None:
        k = len(self.infos)
        info = kernel_info(op)
        if info.ipu is None:  # the op runs on its stream's IPU (placement rule)
            info = replace(info, ipu=self.placement[op])
        self.infos.append(info)
        if self.profile is not None:
            lines = [f"_t = _pc()  # {name}", *lines, f"_ev(({k}, _t, _pc()))  # {name}"]
        self._cur.append(_Op(k, self.stream_of[self.placement[op]], list(lines), self._accesses(op)))

    def _accesses(self, op: Operation) -> list[tuple[Region, bool]]:
        reads: tuple[SSAValue, ...] = ()
        writes: tuple[SSAValue, ...] = ()
        acc: list[tuple[Region, bool]] = []
        if isinstance(op, rt.KernelOp):
            reads, writes = op.io()
        elif isinstance(op, rt.CopyOp):
            reads, writes = (op.source,), (op.dest,)
        elif isinstance(op, rt.H2DOp):
            writes = (op.buffer,)
            acc.append(((("h2d", op.stream.data), 0, 1), True))
        elif isinstance(op, rt.D2HOp):
            reads = (op.buffer,)
            acc.append(((("d2h", op.stream.data), 0, 1), True))
        for vals, w in ((reads, False), (writes, True)):
            for v in vals:
                a = self.array(v)
                if not w and not a.flags.writeable:
                    continue  # constants: nobody writes them
                r = region(a)
                if r is not None:
                    acc.append((r, w))
        return acc

    def loop(self, op: rt.LoopOp, depth: int) -> None:
        node = _Loop(op.count.value.data, [], self._fresh("l"))
        saved, self._cur = self._cur, node.body
        self.walk(op.body.block, depth + 1)
        self._cur = saved
        node.streams = _streams_in(node.body)
        if node.streams:
            self._cur.append(node)

    def branch(self, op: rt.IfOp, depth: int) -> None:
        node = _If(self._fresh("cv"), [], [])
        saved, self._cur = self._cur, node.then
        self.walk(op.then_region.block, depth + 1)
        self._cur = node.other
        self.walk(op.else_region.block, depth + 1)
        self._cur = saved
        node.streams = _streams_in(node.then) | _streams_in(node.other)
        if not node.streams:
            return
        cond = self.array(op.condition)
        r = region(cond)
        name = self.g.buf(op.condition)
        for s in sorted(node.streams):  # each stream reads the condition into a local first
            acc = [(r, False)] if r is not None else []
            self._cur.append(_Op(None, s, [f"{node.cond} = {self.g.fn(bool)}({name})"], acc))
        self._cur.append(node)

    def collective(self, op: rt.KernelOp, site: int, depth: int) -> None:
        raise AssertionError("programs with collectives run serially")  # op_placement said so


# ------------------------------------------------------------------------------------
# Happens-before edges and counts
# ------------------------------------------------------------------------------------

# ancestry of an op: [(container, index in it, node)] from the program body down to the op
Anc = list[tuple[list[Any], int, Any]]


def _ancestries(nodes: list[Any], prefix: Anc, out: dict[int, Anc]) -> None:
    for i, n in enumerate(nodes):
        here = [*prefix, (nodes, i, n)]
        if isinstance(n, _Op):
            out[id(n)] = here
        elif isinstance(n, _Loop):
            _ancestries(n.body, here, out)
        else:
            _ancestries(n.then, here, out)
            _ancestries(n.other, here, out)


def _edges(x: _Op, ax: Anc, y: _Op, ay: Anc) -> Iterator[tuple[Any, Any, Any]]:
    """The waits making `y` (stream B) follow the latest instance of `x` (stream A) that
    precedes it in serial order: (node to wait before, node whose end is awaited, loop
    taken at its previous iteration or None)."""
    d = 0
    n = min(len(ax), len(ay))
    while d < n and ax[d][2] is ay[d][2]:
        node = ax[d][2]
        if isinstance(node, _If) and d + 1 < n and ax[d + 1][0] is not ay[d + 1][0]:
            break  # different branches of one `if`
        d += 1
    if d < n and ax[d][2] is not ay[d][2] and ax[d][1] < ay[d][1]:
        yield ay[d][2], ax[d][2], None  # earlier in the same iteration
        return
    # loop-carried: from the previous iteration of each enclosing common loop
    level = d
    while True:
        loops = [lv for lv in range(level) if isinstance(ax[lv][2], _Loop)]
        if not loops:
            return
        dl = loops[-1]
        yield ay[dl + 1][2], ax[dl + 1][2], ax[dl][2]
        level = dl


def analyse(root: list[Any], streams: int) -> None:
    """Find the cross-stream dependencies of the tree, mark the signalling ops, count the
    bumps and attach the waits (`node.waits[B]`: (stream A, awaited node, shifted loop))."""
    anc: dict[int, Anc] = {}
    _ancestries(root, [], anc)
    ops: list[_Op] = []

    def collect(nodes: list[Any]) -> None:
        for n in nodes:
            if isinstance(n, _Op):
                ops.append(n)
            elif isinstance(n, _Loop):
                collect(n.body)
            else:
                collect(n.then)
                collect(n.other)

    collect(root)
    by_base: dict[Any, list[tuple[int, int, int, bool]]] = {}
    for i, op in enumerate(ops):
        for (key, lo, hi), w in op.acc:
            by_base.setdefault(key, []).append((i, lo, hi, w))
    pairs: set[tuple[int, int]] = set()
    for accs in by_base.values():
        if len(accs) < 2 or not any(w for *_, w in accs):
            continue
        for p in range(len(accs)):
            i, lo, hi, w = accs[p]
            for q in range(p + 1, len(accs)):
                j, lo2, hi2, w2 = accs[q]
                if (w or w2) and i != j and ops[i].stream != ops[j].stream and lo < hi2 and lo2 < hi:
                    pairs.add((i, j) if i < j else (j, i))
    for i, j in pairs:
        for a, b in ((i, j), (j, i)):
            x, y = ops[a], ops[b]
            for before, awaited, shifted in _edges(x, anc[id(x)], y, anc[id(y)]):
                x.signal = True
                before.waits.setdefault(y.stream, set()).add((x.stream, awaited, shifted))
    _count(root, [0] * streams)


def _count(nodes: list[Any], c: list[int]) -> None:
    for n in nodes:
        if isinstance(n, _Op):
            if n.signal:
                c[n.stream] += 1
        elif isinstance(n, _Loop):
            start = list(c)
            _count(n.body, c)
            n.per_iter = [c[s] - start[s] for s in range(len(c))]
            for s in range(len(c)):
                c[s] = start[s] + n.count * n.per_iter[s]
        else:
            start = list(c)
            ct, ce = list(c), list(c)
            _count(n.then, ct)
            _count(n.other, ce)
            for s in range(len(c)):
                c[s] = max(ct[s], ce[s])
            n.pad_then = [c[s] - ct[s] for s in range(len(c))]
            n.pad_other = [c[s] - ce[s] for s in range(len(c))]
            del start
        n.end = list(c)


# ------------------------------------------------------------------------------------
# Code generation
# ------------------------------------------------------------------------------------


class _Emitter:
    def __init__(self, streams: int) -> None:
        self.streams = streams
        self.lines: list[list[str]] = [[] for _ in range(streams)]
        self.kernel_of: list[dict[int, int]] = [{} for _ in range(streams)]  # line index -> k
        self.cuts: list[list[int]] = [[] for _ in range(streams)]  # where a chunk may start
        self.loops: list[_Loop] = []  # enclosing loops while emitting

    def target(self, a: int, awaited: Any, shifted: Any) -> tuple[int, tuple[tuple[str, int], ...]]:
        """The count of stream `a` at the end of `awaited` (at the previous iteration of
        loop `shifted`), as const + sum(coef * loop var) over the enclosing loops."""
        const = awaited.end[a]
        terms = []
        for lp in self.loops:
            k = lp.per_iter[a]
            if k:
                terms.append((lp.var, k))
                if lp is shifted:
                    const -= k
        return const, tuple(terms)

    def block(self, nodes: list[Any], s: int, depth: int) -> int:
        out = self.lines[s]
        start = len(out)
        ind = "    " * depth
        for n in nodes:
            if depth == 0 and not isinstance(n, _If):  # (an `if` follows its condition read)
                self.cuts[s].append(len(out))
            merged: dict[tuple[int, tuple[tuple[str, int], ...]], int] = {}
            for a, awaited, shifted in n.waits.get(s, ()):
                const, terms = self.target(a, awaited, shifted)
                key = (a, terms)
                merged[key] = max(merged.get(key, const), const)
            for (a, terms), const in sorted(merged.items()):
                if not terms and const <= 0:
                    continue
                expr = " + ".join([str(const)] + [f"{k} * {v}" for v, k in terms]) if terms else str(const)
                out.append(f"{ind}if _c[{a}] < {expr}: _w({a}, {expr})")
            if isinstance(n, _Op):
                if n.stream != s:
                    continue
                for line in n.lines:
                    if n.k is not None:
                        self.kernel_of[s][len(out)] = n.k
                    out.append(ind + line)
                if n.signal:
                    out.append(f"{ind}_c[{s}] += 1; _n{s}()")
            elif isinstance(n, _Loop):
                if s not in n.streams:
                    continue
                out.append(f"{ind}for {n.var} in _range({n.count}):")
                self.loops.append(n)
                if self.block(n.body, s, depth + 1) == 0:
                    out.append(f"{ind}    pass")
                self.loops.pop()
            else:
                if s not in n.streams:
                    continue
                out.append(f"{ind}if {n.cond}:")
                for branch, pad in ((n.then, n.pad_then[s]), (n.other, n.pad_other[s])):
                    if branch is n.other:
                        out.append(f"{ind}else:")
                    emitted = self.block(branch, s, depth + 1)
                    if pad:
                        out.append(f"{ind}    _c[{s}] += {pad}; _n{s}()")
                    elif emitted == 0:
                        out.append(f"{ind}    pass")
        return len(out) - start


# ------------------------------------------------------------------------------------
# Running: the counters, the workers, the step
# ------------------------------------------------------------------------------------


class _Aborted(Exception):
    """Another stream failed: this one stops at its next wait."""


class Sync:
    """The per-stream counters of one replica's concurrent step, and the abort flag."""

    def __init__(self, streams: int) -> None:
        self.c = [0] * streams
        self.conds = [threading.Condition(threading.Lock()) for _ in range(streams)]
        self.waiting = [0] * streams
        self.done = [False] * streams
        self.aborted = False

    def reset(self) -> None:
        for s in range(len(self.c)):
            self.c[s] = 0
            self.done[s] = False
        self.aborted = False

    def finished(self, s: int) -> None:
        """Stream `s` has run to its end (or failed): wake whoever waits for it."""
        self.done[s] = True
        with self.conds[s]:
            self.conds[s].notify_all()

    def notifier(self, s: int) -> Callable[[], None]:
        """Wake the waiters on stream `s` (called after `s` bumped its counter)."""
        cond, waiting = self.conds[s], self.waiting

        def notify() -> None:
            if waiting[s]:
                with cond:
                    cond.notify_all()

        return notify

    def wait(self, s: int, target: int) -> None:
        """Block until stream `s` has bumped its counter `target` times (or an abort)."""
        c, cond = self.c, self.conds[s]
        with cond:
            self.waiting[s] += 1
            try:
                while c[s] < target:
                    if self.aborted:
                        raise _Aborted()
                    if self.done[s]:  # cannot happen by construction: never hang on it
                        raise PlanError(
                            f"runtime: internal error: a stream waits for stream {s} to reach "
                            f"{target}, but it ended at {c[s]}"
                        )
                    cond.wait(WAIT_POLL_S)
            finally:
                self.waiting[s] -= 1

    def abort(self) -> None:
        self.aborted = True
        for cond in self.conds:
            with cond:
                cond.notify_all()


class _Worker:
    """A persistent daemon thread of the process's pool, running the stream functions it
    is given (with the queue its result goes to)."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.thread = threading.Thread(target=_serve, args=(self.jobs,), name=name, daemon=True)
        self.thread.start()


# a stream function, its index, where its result goes, the caller's NumPy error handling
Job = tuple[Callable[[], None], int, "queue.SimpleQueue[Any]", Any]


def _serve(jobs: queue.SimpleQueue[Job]) -> None:
    while True:
        fn, s, done, errstate = jobs.get()
        try:
            with np.errstate(**errstate):  # (per thread: np.seterr of the caller applies)
                fn()
        except BaseException as e:  # handed to the caller's thread
            done.put((s, e))
        else:
            done.put((s, None))


_IDLE: list[_Worker] = []  # the pool's workers no step is using
_POOL_LOCK = threading.Lock()
_WORKER_NUMBERS = itertools.count(1)  # the names of the workers started


def take_workers(n: int) -> list[_Worker]:
    """`n` idle workers of the process-wide pool, for one step: started on first use and
    kept (`give_back`), so every concurrent executable reuses them (no thread per step, none
    per executable). Steps running at the same time (executables run from several threads)
    never share a worker: a stream queued behind another step's stream on a shared worker
    could wait for a stream of its own step queued behind a stream of the other step that
    waits for it (a deadlock)."""
    with _POOL_LOCK:
        taken = [_IDLE.pop() for _ in range(min(n, len(_IDLE)))]
        while len(taken) < n:
            taken.append(_Worker(f"xl worker {next(_WORKER_NUMBERS)}"))
        return taken


def give_back(workers: list[_Worker]) -> None:
    """Return the workers of a finished step to the pool."""
    with _POOL_LOCK:
        _IDLE.extend(reversed(workers))


class _Blas:
    """OpenBLAS's (process-wide) thread count, through threadpoolctl, read once."""

    _controller: Any = None

    @classmethod
    def libs(cls) -> list[Any]:
        if cls._controller is None:
            try:
                from threadpoolctl import ThreadpoolController

                cls._controller = ThreadpoolController().select(user_api="blas")
            except Exception:  # threadpoolctl missing or failing: leave BLAS alone
                cls._controller = ()
        return list(getattr(cls._controller, "lib_controllers", ()))


class ConcurrentStep:
    """The step of one replica: its streams on the main thread and the workers."""

    def __init__(self, streams: list[Callable[[], None]], sync: Sync, blas_threads: int, name: str) -> None:
        self.streams = streams
        self.sync = sync
        self.blas_threads = blas_threads
        self._name = name
        self._done: queue.SimpleQueue[tuple[int, BaseException | None]] = queue.SimpleQueue()

    @property
    def workers(self) -> int:
        return len(self.streams)

    def __call__(self) -> None:
        workers = take_workers(len(self.streams) - 1)
        try:
            self._run(workers)
        finally:
            give_back(workers)  # every stream has ended: the workers are idle

    def _run(self, workers: list[_Worker]) -> None:
        sync = self.sync
        sync.reset()
        libs = _Blas.libs()
        saved = [lib.num_threads for lib in libs]
        for lib in libs:
            lib.set_num_threads(self.blas_threads)
        errors: list[BaseException] = []
        try:
            errstate = np.geterr()
            for s, (w, fn) in enumerate(zip(workers, self.streams[1:]), 1):
                w.jobs.put((fn, s, self._done, errstate))
            try:
                self.streams[0]()
            except BaseException as e:
                errors.append(e)
                sync.abort()
            pending = len(workers)
            while pending:
                try:
                    _, r = self._done.get(timeout=WAIT_POLL_S)
                except queue.Empty:
                    continue
                except BaseException as e:  # e.g. KeyboardInterrupt while waiting
                    errors.append(e)
                    sync.abort()
                    continue
                pending -= 1
                if r is not None:
                    errors.append(r)
                    sync.abort()
        finally:
            for lib, n in zip(libs, saved):
                lib.set_num_threads(n)
        real = [e for e in errors if not isinstance(e, _Aborted)]
        if real:
            raise real[0]


def _finishing(fn: Callable[[], None], sync: Sync, s: int) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except BaseException:
            sync.abort()  # the other streams stop at their next wait
            raise
        finally:
            sync.finished(s)

    return run


# ------------------------------------------------------------------------------------
# Building one replica
# ------------------------------------------------------------------------------------


def build_concurrent_replica(
    program: rt.ProgramOp,
    placement: dict[Operation, int],
    stream_in: type,
    stream_out: type,
    replica: int = 0,
    shared_state: dict[str, np.ndarray] | None = None,
    profile: list[tuple[int, int, int]] | None = None,
    workers: int | None = None,
) -> tuple[StreamBuilder, ConcurrentStep, str]:
    """Walk `program` once for replica `replica` and generate its streams (see the module
    docstring); returns the builder (buffers, state, streams, kernel infos, line map), the
    step and the generated source. `placement`: `op_placement(program)`."""
    ipus = set(placement.values())
    n = workers if workers is not None else default_workers(len(ipus))
    n = max(1, min(n, len(ipus)))
    stream_of = stream_of_ipus(ipus, n)
    b = StreamBuilder(
        placement, stream_of, stream_in, stream_out, replica, program.replication_factor, shared_state, profile
    )
    for op in program.body.block.ops:
        b.visit(op, 0)
    analyse(b.root, n)
    em = _Emitter(n)
    for s in range(n):
        em.block(b.root, s, 0)
    g = b.g
    sync = Sync(n)
    g.ns["_c"] = sync.c
    g.ns["_w"] = sync.wait
    g.ns["_range"] = range
    for s in range(n):
        g.ns[f"_n{s}"] = sync.notifier(s)
    src_lines: list[str] = []
    for body, fname in b.helpers.items():
        k = len(set(re.findall(r"\ba(\d+)\b", body)))
        src_lines.append(f"def {fname}({', '.join(f'a{j}' for j in range(k))}):")
        src_lines += ["    " + line for line in body.split("\n")]
    for s in range(n):
        lines = em.lines[s]
        kernel_of = em.kernel_of[s]
        # long streams are split at top-level statements into chunks (compile() stays linear)
        cuts = [0]
        for i in em.cuts[s]:
            if i - cuts[-1] >= CHUNK_LINES:
                cuts.append(i)
        cuts.append(len(lines))
        calls = []
        for c in range(len(cuts) - 1):
            fname = f"_stream{s}_{c}"
            src_lines.append(f"def {fname}():")
            before = len(src_lines)
            for i in range(cuts[c], cuts[c + 1]):
                k = kernel_of.get(i)
                if k is not None:
                    b.line_kernels[before + 1 + i - cuts[c]] = k
            src_lines += ["    " + line for line in lines[cuts[c] : cuts[c + 1]]] or ["    pass"]
            calls.append(f"    {fname}()")
        src_lines.append(f"def _stream{s}():")
        src_lines += calls or ["    pass"]
    src = "\n".join(src_lines) + "\n"
    scope = dict(g.ns)
    filename = b.filename = plan_filename("concurrent")
    exec(compile_plan(src, filename), scope)
    fns = [_finishing(scope[f"_stream{s}"], sync, s) for s in range(n)]
    cores = os.cpu_count() or 1
    step = ConcurrentStep(fns, sync, max(1, cores // n), f"xl replica {replica}")
    register_source(filename, src, step)
    return b, step, src
