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
visits it with the arguments bound to that call's arrays (`expand_call`); what does not
depend on the arrays (each kernel of the body, its description) is made once per op.

The generated plan (`xl.runtime.plan`) emits one Python function per distinct body
(`emit_call`). The templates bind to the actual arrays (precomputed views, BLAS calls
with fixed pointers, alias checks), so a body is generated at a call site with the
arguments bound to that site's arrays, exactly as if it were expanded there; then every
global name of those lines that may differ between sites (the arguments, views of them,
bound BLAS calls and kernels, ...) becomes a parameter `a0, a1, ...`, while the function's
own buffers, the shared callables (an equal callable bound under another name is written
with the first name), constants and scratch buffers stay globals. Sites whose lines are
then identical share one function `_f<k>_<name>`, and each site is one line calling it
with its own names. With `CALL_TABLES`, consecutive sites of one function in the step
(the repeated layers of a model) are one line looping over a table of their arguments
(`for _a in t7: _f0_layer(*_a)  # rt.call @layer (12 sites)`). A site whose code differs
(e.g. a template that chose another path because the arguments alias) gets a function of
its own. When profiling, the timing lines of a body name their kernels relative to a
parameter holding the site's first kernel index, so sites share the body's code too (each
site still generates it: its kernels get their own entries in the profile).
A body that stops at a replica collective (`yield`) is emitted in place at each site
(lowering never makes such a function).

