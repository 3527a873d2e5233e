"""Random structured popxl programs for tests/programs/test_property_structured.py.

The programs of tests/helpers/property_programs.py are straight-line code in the main graph. These
combine the structured features around it:

- subgraphs (`ir.create_graph`) called with `ops.call` from several places on different
  inputs, some inputs by reference (`popxl.TensorByRef` annotations or
  `popxl.graph_input(..., by_ref=True)`, passed positionally or through `inputs_dict`) and
  updated in place inside the graph (`+=`, `ops.var_updates.accumulate_`,
  `ops.scaled_add_`, `copy_var_update_`), so that the caller's tensor (a variable, a
  loaded value, a by-reference input of an enclosing graph) changes; inputs not by
  reference updated in place, which must leave the caller's tensor alone;
- `ops.repeat` (0 to 4 iterations) with the graph's N outputs carried into its first N
  inputs, and by-reference accumulators among the other inputs;
- `ops.conditional` on a host-loaded boolean, or on `sum(value) > 0` (also inside graphs
  and loop bodies, where each iteration may take another branch);
- graphs calling (or repeating) other graphs;
- main-graph statements placed on 1-3 virtual IPUs (`popxl.ipu(k)`), operands moved with
  `ops.ipu_copy`.

Every value has one shape S (a few small shapes; square ones also get matmuls), so any value
can feed any input. A *recipe* (what Hypothesis draws) is tuples of small integers: deleting
statements or moving integers towards 0 gives another valid recipe, so failures shrink.
`resolve` turns it into concrete statements; `popxl_source` writes them as plain popxl
Python (the reproducer printed on failure) and `reference` evaluates them in float64 NumPy
with PopXL's semantics:

- an input not by reference is a copy made at the call; a by-reference input is the
  caller's tensor itself;
- outputs are copies of the graph's values when it ends (a by-reference input returned
  as an output gives its final value);
- `repeat` runs the graph `count` times, each output feeding the input at its position;
  with count 0 its results are (copies of) its first N inputs; the other inputs not by
  reference have their values from before the loop at every iteration (upstream copies them
  into the loop once, then into the graph at each call), even when the loop updates the
  caller's tensor through a by-reference input;
- `ipu_copy` is a new tensor (an in-place update of the copy leaves the source alone);
- variables keep their values between runs.

Next to every value the reference carries a bound on the float32 rounding error, which
sets the tolerance of the comparison. Nothing here uses xl's kernels or passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

U = 2.0**-23  # float32 rounding, with a factor 2 of slack

SHAPES = ((2, 3), (2, 2), (3,), (3, 3), (1, 4), (2, 1, 2))
UNARY = ("tanh", "neg", "relu", "sigmoid", "abs", "sin")
BINARY = ("add", "sub", "mul", "maximum")
SCALAR = ("mul_c", "add_c")
INPLACE = ("iadd", "accumulate_", "scaled_add_", "copy_var_update_", "add_", "relu_")
CONSTS = (0.5, -1.0, 2.0, 0.25, -0.5, 1.5, 0.75)
# Simple kinds first (Hypothesis shrinks towards them); the structured kinds often.
KINDS = ("unary", "binary", "inplace", "call", "call", "call", "repeat", "repeat", "cond", "cond",
         "inplace", "inplace", "scalar", "matmul", "rowsum", "store", "const")  # fmt: skip
GRAPH_KINDS = tuple(k for k in KINDS if k != "store")


@dataclass(frozen=True)
class GraphRecipe:
    n_in: int
    by_ref: tuple[bool, ...]
    style: int  # 0: parameters (TensorByRef annotations); 1: popxl.graph_input in the body
    body: tuple[tuple[Any, ...], ...]
    outs: tuple[int, ...]


@dataclass(frozen=True)
class Recipe:
    shape: int  # index into SHAPES
    streams: int
    variables: int
    ipus: int
    graphs: tuple[GraphRecipe, ...]
    main: tuple[tuple[Any, ...], ...]
    runs: int
    seed: int
    in_sequence: bool


_pick = st.integers(0, 7)
_stmt = st.tuples(st.sampled_from(KINDS), _pick, _pick, st.integers(0, 63), st.sampled_from(CONSTS),
                  st.integers(0, 2), st.tuples(_pick, _pick, _pick))  # fmt: skip
_gstmt = st.tuples(st.sampled_from(GRAPH_KINDS), _pick, _pick, st.integers(0, 63), st.sampled_from(CONSTS),
                   st.just(0), st.tuples(_pick, _pick, _pick))  # fmt: skip


@st.composite
def graph_recipes(draw: Any, max_body: int = 5) -> GraphRecipe:
    n_in = draw(st.integers(1, 3))
    return GraphRecipe(
        n_in=n_in,
        by_ref=tuple(draw(st.lists(st.booleans(), min_size=n_in, max_size=n_in))),
        style=draw(st.integers(0, 1)),
        body=tuple(draw(st.lists(_gstmt, min_size=0, max_size=max_body))),
        outs=tuple(draw(st.lists(_pick, min_size=0, max_size=2))),
    )


@st.composite
def recipes(draw: Any, max_ipus: int = 3, max_graphs: int = 4, max_body: int = 5, max_main: int = 10) -> Recipe:
    return Recipe(
        shape=draw(st.integers(0, len(SHAPES) - 1)),
        streams=draw(st.integers(1, 2)),
        variables=draw(st.integers(0, 2)),
        ipus=draw(st.integers(1, max_ipus)),
        graphs=tuple(draw(st.lists(graph_recipes(max_body), min_size=1, max_size=max_graphs))),
        main=tuple(draw(st.lists(_stmt, min_size=1, max_size=max_main))),
        runs=draw(st.integers(1, 3 if max_main > 10 else 2)),
        seed=draw(st.integers(0, 2**16)),
        in_sequence=draw(st.booleans()),
    )


# --- resolved programs -------------------------------------------------------------------------


@dataclass
class Stmt:
    kind: str  # unary binary scalar matmul rowsum inplace call repeat cond store copy
    op: str = ""
    args: tuple[int, ...] = ()  # operand slots
    outs: tuple[int, ...] = ()  # new slots
    c: float = 0.0
    graph: int = -1  # callee (call, repeat; then-branch of cond)
    graph2: int = -1  # else-branch of cond
    count: int = 0  # repeat count; cond: number of then-inputs (args = then + else)
    ipu: int | None = None  # main graph with several IPUs: the placement
    style: int = 0  # spelling (inputs_dict or positional; operator or ops function)


@dataclass
class Graph:
    n_in: int
    by_ref: tuple[bool, ...]
    style: int
    stmts: list[Stmt]
    outs: tuple[int, ...]  # slots
    n_slots: int


@dataclass
class Program:
    recipe: Recipe
    shape: tuple[int, ...]
    graphs: list[Graph]
    main: list[Stmt]
    n_slots: int
    # main graph slots 0..: streams x0.., variables w0..; the cond value is slot `cond_slot`
    cond_slot: int | None
    stores: list[int] = field(default_factory=list)
    var_init: list[np.ndarray] = field(default_factory=list)
    slot_ipu: list[int] = field(default_factory=list)


def _square(shape: tuple[int, ...]) -> bool:
    return len(shape) == 2 and shape[0] == shape[1]


def _repeatable(g: Graph) -> bool:
    """`ops.repeat` needs N outputs <= inputs; by-reference inputs among the carried ones
    are left out (what a carried by-reference input means is not defined)."""
    n = len(g.outs)
    return n <= g.n_in and not any(g.by_ref[:n])


def _resolve_body(
    stmts: tuple[tuple[Any, ...], ...],
    graphs: list[Graph],
    n_slots: int,
    square: bool,
    ndim: int,
    ipus: int,
    slot_ipu: list[int] | None,
    cond_slot: int | None,
) -> tuple[list[Stmt], int, list[int]]:
    """Concrete statements of a body whose first `n_slots` slots exist. With `slot_ipu`
    (the main graph on several IPUs) operands on another IPU are copied first."""
    out: list[Stmt] = []
    live = [s for s in range(n_slots) if s != cond_slot]

    def new(operand: bool = True) -> int:
        nonlocal n_slots
        n_slots += 1
        if operand:
            live.append(n_slots - 1)
        if slot_ipu is not None:
            slot_ipu.append(cur_ipu)
        return n_slots - 1

    def pick(i: int) -> int:
        return live[-1 - (i % len(live))]  # 0: the latest value

    def on(s: int, ipu: int) -> int:
        """`s` on `ipu` (a copy when it lives elsewhere)."""
        if slot_ipu is None or slot_ipu[s] == ipu:
            return s
        src = slot_ipu[s]
        t = new(operand=s != cond_slot)
        slot_ipu[t] = ipu
        out.append(Stmt("copy", args=(s,), outs=(t,), count=src, ipu=ipu))
        return t

    cur_ipu = 0
    for kind, a, b, k, c, ipu, picks in stmts:
        cur_ipu = ipu % ipus if slot_ipu is not None else 0
        place = cur_ipu if slot_ipu is not None else None
        sa, sb = pick(a), pick(b)
        if kind == "matmul" and not square:
            kind = "binary"
        if kind in ("call", "repeat") and not graphs:
            kind = "unary"
        if kind == "cond" and not graphs:
            kind = "unary"
        if kind == "repeat" and not any(_repeatable(g) for g in graphs):
            kind = "call"
        if kind == "store":
            out.append(Stmt("store", args=(sa,), ipu=slot_ipu[sa] if slot_ipu is not None else None))
            continue
        if kind == "inplace":
            d_ipu = slot_ipu[sa] if slot_ipu is not None else 0
            cur_ipu = d_ipu
            src = on(sb, d_ipu)
            out.append(Stmt("inplace", INPLACE[k % len(INPLACE)], (sa, src), (), c,
                            ipu=d_ipu if slot_ipu is not None else None, style=k // len(INPLACE)))  # fmt: skip
            continue
        if kind == "unary":
            x = on(sa, cur_ipu)
            out.append(Stmt("unary", UNARY[k % len(UNARY)], (x,), (new(),), ipu=place, style=k // len(UNARY)))
        elif kind == "binary":
            x, y = on(sa, cur_ipu), on(sb, cur_ipu)
            out.append(Stmt("binary", BINARY[k % len(BINARY)], (x, y), (new(),), ipu=place, style=k // len(BINARY)))
        elif kind == "scalar":
            x = on(sa, cur_ipu)
            out.append(Stmt("scalar", SCALAR[k % len(SCALAR)], (x,), (new(),), c, ipu=place, style=k))
        elif kind == "matmul":
            x, y = on(sa, cur_ipu), on(sb, cur_ipu)
            out.append(Stmt("matmul", "matmul", (x, y), (new(),), ipu=place))
        elif kind == "const":  # a constant (updated in place later: a fresh copy at each execution)
            out.append(Stmt("const", "const", (), (new(),), c, count=k, ipu=place))
        elif kind == "rowsum":
            x = on(sa, cur_ipu)
            out.append(Stmt("rowsum", "rowsum", (x,), (new(),), c, count=k % ndim, ipu=place))
        elif kind in ("call", "repeat"):
            cands = list(range(len(graphs))) if kind == "call" else [i for i, g in enumerate(graphs) if _repeatable(g)]
            gi = cands[k % len(cands)]
            g = graphs[gi]
            args = [on(pick(p), cur_ipu) for p in (*picks, a, b)[: g.n_in]]
            outs = tuple(new() for _ in g.outs)
            out.append(Stmt(kind, "", tuple(args), outs, graph=gi, count=(k // 4) % 5, ipu=place, style=k % 4))
        elif kind == "cond":
            data = cond_slot is None or (k // 16) % 2 == 1  # the condition: sum(value) > 0
            ti = k % len(graphs)
            same = [i for i, g in enumerate(graphs) if len(g.outs) == len(graphs[ti].outs)]
            ei = same[(k // 4) % len(same)]
            t_args = [on(pick(p), cur_ipu) for p in (*picks, a, b)[: graphs[ti].n_in]]
            e_args = [on(pick(p), cur_ipu) for p in (b, a, *picks)[: graphs[ei].n_in]]
            cnd = on(sa if data or cond_slot is None else cond_slot, cur_ipu)
            outs = tuple(new() for _ in graphs[ti].outs)
            out.append(Stmt("cond", "data" if data else "", (cnd, *t_args, *e_args), outs, graph=ti, graph2=ei,
                            count=len(t_args), ipu=place, style=k % 4))  # fmt: skip
    return out, n_slots, live


def resolve(recipe: Recipe) -> Program:
    shape = SHAPES[recipe.shape]
    square = _square(shape)
    graphs: list[Graph] = []
    for gr in recipe.graphs:
        stmts, n, _ = _resolve_body(gr.body, graphs, gr.n_in, square, len(shape), 1, None, None)
        outs = tuple(n - 1 - (o % n) for o in gr.outs)
        graphs.append(Graph(gr.n_in, gr.by_ref, gr.style, stmts, outs, n))
    n_streams, n_vars = recipe.streams, recipe.variables
    uses_cond = any(s[0] == "cond" for s in recipe.main)
    n0 = n_streams + n_vars
    cond_slot = n0 if uses_cond else None
    n0 += int(uses_cond)
    ipus = recipe.ipus
    slot_ipu = [0] * n_streams + [v % ipus for v in range(n_vars)] + ([0] if uses_cond else [])
    multi = ipus > 1
    main, n, live = _resolve_body(
        recipe.main, graphs, n0, square, len(shape), ipus, slot_ipu if multi else None, cond_slot
    )
    p = Program(recipe, shape, graphs, main, n, cond_slot, slot_ipu=slot_ipu if multi else [0] * n)
    stored = [s.args[0] for s in main if s.kind == "store"]
    last = live[-1]  # the latest value (not the condition or a copy of it)
    if not stored or stored[-1] != last:
        main.append(Stmt("store", args=(last,), ipu=p.slot_ipu[last] if multi else None))
    p.stores = [s.args[0] for s in main if s.kind == "store"]
    rng = np.random.default_rng([recipe.seed, 1])
    p.var_init = [(rng.integers(-16, 17, size=shape) / 16).astype(np.float32) for _ in range(n_vars)]
    return p


def run_inputs(p: Program, run: int) -> tuple[list[np.ndarray], np.ndarray | None]:
    """float32 data of the streams x0.. (multiples of 1/16 in [-1, 1]) and the condition."""
    xs = [
        (np.random.default_rng([p.recipe.seed, 2, run, n]).integers(-16, 17, size=p.shape) / 16).astype(np.float32)
        for n in range(p.recipe.streams)
    ]
    cond = None
    if p.cond_slot is not None:
        cond = np.array(bool(np.random.default_rng([p.recipe.seed, 3, run]).integers(0, 2)))
    return xs, cond


# --- popxl source --------------------------------------------------------------------------------


def _const(s: Stmt, shape: tuple[int, ...]) -> np.ndarray:
    """The value of a `const` statement (multiples of 1/8)."""
    return (np.random.default_rng([s.count, 5]).integers(-8, 9, size=shape) / 8).astype(np.float64)


def _expr(s: Stmt, names: list[str], graph_names: list[str], graphs: list[Graph], shape: tuple[int, ...]) -> str:
    """The popxl statement of `s` (operands and results named by `names`)."""
    a = [names[i] for i in s.args]
    o = [names[i] for i in s.outs]
    lhs = (", ".join(o) + ("," if len(o) == 1 else "") + " = ") if o else ""
    if s.kind == "unary":
        if s.op == "neg":
            return f"{o[0]} = -{a[0]}" if s.style % 2 else f"{o[0]} = ops.negate({a[0]})"
        return f"{o[0]} = ops.{s.op}({a[0]})"
    if s.kind == "binary":
        sym = {"add": "+", "sub": "-", "mul": "*"}.get(s.op)
        if sym and s.style % 2 == 0:
            return f"{o[0]} = {a[0]} {sym} {a[1]}"
        return f"{o[0]} = ops.{s.op}({a[0]}, {a[1]})"
    if s.kind == "scalar":
        sym = "*" if s.op == "mul_c" else "+"
        return f"{o[0]} = {a[0]} {sym} {s.c!r}"
    if s.kind == "matmul":
        return f"{o[0]} = ops.matmul({a[0]}, {a[1]}) * 0.5"
    if s.kind == "const":
        return f"{o[0]} = popxl.constant(np.array({_const(s, shape).tolist()!r}), popxl.float32)"
    if s.kind == "rowsum":
        return f"{o[0]} = {a[0]} + ops.sum({a[0]}, axis={s.count}, keepdims=True) * 0.25"
    if s.kind == "inplace":
        d, x = a
        if s.op == "iadd":
            return f"{d} += {x}"
        if s.op == "add_":
            return f"ops.add_({d}, {x})"
        if s.op == "relu_":
            return f"ops.relu_({d})"
        if s.op == "accumulate_":
            return (
                f"ops.var_updates.accumulate_({d}, {x}, {s.c!r})"
                if s.style % 2
                else f"ops.var_updates.accumulate_({d}, {x})"
            )
        if s.op == "scaled_add_":
            return f"ops.scaled_add_({d}, {x}, a={s.c!r}, b=0.5)"
        return f"ops.var_updates.copy_var_update_({d}, {x})"
    if s.kind == "copy":
        return f"{o[0]} = ops.ipu_copy({a[0]}, {s.ipu}, {s.count})"
    if s.kind in ("call", "repeat"):
        gn = graph_names[s.graph]
        head = f"ops.call({gn}, " if s.kind == "call" else f"ops.repeat({gn}, {s.count}, "
        if s.style == 1 and len(a) > 1:  # the last input through inputs_dict
            body = ", ".join(a[:-1]) + f", inputs_dict={{{gn}.inputs[{len(a) - 1}]: {a[-1]}}}"
        else:
            body = ", ".join(a)
        return f"{lhs}{head}{body})"
    if s.kind == "cond":
        n_t = s.count
        t, e = a[1 : 1 + n_t], a[1 + n_t :]
        tn, en = graph_names[s.graph], graph_names[s.graph2]
        cnd = f"ops.greater(ops.sum({a[0]}), 0.0)" if s.op == "data" else a[0]
        if s.style == 1 and t:
            return (f"{lhs}ops.conditional({cnd}, {tn}, {en}, then_inputs=[{', '.join(t[:-1])}], "
                    f"else_inputs=[{', '.join(e)}], then_inputs_dict={{{tn}.inputs[{n_t - 1}]: {t[-1]}}})")  # fmt: skip
        return f"{lhs}ops.conditional({cnd}, {tn}, {en}, [{', '.join(t)}], [{', '.join(e)}])"
    raise AssertionError(s.kind)


def popxl_source(p: Program) -> str:
    S = p.shape
    lines = ["ir = popxl.Ir()", f"S = {S!r}", "spec = popxl.TensorSpec(S, popxl.float32)", "with ir.main_graph:"]
    graph_names = [f"G{i}" for i in range(len(p.graphs))]
    multi = p.recipe.ipus > 1
    for gi, g in enumerate(p.graphs):
        names = [f"a{i}" for i in range(g.n_in)] + [f"t{i}" for i in range(g.n_in, g.n_slots)]
        if g.style == 0:
            params = ", ".join(f"a{i}: popxl.TensorByRef" if r else f"a{i}" for i, r in enumerate(g.by_ref))
            lines.append(f"    def g{gi}({params}):")
        else:
            lines.append(f"    def g{gi}():")
            for i, r in enumerate(g.by_ref):
                lines.append(
                    f"        a{i} = popxl.graph_input(S, popxl.float32, 'a{i}'{', by_ref=True' if r else ''})"
                )
        for s in g.stmts:
            lines.append("        " + _expr(s, names, graph_names, p.graphs, p.shape))
        if g.outs:
            lines.append(f"        return {', '.join(names[o] for o in g.outs)}{',' if len(g.outs) == 1 else ''}")
        else:
            lines.append("        return None")
        specs = ", ".join(["spec"] * g.n_in) if g.style == 0 else ""
        lines.append(f"    {graph_names[gi]} = ir.create_graph(g{gi}{', ' if specs else ''}{specs})")
    names = [f"x{i}_" for i in range(p.recipe.streams)] + [f"w{i}" for i in range(p.recipe.variables)]
    if p.cond_slot is not None:
        names.append("cv")
    names += [f"t{i}" for i in range(len(names), p.n_slots)]
    ind = "    "
    if p.recipe.in_sequence:
        lines.append("    with popxl.in_sequence(True):")
        ind = "        "

    def placed(ipu: int | None, text: str) -> list[str]:
        if multi and ipu is not None:
            return [f"{ind}with popxl.ipu({ipu}):", f"{ind}    {text}"]
        return [ind + text]

    for n in range(p.recipe.streams):
        lines.append(f"{ind}x{n} = popxl.h2d_stream(S, popxl.float32, 'x{n}')")
        lines += placed(0, f"x{n}_ = ops.host_load(x{n}, 'x{n}_')")
    for n in range(p.recipe.variables):
        lines += placed(p.slot_ipu[p.recipe.streams + n], f"w{n} = popxl.variable(np.array({p.var_init[n].tolist()!r}, np.float32), name='w{n}')")  # fmt: skip
    if p.cond_slot is not None:
        lines.append(f"{ind}c = popxl.h2d_stream((), popxl.bool, 'c')")
        lines += placed(0, "cv = ops.host_load(c, 'cv')")
    k = 0
    for s in p.main:
        if s.kind == "store":
            lines.append(f"{ind}o{k} = popxl.d2h_stream(S, popxl.float32, 'o{k}')")
            lines += placed(s.ipu, f"ops.host_store(o{k}, {names[s.args[0]]})")
            k += 1
        else:
            lines += placed(s.ipu, _expr(s, names, graph_names, p.graphs, p.shape))
    return "\n".join(lines) + "\n"


@dataclass
class Built:
    ir: Any
    h2d: list[Any]
    cond: Any
    d2h: list[Any]
    variables: list[Any]


def build(p: Program, source: str) -> Built:
    import popxl
    import popxl.ops as ops

    ns: dict[str, Any] = {"np": np, "popxl": popxl, "ops": ops}
    exec(compile(source, "<random structured popxl program>", "exec"), ns)
    return Built(
        ns["ir"],
        [ns[f"x{n}"] for n in range(p.recipe.streams)],
        ns.get("c"),
        [ns[f"o{n}"] for n in range(len(p.stores))],
        [ns[f"w{n}"] for n in range(p.recipe.variables)],
    )


# --- the NumPy reference ---------------------------------------------------------------------------


class Rejected(Exception):
    """The program's values leave the range where float32 results are meaningful."""


