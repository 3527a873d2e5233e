"""Virtual IPUs run concurrently: one stream of generated code per IPU, on worker threads.

`build_concurrent_replica(program, ...)` builds the step of one replica in four parts, each
its own module:

- which IPU runs each op (`xl.runtime.placement.op_placement`) and which stream (worker)
  runs each IPU: IPU k goes to worker `rank(k) % workers` (workers = min(number of IPUs,
  `os.cpu_count()`), so with fewer cores than IPUs several IPUs share a worker, their ops
  interleaved in program order);
- the tree of executed ops, each with its stream and the memory it reads and writes
  (`xl.runtime.stream_tree`, one walk of the program shared with the serial plan, so
  buffers, kernels, templates and error names are exactly those of the serial plan);
- which top-level ops of a busier stream another stream runs instead
  (`xl.runtime.stream_balance`: a static list schedule; the program is then walked again
  with them, so their scratch buffers are their new stream's);
- the waits that keep every cross-stream access to shared memory in serial order
  (`xl.runtime.stream_deps`), and the code of each stream with them
  (`xl.runtime.stream_emit`);
- at run time, the streams' counters and abort flag (`xl.runtime.stream_sync`), the
  process-wide pool of worker threads (`xl.runtime.thread_pool`: the main thread runs
  stream 0, the others run on daemon workers started on first use and shared by every
  executable, never a thread per step; steps running at the same time, from several
  threads, take different workers) and OpenBLAS's thread count (`xl.runtime.blas_threads`).

NumPy releases the GIL inside BLAS and ufunc loops, so streams overlap where the kernels are
large enough. Results are bit-identical to the serial plan: waits only target the serial
past, so they cannot deadlock, and there is no lock per kernel. A failing stream stops the
others at their next wait; the caller gets the original exception (named after the failing
popxl op, as in the serial plan), and the next run starts clean.

BLAS: while streams run concurrently OpenBLAS runs `max(1, cores // workers)` threads, i.e.
one BLAS thread per worker on a 2-core machine with 2 workers, restored to the caller's
setting after the step. OpenBLAS's own results can depend on its thread count (the pipelined
MNIST's weights differ in the last bits between 1 and 2 BLAS threads, serial or not), so
"bit-identical" compares runs with the same BLAS threads per kernel: e.g. `XL_SERIAL=1
OPENBLAS_NUM_THREADS=1` against the default concurrent run on 2 cores (both 92.90 % on
examples/mnist_pipeline.py).

Not concurrent (the serial plan is used): programs with a single virtual IPU, programs with
replica collectives (their steps stop at collective sites) or `rt.call`s (which lowering
only makes for single-IPU programs), the straightforward plan,
`compile_program(..., concurrent=False)`, and `XL_SERIAL=1` in the environment (read when the
program is compiled, e.g. at `Session` creation).
"""

from __future__ import annotations

import os
import queue
import re
from collections.abc import Callable

import numpy as np
from xdsl.ir import Operation

from xl.dialects import rt
from xl.runtime.blas_threads import BlasThreads
from xl.runtime.placement import stream_of_ipus
from xl.runtime.plan import CHUNK_LINES, compile_plan, plan_filename, register_source
from xl.runtime.stream_balance import balance as balance_streams
from xl.runtime.stream_deps import analyse
from xl.runtime.stream_emit import Emitter
from xl.runtime.stream_sync import WAIT_POLL_S, Aborted, Sync, finishing
from xl.runtime.stream_tree import StreamBuilder
from xl.runtime.thread_pool import Worker, give_back, take_workers

SERIAL_ENV = "XL_SERIAL"


def serial_forced() -> bool:
    """Whether `XL_SERIAL` (set and not `0`) asks for serial execution."""
    return os.environ.get(SERIAL_ENV, "").strip() not in ("", "0")


def default_workers(n_ipus: int) -> int:
    """The worker threads of a step over `n_ipus` virtual IPUs: one per IPU, at most one per core."""
    return max(1, min(n_ipus, os.cpu_count() or 1))


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

    def _run(self, workers: list[Worker]) -> None:
        sync = self.sync
        sync.reset()
        libs = BlasThreads.libs()
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
        real = [e for e in errors if not isinstance(e, Aborted)]
        if real:
            raise real[0]


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

    def walk(moved: dict[Operation, int] | None) -> StreamBuilder:
        b = StreamBuilder(
            placement,
            stream_of,
            stream_in,
            stream_out,
            replica,
            program.replication_factor,
            shared_state,
            profile,
            moved=moved,
        )
        for op in program.body.block.ops:
            b.visit(op, 0)
        return b

    b = walk(None)
    moves = balance_streams(b.root, n)
    if moves:  # walked again: the moved ops' scratch buffers are their new stream's
        b = walk(moves)
    analyse(b.root, n)
    em = Emitter(n)
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
    fns = [finishing(scope[f"_stream{s}"], sync, s) for s in range(n)]
    cores = os.cpu_count() or 1
    step = ConcurrentStep(fns, sync, max(1, cores // n), f"xl replica {replica}")
    register_source(filename, src, step)
    return b, step, src
