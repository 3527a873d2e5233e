"""Kernels of a single-IPU step on several threads: large kernels in row blocks, and
independent kernels side by side.

A program on one virtual IPU is one stream of kernels, most of them NumPy ufunc loops and
BLAS calls, which release the GIL. When the generated plan (`xl.runtime.plan`) is built
with `parts > 1` (`compile_program(..., workers=)`, default: the threads NumPy's BLAS may
use when the program is compiled, `default_parts`), the step uses the process-wide worker
threads (`xl.runtime.thread_pool`) in two ways.

Row blocks. A kernel whose result has at least `SPLIT_MIN_ELEMENTS` elements and whose rows
(the indices of the results' leading axis) are computed independently of each other is
generated once per block of rows, each block over views of its rows (an operand without
that axis, broadcast, is read whole), and the blocks run at once, the first on the calling
thread, the others on workers, joined before the next kernel:

```python
_par(_h3, (v10, v11), _h3, (v12, v13))  # popxl.gelu: rows 0..511 here, 512..1023 on a worker
```

Which kernels split, by op class (each fact written once): the `Elementwise` trait
(`xl.dialects.traits`), and the rules registered here with `@rows_independent(cls, ...)`,
which say from the kernel's properties and arrays that its rows are independent (the
softmax gradient along a non-leading axis, stacks of matrix products over a batch axis both
operands have, `xl.fused` chains, the softmax where each leading slice holds whole blocks of
rows sharing a shift). A stack of products counts its FLOPs as work (`_product_work`), not
its results. Never split: blocks that would write memory another block reads (an operand
read whole, or a row operand overlapping another block's result), kernels inside `rt.func`
bodies, one matrix product or a stack times one matrix (a BLAS product of fewer rows is not
the same computation: OpenBLAS's results differ in the last bits), a softmax whose shift
blocks straddle leading slices.

Lanes. Consecutive kernels of the step's top level that touch no common memory one of them
writes are dealt to two lanes (`Lanes`): lane 1 becomes a function started on a worker,
lane 0 runs here, then both join (e.g. a weight gradient's product beside the input
gradient's, the query, key and value projections):

```python
_fork(_lane3)        # def _lane3(): _matmul_89(v283, b268, b284)  # popxl.matmul
_matmul_89(b268, v280, b281)  # popxl.matmul
_join()
```

Only the plan's own code goes in a lane (templates: a kernel closure may keep state of its
own), and only when each lane has enough work to pay for the fork and the join
(`LANE_MIN_COST`); otherwise the kernels stay in program order.

Which plan. OpenBLAS can use the threads too, inside each product, but a product on several
BLAS threads does not give the bits of one thread. So a step either runs its blocks and
lanes (OpenBLAS on one thread per kernel) or is the serial plan with OpenBLAS on the
caller's threads, by the builder's estimate (`uses_threads`: the blocks' and lanes' work
against that of the products large enough for BLAS threads, `blas_threads_gain`, weighted by
`PARALLEL_OVER_BLAS`, from measurements): programs whose products are large enough for BLAS
threads (the GPT example, the seed MLP, a BERT-sized layer) keep the serial plan and BLAS
threads, as before; blocks and lanes run where products are small and elementwise work is
large.

Either way every kernel computes exactly what it computes in the serial plan, and while such
a step runs OpenBLAS runs one thread per kernel (`xl.runtime.blas_threads`): a step with
blocks and lanes on N threads gives the bits of the step on 1 (`tests/runtime/test_parallel_kernels.py` checks
every splittable kernel of the registry and the GPT example's training step). A failure
on a worker is raised by the step, named after its kernel.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from xl.dialects import rt
from xl.dialects.popxl import MatmulOp, SoftmaxGradOp, SoftmaxOp
from xl.dialects.rt_kernels import FusedOp, KernelClass, SoftmaxFusedOp, SoftmaxGradFusedOp, kernel_class
from xl.dialects.traits import Elementwise, flop_count
from xl.runtime.blas_threads import BlasThreads
from xl.runtime.kernels.activation import rows_split_exactly
from xl.runtime.kernels.collectives import is_collective
from xl.runtime.thread_pool import Worker, give_back, take_workers

SPLIT_MIN_ELEMENTS = 1 << 17  # a smaller kernel gains less than a fork and join costs (~10 us)

# (kernel properties, input arrays, output arrays) -> whether the rows are independent
RowRule = Callable[[dict[str, Any], Sequence[np.ndarray], Sequence[np.ndarray]], bool]
ROW_RULES: dict[KernelClass, RowRule] = {}

RowBlock = tuple[list[np.ndarray], list[np.ndarray]]  # one block's (inputs, outputs)


def rows_independent(*classes: KernelClass) -> Callable[[RowRule], RowRule]:
    """Register the decorated rule for kernels of these op classes (not `Elementwise`)."""

    def deco(rule: RowRule) -> RowRule:
        for cls in classes:
            if cls in ROW_RULES:
                raise TypeError(f"a row rule for {cls.name} is registered twice")
            ROW_RULES[cls] = rule
        return rule

    return deco


@rows_independent(SoftmaxGradOp)
def _along_inner_axis(props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> bool:
    """Each slice along `axis` on its own: rows are independent unless `axis` is the
    leading one."""
    ndim = outs[0].ndim
    axis = int(props.get("axis", -1))
    return ndim >= 2 and axis % ndim != 0 and all(a.shape == outs[0].shape for a in (*ins, *outs))


@rows_independent(FusedOp)
def _chain_of_elementwise(props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> bool:
    """`xl.fused`: its steps are `Elementwise` kernels (`rt-fuse-elementwise` fuses only
    those): elementwise as a whole."""
    return True


@rows_independent(SoftmaxOp)
def _whole_shift_blocks(props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> bool:
    """The softmax kernel shifts blocks of rows by their common maximum: blocks of leading
    slices split when each holds whole shift blocks of the size the whole uses
    (`rows_split_exactly`)."""
    return len(ins) == 1 and rows_split_exactly(ins[0], outs[0], int(props.get("axis", -1)), redo=False)


@rows_independent(SoftmaxFusedOp)
def _prologue_then_shift_blocks(props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> bool:
    """`xl.softmax`: elementwise steps write the scores into the output (its inputs
    broadcast as in an elementwise kernel), then the softmax in place, as `SoftmaxOp`."""
    return rows_split_exactly(outs[0], outs[0], int(props.get("axis", -1)), redo=True)


@rows_independent(SoftmaxGradFusedOp)
def _grad_then_elementwise(props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> bool:
    """`xl.softmax_grad`: the softmax gradient of `(dy, y)` along a non-leading axis, then
    elementwise steps (the other inputs broadcast as in an elementwise kernel)."""
    return len(ins) >= 2 and _along_inner_axis(props, ins[:2], outs)


@rows_independent(MatmulOp)
def _stacks_of_matrices(props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> bool:
    """A stack of matrix products over a leading batch axis that both operands have: each
    product is the same BLAS call whichever block it is in. (A product of one matrix, or a
    stack times one matrix, which one GEMM may compute, never splits.)"""
    out = outs[0]
    return (
        len(ins) == 2
        and out.ndim >= 3
        and all(a.ndim == out.ndim and a.shape[0] == out.shape[0] and a.strides[0] != 0 for a in ins)
    )


# rules of kernels whose other operands broadcast as in an elementwise kernel (read whole
# by every block when they lack the rows' axis); the rule must hold too
_ELEMENTWISE_RULES = frozenset(
    {_chain_of_elementwise, _grad_then_elementwise, _whole_shift_blocks, _prologue_then_shift_blocks}
)


def _splits(cls: KernelClass | None, props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]):
    """For each input, whether it is split with the rows (False: read whole), or None when
    the kernel's rows are not independent."""
    if cls is None or not outs:
        return None
    out0 = outs[0]
    if out0.ndim == 0 or any(o.ndim != out0.ndim or o.shape[0] != out0.shape[0] for o in outs):
        return None
    n = out0.shape[0]
    has_trait = getattr(cls, "has_trait", None)
    rule = ROW_RULES.get(cls)
    if (has_trait is not None and has_trait(Elementwise)) or rule in _ELEMENTWISE_RULES:
        if rule is not None and not rule(props, ins, outs):
            return None
        split: list[bool] = []
        for a in ins:
            if a.ndim == out0.ndim and a.shape[0] == n:
                split.append(True)
            elif a.ndim < out0.ndim or a.shape[0] == 1:
                split.append(False)  # broadcast along the rows: every block reads it whole
            else:
                return None
        return split
    if rule is None or not rule(props, ins, outs):
        return None
    if any(a.ndim != out0.ndim or a.shape[0] != n for a in ins):
        return None
    return [True] * len(ins)


