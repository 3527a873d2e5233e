"""The optimised plan: one generated Python function per replica for a whole `rt.program`.

`build_replica(program)` allocates every buffer once, binds each kernel to its arrays at
compile time and emits straight-line Python source (loops become `for`, branches `if`),
compiled once with `compile()`. The bound arrays, ufuncs and constants are globals of the
generated code, so a steady-state step does no name lookups in Python dicts of ours, no
dispatch on types or kernel names, no shape checks and no array allocations: it calls
NumPy ufuncs with preallocated `out=` arrays, precomputed views and bound BLAS calls.

Kernel selection: the common kernels have *templates* (`xl.runtime.plan_templates`,
registered by op class), alias-aware sequences of in-place ufunc calls over shared
scratch buffers. Anything else calls the kernel factory of `xl.runtime.kernels`, as the
straightforward plan does. The `rt.kernel` name is resolved to its op class once per
kernel (`xl.dialects.rt_kernels.kernel_class`).
Kernels marked `rt.view` bind their output as a view of their input and emit no code.
Scalar constants are 0-d arrays of the operand dtype (same results as Python scalars,
no conversion per call).

Each kernel's lines end with a `# popxl.op` comment naming the kernel, and the source is
registered with `linecache` (one file name per plan, `<xl plan N>`): a traceback from a
kernel, pdb and profilers show the generated line.

Replica collectives (`xl.runtime.kernels.collectives`) are not called by the step: it stops there
with `yield k` (k: the collective site), which makes the step (and each chunk holding a
site) a generator; the executable runs site k over all replicas, then resumes every
replica. A program without collectives keeps a plain step function.

Profiling (`profile=` a list): each kernel's lines are framed by `_t = _pc()` and
`_ev((k, _t, _pc()))` (k: its index in `infos`, `_pc`: `time.perf_counter_ns`, `_ev`: the
list's `append`), h2d / d2h / copies too; without it the source is exactly the unprofiled
one. Either way `infos` (`xl.runtime.profile.KernelInfo`) describes each kernel and
`line_kernels` maps the generated file's line numbers to them, which is how a run-time
error names the failing popxl op (`MatMul.101`) at no cost per step.

Code size: kernels of 4+ lines become calls to helper functions shared by all kernels
with the same code (whichever of their operands are the same buffer), `rt.func` bodies
are one function each (`xl.runtime.functions`), and long programs are split into chunk
functions, so `compile()` stays linear and small. Scratch buffers are shared by all
kernels of a replica: a step function is not re-entrant.
"""

from __future__ import annotations

import itertools
import linecache
import re
import threading
import time
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Block, SSAValue

from xl.dialects import rt
from xl.dialects.rt import VIEW_ATTR
from xl.dialects.rt_kernels import kernel_class, view_array
from xl.dialects.utils import dtype_of, shape_of
from xl.runtime import plan_templates as _plan_templates  # noqa: F401  (registers the templates)
from xl.runtime.aliasing import check_writable, inputs_to_snapshot
from xl.runtime.codegen import TEMPLATES, Gen, K
from xl.runtime.errors import PlanError, diagnostic_props
from xl.runtime.functions import emit_call, function_source
from xl.runtime.kernels import KERNELS
from xl.runtime.parallel_kernels import (
    ForkJoin,
    Lanes,
    RowBlock,
    accesses,
    blas_threads_gain,
    kernel_cost,
    row_blocks,
)
from xl.runtime.profile import KernelInfo, kernel_info
from xl.runtime.walk import ProgramWalk

# ------------------------------------------------------------------------------------
# Building the step function
# ------------------------------------------------------------------------------------