class Val:
    """A tensor's float64 value and a bound on its float32 rounding error. Slots holding the
    same `Val` are the same tensor (in-place updates show through all of them)."""

    __slots__ = ("a", "e")

    def __init__(self, a: np.ndarray, e: float):
        self.a = a
        self.e = e

    def copy(self) -> Val:
        return Val(self.a.copy(), self.e)

    @property
    def m(self) -> float:
        return float(np.max(np.abs(self.a))) if self.a.size else 0.0


def _mx(a: np.ndarray) -> float:
    return float(np.max(np.abs(a))) if a.size else 0.0


def _check(v: Val, what: str) -> Val:
    m = v.m
    if not np.all(np.isfinite(v.a)) or m > 1e3 or v.e > 1e-3 * (1.0 + m):
        raise Rejected(f"{what}: max |value| {m:.3g}, error bound {v.e:.3g}")
    return v


def _unary(op: str, x: Val) -> Val:
    a = x.a
    if op == "tanh":
        y = np.tanh(a)
        return Val(y, x.e + 4 * U * (1 + _mx(y)))
    if op == "sin":
        y = np.sin(a)
        return Val(y, x.e + 4 * U * (1 + _mx(a)))
    if op == "sigmoid":
        y = 0.5 * (1 + np.tanh(0.5 * a))  # = 1 / (1 + exp(-a)), without overflow
        return Val(y, 0.25 * x.e + 4 * U)
    y = {"neg": lambda: -a, "relu": lambda: np.maximum(a, 0), "abs": lambda: np.abs(a)}[op]()
    return Val(y, x.e)