def _product_work(cls: KernelClass | None, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> float:
    """A stack of matrix products' work in element passes (its `Flops` / `FLOPS_PER_ELEMENT`:
    `[16, 4, 64, 64] @ [16, 4, 64, 16]` is a few of its 65536 results' worth of passes); 0
    for any other kernel (their work is their results)."""
    if cls is not MatmulOp:
        return 0.0
    return kernel_cost(cls, {}, ins, outs)


def row_blocks(
    cls: KernelClass | None,
    props: dict[str, Any],
    ins: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    parts: int,
    min_elements: int | None = None,
) -> list[RowBlock] | None:
    """The kernel's operands cut into `parts` blocks of rows (views), or None when it does
    not split (fewer than `min_elements` results, default `SPLIT_MIN_ELEMENTS`; rows not
    independent; blocks that would touch each other's results)."""
    if min_elements is None:
        min_elements = SPLIT_MIN_ELEMENTS
    if parts < 2 or not outs or outs[0].ndim == 0 or outs[0].shape[0] < parts:
        return None
    if outs[0].size < min_elements and _product_work(cls, ins, outs) < min_elements:
        return None
    split = _splits(cls, props, ins, outs)
    if split is None:
        return None
    n = outs[0].shape[0]
    bounds = [n * p // parts for p in range(parts + 1)]
    blocks: list[RowBlock] = []
    for p in range(parts):
        lo, hi = bounds[p], bounds[p + 1]
        blocks.append(([a[lo:hi] if s else a for a, s in zip(ins, split, strict=True)], [o[lo:hi] for o in outs]))
    # no block writes what another block reads or writes
    for p, (_, pouts) in enumerate(blocks):
        for q, (qins, qouts) in enumerate(blocks):
            if p == q:
                continue
            for w in pouts:
                if any(np.may_share_memory(w, a) for a in (*qins, *qouts)):
                    return None
    return blocks


# ------------------------------------------------------------------------------------
# Independent kernels side by side
# ------------------------------------------------------------------------------------

Region = tuple[int, int, int]  # (id of the base array, first byte, end byte)

LANE_MIN_COST = 150_000  # each lane's work (`kernel_cost`, ~0.5 ns a unit) must pay for a fork and a join
FLOPS_PER_ELEMENT = 25  # a product's FLOP costs about 1/25 of an elementwise element pass
# a float16 element of a NumPy loop against a float32 one (measured, seed 003's pipeline: the
# Adam first-moment update, float16 state, 4.2 ms on 400k elements, the float32 second moment 0.18 ms)
HALF_COST = 20.0


def region(a: np.ndarray) -> Region | None:
    """The memory `a` spans: its base array (by id) and the byte range within it."""
    if a.size == 0:
        return None
    b = a
    while isinstance(b.base, np.ndarray):
        b = b.base
    off = a.__array_interface__["data"][0] - b.__array_interface__["data"][0]
    lo = hi = off
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return id(b), lo, hi + a.itemsize


def accesses(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> list[tuple[Region, bool]]:
    """(region, written) of a kernel's operands; read-only arrays (constants) are left out."""
    acc: list[tuple[Region, bool]] = []
    for arrays, w in ((ins, False), (outs, True)):
        for a in arrays:
            if not w and not a.flags.writeable:
                continue
            r = region(a)
            if r is not None:
                acc.append((r, w))
    return acc


def kernel_cost(
    cls: KernelClass | None,
    props: dict[str, Any],
    ins: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    half_cost: float = 1.0,
) -> float:
    """A rough time of the kernel in element passes: its FLOPs (`Flops` trait) scaled, else
    the elements it reads and writes, a float16 one counting `half_cost` (`HALF_COST`:
    NumPy's half loops convert element by element; the plan's thresholds here were
    measured on float32 and count it 1)."""
    if cls is not None:
        try:
            flops = flop_count(cls, [a.shape for a in ins], [a.shape for a in outs], props)
        except Exception:  # a count that does not apply to these operands
            flops = None
        if flops:
            return flops / FLOPS_PER_ELEMENT
    return float(sum(a.size * (half_cost if a.dtype == np.float16 else 1.0) for a in (*ins, *outs)))


# The blocks and lanes are used when they save at least this multiple of what OpenBLAS's own
# threads would save in the serial plan. Measured (2-core VM, quiet minutes, alternating
# chunks): the GPT example's step at 2 threads, serial plan + 2 BLAS threads 1.26x the
# 1-thread step, blocks and lanes 0.99x (they run on the worker, but gain nothing there), so
# the serial plan wins wherever products are large enough for BLAS threads at all.
PARALLEL_OVER_BLAS = 2.0


def uses_threads(parallel_gain: float, blas_gain: float) -> bool:
    """Whether a plan whose blocks and lanes save `parallel_gain` runs them (else: the
    serial plan, with OpenBLAS at the caller's thread count)."""
    return parallel_gain > 0 and parallel_gain >= PARALLEL_OVER_BLAS * blas_gain


BLAS_THREADS_MIN_FLOPS = 4_000_000  # OpenBLAS's threads pay on products of this size up


def blas_threads_gain(
    cls: KernelClass | None, props: dict[str, Any], ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], parts: int
) -> float:
    """What OpenBLAS's own `parts` threads would save on this kernel in a serial plan
    (`kernel_cost` units): a product of at least `BLAS_THREADS_MIN_FLOPS` FLOPs runs about
    `parts` times faster; anything else, nothing."""
    if cls is None or not outs:
        return 0.0
    try:
        flops = flop_count(cls, [a.shape for a in ins], [a.shape for a in outs], props)
    except Exception:
        return 0.0
    if not flops or flops < BLAS_THREADS_MIN_FLOPS:
        return 0.0
    return flops / FLOPS_PER_ELEMENT * (1 - 1 / parts)


def _conflict(x: list[tuple[Region, bool]], lane: list[tuple[Region, bool]]) -> bool:
    for (kx, lo, hi), wx in x:
        for (ky, lo2, hi2), wy in lane:
            if kx == ky and (wx or wy) and lo < hi2 and lo2 < hi:
                return True
    return False


class Lanes:
    """Consecutive kernels of the step dealt to two lanes that touch no common memory one of
    them writes: lane 0 runs on the calling thread, lane 1 on a worker, at the same time
    (`ForkJoin.fork` / `join`). Within a lane the kernels keep program order; across lanes
    they are independent, so any interleaving gives the serial results."""

    def __init__(self) -> None:
        self.entries: list[list[Any]] = [[], []]
        self.acc: list[list[tuple[Region, bool]]] = [[], []]
        self.cost = [0.0, 0.0]

    def lane_for(self, acc: list[tuple[Region, bool]], cost: float) -> int | None:
        """The lane a kernel with these accesses joins: the less loaded one when it depends
        on neither; the one it depends on while that lane is the shorter. None (start new
        lanes with it) when it depends on both, or on the longer lane: there it would only
        lengthen the step while the other lane idles, and the kernels after it may run
        beside it in new lanes."""
        c0, c1 = _conflict(acc, self.acc[0]), _conflict(acc, self.acc[1])
        if c0 and c1:
            return None
        if c0 or c1:
            lane = 0 if c0 else 1
            return lane if self.cost[lane] < self.cost[1 - lane] else None
        return 0 if self.cost[0] <= self.cost[1] else 1

    def add(self, lane: int, acc: list[tuple[Region, bool]], cost: float, entry: Any) -> None:
        self.entries[lane].append(entry)
        self.acc[lane] += acc
        self.cost[lane] += cost

    def pays(self) -> bool:
        """Whether running the lanes at once gains more than the fork and join cost."""
        return bool(self.entries[1]) and min(self.cost) >= LANE_MIN_COST


# ------------------------------------------------------------------------------------
# Running the blocks and the lanes
# ------------------------------------------------------------------------------------


class _Task:
    """A block or lane handed to a worker, which the caller runs itself if the worker has not
    started it by the time the caller needs it (a busy machine may not schedule the worker
    at once): whoever claims it first runs it, so a join never waits for a thread that has
    not begun."""

    __slots__ = ("claim", "error", "finished", "fn")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.claim = threading.Lock()
        self.finished = threading.Lock()
        self.finished.acquire()
        self.error: BaseException | None = None

    def on_worker(self) -> None:
        if self.claim.acquire(blocking=False):
            try:
                self.fn()
            except BaseException as e:  # re-raised by `join`, on the caller's thread
                self.error = e
            finally:
                self.finished.release()

    def join(self) -> None:
        """On the caller: run it here if unclaimed, else wait for the worker; re-raise its
        failure."""
        if self.claim.acquire(blocking=False):
            self.fn()
            return
        self.finished.acquire()
        if self.error is not None:
            raise self.error


class ForkJoin:
    """The step's `_par` (row blocks: `f0(*a0)` here, `f1(*a1)`, ... on workers, returning
    once all have run) and `_fork` / `_join` (a lane on a worker while the caller runs the
    other). The first failure is re-raised once every block has ended."""

    def __init__(self) -> None:
        self.workers: list[Worker] = []
        self.errstate: Any = {}  # the caller's np.geterr(), for the workers
        self.pending: _Task | None = None  # the lane forked and not joined

    def __call__(self, *fa: Any) -> None:
        workers = self.workers
        n = len(fa) // 2
        if len(workers) < n - 1:  # run outside a ParallelStep (no workers): in order, here
            for i in range(n):
                fa[2 * i](*fa[2 * i + 1])
            return
        tasks = []
        for i in range(1, n):
            t = _Task(partial(fa[2 * i], *fa[2 * i + 1]))
            workers[i - 1].jobs.put((t.on_worker, i, None, self.errstate))
            tasks.append(t)
        error: BaseException | None = None
        try:
            fa[0](*fa[1])
        except BaseException as e:
            error = e
        for t in tasks:
            try:
                t.join()
            except BaseException as e:
                if error is None:
                    error = e
        if error is not None:
            raise error

    def fork(self, fn: Callable[[], None]) -> None:
        """`_fork`: hand `fn` (a lane) to the first worker; `join` waits for it."""
        if not self.workers:
            fn()  # run outside a ParallelStep: in order, here
            return
        t = self.pending = _Task(fn)
        self.workers[0].jobs.put((t.on_worker, 1, None, self.errstate))

    def join(self) -> None:
        """`_join`: the lane started by `fork` has run (here, if the worker had not begun
        it); re-raise its failure."""
        t, self.pending = self.pending, None
        if t is not None:
            t.join()

    def drain(self) -> None:
        """Let a lane still running end (the step failed between `fork` and `join`)."""
        t, self.pending = self.pending, None
        if t is not None and not t.claim.acquire(blocking=False):
            t.finished.acquire()


class ParallelStep:
    """The step of one replica whose plan runs kernels in blocks (`ForkJoin`): takes
    `parts - 1` workers of the pool for the step and runs OpenBLAS on one thread meanwhile."""

    def __init__(self, step: Callable[[], None], fork_join: ForkJoin, parts: int) -> None:
        self.step = step
        self.fork_join = fork_join
        self.parts = parts

    @property
    def workers(self) -> int:
        return self.parts

    def __call__(self) -> None:
        workers = take_workers(self.parts - 1)
        fj = self.fork_join
        libs = BlasThreads.libs()
        saved = [lib.num_threads for lib in libs]
        try:
            for lib, n in zip(libs, saved):
                if n != 1:
                    lib.set_num_threads(1)
            fj.errstate = np.geterr()
            fj.workers = workers
            self.step()
        finally:
            fj.drain()
            fj.workers = []
            for lib, n in zip(libs, saved):
                if n != 1:
                    lib.set_num_threads(n)
            give_back(workers)


def split_parts(program: rt.ProgramOp, workers: int | None) -> int:
    """The blocks a large kernel of `program`'s generated plan runs in: `workers` (default
    `default_parts()`), or 1 for a program whose step stops at replica collectives (a
    generator, run in lockstep with the other replicas)."""
    n = default_parts() if workers is None else workers
    if n > 1:
        for op in program.walk():
            if isinstance(op, rt.KernelOp) and is_collective(kernel_class(op.kernel.data)):
                return 1
    return max(1, n)


def default_parts() -> int:
    """The threads a single-IPU step uses by default: as many as NumPy's BLAS may use
    (threadpoolctl, `OPENBLAS_NUM_THREADS`) when the program is compiled, at most the cores."""
    cores = os.cpu_count() or 1
    libs = BlasThreads.libs()
    blas = min((lib.num_threads for lib in libs), default=cores)
    return max(1, min(cores, blas))