Generating a body costs what expanding it does, so it happens once per *binding
signature* of a function: the shape, dtype, strides and writability of each argument
array, which arguments are the same buffer, and how arguments in one allocation lie
relative to each other (`_signature`); that is all the templates can see of the arguments.
The first site of a signature records how each parameter derives from its arguments
(`_derivations`): an argument; a view into an argument (offset, shape, strides, dtype:
rebuilt over the other site's memory); a callable bound to argument arrays that says how
to bind it again (`xl_bound = (factory, args)`, e.g. `xl.runtime.blas.gemm_acc`); or an
object holding no argument memory (a stream, a kernel closure, a view of the function's
own buffers: shared). Another site with that signature then costs O(parameters): it
derives its parameters and emits its call line. A parameter that cannot be derived (an
object holding argument memory with no `xl_bound`) makes every site of that signature
generate its body, as above. A `functools.partial` of a function holding no argument
memory is bound again like an `xl_bound` callable: the same function and keywords over the
derived arguments (the templates bind kernels to arrays that way, e.g. `xl.softmax`'s
prologue).

Errors: the function's lines map to the kernels of its first site (the same `rt` ops), so
a failing kernel inside a function is named as usual, whichever site called it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from types import BuiltinFunctionType, FunctionType, MethodType
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.array_utils import byte_bounds

from xl.dialects import rt
from xl.runtime.errors import PlanError

if TYPE_CHECKING:
    from xl.runtime.codegen import Gen
    from xl.runtime.plan import PlanBuilder
    from xl.runtime.walk import ProgramWalk

# Sites of one function with one binding signature reuse the first one's body (recipes);
# False: every site generates its body (the reference the recipes are tested against).
SHARE_SITES = True
# Consecutive calls of one function in the step are one line over a table (`_emit_site`, the
# default); False: one line per call.
CALL_TABLES = True

_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_YIELD = re.compile(r"^\s*yield\b")
_HELPER = re.compile(r"_h\d+")
_EVENT = re.compile(r"_ev\(\((\d+), ")


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
    # (function, binding signature of a site) -> how to call its function at another site
    # with that signature (None: regenerate the body at each such site)
    recipes: dict[tuple[rt.FuncOp, tuple[Any, ...]], _Recipe | None] = field(default_factory=dict)
    run: _Run | None = None  # the last call line emitted in the step (`_emit_site`)


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
    operands = op.operands
    arrays = [g.arrays[v] for v in operands]
    key: tuple[rt.FuncOp, tuple[Any, ...]] | None = None
    if b.profile is None and SHARE_SITES:  # profiled: each site its own function (kernel indices)
        names = [g.names[v] for v in operands]
        key = (func, _signature(arrays, names))
        recipe = st.recipes.get(key)
        if recipe is not None:
            params = [_site_param(g, d, arrays, names) for d in recipe.params]
            b.fallbacks += recipe.fallbacks
            b.snapshots += recipe.snapshots
            _emit_site(b, st, recipe.fn, params, func.func_name, depth)
            return
    for arg, v in zip(func.body.block.args, operands, strict=True):
        g.arrays[arg] = g.arrays[v]
        g.names[arg] = g.names[v]
    n_fallbacks, n_snapshots = len(b.fallbacks), len(b.snapshots)
    fn, params = _generate(b, st, func, depth)
    if key is not None and key not in st.recipes:
        derived = None if fn is None else _derivations(params, g.ns, arrays)
        st.recipes[key] = (
            None
            if fn is None or derived is None
            else _Recipe(fn, derived, b.fallbacks[n_fallbacks:], b.snapshots[n_snapshots:])
        )


def _generate(b: PlanBuilder, st: _State, func: rt.FuncOp, depth: int) -> tuple[_Function | None, list[str]]:
    """Generate the body of `func` bound to this site's arrays and emit the site: a call
    of the function with that body (made now if new) and its parameters, or (a body that
    stops at a collective) the body in place, then (None, [])."""
    g = b.g
    own = st.own.get(func)
    first = own is None
    own_names: set[str] = set()
    k0 = len(b.infos)  # the index of the body's first kernel at this site (profiled timing lines)
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
        return None, []
    if b.profile is not None:
        # the timing lines name their kernel by index: relative to a parameter holding this
        # site's first index, so that sites share the body's code
        base = g.bind(k0, "kb")
        lines = [_EVENT.sub(lambda m: f"_ev(({base} + {int(m.group(1)) - k0}, ", line) for line in lines]
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
    _emit_site(b, st, fn, params, func.func_name, depth)
    return fn, params


@dataclass
class _Run:
    """Consecutive call lines of one function in the step: the line (`lines[index]`), and
    each site's arguments once they are a table."""

    lines: list[str]
    index: int
    fn: _Function
    depth: int
    sites: list[tuple[Any, ...]]
    table: str = ""


def _emit_site(b: PlanBuilder, st: _State, fn: _Function, params: list[str], callee: str, depth: int) -> None:
    """Emit the call of `fn` with `params` at this site. Consecutive calls of one function
    in the step (e.g. the repeated layers of a model) become one line looping over a
    table of the sites' arguments: `for _a in t7: _f0_layer(*_a)  # rt.call @layer (12 sites)`
    (the same calls, in the same order; unpacking a tuple costs no more than loading the
    arguments' names)."""
    g = b.g
    run = st.run
    if st.stack or not CALL_TABLES:  # inside a body being generated: its lines are parametrised
        b.emit(f"{fn.name}({', '.join(params)})  # rt.call @{callee}", depth)
        return
    args = tuple(g.ns[p] for p in params)
    if (
        run is not None
        and run.lines is g.lines
        and run.index == len(g.lines) - 1
        and run.fn is fn
        and run.depth == depth
    ):
        run.sites.append(args)
        if not run.table:
            run.table = g.bind(run.sites, "t")
        g.lines[run.index] = (
            "    " * depth + f"for _a in {run.table}: {fn.name}(*_a)  # rt.call @{callee} ({len(run.sites)} sites)"
        )
        return
    b.emit(f"{fn.name}({', '.join(params)})  # rt.call @{callee}", depth)
    st.run = _Run(g.lines, len(g.lines) - 1, fn, depth, [args])


# -- calling a function at another site of the same binding signature ---------------------


@dataclass
class _Recipe:
    """How to call `fn` at a site whose arrays have the signature of the site it was
    generated at: each parameter's derivation (`_derivations`), and the kernels that site
    added to the plan's fallback / snapshot lists."""

    fn: _Function
    params: list[tuple[Any, ...]]
    fallbacks: list[str]
    snapshots: list[str]


def _root(a: np.ndarray) -> np.ndarray:
    """The array owning the memory `a` views (the last array of its `base` chain)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _signature(arrays: list[np.ndarray], names: list[str]) -> tuple[Any, ...]:
    """What the generated body of a function may depend on in the arrays a site binds its
    arguments to: each one's shape, dtype, strides and writability, which arguments are
    the same name, and where arguments in one allocation lie relative to each other."""
    first_name: dict[str, int] = {}
    first_root: dict[int, int] = {}
    sig: list[Any] = []
    for i, a in enumerate(arrays):
        r = a
        while isinstance(r.base, np.ndarray):
            r = r.base
        j = first_root.setdefault(id(r), i)
        same = None if j == i else (j, _address(a) - _address(arrays[j]))
        sig.append((a.shape, a.dtype, a.strides, a.flags.writeable, first_name.setdefault(names[i], i), same))
    return tuple(sig)


def _derivations(params: list[str], ns: dict[str, Any], arrays: list[np.ndarray]) -> list[tuple[Any, ...]] | None:
    """How each parameter object of a site derives from the site's argument arrays:
    ("arg", i) argument i; ("view", i, offset, shape, strides, dtype, writeable, hint) an
    array in argument i's memory; ("bind", factory, args, hint) a bound callable rebuilt
    by `factory(*args)` (its `xl_bound`, arrays derived in turn); ("same", obj, name) an
    object that holds no argument memory (shared by every site, under its first name).
    `hint`: the prefix of the first site's name, for the other sites' names.
    None: some parameter cannot be derived (each site then generates its body)."""
    roots = {id(_root(a)) for a in arrays}
    out: list[tuple[Any, ...]] = []
    for t in params:
        d = _derive(ns[t], arrays, roots)
        if d is None:
            return None
        out.append((*d, t) if d[0] == "same" else (*d, t.rstrip("0123456789")))
    return out


def _derive(obj: Any, arrays: list[np.ndarray], roots: set[int]) -> tuple[Any, ...] | None:
    for i, a in enumerate(arrays):
        if obj is a:
            return ("arg", i)
    if isinstance(obj, np.ndarray):
        if id(_root(obj)) not in roots:
            return ("same", obj)
        lo, hi = byte_bounds(obj)
        for i, a in enumerate(arrays):
            alo, ahi = byte_bounds(a)
            if alo <= lo and hi <= ahi and _root(a) is _root(obj):
                off = _address(obj) - _address(a)
                return ("view", i, off, obj.shape, obj.strides, obj.dtype, obj.flags.writeable)
        return None
    bound = getattr(obj, "xl_bound", None)
    if bound is None and type(obj) is partial and not vars(obj) and not _holds(obj.func, roots, 0, set()):
        # a kernel bound to arrays by `functools.partial` (e.g. the prologue of `xl.softmax`):
        # the same function and keywords over the other site's arrays
        if _holds(obj.keywords, roots, 0, set()):
            return None
        bound = (partial(partial, obj.func, **obj.keywords), obj.args)
    if bound is not None:
        factory, args = bound
        derived = []
        for x in args:
            d = _derive(x, arrays, roots)
            if d is None:
                return None
            derived.append(d)
        return ("bind", factory, derived)
    if _holds(obj, roots, 0, set()):
        return None
    return ("same", obj)


_LEAVES = (int, float, complex, str, bytes, bool, type(None), np.generic, np.dtype, np.ufunc, type)


def _holds(obj: Any, roots: set[int], depth: int, seen: set[int]) -> bool:
    """Whether `obj` may hold an array in the memory of `roots` (conservative: an object
    too deep to tell counts as holding one)."""
    if isinstance(obj, np.ndarray):
        return id(_root(obj)) in roots
    if isinstance(obj, _LEAVES) or id(obj) in seen:
        return False
    if depth > 4:
        return True
    seen.add(id(obj))
    items: Any
    if isinstance(obj, partial):
        items = (obj.func, *obj.args, *obj.keywords.values())
    elif isinstance(obj, FunctionType):
        items = [*(c.cell_contents for c in obj.__closure__ or ()), *(obj.__defaults__ or ()), *vars(obj).values()]
    elif isinstance(obj, MethodType):
        items = (obj.__self__,)
    elif isinstance(obj, tuple | list | set | frozenset):
        items = obj
    elif isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, BuiltinFunctionType):
        return False
    else:
        try:
            items = vars(obj).values()
        except TypeError:
            return True
    return any(_holds(x, roots, depth + 1, seen) for x in items)


def _rebuild(d: tuple[Any, ...], arrays: list[np.ndarray]) -> Any:
    """The object derivation `d` gives for a site whose arguments are `arrays`."""
    kind = d[0]
    if kind == "arg":
        return arrays[d[1]]
    if kind == "view":
        i, off, shape, strides, dtype, writeable = d[1:7]
        a = arrays[i]
        r = _root(a)
        v = np.ndarray(shape, dtype, buffer=r, offset=_address(a) - _address(r) + off, strides=strides)
        if not writeable:
            v.flags.writeable = False
        return v
    if kind == "bind":
        return d[1](*(_rebuild(x, arrays) for x in d[2]))
    return d[1]


def _site_param(g: Gen, d: tuple[Any, ...], arrays: list[np.ndarray], names: list[str]) -> str:
    """The global name of parameter derivation `d` at a site (arguments `arrays`, bound
    under `names`)."""
    kind = d[0]
    if kind == "arg":
        return names[d[1]]
    if kind == "same":
        return d[2]
    return g.bind(_rebuild(d, arrays), d[-1])  # named as at the first site


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