class PlanBuilder(ProgramWalk[int]):
    """Allocates the buffers of one replica and generates its step function (`at`: the
    indentation depth of the emitted lines)."""

    def __init__(
        self,
        stream_in: type,
        stream_out: type,
        replica: int = 0,
        replication_factor: int = 1,
        shared_state: dict[str, np.ndarray] | None = None,
        profile: list[tuple[int, int, int]] | None = None,
    ) -> None:
        super().__init__(stream_in, stream_out, replica, replication_factor, shared_state)
        self.g = Gen()
        self.profile = profile
        if profile is not None:
            self.g.ns["_pc"] = time.perf_counter_ns
            self.g.ns["_ev"] = profile.append
        self.infos: list[KernelInfo] = []  # what each kernel is (profile, errors)
        self.site_kernels: list[int] = []  # the `infos` index of each collective site
        self._line_kernel: dict[int, int] = {}  # index in g.lines -> `infos` index
        self.line_kernels: dict[int, int] = {}  # line number in `filename` -> `infos` index
        self.filename = ""
        self.fallbacks: list[str] = []
        self.snapshots: list[str] = []  # kernels whose overlapping inputs are copied first
        self.helpers: dict[str, str] = {}  # outlined kernel body -> helper name
        # kernels run in this many blocks of rows at once (`xl.runtime.parallel_kernels`)
        self.parts = 1
        # the serial plan is generated, and `parallel_gain` / `blas_gain` are what the plan
        # for `parts` threads would save (the figures its build gives): `build_replica(serial=True)`
        self.estimate_only = False
        self.split_kernels: list[str] = []  # the kernels that do
        # what running on `parts` threads saves (in `kernel_cost` units): through the blocks
        # and lanes (`parallel_gain`), or through BLAS's own threads in the serial plan
        self.parallel_gain = 0.0
        self.blas_gain = 0.0
        self._in_function = 0  # > 0 while an `rt.func` body is generated
        self._lanes: Lanes | None = None  # independent kernels not emitted yet
        self.lane_functions: list[tuple[str, list[tuple[int, list[str]]]]] = []  # lane 1 of each fork

    def bind(self, v: SSAValue, arr: np.ndarray, hint: str) -> None:
        self.g.set_buffer(v, arr, hint)

    def array(self, v: SSAValue) -> np.ndarray:
        return self.g.arr(v)

    def emit(self, line: str, depth: int) -> None:
        self._flush_lanes()
        self.g.lines.append("    " * depth + line)

    def emit_kernel(self, op: Any, lines: list[str], depth: int, name: str) -> None:
        """Emit the lines of one executed op (timed when profiling), remembering which
        kernel each line belongs to."""
        self._flush_lanes()
        self._append(*self._timed(op, lines, name), depth)

    def _timed(self, op: Any, lines: list[str], name: str) -> tuple[int, list[str]]:
        """The kernel index of executed op `op` (its `infos` entry, made now) and its lines,
        framed by timing lines when profiling."""
        k = len(self.infos)
        self.infos.append(kernel_info(op))
        if self.profile is not None:
            lines = [f"_t = _pc()  # {name}", *lines, f"_ev(({k}, _t, _pc()))  # {name}"]
        return k, lines

    def _append(self, k: int, lines: list[str], depth: int) -> None:
        for line in lines:
            self._line_kernel[len(self.g.lines)] = k
            self.g.lines.append("    " * depth + line)

    def _flush_lanes(self) -> None:
        """Emit the pending lanes of independent kernels: lane 1 as a function started on a
        worker (`_fork`), lane 0 here, then `_join()`; serially when that does not pay."""
        lanes = self._lanes
        if lanes is None or self._in_function:
            return
        self._lanes = None
        if self.estimate_only:  # the lines are emitted already, in program order
            if lanes.pays():
                self.parallel_gain += min(lanes.cost)
            return
        if lanes.pays():
            self.parallel_gain += min(lanes.cost)
            fname = f"_lane{len(self.lane_functions)}"
            self.lane_functions.append((fname, lanes.entries[1]))
            self.g.lines.append(f"_fork({fname})")
            for k, lines in lanes.entries[0]:
                self._append(k, lines, 0)
            self.g.lines.append("_join()")
        else:  # in program order (kernel indices are): the serial plan's lines
            for k, lines in sorted((*lanes.entries[0], *lanes.entries[1]), key=lambda e: e[0]):
                self._append(k, lines, 0)

    def block(self, block: Block, depth: int) -> None:
        start = len(self.g.lines)
        self.walk(block, depth)
        if len(self.g.lines) == start:
            self.emit("pass", depth)

    def copy(self, op: rt.CopyOp, depth: int) -> None:
        g = self.g
        self.emit_kernel(op, [f"{g.fn(np.copyto)}({g.buf(op.dest)}, {g.buf(op.source)})"], depth, op.name)

    def h2d(self, op: rt.H2DOp, stream: Any, depth: int) -> None:
        g = self.g
        sn, b = g.bind(stream, "s"), g.buf(op.buffer)
        line = f"_d = {sn}.data; _i = {sn}.index; {g.fn(np.copyto)}({b}, _d[_i % _d.shape[0]]); {sn}.index = _i + 1"
        self.emit_kernel(op, [line], depth, op.name)

    def d2h(self, op: rt.D2HOp, stream: Any, depth: int) -> None:
        g = self.g
        sn, b = g.bind(stream, "s"), g.buf(op.buffer)
        line = (
            f"_d = {sn}.data; _i = {sn}.index; {g.fn(np.copyto)}(_d[_i % _d.shape[0], ...], {b}); {sn}.index = _i + 1"
        )
        self.emit_kernel(op, [line], depth, op.name)

    def loop(self, op: rt.LoopOp, depth: int) -> None:
        self.emit(f"for _ in {self.g.fn(range)}({op.count.value.data}):", depth)
        self.block(op.body.block, depth + 1)

    def branch(self, op: rt.IfOp, depth: int) -> None:
        self.emit(f"if {self.g.buf(op.condition)}:", depth)
        self.block(op.then_region.block, depth + 1)
        self.emit("else:", depth)
        self.block(op.else_region.block, depth + 1)

    def call(self, op: rt.CallOp, depth: int) -> None:
        # one shared Python function per distinct body
        self._flush_lanes()
        self._in_function += 1
        try:
            emit_call(self, op, depth)  # pyright: ignore[reportArgumentType]  (checked as runtime.*, imported as xl.runtime.*: two names of one class)
        finally:
            self._in_function -= 1

    def collective(self, op: rt.KernelOp, site: int, depth: int) -> None:
        # the step is a generator: it stops here until every replica has arrived
        self.site_kernels.append(len(self.infos))
        self.infos.append(kernel_info(op))
        self.emit(f"yield {site}  # {op.kernel.data}", depth)

    def kernel(self, rop: rt.KernelOp, depth: int) -> None:
        g = self.g
        name = rop.kernel.data
        props = rop.params
        props.update(diagnostic_props(rop, self.describe))
        cls = kernel_class(name)
        op = K(name, cls, *rop.io())
        if VIEW_ATTR in rop.attributes and len(op.ins) == 1 and len(op.outs) == 1:
            x = g.arr(op.ins[0])
            shape = shape_of(op.outs[0].type)
            v = view_array(cls, x, shape, props.get("perm"))
            if v is not None:
                g.set_buffer(op.outs[0], v, "v")
                return
            # Not expressible as a view (rt-views never marks such a kernel): the output
            # gets storage and the kernel copies, every step.
            g.set_buffer(op.outs[0], np.zeros(shape, dtype_of(op.outs[0].type)))
        if self.parts > 1 and not self._in_function:
            ins, outs = [g.arr(v) for v in op.ins], [g.arr(v) for v in op.outs]
            blocks = row_blocks(cls, props, ins, outs, self.parts)
            if blocks is not None:  # what the blocks save (estimating: the serial lines below)
                self.parallel_gain += kernel_cost(op.cls, props, ins, outs) * (1 - 1 / len(blocks))
                if not self.estimate_only:
                    self.emit_kernel(rop, [self._blocks_line(op, props, blocks)], depth, name)
                    return
            else:
                self.blas_gain += blas_threads_gain(cls, props, ins, outs, self.parts)
                if depth == 0:
                    self._lane_kernel(rop, op, props, ins, outs)
                    return
        self.emit_kernel(rop, self._lines_with_roles(op, props), depth, name)

    def _lane_kernel(
        self, rop: rt.KernelOp, op: K, props: dict[str, Any], ins: list[np.ndarray], outs: list[np.ndarray]
    ) -> None:
        """Put kernel `op` of the step's top level in a lane of independent kernels
        (`xl.runtime.parallel_kernels.Lanes`), or emit it after the pending lanes when it
        is a kernel closure (only the plan's own code, templates, goes in a lane: a closure
        may keep state of its own)."""
        acc = accesses(ins, outs)
        cost = kernel_cost(op.cls, props, ins, outs)
        lanes = self._lanes if self._lanes is not None else Lanes()
        lane = lanes.lane_for(acc, cost)
        if lane is None:
            self._flush_lanes()
            lanes, lane = Lanes(), 0
        g = self.g
        fallbacks = len(self.fallbacks)
        # a lane's scratch buffers are its own (the serial plan's when only estimating)
        saved, g.stream = g.stream, g.stream if self.estimate_only else lane
        try:
            lines = self._lines_with_roles(op, props)
        finally:
            g.stream = saved
        if len(self.fallbacks) != fallbacks or not lines:
            self.emit_kernel(rop, lines, 0, op.name)
            return
        self._lanes = lanes
        k, lines = self._timed(rop, lines, op.name)
        if self.estimate_only:  # emitted here, where the serial plan has it
            self._append(k, lines, 0)
            lines = []
        lanes.add(lane, acc, cost, (k, lines))

    def _lines_with_roles(self, op: K, props: dict[str, Any]) -> list[str]:
        """The lines of kernel `op` over its operands' buffers (`_roles` for aliased ones)."""
        g = self.g
        ins = [g.buf(v) for v in op.ins]
        outs = [g.buf(v) for v in op.outs]
        roles = self._roles(ins, outs)
        try:
            lines = self._kernel_lines(op, ins, outs, props)
        finally:
            for t in roles:
                del g.ns[t]
        if roles:
            lines = [_IDENT.sub(lambda m: roles.get(m.group(0), m.group(0)), line) for line in lines]
        return lines

    def _blocks_line(self, op: K, props: dict[str, Any], blocks: list[RowBlock]) -> str:
        """The line running kernel `op` as blocks of rows at once (`xl.runtime.parallel_kernels`):
        each block is the kernel generated over views of its rows (one view per distinct
        operand, so aliased operands stay aliased), as a shared helper, with the scratch
        buffers of its own worker."""
        g = self.g
        calls: list[str] = []
        saved = g.stream
        try:
            for p, (bins, bouts) in enumerate(blocks):
                g.stream = p
                views: dict[SSAValue, SSAValue] = {}
                pins = [self._block_view(views, v, a) for v, a in zip(op.ins, bins, strict=True)]
                pouts = [self._block_view(views, v, a) for v, a in zip(op.outs, bouts, strict=True)]
                lines = self._lines_with_roles(K(op.name, op.cls, pins, pouts), props)
                if not lines:
                    continue
                fname, args = self.outline(lines).split("(", 1)
                calls.append(f"{fname}, ({args[:-1]},)" if args[:-1] else f"{fname}, ()")
        finally:
            g.stream = saved
        self.split_kernels.append(op.name)
        return f"_par({', '.join(calls)})  # {op.name}" if calls else f"pass  # {op.name}"

    def _roles(self, ins: list[str], outs: list[str]) -> dict[str, str]:
        """Names of their own for the operands of a kernel whose buffer is in several
        roles (`ins` / `outs` renamed in place; returns role name -> buffer name).

        A role name is bound to the same array, so the code is the same; it only keys
        the kernel's helper (`outline`) by what each operand is rather than by which
        operands coincide: e.g. every gelu_grad of one shape shares one helper whether it
        writes into dy, into x or elsewhere. The roles are named back in the emitted lines.
        """
        every = ins + outs
        if len(set(every)) == len(every):
            return {}
        ns = self.g.ns
        roles: dict[str, str] = {}
        for k, n in enumerate(every):
            t = f"{_ROLE}{k}"
            ns[t] = ns[n]
            roles[t] = n
        ins[:] = [f"{_ROLE}{k}" for k in range(len(ins))]
        outs[:] = [f"{_ROLE}{len(ins) + k}" for k in range(len(outs))]
        return roles

    def _kernel_lines(self, op: K, ins: list[str], outs: list[str], props: dict[str, Any]) -> list[str]:
        """The lines of one kernel (`ins` / `outs`: its operands' names)."""
        g = self.g
        name, cls = op.name, op.cls
        pre: list[str] = []
        check_writable(name, [g.arr(v) for v in op.outs], lambda i: self.describe(op.outs[i]))
        snap = inputs_to_snapshot(name, [g.arr(v) for v in op.ins], [g.arr(v) for v in op.outs])
        if snap:
            # inputs overlapping an output are read (copied) before the kernel writes
            in_vals = list(op.ins)
            for j in snap:
                x = g.arr(op.ins[j])
                t = op.ins[j].type
                assert isinstance(t, MemRefType)
                copy = rt.AllocOp(t).result  # a private buffer for the copy
                g.set_buffer(copy, np.empty_like(x, order="C"), "snap")
                pre.append(f"{g.fn(np.copyto)}({g.buf(copy)}, {ins[j]})")
                ins[j] = g.buf(copy)
                in_vals[j] = copy
            op = K(name, cls, in_vals, op.outs)
            self.snapshots.append(name)
        tmpl = TEMPLATES.get(cls) if cls is not None else None
        lines = tmpl(g, op, ins, outs, props) if tmpl is not None else None
        g.release_scratch()
        if lines is None:
            factory = KERNELS.get(cls) if cls is not None else None
            if factory is None:
                raise PlanError(f"runtime: no NumPy kernel for '{name}'")
            fn = factory(props)
            self.fallbacks.append(name)
            lines = [f"{g.bind(fn, 'k')}({', '.join(ins + outs)})"]
        lines = [f"{line}  # {name}" for line in pre + lines]
        if len(lines) >= OUTLINE_LINES:
            lines = [f"{self.outline(lines)}  # {name}"]
        return lines

    def _block_view(self, views: dict[SSAValue, SSAValue], v: SSAValue, a: np.ndarray) -> SSAValue:
        """A buffer for block view `a` of operand `v` (one per operand: aliases stay aliases)."""
        w = views.get(v)
        if w is None:
            t = v.type
            assert isinstance(t, MemRefType)
            w = views[v] = rt.AllocOp(MemRefType(t.element_type, a.shape)).result
            self.g.set_buffer(w, a, "v")
        return w

    def outline(self, lines: list[str]) -> str:
        """Replace a multi-line kernel body by a call to a shared helper function.

        The arrays it uses become parameters, so kernels with the same code (e.g. every
        gelu of one shape/aliasing pattern) share one helper: the generated source, and
        thus `compile()` time, stays small. A call costs ~0.1 us against the several
        ufunc calls of the body.
        """
        ns = self.g.ns
        params: list[str] = []
        index: dict[str, int] = {}

        def param(m: re.Match[str]) -> str:
            t = m.group(0)
            if t.startswith("_") or t not in ns:
                return t
            j = index.get(t)
            if j is None:
                j = index[t] = len(params)
                params.append(t)
            return f"a{j}"

        key = "\n".join(_IDENT.sub(param, line) for line in lines)
        fname = self.helpers.get(key)
        if fname is None:
            fname = self.helpers[key] = f"_h{len(self.helpers)}"
        return f"{fname}({', '.join(params)})"

    def finish(self, marks: Sequence[int] = ()) -> tuple[Callable[[], None], str]:
        """Compile the generated source; returns (step function, source).

        The bound objects are the globals of the generated code (LOAD_GLOBAL is cached
        by the interpreter, about as fast as a local). Long programs are split at the
        top-level op boundaries `marks` into functions of about `CHUNK_LINES` lines, which
        keeps `compile()` linear in the program size.
        """
        self._flush_lanes()
        g = self.g
        lines = g.lines
        cuts = [0]
        for m in marks:
            if m - cuts[-1] >= CHUNK_LINES:
                cuts.append(m)
        cuts.append(len(lines))
        src_lines: list[str] = []
        for body, fname in self.helpers.items():
            n = len(set(re.findall(r"\ba(\d+)\b", body)))
            src_lines.append(f"def {fname}({', '.join(f'a{j}' for j in range(n))}):")
            src_lines += ["    " + line for line in body.split("\n")]
        for fname, entries in self.lane_functions:  # lanes run on a worker (`_fork`)
            src_lines.append(f"def {fname}():")
            for k, klines in entries:
                for line in klines:
                    self.line_kernels[len(src_lines) + 1] = k
                    src_lines.append("    " + line)
        # rt.func bodies
        src_lines += function_source(self, len(src_lines))  # pyright: ignore[reportArgumentType]  (checked as runtime.*, imported as xl.runtime.*: two names of one class)
        if len(cuts) <= 2:
            src_lines.append("def _step():")
            self._number_lines(len(src_lines), 0, len(lines))
            src_lines += ["    " + line for line in lines] or ["    pass"]
        else:
            calls = []
            for k in range(len(cuts) - 1):
                chunk = lines[cuts[k] : cuts[k + 1]]
                src_lines.append(f"def _chunk{k}():")
                self._number_lines(len(src_lines), cuts[k], cuts[k + 1])
                src_lines += ["    " + line for line in chunk] or ["    pass"]
                # a chunk with a collective site is a generator: the step yields from it
                stops = any(_YIELD.match(line) for line in chunk)
                calls.append(f"    yield from _chunk{k}()" if stops else f"    _chunk{k}()")
            src_lines.append("def _step():")
            src_lines += calls
        src = "\n".join(src_lines) + "\n"
        scope = dict(g.ns)
        filename = self.filename = plan_filename()
        exec(compile_plan(src, filename), scope)
        step = scope["_step"]
        register_source(filename, src, step)
        return step, src

    def _number_lines(self, before: int, start: int, stop: int) -> None:
        """`line_kernels` for g.lines[start:stop], which follow `before` source lines."""
        for i in range(start, stop):
            k = self._line_kernel.get(i)
            if k is not None:
                self.line_kernels[before + 1 + i - start] = k