def _binary(op: str, x: Val, y: Val) -> Val:
    if op == "add":
        r = x.a + y.a
        return Val(r, x.e + y.e + U * _mx(r))
    if op == "sub":
        r = x.a - y.a
        return Val(r, x.e + y.e + U * _mx(r))
    if op == "mul":
        r = x.a * y.a
        return Val(r, x.m * y.e + y.m * x.e + x.e * y.e + U * _mx(r))
    return Val(np.maximum(x.a, y.a), max(x.e, y.e))


def _inplace(s: Stmt, d: Val, x: Val) -> None:
    """Updates `d` (its array, in place: aliases see it)."""
    xa = x.a.copy()  # the source is read before the destination is written (d may be x)
    if s.op == "relu_":
        np.maximum(d.a, 0, out=d.a)
        return
    if s.op in ("iadd", "add_") or (s.op == "accumulate_" and s.style % 2 == 0):
        d.a += xa
        d.e = d.e + x.e + U * _mx(d.a)
    elif s.op == "accumulate_":
        d.a += s.c * xa
        d.e = d.e + abs(s.c) * x.e + U * (abs(s.c) * _mx(xa) + _mx(d.a))
    elif s.op == "scaled_add_":
        d.e = abs(s.c) * d.e + 0.5 * x.e + U * (abs(s.c) * d.m + 0.5 * _mx(xa))
        d.a *= s.c
        d.a += 0.5 * xa
        d.e += U * _mx(d.a)
    else:  # copy_var_update_
        d.a[...] = xa
        d.e = x.e


