"""Running `rt.func` / `rt.call` in both plans.

How arguments reach a function body. A function's arguments are the caller's buffers
themselves: each call binds the function's block arguments to the arrays of the call's
operands (inputs, and the destinations the body writes), so a by-reference input is
updated in place and nothing is copied in or out. The function's own buffers (`rt.alloc`
/ `rt.const` directly in its body) are allocated once per replica and shared by all its
calls: calls never overlap (a step runs one op at a time and functions are not
recursive), and a value a call leaves in them is never read by another call (results
leave through the destinations). `rt-reuse-buffers` works inside the body as in any
block, and across calls at the caller (a call's destination may take the storage of a
buffer that died before the call).

The straightforward plan (`xl.runtime.executable`) runs the body at each call: the walk
visits it with the arguments bound to that call's arrays (`expand_call`).

The generated plan (`xl.runtime.plan`) emits one Python function per distinct body
(`emit_call`). The templates bind to the actual arrays (precomputed views, BLAS calls
with fixed pointers, alias checks), so the body is generated at each call site with the
arguments bound to that site's arrays, exactly as if it were expanded there; then every
global name of those lines that may differ between sites (the arguments, views of them,
bound BLAS calls and kernels, ...) becomes a parameter `a0, a1, ...`, while the function's
own buffers, the shared callables (an equal callable bound under another name is written
with the first name), constants and scratch buffers stay globals. Sites whose
lines are then identical share one function `_f<k>_<name>`, and each site is one line
calling it with its own names. A site whose code differs (e.g. a template that chose
another path because the arguments alias) gets a function of its own; so does each site
when profiling (the kernel indices in the timing lines differ). A body that stops at a
replica collective (`yield`) is emitted in place at each site (lowering never makes such
a function).

Errors: the function's lines map to the kernels of its first site (the same `rt` ops), so
a failing kernel inside a function is named as usual.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xl.dialects import rt
from xl.runtime.errors import PlanError

if TYPE_CHECKING:
    from xl.runtime.plan import PlanBuilder
    from xl.runtime.walk import ProgramWalk

_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_YIELD = re.compile(r"^\s*yield\b")
_HELPER = re.compile(r"_h\d+")


@dataclass
class _Function:
    """One generated Python function: its name, parameter count, body lines (unindented)
    and the kernel of each body line (index in the lines -> `infos` index)."""

    name: str
    n_params: int
    lines: list[str]
    kernels: dict[int, int]


@dataclass
class _State:
    """What one plan knows of the functions it runs."""

    stack: list[str] = field(default_factory=list)  # functions being walked (recursion check)
    own: dict[rt.FuncOp, frozenset[str]] = field(default_factory=dict)  # own buffers' names
    functions: dict[str, _Function] = field(default_factory=dict)  # by canonical body
    # a shared callable -> the first global name bound to an equal one (templates bind
    # e.g. `np.add.reduce`, a new but equal bound method each time, under a new name)
    callables: dict[Any, str] = field(default_factory=dict)
    # a kernel helper (`PlanBuilder.outline`) -> the first helper with the same code once
    # its callables are written that way
    helpers: dict[str, str] = field(default_factory=dict)
    helper_bodies: dict[str, str] = field(default_factory=dict)


def _state(walk: Any) -> _State:
    """The function state of `walk` (kept in its instance dictionary)."""
    st = vars(walk).get("_xl_functions")
    if st is None:
        st = _State()
        vars(walk)["_xl_functions"] = st
    return st


def _enter(walk: Any, op: rt.CallOp) -> rt.FuncOp:
    try:
        func = op.func()
    except Exception as e:  # no such function
        raise PlanError(f"runtime: {e}") from None
    st = _state(walk)
    name = func.func_name
    if name in st.stack:
        chain = " -> ".join(f"@{n}" for n in [*st.stack, name])
        raise PlanError(f"runtime: rt.func @{name} is recursive ({chain})")
    return func


def expand_call(walk: ProgramWalk[Any], op: rt.CallOp, at: Any) -> None:
    """Run the body of the called function at this call (the straightforward plan): its
    arguments are bound to the call's arrays, its own buffers allocated for this call."""
    func = _enter(walk, op)
    for arg, v in zip(func.body.block.args, op.operands, strict=True):
        walk.bind(arg, walk.array(v), "a")
    st = _state(walk)
    st.stack.append(func.func_name)
    try:
        walk.walk(func.body.block, at)
    finally:
        st.stack.pop()