_PLAN_IDS = itertools.count()


def plan_filename(kind: str = "") -> str:
    """A new file name for a generated plan's source (`<xl plan N>`, `<xl plan N (kind)>`)."""
    n = next(_PLAN_IDS)
    return f"<xl plan {n} ({kind})>" if kind else f"<xl plan {n}>"


# The code objects of the last sources compiled: the replicas of a program generate the same
# source (their arrays are globals), so `compile()` runs once per program, not per replica.
_COMPILED: dict[str, types.CodeType] = {}
_COMPILED_KEEP = 4
_COMPILED_LOCK = threading.Lock()


def compile_plan(src: str, filename: str) -> types.CodeType:
    """`compile(src, filename, "exec")`, reusing the code of an identical source compiled
    before under another file name (each plan keeps its own `filename`, which is how an
    error finds the replica and kernel it came from)."""
    code = _COMPILED.get(src)
    if code is None:
        code = compile(src, filename, "exec")
        with _COMPILED_LOCK:  # sessions may compile on several threads
            while len(_COMPILED) >= _COMPILED_KEEP:
                del _COMPILED[next(iter(_COMPILED))]
            _COMPILED[src] = code
    return _renamed_code(code, filename)


def _renamed_code(code: types.CodeType, filename: str) -> types.CodeType:
    """`code` and the code objects nested in it (the functions it defines) under `filename`."""
    if code.co_filename == filename:
        return code
    consts = tuple(_renamed_code(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def register_source(filename: str, src: str, owner: object) -> None:
    """Make the generated `src` (compiled as `filename`) visible to `linecache`, so
    tracebacks, pdb and profilers show the generated line and its `# popxl.op` comment.
    The entry is dropped when `owner` (the step function) is freed."""
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    weakref.finalize(owner, linecache.cache.pop, filename, None)


CHUNK_LINES = 2000
OUTLINE_LINES = 4  # kernels with at least this many lines become shared helpers
_ROLE = "rl"  # role names of a kernel's operands (`PlanBuilder._roles`)
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_YIELD = re.compile(r"^\s*yield \d+  #")


def build_replica(
    program: rt.ProgramOp,
    stream_in: type,
    stream_out: type,
    replica: int = 0,
    shared_state: dict[str, np.ndarray] | None = None,
    profile: list[tuple[int, int, int]] | None = None,
    parts: int = 1,
    serial: bool = False,
) -> tuple[PlanBuilder, list[int]]:
    """The builder of one replica (step source generated) and its top-level op boundaries.
    With collective sites (`b.sites`), the step function is a generator yielding the
    index of each site it reaches. `profile`: the list the step appends kernel events to
    (None: not profiled). `parts > 1`: large kernels whose rows are independent run in
    that many blocks at once (`xl.runtime.parallel_kernels`; the step, once finished, must
    run as a `ParallelStep` when `b.split_kernels` or `b.lane_functions` is not empty), and
    consecutive independent kernels run side by side. `serial=True` with `parts > 1`: the
    serial plan (the lines of `parts=1`), with `b.parallel_gain` and `b.blas_gain` those of
    the plan for `parts` (`xl.runtime.parallel_kernels.uses_threads` decides from them
    whether that plan is worth building)."""
    b = PlanBuilder(stream_in, stream_out, replica, program.replication_factor, shared_state, profile)
    if parts > 1 and serial:
        b.parts, b.estimate_only = parts, True
    elif parts > 1:
        b.parts = parts
        fj = b.g.ns["_par"] = ForkJoin()
        b.g.ns["_fork"], b.g.ns["_join"] = fj.fork, fj.join
    marks = []
    for op in program.body.block.ops:
        marks.append(len(b.g.lines))
        b.visit(op, 0)
    return b, marks