class _Ref:
    def __init__(self, p: Program):
        self.p = p

    def run_graph(self, gi: int, ins: list[Val]) -> list[Val]:
        g = self.p.graphs[gi]
        slots: list[Val | None] = [*ins, *([None] * (g.n_slots - g.n_in))]
        self.body(g.stmts, slots)
        return [self._get(slots, o).copy() for o in g.outs]

    @staticmethod
    def _get(slots: list[Val | None], i: int) -> Val:
        v = slots[i]
        assert v is not None
        return v

    def call_args(self, gi: int, args: list[Val]) -> list[Val]:
        g = self.p.graphs[gi]
        return [v if r else v.copy() for v, r in zip(args, g.by_ref, strict=True)]

    def body(self, stmts: list[Stmt], slots: list[Val | None]) -> list[Val]:
        stored: list[Val] = []
        for s in stmts:
            a = [self._get(slots, i) for i in s.args]
            what = f"{s.kind} {s.op}"
            if s.kind == "store":
                stored.append(a[0].copy())
                continue
            if s.kind == "copy":
                slots[s.outs[0]] = a[0].copy()
                continue
            if s.kind == "inplace":
                _inplace(s, a[0], a[1])
                _check(a[0], what)
                continue
            if s.kind == "unary":
                r = [_unary(s.op, a[0])]
            elif s.kind == "binary":
                r = [_binary(s.op, a[0], a[1])]
            elif s.kind == "scalar":
                y = a[0].a * s.c if s.op == "mul_c" else a[0].a + s.c
                e = abs(s.c) * a[0].e if s.op == "mul_c" else a[0].e
                r = [Val(y, e + U * _mx(y))]
            elif s.kind == "matmul":
                x, w = a
                n = x.a.shape[-1]
                y = (x.a @ w.a) * 0.5
                r = [Val(y, 0.5 * n * (x.m * w.e + w.m * x.e + x.e * w.e + n * U * x.m * w.m) + U * _mx(y))]
            elif s.kind == "const":
                r = [Val(_const(s, self.p.shape), 0.0)]
            elif s.kind == "rowsum":
                x = a[0]
                ax = s.count
                n = x.a.shape[ax]
                y = x.a + x.a.sum(axis=ax, keepdims=True) * 0.25
                r = [Val(y, x.e + 0.25 * n * (x.e + n * U * x.m) + U * _mx(y))]
            elif s.kind == "call":
                r = self.run_graph(s.graph, self.call_args(s.graph, a))
            elif s.kind == "repeat":
                g = self.p.graphs[s.graph]
                n = len(g.outs)
                carried = [v.copy() for v in a[:n]]
                # the other inputs not by reference: their values before the loop
                rest = [v if r else v.copy() for v, r in zip(a[n:], g.by_ref[n:], strict=True)]
                for _ in range(s.count):
                    carried = self.run_graph(s.graph, self.call_args(s.graph, carried + rest))
                    for v in carried:
                        _check(v, "repeat")
                r = carried
            elif s.kind == "cond":
                if s.op == "data":
                    total, n = float(a[0].a.sum()), a[0].a.size
                    if abs(total) <= 4 * n * (a[0].e + n * U * a[0].m) + 1e-6:
                        raise Rejected("a condition sum(x) > 0 too close to 0")
                    take = total > 0
                else:
                    take = bool(a[0].a)
                t, e = a[1 : 1 + s.count], a[1 + s.count :]
                r = self.run_graph(s.graph, self.call_args(s.graph, t)) if take else self.run_graph(
                    s.graph2, self.call_args(s.graph2, e))  # fmt: skip
            else:
                raise AssertionError(s.kind)
            for o, v in zip(s.outs, r, strict=True):
                slots[o] = _check(v, what)
        return stored


def reference(p: Program) -> tuple[list[list[Val]], list[list[Val]]]:
    """Per run: the values of the stores o0.. and of the variables w0.. after the run."""
    ref = _Ref(p)
    variables = [Val(w.astype(np.float64), 0.0) for w in p.var_init]
    outs, vars_after = [], []
    for run in range(p.recipe.runs):
        xs, cond = run_inputs(p, run)
        slots: list[Val | None] = [Val(x.astype(np.float64), 0.0) for x in xs]
        slots += variables
        if p.cond_slot is not None:
            assert cond is not None
            slots.append(Val(cond.astype(np.float64), 0.0))
        slots += [None] * (p.n_slots - len(slots))
        outs.append(ref.body(p.main, slots))
        vars_after.append([v.copy() for v in variables])
    return outs, vars_after


def tolerance(v: Val) -> float:
    """Absolute tolerance for a float32 result whose float64 reference is `v`."""
    return 4 * v.e + 8 * U * (1.0 + v.m) + 1e-6