def emit_call(b: PlanBuilder, op: rt.CallOp, depth: int) -> None:
    """The generated plan's `rt.call`: one line calling the (shared) function of this
    site's body (see the module docstring)."""
    func = _enter(b, op)
    st = _state(b)
    g = b.g
    for arg, v in zip(func.body.block.args, op.operands, strict=True):
        g.arrays[arg] = g.arrays[v]
        g.names[arg] = g.names[v]
    own = st.own.get(func)
    first = own is None
    own_names: set[str] = set()
    saved_lines, saved_kernels = g.lines, b._line_kernel  # noqa: SLF001
    g.lines, b._line_kernel = [], {}  # noqa: SLF001
    st.stack.append(func.func_name)
    try:
        for inner in func.body.block.ops:
            if isinstance(inner, rt.AllocOp | rt.ConstOp):
                if not first:
                    continue  # allocated at the first site, shared by every call
                b.visit(inner, 0)
                own_names.add(g.names[inner.results[0]])
            else:
                b.visit(inner, 0)
    finally:
        st.stack.pop()
        lines, kernels = g.lines, b._line_kernel  # noqa: SLF001
        g.lines, b._line_kernel = saved_lines, saved_kernels  # noqa: SLF001
    if first:
        own = st.own[func] = frozenset(own_names)
    assert own is not None
    if any(_YIELD.match(line) for line in lines):
        # a generator body: in place (the step's chunks find their `yield` lines)
        for i, line in enumerate(lines):
            k = kernels.get(i)
            if k is not None:
                b._line_kernel[len(g.lines)] = k  # noqa: SLF001
            b.emit(line, depth)
        return
    params: list[str] = []
    index: dict[str, int] = {}
    ns = g.ns

    def shared(m: re.Match[str]) -> str:
        t = m.group(0)
        if t.startswith("_") and t in ns:  # a shared callable or constant: an equal one's name
            try:
                return st.callables.setdefault(ns[t], t)
            except TypeError:  # unhashable (a constant array): its name is shared already
                return t
        return t

    def helper(t: str) -> str:
        name = st.helpers.get(t)
        if name is None:
            body = next(k for k, v in b.helpers.items() if v == t)
            name = st.helpers[t] = st.helper_bodies.setdefault(_IDENT.sub(shared, body), t)
        return name

    def param(m: re.Match[str]) -> str:
        t = m.group(0)
        if t not in ns:
            return helper(t) if _HELPER.fullmatch(t) and t in b.helpers.values() else t
        if t in own or t.startswith("s_"):
            return t
        if t.startswith("_"):
            return shared(m)
        j = index.get(t)
        if j is None:
            j = index[t] = len(params)
            params.append(t)
        return f"a{j}"

    body = [_IDENT.sub(param, line) for line in lines] or ["pass"]
    key = "\n".join(body)
    fn = st.functions.get(key)
    if fn is None:
        fname = f"_f{len(st.functions)}_{re.sub(r'[^A-Za-z0-9_]', '_', func.func_name)}"
        fn = st.functions[key] = _Function(fname, len(params), body, kernels)
    b.emit(f"{fn.name}({', '.join(params)})  # rt.call @{func.func_name}", depth)


def function_source(b: PlanBuilder, before: int) -> list[str]:
    """The definitions of the functions emitted by `emit_call`, to be placed after `before`
    source lines; records the kernel of each body line in `b.line_kernels`."""
    st = vars(b).get("_xl_functions")
    if st is None:
        return []
    out: list[str] = []
    for fn in st.functions.values():
        out.append(f"def {fn.name}({', '.join(f'a{j}' for j in range(fn.n_params))}):")
        base = before + len(out)
        for i, line in enumerate(fn.lines):
            k = fn.kernels.get(i)
            if k is not None:
                b.line_kernels[base + 1 + i] = k
            out.append("    " + line)
    return out


def function_count(b: PlanBuilder) -> int:
    """How many Python functions the plan of `b` defines for `rt.func` bodies."""
    st = vars(b).get("_xl_functions")
    return 0 if st is None else len(st.functions)
