"""Random popxl programs for the property test (tests/programs/test_property_programs.py).

A *recipe* is what Hypothesis draws: the shapes of the input streams and variables, a list
of small op descriptors `(kind, i, j, k, c)` (`i` and `j` pick operands counting back from
the latest result, so 0 chains ops one after another; `k` picks axes, shapes and permutations (and the views of a `view_chain`), `c` is an exactly representable constant), the
number of `Session.run` calls and a data seed. Deleting descriptors or moving their integers
towards 0 always gives another valid recipe, so failing programs shrink to a few ops.

`resolve` turns a recipe into concrete `Step`s (shapes, axes, permutations decided once).
From the steps:

- `popxl_source` writes the program as plain popxl Python (the text is the reproducer
  printed when a check fails), which `build` executes;
- `reference` evaluates the same steps with plain NumPy in float64, in program order,
  with PopXL semantics (every op but an in-place one makes a new tensor; an in-place op
  reads all its inputs before writing its destination; `host_store` sends the value at
  that point; variables keep their values between runs). Alongside every value it carries
  a bound on the float32 rounding error the program may accumulate, which sets the
  tolerance of each comparison.

Nothing here calls xl's kernels or passes: the reference is independent of the runtime.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
from hypothesis import strategies as st

# --- what the generator draws ------------------------------------------------------------

UNARY = ("neg", "abs", "relu", "gelu", "tanh", "sigmoid", "sin", "cos", "exp", "swish",
         "log1p_abs", "sqrt_abs", "square")  # fmt: skip
BINARY = ("add", "sub", "mul", "div", "maximum", "scaled_add")
SCALAR = ("add_c", "rsub_c", "mul_c", "div_c", "const_add")
VIEWS = ("reshape", "transpose", "slice", "squeeze", "expand", "concat")
REDUCE = ("sum", "mean", "max")
INPLACE = ("add_", "iadd", "scaled_add_", "accumulate_", "accumulate_square_", "accumulate_mean_",
           "accumulate_moving_average_", "accumulate_moving_average_square_",
           "accumulator_scale_", "accumulator_zero_", "copy_var_update_")  # fmt: skip
# Ops of the NN/elementwise extensions (each resolved to an "nn" step; reference below).
ROUNDING = ("ceil", "floor")
SMOOTH = ("erf", "geluerf")
# All-reduces over groups of one replica (each replica alone): the identity, out of place
# and in place (the runtime erases or copies them), on any value of the program.
TRIVIAL_COLLECTIVES = ("all_reduce_1", "all_reduce_1_")
NN_KINDS = (*ROUNDING, *SMOOTH, "clip", "fmod", "fmod_c", "prod", "log_softmax", "topk", "conv", "conv_transpose", "scatter",
            "max_pool", "average_pool", "scatter_reduce", "layer_norm", "group_norm")  # fmt: skip
# Simple kinds first: Hypothesis shrinks a kind towards the start of the list. Views, matmul
# and the in-place ops the runtime plans around are repeated, so they are drawn more often.
KINDS = (*UNARY[:1], *BINARY[:1], *VIEWS * 4, *("view_chain",) * 8, "matmul", "matmul", *REDUCE, "softmax",
         *INPLACE[:3] * 3, *INPLACE[3:], "store", "store", "load", "const", *UNARY[1:],
         *BINARY[1:], *SCALAR, *NN_KINDS, "conv", "max_pool", "average_pool", *TRIVIAL_COLLECTIVES)  # fmt: skip

# Exactly representable constants (scales, factors), nonzero.
CONSTS = (0.5, -1.0, 2.0, 0.25, -0.5, 1.5, -2.0, 0.75, 1.0, -0.25)
MAX_ELEMS = 96  # a step whose result would be larger is replaced by a smaller variant
MAX_STREAMS = 5

# Patterns excluded from generation while their bug is open: name -> entry in
# /work/notes/bugs.md. Re-enable (remove) each once its entry is marked FIXED.
DISABLED: dict[str, str] = {}


@dataclass(frozen=True)
class Recipe:
    streams: tuple[tuple[int, ...], ...]
    variables: tuple[tuple[int, ...], ...]
    ops: tuple[tuple[str, int, int, int, float], ...]
    runs: int
    seed: int


def _shape(min_rank: int = 1) -> st.SearchStrategy[tuple[int, ...]]:
    # Size-1 dims last: they make views trivial, so shrinking moves away from them.
    return st.lists(st.sampled_from((2, 3, 4, 1)), min_size=min_rank, max_size=3).map(tuple)


_operand = st.just(0) | st.integers(0, 15)  # half the time the latest result
op_descriptors = st.tuples(
    st.sampled_from(KINDS),
    _operand,
    _operand,
    st.integers(0, 255),
    st.sampled_from(CONSTS),
)


@st.composite
def recipes(draw: Any, max_ops: int = 24) -> Recipe:
    return Recipe(
        streams=tuple(draw(st.lists(_shape(), min_size=1, max_size=3))),
        variables=tuple(draw(st.lists(_shape(), min_size=0, max_size=3))),
        # Two lists: longer programs on average than one list, and each still shrinks by deletion.
        ops=tuple(draw(st.lists(op_descriptors, min_size=1, max_size=max_ops // 2)))
        + tuple(draw(st.lists(op_descriptors, min_size=0, max_size=max_ops // 2))),
        runs=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


# --- resolution: one concrete step per descriptor -------------------------------------------


@dataclass
class Step:
    kind: str  # "load", "var", "unary", "binary", "scalar", "matmul", view names, "reduce",
    #            "softmax", "const", "inplace", "store"
    op: str  # the op (e.g. "gelu", "scaled_add_"), or the kind again
    args: tuple[int, ...]  # operand slots
    out: int | None = None  # new slot (None for in-place ops and stores)
    params: dict[str, Any] = field(default_factory=dict)
    style: int = 0  # spelling in the popxl source (operator, ops function, method, ...)

    @property
    def slot(self) -> int:
        """The new slot of a step that makes one (every kind but in-place ops and stores)."""
        assert self.out is not None, self
        return self.out


@dataclass
class Program:
    recipe: Recipe
    steps: list[Step]
    shapes: list[tuple[int, ...]]  # per slot
    streams: list[tuple[int, ...]]  # h2d streams x0, x1, ...
    variables: list[tuple[int, ...]]  # w0, w1, ...
    stores: list[int]  # slot stored by d2h stream o0, o1, ...
    var_init: list[np.ndarray]
    consts: dict[int, np.ndarray]  # slot -> data of `const` steps


def _broadcastable(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    if not a or not b:
        return None
    try:
        return np.matmul(np.zeros(a), np.zeros(b)).shape
    except ValueError:
        return None


def _size(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


@functools.cache
def _factorizations(n: int, max_rank: int = 3) -> tuple[tuple[int, ...], ...]:
    """Every shape of rank 1..max_rank with `n` elements."""
    if max_rank == 1:
        return ((n,),)
    out: list[tuple[int, ...]] = [(n,)]
    for d in range(1, n + 1):
        if n % d == 0:
            out.extend((d, *rest) for rest in _factorizations(n // d, max_rank - 1))
    return tuple(dict.fromkeys(out))


def resolve(recipe: Recipe) -> Program:
    """Concrete steps for `recipe` (decided from the shapes only)."""
    rng = np.random.default_rng([recipe.seed, 1])
    steps: list[Step] = []
    shapes: list[tuple[int, ...]] = []
    streams: list[tuple[int, ...]] = []
    consts: dict[int, np.ndarray] = {}
    stores: list[int] = []
    var_slots: list[int] = []

    def new(shape: tuple[int, ...]) -> int:
        shapes.append(tuple(shape))
        return len(shapes) - 1

    @overload
    def emit(kind: str, op: str, args: tuple[int, ...], shape: tuple[int, ...],
             style: int = 0, **params: Any) -> int: ...  # fmt: skip
    @overload
    def emit(kind: str, op: str, args: tuple[int, ...], shape: None,
             style: int = 0, **params: Any) -> None: ...  # fmt: skip
    def emit(kind: str, op: str, args: tuple[int, ...], shape: tuple[int, ...] | None,
             style: int = 0, **params: Any) -> int | None:  # fmt: skip
        out = None if shape is None else new(shape)
        steps.append(Step(kind, op, args, out, params, style))
        return out

    def load(shape: tuple[int, ...]) -> None:
        streams.append(shape)
        emit("load", "load", (), shape, stream=len(streams) - 1)

    for s in recipe.streams:
        load(s)
    var_init = []
    for n, s in enumerate(recipe.variables):
        var_init.append(rng.integers(-8, 9, size=s).astype(np.float32) / 8)
        var_slots.append(emit("var", "var", (), s, var=n))

    def first(j: int, ok: Any) -> int | None:
        """The `j`-th latest slot whose shape is `ok`, or the next older that is."""
        n = len(shapes)
        for d in range(n):
            slot = n - 1 - (j + d) % n
            if ok(shapes[slot]):
                return slot
        return None

    def expand_chains(ops: tuple[tuple[str, int, int, int, float], ...]) -> list[tuple[str, int, int, int, float]]:
        """`view_chain` is 2 or 3 view ops in a row, each on the previous one's result."""
        out = []
        for kind, i, j, k, c in ops:
            if kind != "view_chain":
                out.append((kind, i, j, k, c))
                continue
            # A layout-changing view, then views that must see that layout.
            first_ = ("transpose", "slice", "expand", "concat", "reshape", "squeeze")
            then = ("reshape", "transpose", "squeeze", "slice")
            stages = (first_[k % 6], then[(k // 6) % 4]) + ((then[(k // 24) % 4],) if k >= 128 else ())
            for n, v in enumerate(stages):
                out.append((v, i if n == 0 else 0, j, (k * 37 * (n + 1)) % 64, c))
        return out

    for kind, i, j, k, c in expand_chains(recipe.ops):
        a = len(shapes) - 1 - i % len(shapes)  # i = 0: the latest result, so chains shrink well
        sa = shapes[a]
        ra = len(sa)
        c2 = CONSTS[k % len(CONSTS)]
        if kind in UNARY:
            emit("unary", kind, (a,), sa, style=k % 2)
        elif kind in BINARY:
            b = first(j, lambda s: (r := _broadcastable(sa, s)) is not None and _size(r) <= MAX_ELEMS)  # noqa: B023 (called within this iteration)
            assert b is not None  # a itself always fits
            emit("binary", kind, (a, b), _broadcastable(sa, shapes[b]), style=k % 2, alpha=c, beta=c2)
        elif kind in SCALAR:
            emit("scalar", kind, (a,), sa, style=k % 2, c=c)
        elif kind == "matmul":
            b = first(j, lambda s: (r := _matmul_shape(sa, s)) is not None and _size(r) <= MAX_ELEMS)  # noqa: B023 (called within this iteration)
            if b is None:
                if ra >= 2 and _size((*sa[:-1], sa[-2])) <= MAX_ELEMS:  # a @ a^T
                    perm = (*range(ra - 2), ra - 1, ra - 2)
                    b = emit("transpose", "transpose", (a,), tuple(sa[p] for p in perm), perm=perm)
                elif ra == 1:
                    b = a
                else:
                    emit("unary", "tanh", (a,), sa)
                    continue
            emit("matmul", "matmul", (a, b), _matmul_shape(sa, shapes[b]), style=k % 2)
        elif kind == "reshape":
            cands = _factorizations(_size(sa))
            new_shape = cands[k % len(cands)]
            emit("reshape", "reshape", (a,), new_shape, style=j % 3)
        elif kind == "transpose":
            perms = list(itertools.permutations(range(ra)))[1:] or [tuple(range(ra))]  # not the identity
            perm = perms[k % len(perms)]
            emit("transpose", "transpose", (a,), tuple(sa[p] for p in perm), style=j % 3, perm=perm)
        elif kind == "slice":
            if ra == 0:
                emit("reshape", "reshape", (a,), (1,))
                continue
            axis = k % ra
            n = sa[axis]
            step = (1, 1, 2, -1)[(k // 4) % 4]
            start = j % n
            stop = start + 1 + (k // 16) % (n - start) if step > 0 else (None if j % 2 else -n - 1)
            length = len(range(n)[slice(start, stop, step)])
            shape = tuple(length if d == axis else s for d, s in enumerate(sa))
            emit("slice", "slice", (a,), shape, style=(j // 2) % 2,
                 axis=axis, start=start, stop=stop, step=step)  # fmt: skip
        elif kind == "squeeze":
            ones = [d for d, s in enumerate(sa) if s == 1]
            if not ones:  # make a size-1 dim for a later squeeze
                pos = k % (ra + 1)
                emit("reshape", "reshape", (a,), (*sa[:pos], 1, *sa[pos:]), style=j % 3)
                continue
            if k % 2:
                axes = None
            else:
                axes = tuple(d for n_, d in enumerate(ones) if (k >> (n_ + 1)) & 1) or (ones[0],)
            gone = ones if axes is None else axes
            emit("squeeze", "squeeze", (a,), tuple(s for d, s in enumerate(sa) if d not in gone), axes=axes)
        elif kind == "expand":
            lead = ((), (2,), (3,), ())[k % 4]
            target = tuple((2 if (k >> (4 + d)) & 1 else 3) if s == 1 else s for d, s in enumerate(sa))
            shape = (*lead, *target)
            if _size(shape) > MAX_ELEMS:
                shape = sa
            emit("expand", "expand", (a,), shape, shape_arg=shape)
        elif kind == "concat":
            if ra == 0:
                emit("reshape", "reshape", (a,), (1,))
                continue
            axis = k % ra
            b = first(j, lambda s: len(s) == ra and all(x == y for d, (x, y) in enumerate(zip(s, sa)) if d != axis))  # noqa: B023 (called within this iteration)
            assert b is not None
            parts = (a, b, a) if (k // 3) % 3 == 2 else (a, b)
            n = sum(shapes[p][axis] for p in parts)
            shape = tuple(n if d == axis else s for d, s in enumerate(sa))
            if _size(shape) > MAX_ELEMS:
                parts = (a,)
                shape = sa
            emit("concat", "concat", parts, shape, axis=axis - ra if j % 2 else axis)
        elif kind in REDUCE:
            mask = k % (2**ra + 1)
            axes = None if mask == 2**ra or ra == 0 else tuple(d for d in range(ra) if (mask >> d) & 1)
            keep = bool(j % 2)
            red = set(range(ra)) if not axes else set(axes)
            if axes == ():
                axes = None
            shape = (
                tuple(1 if d in red else s for d, s in enumerate(sa))
                if keep
                else tuple(s for d, s in enumerate(sa) if d not in red)
            )
            emit("reduce", kind, (a,), shape, axes=axes, keepdims=keep)
        elif kind == "softmax":
            if ra == 0:
                emit("unary", "sigmoid", (a,), sa)
                continue
            axis = k % ra
            emit("softmax", "softmax", (a,), sa, axis=axis - ra if j % 2 else axis)
        elif kind in INPLACE:
            if "inplace-on-constant" in DISABLED and a in consts:
                emit("unary", "tanh", (a,), sa)
                continue
            aliased = k % 3 == 0
            if aliased and "aliased-inplace" in DISABLED:
                aliased = False
            if aliased:
                b = a
            elif k % 3 == 1 and ra and "view-aliased-inplace" not in DISABLED:
                # The operand is a view of the destination: a row that broadcasts back over
                # it, the same tensor transposed (when that keeps the shape), or reshaped.
                axis = (k // 3) % ra
                start = j % sa[axis]
                views: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
                    ("slice", tuple(1 if d == axis else x for d, x in enumerate(sa)),
                     dict(axis=axis, start=start, stop=start + 1, step=1)),
                    ("reshape", sa, {}),
                ]  # fmt: skip
                views += [("transpose", sa, dict(perm=pm)) for pm in itertools.permutations(range(ra))
                          if pm != tuple(range(ra)) and tuple(sa[d] for d in pm) == sa]  # fmt: skip
                vk, vshape, vparams = views[(k // 6) % len(views)]
                b = emit(vk, vk, (a,), vshape, style=j % 2 if vk == "slice" else 0, **vparams)
            else:
                b = first(j, lambda s: _broadcastable(sa, s) == sa)  # noqa: B023 (called within this iteration)
                assert b is not None
                if b == a and "aliased-inplace" in DISABLED:
                    emit("unary", "tanh", (a,), sa)
                    continue
            f = c
            if kind in ("accumulate_moving_average_", "accumulate_moving_average_square_"):
                f = (0.25, 0.5, 0.75, 0.875)[k % 4]
            emit("inplace", kind, (a, b), None, style=(k // 3) % 2,
                 a=c, b=c2, f=f, step=float(k % 4))  # fmt: skip
        elif kind == "store":
            stores.append(a)
            emit("store", "store", (a,), None, stream=len(stores) - 1)
        elif kind == "load":
            if len(streams) >= MAX_STREAMS:
                emit("unary", "neg", (a,), sa)
                continue
            load(sa if k % 2 else recipe.streams[k % len(recipe.streams)])
        elif kind == "all_reduce_1":
            emit("nn", kind, (a,), sa, red=("add", "mean", "max", "min", "mul")[k % 5])
        elif kind == "all_reduce_1_":
            emit(
                "inplace", kind, (a, a), None, red=("add", "mean", "max", "min", "mul")[k % 5], a=c, b=c2, f=c, step=0.0
            )
        elif kind in NN_KINDS:
            _resolve_nn(kind, a, j, k, c, c2, shapes, first, emit, rng)
        elif kind == "const":
            data = rng.integers(-4, 5, size=sa).astype(np.float32) / 4
            out = emit("const", "const", (), sa)
            assert out is not None
            consts[out] = data
        else:  # pragma: no cover
            raise AssertionError(kind)

    # Store every value no later op reads (so every op's result is observed), and every
    # tensor an in-place op changed; variables are read with get_tensor_data.
    used = {a for s in steps for a in s.args}
    changed = [s.args[0] for s in steps if s.kind == "inplace"]
    leaves = [n for n in range(len(shapes)) if n not in used]
    for slot in dict.fromkeys([*changed, *leaves]):
        if slot not in var_slots:
            stores.append(slot)
            steps.append(Step("store", "store", (slot,), None, {"stream": len(stores) - 1}))
    return Program(recipe, steps, shapes, streams, list(recipe.variables), stores, var_init, consts)


# --- the program as popxl source ---------------------------------------------------------------


def _lit(x: np.ndarray) -> str:
    return f"np.array({x.tolist()!r}, np.float32)"


def popxl_source(p: Program) -> str:
    """The program as plain popxl code (runs as is with numpy, popxl, popxl.ops as ops)."""
    L = ["ir = popxl.Ir()", "with ir.main_graph:"]

    def w(line: str) -> None:
        L.append("    " + line)

    for s in p.steps:
        t = f"t{s.out}" if s.out is not None else None
        args = [f"t{x}" for x in s.args]
        a = args[0] if args else None
        b = args[1] if len(args) > 1 else None
        q = s.params
        if s.kind == "load":
            n = q["stream"]
            w(f"x{n} = popxl.h2d_stream({p.streams[n]!r}, popxl.float32, 'x{n}')")
            w(f"{t} = ops.host_load(x{n})")
        elif s.kind == "var":
            n = q["var"]
            w(f"w{n} = popxl.variable({_lit(p.var_init[n])}, name='w{n}')")
            w(f"{t} = w{n}")
        elif s.kind == "const":
            w(f"{t} = popxl.constant({_lit(p.consts[s.slot])})")
        elif s.kind == "unary":
            expr = {
                "neg": f"-{a}" if s.style else f"ops.negate({a})",
                "log1p_abs": f"ops.log(ops.abs({a}) + 1.0)",
                "sqrt_abs": f"ops.sqrt(ops.abs({a}) + 0.25)",
                "square": f"{a} ** 2.0" if s.style else f"ops.pow({a}, 2.0)",
            }.get(s.op, f"ops.{s.op}({a})")
            w(f"{t} = {expr}")
        elif s.kind == "binary":
            sym = {"add": "+", "sub": "-", "mul": "*"}.get(s.op)
            if sym and s.style:
                expr = f"{a} {sym} {b}"
            elif s.op == "div":
                expr = f"{a} / (ops.abs({b}) + 1.0)" if s.style else f"ops.div({a}, ops.abs({b}) + 1.0)"
            elif s.op == "scaled_add":
                expr = f"ops.scaled_add({a}, {b}, a={q['alpha']}, b={q['beta']})"
            else:
                expr = f"ops.{s.op}({a}, {b})"
            w(f"{t} = {expr}")
        elif s.kind == "scalar":
            c = q["c"]
            expr = {
                "add_c": f"{a} + {c}",
                "rsub_c": f"{c} - {a}",
                "mul_c": f"{c} * {a}" if s.style else f"{a} * {c}",
                "div_c": f"{a} / {c}",
                "const_add": f"{a} + popxl.constant(np.float32({c}))",
            }[s.op]
            w(f"{t} = {expr}")
        elif s.kind == "matmul":
            w(f"{t} = {a} @ {b}" if s.style else f"{t} = ops.matmul({a}, {b})")
        elif s.kind == "reshape":
            shape = p.shapes[s.slot]
            if s.style == 1 and shape:
                shape = (-1, *shape[1:])
            w(f"{t} = {a}.reshape({shape!r})" if s.style != 2 else f"{t} = ops.reshape({a}, {shape!r})")
        elif s.kind == "transpose":
            perm = q["perm"]
            if s.style == 1 and len(perm) == 2 and perm == (1, 0):
                w(f"{t} = {a}.T")
            elif s.style == 2:
                w(f"{t} = ops.transpose({a}, {perm!r})")
            else:
                w(f"{t} = {a}.transpose({perm!r})")
        elif s.kind == "slice":
            ax, st_, sp, step = q["axis"], q["start"], q["stop"], q["step"]
            if s.style:
                key = ", ".join([":"] * ax + [f"{st_}:{'' if sp is None else sp}:{step}"])
                w(f"{t} = {a}[{key}]")
            else:
                w(f"{t} = ops.slice({a}, start=[{st_}], stop=[{sp}], step=[{step}], axis=[{ax}])")
        elif s.kind == "squeeze":
            w(f"{t} = ops.squeeze({a}, {q['axes']!r})" if q["axes"] is not None else f"{t} = ops.squeeze({a})")
        elif s.kind == "expand":
            w(f"{t} = ops.expand({a}, {q['shape_arg']!r})")
        elif s.kind == "concat":
            w(f"{t} = ops.concat([{', '.join(args)}], axis={q['axis']})")
        elif s.kind == "reduce":
            w(f"{t} = ops.{s.op}({a}, axis={q['axes']!r}, keepdims={q['keepdims']})")
        elif s.kind == "softmax":
            w(f"{t} = ops.softmax({a}, axis={q['axis']})")
        elif s.kind == "inplace":
            op = s.op
            vu = "ops.var_updates"
            line = {
                "add_": f"ops.add_({a}, {b})",
                "iadd": f"{a} += {b}",
                "scaled_add_": f"ops.scaled_add_({a}, {b}, a={q['a']}, b={q['b']})",
                "accumulate_": f"{vu}.accumulate_({a}, {b}, f={q['f']})" if s.style else f"{vu}.accumulate_({a}, {b})",
                "accumulate_square_": f"{vu}.accumulate_square_({a}, {b}, f={q['f']})",
                "accumulate_mean_": f"{vu}.accumulate_mean_({a}, {b}, {q['step']})",
                "accumulate_moving_average_": f"{vu}.accumulate_moving_average_({a}, {b}, {q['f']})",
                "accumulate_moving_average_square_": f"{vu}.accumulate_moving_average_square_({a}, {b}, {q['f']})",
                "accumulator_scale_": f"{vu}.accumulator_scale_({a}, {q['f']})",
                "accumulator_zero_": f"{vu}.accumulator_zero_({a})",
                "copy_var_update_": f"{vu}.copy_var_update_({a}, {b})",
                "all_reduce_1_": f"ops.collectives.replicated_all_reduce_({a}, {q.get('red')!r}, {_ALONE})",
            }[op]
            w(line)
        elif s.kind == "nn":
            w(f"{t} = {_nn_source(s, args)}")
        elif s.kind == "store":
            n = q["stream"]
            w(f"o{n} = popxl.d2h_stream({a}.shape, {a}.dtype, 'o{n}')")
            w(f"ops.host_store(o{n}, {a})")
        else:  # pragma: no cover
            raise AssertionError(s.kind)
    return "\n".join(L) + "\n"


@dataclass
class Built:
    ir: Any
    h2d: list[Any]  # x0, x1, ...
    d2h: list[Any]  # o0, o1, ...
    variables: list[Any]  # w0, w1, ...


def build(p: Program, source: str) -> Built:
    import popxl
    import popxl.ops as ops

    ns: dict[str, Any] = {"np": np, "popxl": popxl, "ops": ops}
    exec(compile(source, "<random popxl program>", "exec"), ns)
    return Built(
        ns["ir"],
        [ns[f"x{n}"] for n in range(len(p.streams))],
        [ns[f"o{n}"] for n in range(len(p.stores))],
        [ns[f"w{n}"] for n in range(len(p.variables))],
    )


def run_inputs(p: Program, run: int) -> list[np.ndarray]:
    """float32 data for every h2d stream in run number `run` (multiples of 1/16 in [-1, 1])."""
    return [
        (np.random.default_rng([p.recipe.seed, 2, run, n]).integers(-16, 17, size=s) / 16).astype(np.float32)
        for n, s in enumerate(p.streams)
    ]


# --- the NumPy reference -------------------------------------------------------------------------

U = 2.0**-23  # float32 rounding, with a factor 2 of slack


class Rejected(Exception):
    """The program's values leave the range where float32 results are meaningful."""


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _mx(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def _unary(op: str, x: np.ndarray, e: float) -> tuple[np.ndarray, float]:
    """(value, error bound): the input error times the op's slope, plus rounding."""
    m = _mx(x)
    if op == "neg":
        return -x, e
    if op == "abs":
        return np.abs(x), e
    if op == "relu":
        return np.maximum(x, 0.0), e
    if op == "square":
        return x * x, 2 * m * e + e * e + 2 * U * m * m
    if op == "exp":
        r = np.exp(x)
        return r, _mx(r) * (math.expm1(e) + 8 * U)
    f, slope = {
        "gelu": (_gelu, 1.2),
        "tanh": (np.tanh, 1.0),
        "sigmoid": (_sigmoid, 0.25),
        "sin": (np.sin, 1.0),
        "cos": (np.cos, 1.0),
        "swish": (lambda v: v * _sigmoid(v), 1.1),
        "log1p_abs": (lambda v: np.log(np.abs(v) + 1.0), 1.0),
        "sqrt_abs": (lambda v: np.sqrt(np.abs(v) + 0.25), 1.0),
    }[op]
    r = f(x)
    return r, slope * e + 16 * U * (_mx(r) + m)


def reference(
    p: Program,
) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]], list[list[float]], list[list[float]]]:
    """Per run: the stored values, the variables after the run, and their error bounds."""
    var_vals = [v.astype(np.float64) for v in p.var_init]
    var_errs = [0.0] * len(var_vals)
    outs, vars_after, out_errs, var_err_after = [], [], [], []
    for run in range(p.recipe.runs):
        inputs = run_inputs(p, run)
        val: dict[int, np.ndarray] = {}
        err: dict[int, float] = {}
        stored: dict[int, tuple[np.ndarray, float]] = {}
        var_slot: dict[int, int] = {}
        for s in p.steps:
            q = s.params
            x = [val[a] for a in s.args]
            e = [err[a] for a in s.args]
            m = [_mx(v) for v in x]
            if s.kind == "load":
                r, re = inputs[q["stream"]].astype(np.float64), 0.0
            elif s.kind == "var":
                var_slot[s.slot] = q["var"]
                r, re = var_vals[q["var"]].copy(), var_errs[q["var"]]
            elif s.kind == "const":
                r, re = p.consts[s.slot].astype(np.float64), 0.0
            elif s.kind == "unary":
                r, re = _unary(s.op, x[0], e[0])
            elif s.kind == "binary":
                A, B = x
                if s.op == "add":
                    r, re = A + B, e[0] + e[1] + U * (m[0] + m[1])
                elif s.op == "sub":
                    r, re = A - B, e[0] + e[1] + U * (m[0] + m[1])
                elif s.op == "mul":
                    r, re = A * B, m[0] * e[1] + m[1] * e[0] + e[0] * e[1] + U * m[0] * m[1]
                elif s.op == "maximum":
                    r, re = np.maximum(A, B), max(e) + U * max(m)
                elif s.op == "div":
                    r, re = A / (np.abs(B) + 1.0), e[0] + m[0] * e[1] + 4 * U * m[0]
                else:  # scaled_add
                    al, be = q["alpha"], q["beta"]
                    r = al * A + be * B
                    re = abs(al) * e[0] + abs(be) * e[1] + 2 * U * (abs(al) * m[0] + abs(be) * m[1])
            elif s.kind == "scalar":
                c, A = q["c"], x[0]
                r = {"add_c": A + c, "rsub_c": c - A, "mul_c": A * c, "div_c": A / c, "const_add": A + c}[s.op]
                gain = abs(c) if s.op == "mul_c" else 1 / abs(c) if s.op == "div_c" else 1.0
                re = gain * e[0] + U * (_mx(r) + m[0] + abs(c))
            elif s.kind == "matmul":
                A, B = x
                kdim = A.shape[-1]
                r = np.matmul(A, B)
                re = kdim * (m[0] * e[1] + m[1] * e[0] + e[0] * e[1] + 2 * U * m[0] * m[1])
            elif s.kind == "reshape":
                r, re = x[0].reshape(p.shapes[s.slot]), e[0]
            elif s.kind == "transpose":
                r, re = np.transpose(x[0], q["perm"]), e[0]
            elif s.kind == "slice":
                idx = [slice(None)] * x[0].ndim
                idx[q["axis"]] = slice(q["start"], q["stop"], q["step"])
                r, re = x[0][tuple(idx)], e[0]
            elif s.kind == "squeeze":
                axes = q["axes"]
                r = np.squeeze(x[0]) if axes is None else np.squeeze(x[0], axis=axes)
                re = e[0]
            elif s.kind == "expand":
                r, re = np.broadcast_to(x[0], q["shape_arg"]).copy(), e[0]
            elif s.kind == "concat":
                r, re = np.concatenate(x, axis=q["axis"]), max(e)
            elif s.kind == "reduce":
                A = x[0]
                axes = q["axes"]
                n = A.size // max(1, math.prod(p.shapes[s.slot])) if A.size else 1
                if s.op == "sum":
                    r, re = np.sum(A, axis=axes, keepdims=q["keepdims"]), n * (e[0] + U * m[0])
                elif s.op == "mean":
                    r, re = np.mean(A, axis=axes, keepdims=q["keepdims"]), e[0] + 2 * n * U * m[0]
                else:
                    r, re = np.max(A, axis=axes, keepdims=q["keepdims"]), e[0]
            elif s.kind == "softmax":
                A = x[0]
                ex = np.exp(A - np.max(A, axis=q["axis"], keepdims=True))
                r = ex / np.sum(ex, axis=q["axis"], keepdims=True)
                re = 2 * e[0] + 16 * U * (A.shape[q["axis"]] + m[0])
            elif s.kind == "inplace":
                d = s.args[0]
                T, X = val[d], val[s.args[1]]  # read everything before writing
                eT, eX = err[d], err[s.args[1]]
                mT, mX = _mx(T), _mx(X)
                op, f = s.op, q["f"]
                if op in ("add_", "iadd"):
                    new, ne = T + X, eT + eX + U * (mT + mX)
                elif op == "scaled_add_":
                    a_, b_ = q["a"], q["b"]
                    new = a_ * T + b_ * X
                    ne = abs(a_) * eT + abs(b_) * eX + 2 * U * (abs(a_) * mT + abs(b_) * mX)
                elif op == "accumulate_":
                    f = f if s.style else 1.0
                    new, ne = T + f * X, eT + abs(f) * eX + 2 * U * (mT + abs(f) * mX)
                elif op == "accumulate_square_":
                    new = T + f * X * X
                    ne = eT + abs(f) * (2 * mX * eX + eX * eX) + 3 * U * (mT + abs(f) * mX * mX)
                elif op == "accumulate_mean_":
                    st_ = q["step"]
                    new = T * (st_ / (st_ + 1)) + X / (st_ + 1)
                    ne = max(eT, eX) + 4 * U * (mT + mX)
                elif op == "accumulate_moving_average_":
                    new = f * T + (1 - f) * X
                    ne = max(eT, eX) + 4 * U * (mT + mX)
                elif op == "accumulate_moving_average_square_":
                    new = f * T + (1 - f) * X * X
                    ne = eT + 2 * mX * eX + eX * eX + 4 * U * (mT + mX * mX)
                elif op == "accumulator_scale_":
                    new, ne = T * f, abs(f) * eT + U * abs(f) * mT
                elif op == "all_reduce_1_":
                    new, ne = T, eT
                elif op == "accumulator_zero_":
                    new, ne = np.zeros_like(T), 0.0
                else:  # copy_var_update_
                    new, ne = X, eX
                val[d] = np.broadcast_to(new, T.shape).copy()
                err[d] = ne
                if d in var_slot:
                    var_vals[var_slot[d]] = val[d].copy()
                    var_errs[var_slot[d]] = ne
                _check_range(val[d], ne, s)
                continue
            elif s.kind == "nn":
                r, re = _nn_reference(s, x, e)
            elif s.kind == "store":
                stored[q["stream"]] = (val[s.args[0]].copy(), err[s.args[0]])
                continue
            else:  # pragma: no cover
                raise AssertionError(s.kind)
            r = np.asarray(r, dtype=np.float64)
            assert r.shape == p.shapes[s.slot], (s, r.shape, p.shapes[s.slot])
            _check_range(r, re, s)
            val[s.slot], err[s.slot] = r, re
        outs.append([stored[n][0] for n in range(len(p.stores))])
        out_errs.append([stored[n][1] for n in range(len(p.stores))])
        vars_after.append([v.copy() for v in var_vals])
        var_err_after.append(list(var_errs))
    return outs, vars_after, out_errs, var_err_after


def _check_range(r: np.ndarray, e: float, s: Step) -> None:
    m = _mx(r)
    if not np.all(np.isfinite(r)) or m > 1e4 or e > 1e-3 * (1.0 + m):
        raise Rejected(f"{s.op}: max |value| {m:.3g}, error bound {e:.3g}")


def tolerance(ref: np.ndarray, err: float) -> float:
    """Absolute tolerance for a float32 result whose float64 reference is `ref`."""
    return 4 * err + 8 * U * (1.0 + _mx(ref)) + 1e-6


# --- NN and extra elementwise ops ------------------------------------------------------------
# Resolved into "nn" steps; the operand of conv and the pools may first be reshaped to
# (N, C, *spatial) and transposed (views the runtime must see through). Constant operands
# (weights, scatter indices, norm parameters) are inline popxl.constant arguments, not slots.


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pool_windows(size: int, kern: int, stride: int, dil: int, p0: int, p1: int, ceil: bool) -> list[list[int]]:
    """Per output position, the input positions of its window that lie inside the input
    (ONNX / PyTorch sizes; in ceil mode the last window must start before the end padding)."""
    span = size + p0 + p1 - dil * (kern - 1) - 1
    if span < 0:
        return []
    n = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (n - 1) * stride >= size + p0:
        n -= 1
    return [[o * stride - p0 + t * dil for t in range(kern) if 0 <= o * stride - p0 + t * dil < size] for o in range(n)]


def _spatial_operand(a: int, j: int, k: int, shapes: list[tuple[int, ...]], emit: Any) -> int | None:
    """`a` as (N, C, *spatial) with 1 or 2 spatial dims, through reshape / transpose views."""
    sa = shapes[a]
    if len(sa) == 0:
        return None
    if len(sa) != 3:
        target = (1, *sa) if len(sa) == 2 else (1, 1, *sa) if len(sa) == 1 else None
        if target is None:  # never: shapes have rank <= 3
            return None
        a = emit("reshape", "reshape", (a,), target, style=j % 3)
        sa = shapes[a]
    if (k >> 1) & 1:  # channels and length swapped: conv / pool of a transposed view
        a = emit("transpose", "transpose", (a,), (sa[0], sa[2], sa[1]), style=2, perm=(0, 2, 1))
        sa = shapes[a]
    if (k >> 2) & 1:  # 2 spatial dims when the length factors
        length = sa[2]
        fs = [d for d in _divisors(length) if 1 < d < length] or [1]
        h = fs[(k >> 3) % len(fs)]
        a = emit("reshape", "reshape", (a,), (sa[0], sa[1], h, length // h), style=j % 3)
    return a


def _resolve_nn(kind: str, a: int, j: int, k: int, c: float, c2: float, shapes: list[tuple[int, ...]],
                first: Any, emit: Any, rng: np.random.Generator) -> None:  # fmt: skip
    sa = shapes[a]
    ra = len(sa)
    if kind in ROUNDING or kind in SMOOTH:
        emit("nn", kind, (a,), sa, style=k % 2)
    elif kind == "clip":
        lo, hi = sorted((c, c2))
        if lo == hi:
            hi = lo + 0.5
        emit("nn", "clip", (a,), sa, style=k % 3, lo=lo, hi=hi)
    elif kind == "fmod_c":
        emit("nn", "fmod_c", (a,), sa, style=k % 2, c=c)
    elif kind == "fmod":
        b = first(j, lambda s: (r := _broadcastable(sa, s)) is not None and _size(r) <= MAX_ELEMS)
        emit("nn", "fmod", (a, b), _broadcastable(sa, shapes[b]), style=k % 2)
    elif kind in ("prod", "log_softmax", "topk") and ra == 0:
        emit("unary", "sigmoid", (a,), sa)
    elif kind == "prod":
        mask = k % (2**ra + 1)
        axes = None if mask == 2**ra else tuple(d for d in range(ra) if (mask >> d) & 1) or None
        keep = bool(j % 2)
        red = set(range(ra)) if axes is None else set(axes)
        shape = (
            tuple(1 if d in red else s for d, s in enumerate(sa))
            if keep
            else tuple(s for d, s in enumerate(sa) if d not in red)
        )
        emit("nn", "prod", (a,), shape, axes=axes, keepdims=keep)
    elif kind == "log_softmax":
        axis = k % ra
        emit("nn", "log_softmax", (a,), sa, axis=axis - ra if j % 2 else axis)
    elif kind == "topk":
        axis = k % ra
        kk = 1 + (k // 4) % sa[axis]
        shape = tuple(kk if d == axis else s for d, s in enumerate(sa))
        emit("nn", "topk", (a,), shape, axis=axis, k=kk, largest=bool((k // 2) % 2))
    elif kind == "scatter":
        if ra == 0:
            emit("unary", "relu", (a,), sa)
            return
        axis = k % ra
        b = first(j, lambda s_: s_ == sa)
        m = 1 + (k // 4) % sa[axis]
        if m < sa[axis]:  # the values: a slice (view) of a tensor of t's shape
            vshape = tuple(m if d == axis else x for d, x in enumerate(sa))
            b = emit("slice", "slice", (b,), vshape, style=j % 2, axis=axis, start=0, stop=m, step=1)
        else:
            vshape = sa
        n = sa[axis]
        idx = rng.integers(-n, n, size=vshape).astype(np.int32)  # repeats: the last write wins
        emit("nn", "scatter", (a, b), sa, axis=axis, indices=idx)
    elif kind == "scatter_reduce":
        if ra == 0:
            emit("unary", "relu", (a,), sa)
            return
        axis = k % ra
        size = 1 + (k // 4) % 4
        full = bool((k // 16) % 2)
        ishape = sa if full else (sa[axis],)
        idx = rng.integers(0, size, size=ishape).astype(np.int32)
        shape = tuple(size if d == axis else s for d, s in enumerate(sa))
        red = ("sum", "max", "min")[(k // 32) % 3]
        emit("nn", "scatter_reduce", (a,), shape, axis=axis, axis_size=size, indices=idx, reduction=red)
    elif kind in ("layer_norm", "group_norm"):
        if ra < 2:
            x = emit("reshape", "reshape", (a,), (1, *sa) if ra else (1, 1), style=j % 3)
            sa = shapes[x]
            a = x
        ch = sa[1]
        groups = 1 if kind == "layer_norm" else _divisors(ch)[k % len(_divisors(ch))]
        w = rng.integers(-4, 5, size=(ch,)).astype(np.float32) / 4
        b = rng.integers(-4, 5, size=(ch,)).astype(np.float32) / 4
        emit("nn", kind, (a,), sa, groups=groups, weight=w, bias=b)
    else:  # conv, conv_transpose, max_pool, average_pool
        x = _spatial_operand(a, j, k, shapes, emit)
        if x is None:
            emit("unary", "tanh", (a,), sa)
            return
        sx = shapes[x]
        nd = len(sx) - 2
        r = np.random.default_rng([k, j, len(shapes)])
        kern = tuple(int(r.integers(1, 4)) for _ in range(nd))
        dil = tuple(int(r.integers(1, 3)) for _ in range(nd))
        stride = tuple(int(r.integers(1, 3)) for _ in range(nd))
        if kind == "conv":
            pads = tuple(int(r.integers(0, 2)) for _ in range(2 * nd))
        else:
            pads = tuple(int(r.integers(0, kern[d % nd] // 2 + 1)) for d in range(2 * nd))
        ceil = kind != "conv" and bool(r.integers(0, 2))
        wins = [_pool_windows(sx[2 + d], kern[d], stride[d], dil[d], pads[d], pads[nd + d], ceil) for d in range(nd)]
        if any(
            not w or (kind != "conv" and any(not v for v in w)) for w in wins
        ):  # empty, or a pool window of padding only
            kern, dil, stride, pads, ceil = (1,) * nd, (1,) * nd, (1,) * nd, (0,) * (2 * nd), False
            wins = [[[i] for i in range(sx[2 + d])] for d in range(nd)]
        out_sp = tuple(len(w) for w in wins)
        if kind == "conv_transpose":
            ch = sx[1]
            groups = _divisors(ch)[(k >> 4) % len(_divisors(ch))]
            m = groups * int(r.integers(1, 3))
            outp = tuple(int(r.integers(0, max(stride[d], dil[d]))) for d in range(nd))
            out_sp = tuple((sx[2 + d] - 1) * stride[d] - pads[d] - pads[nd + d] + dil[d] * (kern[d] - 1) + 1 + outp[d]
                           for d in range(nd))  # fmt: skip
            if min(out_sp) < 1 or _size((sx[0], m, *out_sp)) > 2 * MAX_ELEMS:
                emit("unary", "tanh", (x,), sx)
                return
            weight = (r.integers(-4, 5, size=(ch, m // groups, *kern)) / 4).astype(np.float32)
            emit("nn", "conv_transpose", (x,), (sx[0], m, *out_sp), weight=weight, stride=stride, pads=pads,
                 dilation=dil, groups=groups, output_padding=outp)  # fmt: skip
        elif kind == "conv":
            ch = sx[1]
            groups = _divisors(ch)[(k >> 4) % len(_divisors(ch))]
            m = groups * int(r.integers(1, 3))
            shape = (sx[0], m, *out_sp)
            if _size(shape) > MAX_ELEMS:
                m = groups
                shape = (sx[0], m, *out_sp)
            weight = (r.integers(-4, 5, size=(m, ch // groups, *kern)) / 4).astype(np.float32)
            emit("nn", "conv", (x,), shape, style=k % 2, weight=weight, stride=stride, pads=pads, dilation=dil,
                 groups=groups)  # fmt: skip
        else:
            emit("nn", kind, (x,), (*sx[:2], *out_sp), style=k % 2, kernel=kern, stride=stride, pads=pads,
                 dilation=dil, ceil_mode=ceil, windows=wins)  # fmt: skip


_ALONE = "ir.replica_grouping(ir.replication_factor, 1)"


def _nn_source(s: Step, args: list[str]) -> str:
    a = args[0]
    q = s.params
    op = s.op
    if op == "all_reduce_1":
        return f"ops.collectives.replicated_all_reduce({a}, {q['red']!r}, {_ALONE})"
    if op in ROUNDING or op in SMOOTH:
        return f"ops.{op}({a})"
    if op == "clip":
        return [f"ops.clip({a}, {q['lo']}, {q['hi']})", f"ops.clamp({a}, min={q['lo']}, max={q['hi']})",
                f"ops.clip({a}, max={q['hi']})" if q["lo"] < -100 else f"ops.clip({a}, min={q['lo']}, max={q['hi']})"][s.style]  # fmt: skip
    if op == "fmod_c":
        return f"{a} % {q['c']}" if s.style else f"ops.fmod({a}, {q['c']})"
    if op == "fmod":
        d = f"(ops.abs({args[1]}) + 0.5)"
        return f"{a} % {d}" if s.style else f"ops.fmod({a}, {d})"
    if op == "prod":
        return f"ops.prod({a}, axis={q['axes']!r}, keepdims={q['keepdims']})"
    if op == "log_softmax":
        return f"ops.log_softmax({a}, axis={q['axis']})"
    if op == "topk":
        return f"ops.topk({a}, {q['k']}, axis={q['axis']}, largest={q['largest']})[0]"
    if op == "scatter":
        idx = f"popxl.constant(np.array({q['indices'].tolist()!r}, np.int32))"
        return f"ops.scatter({a}, {idx}, {args[1]}, axis={q['axis']})"
    if op == "scatter_reduce":
        idx = f"popxl.constant(np.array({q['indices'].tolist()!r}, np.int32))"
        return (f"ops.scatter_reduce({a}, {idx}, {q['reduction']!r}, axis={q['axis']}, "
                f"axis_size={q['axis_size']})")  # fmt: skip
    if op in ("layer_norm", "group_norm"):
        wb = f"popxl.constant({_lit(q['weight'])}), popxl.constant({_lit(q['bias'])})"
        return f"ops.layer_norm({a}, {wb})" if op == "layer_norm" else f"ops.group_norm({a}, {wb}, {q['groups']})"
    if op == "conv_transpose":
        outp = f", output_padding={q['output_padding']!r}" if any(q["output_padding"]) else ""
        return (f"ops.conv_transpose({a}, popxl.constant({_lit(q['weight'])}), stride={q['stride']!r}, "
                f"padding={q['pads']!r}, dilation={q['dilation']!r}, groups={q['groups']}{outp})")  # fmt: skip
    if op == "conv":
        return (f"ops.conv({a}, popxl.constant({_lit(q['weight'])}), stride={q['stride']!r}, "
                f"padding={q['pads']!r}, dilation={q['dilation']!r}, groups={q['groups']})")  # fmt: skip
    # pools
    return (f"ops.{op}({a}, {q['kernel']!r}, stride={q['stride']!r}, padding={q['pads']!r}, "
            f"dilation={q['dilation']!r}, ceil_mode={q['ceil_mode']})")  # fmt: skip


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _near_jumps(x: np.ndarray, jumps_of: Any, e: float, s: Step) -> None:
    """Rejected when an element lies within the error bound of a jump of a discontinuous op."""
    if e > 0 and x.size and np.any(jumps_of(x) <= e + 4 * U * (1.0 + np.abs(x))):
        raise Rejected(f"{s.op}: a value within its error bound {e:.3g} of a jump")


def _nn_reference(s: Step, x: list[np.ndarray], e: list[float]) -> tuple[np.ndarray, float]:
    q = s.params
    op = s.op
    A = x[0]
    m = _mx(A)
    if op == "all_reduce_1":
        return A.copy(), e[0]
    if op in ROUNDING:
        _near_jumps(A, lambda v: np.abs(v - np.round(v)), e[0], s)
        return (np.ceil(A) if op == "ceil" else np.floor(A)), 0.0  # exact away from the jumps
    if op == "erf":
        r = _erf(A)
        return r, 1.13 * e[0] + 16 * U * (1.0 + m)
    if op == "geluerf":
        r = 0.5 * A * (1.0 + _erf(A / math.sqrt(2.0)))
        return r, 1.13 * e[0] + 16 * U * (1.0 + m)
    if op == "clip":
        return np.clip(A, q["lo"], q["hi"]), e[0]
    if op in ("fmod", "fmod_c"):
        if op == "fmod":
            D = np.abs(x[1]) + 0.5
            eD = e[1] + U * (_mx(x[1]) + 0.5)
        else:
            D, eD = np.full_like(A, abs(q["c"])), 0.0
        D = np.broadcast_to(D, np.broadcast_shapes(A.shape, D.shape))
        Q = np.abs(A) / D
        n = np.floor(Q)
        # jumps where |A| crosses a nonzero multiple of D
        dist = np.where(Q >= 0.5, np.abs(Q - np.round(Q)) * D, np.inf)
        slack = e[0] + (n + 1) * eD
        if np.any(dist <= np.max(slack, initial=0.0) + 8 * U * (1.0 + np.abs(A))) and (e[0] > 0 or eD > 0):
            raise Rejected(f"{op}: a value within its error bound of a jump")
        r = np.fmod(A, D)
        return r, e[0] + float(np.max(n, initial=0.0)) * eD
    if op == "prod":
        r = np.prod(A, axis=q["axes"], keepdims=q["keepdims"])
        n = A.size // max(1, r.size) if A.size else 1
        mm = m + e[0]
        return r, (mm**n - m**n) + 2 * n * U * mm**n
    if op == "log_softmax":
        ax = q["axis"]
        sh = A - np.max(A, axis=ax, keepdims=True)
        r = sh - np.log(np.sum(np.exp(sh), axis=ax, keepdims=True))
        return r, 2 * e[0] + 16 * U * (A.shape[ax] + m + _mx(r))
    if op == "topk":
        srt = np.sort(A, axis=q["axis"])
        if q["largest"]:
            srt = np.flip(srt, axis=q["axis"])
        return np.take(srt, range(q["k"]), axis=q["axis"]), e[0]
    if op == "scatter":
        r = A.copy()
        V, ax, idx = x[1], q["axis"], q["indices"]
        for pos in np.ndindex(idx.shape):  # C order: the last write wins
            r[tuple(idx[pos] % A.shape[ax] if d == ax else p for d, p in enumerate(pos))] = V[pos]
        return r, max(e[0], e[1])
    if op == "scatter_reduce":
        ax, size = q["axis"], q["axis_size"]
        idx = np.broadcast_to(
            q["indices"].reshape([-1 if d == ax else 1 for d in range(A.ndim)])
            if q["indices"].ndim == 1
            else q["indices"],
            A.shape,
        )
        out_shape = tuple(size if d == ax else n for d, n in enumerate(A.shape))
        r = np.zeros(out_shape)
        seen = np.zeros(out_shape, bool)
        for pos in np.ndindex(A.shape):
            o = tuple(idx[pos] if d == ax else p for d, p in enumerate(pos))
            v = A[pos]
            if q["reduction"] == "sum":
                r[o] += v
            elif not seen[o]:
                r[o] = v
            else:
                r[o] = max(r[o], v) if q["reduction"] == "max" else min(r[o], v)
            seen[o] = True
        n = A.shape[ax]
        return r, (n * (e[0] + U * m) if q["reduction"] == "sum" else e[0])
    if op in ("layer_norm", "group_norm"):
        G = q["groups"]
        N, C = A.shape[:2]
        g = A.reshape(N, G, -1)
        mu = g.mean(axis=2, keepdims=True)
        var = ((g - mu) ** 2).mean(axis=2, keepdims=True)
        sd = np.sqrt(var + 1e-5)
        xh = ((g - mu) / sd).reshape(A.shape)
        bshape = (1, C) + (1,) * (A.ndim - 2)
        w, b = q["weight"].astype(np.float64), q["bias"].astype(np.float64)
        r = xh * w.reshape(bshape) + b.reshape(bshape)
        n = g.shape[2]
        de = 2 * (e[0] + 4 * n * U * (1.0 + m))
        re = de / float(sd.min()) * (1.0 + _mx(xh)) * _mx(w) + 8 * U * (_mx(r) + 1.0)
        return r, re
    if op == "conv":
        return _conv_ref(A, q["weight"].astype(np.float64), q["stride"], q["pads"], q["dilation"], q["groups"]), (
            math.prod(q["weight"].shape[1:]) * (_mx(q["weight"]) * e[0] + 2 * U * m * _mx(q["weight"]))
        )
    if op == "conv_transpose":
        w = q["weight"]
        return _conv_transpose_ref(A, w.astype(np.float64), q["stride"], q["pads"], q["dilation"], q["groups"],
                                   q["output_padding"]), (
            A.shape[1] // q["groups"] * math.prod(w.shape[2:]) * (_mx(w) * e[0] + 2 * U * m * _mx(w))
        )  # fmt: skip
    # pools: separable windows (lists of input positions inside the input)
    wins = q["windows"]
    out = np.zeros((*A.shape[:2], *(len(w) for w in wins)))
    for o in itertools.product(*(range(len(w)) for w in wins)):
        sel = A[(slice(None), slice(None), *np.ix_(*(wins[d][o[d]] for d in range(len(wins)))))]
        flat = sel.reshape(*A.shape[:2], -1)
        out[(slice(None), slice(None), *o)] = flat.max(axis=2) if op == "max_pool" else flat.mean(axis=2)
    return out, (e[0] if op == "max_pool" else e[0] + 8 * U * m)


def _conv_ref(x: np.ndarray, w: np.ndarray, stride: tuple[int, ...], pads: tuple[int, ...],
              dil: tuple[int, ...], groups: int) -> np.ndarray:  # fmt: skip
    """Cross-correlation by summing shifted, strided slices of the zero-padded input (float64)."""
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[d], pads[nd + d]) for d in range(nd)])
    M, cg = w.shape[:2]
    kern = w.shape[2:]
    out_sp = tuple((xp.shape[2 + d] - dil[d] * (kern[d] - 1) - 1) // stride[d] + 1 for d in range(nd))
    out = np.zeros((x.shape[0], M, *out_sp))
    mg = M // groups
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        for t in itertools.product(*(range(kk) for kk in kern)):
            sl = tuple(
                slice(t[d] * dil[d], t[d] * dil[d] + (out_sp[d] - 1) * stride[d] + 1, stride[d]) for d in range(nd)
            )
            patch = xs[(slice(None), slice(None), *sl)]  # (N, cg, *out)
            wt = w[(slice(g * mg, (g + 1) * mg), slice(None), *t)]  # (mg, cg)
            out[:, g * mg : (g + 1) * mg] += np.einsum("nc...,mc->nm...", patch, wt)
    return out


def _conv_transpose_ref(x: np.ndarray, w: np.ndarray, stride: tuple[int, ...], pads: tuple[int, ...],
                        dil: tuple[int, ...], groups: int, outp: tuple[int, ...]) -> np.ndarray:  # fmt: skip
    """Transposed convolution by scattering each input position's contribution into the
    full (unpadded) output, then cropping pads (ONNX ConvTranspose), float64."""
    nd = x.ndim - 2
    N, C = x.shape[:2]
    cg, mg = C // groups, w.shape[1]
    kern = w.shape[2:]
    full = tuple((x.shape[2 + d] - 1) * stride[d] + dil[d] * (kern[d] - 1) + 1 + outp[d] for d in range(nd))
    out = np.zeros((N, mg * groups, *full))
    for g in range(groups):
        for pos in itertools.product(*(range(n) for n in x.shape[2:])):
            xv = x[(slice(None), slice(g * cg, (g + 1) * cg), *pos)]  # (N, cg)
            for t in itertools.product(*(range(kk) for kk in kern)):
                o = tuple(pos[d] * stride[d] + t[d] * dil[d] for d in range(nd))
                wt = w[(slice(g * cg, (g + 1) * cg), slice(None), *t)]  # (cg, mg)
                out[(slice(None), slice(g * mg, (g + 1) * mg), *o)] += xv @ wt
    crop = tuple(slice(pads[d], full[d] - pads[nd + d]) for d in range(nd))
    return out[(slice(None), slice(None), *crop)]
