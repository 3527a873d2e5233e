"""Random popxl programs, both runtime plans, against NumPy computed independently.

Hypothesis draws programs (tests/helpers/property_programs.py) that chain elementwise ops with
broadcasting and scalar constants, matmuls with batch dims, views (reshape, transpose,
slice, squeeze, expand, concat) in any order, reductions, softmax, in-place ops whose
operands alias their destination (`ops.add_(x, x)`, `scaled_add_(y, y, ...)`, `+=`,
`ops.var_updates.*`), `host_store` in the middle of the program, several `host_load`
streams, and variables updated over several `Session.run` calls. Each program is built
through the popxl Python API and run with

- `popxl.Session` (the optimised plan), reading variables with `get_tensor_data`;
- `compile_module(..., optimize=False)` (the straightforward plan);
- the default compile's outlining pipeline with runs of 2+ ops (`inline`, `hoist-updates`,
  `outline`, functions in the generated plan), forced on these small programs;

and every stored output and every variable after every run is compared with a float64
NumPy evaluation of the same program, within a bound on the float32 rounding error that
the reference propagates through the program.

The programs also use ceil, floor, erf, geluerf, clip, fmod, prod, log_softmax, topk, scatter,
scatter_reduce, layer_norm / group_norm, conv / conv_transpose and max / average pools (on reshaped
and transposed views), and all-reduces over groups of one replica. Further properties here:

- gradients of random chains of those ops in float64 (popxl autodiff) against central
  differences of the NumPy reference;
- random programs of replica collectives (every grouping valid for 2 and 4 replicas, in place
  or not, a fused all-reduce weight update over 1-2 runs) against NumPy per replica;
- R replicas of a random program without collectives equal R one-replica runs with each
  replica's inputs, bit for bit.

Profiles (tests/conftest.py): the default `xl-ci` is derandomised and bounded for CI;
`pytest tests/programs/test_property_programs.py --hypothesis-profile=long` tries thousands of
programs (random seed; add `--hypothesis-seed=N` to repeat a run). A failure prints the
program as popxl source, ready to paste as a reproducer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import currently_in_test_context, example, given, note, reject

import popxl
from tests.helpers.property_programs import (
    Program,
    Recipe,
    Rejected,
    build,
    popxl_source,
    recipes,
    reference,
    resolve,
    run_inputs,
    tolerance,
)
from xl.compiler import compile_module
from xl.compiler.driver import OUTLINE_MIN_OPS, OUTLINE_PIPELINE


def _check(plan: str, what: str, run: int, got: np.ndarray, want: np.ndarray, err: float) -> None:
    assert got.shape == want.shape, f"{plan}: {what} after run {run}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == np.float32, f"{plan}: {what} after run {run}: dtype {got.dtype}"
    tol = tolerance(want, err)
    diff = np.abs(got.astype(np.float64) - want)
    if not np.all(diff <= tol):  # also catches NaN
        raise AssertionError(
            f"{plan}: {what} after run {run} differs from NumPy by up to {np.nanmax(diff):.3g} "
            f"(tolerance {tol:.3g})\n got: {got.tolist()}\nwant: {want.astype(np.float32).tolist()}"
        )


# The default compile's outlining pipeline (xl.compiler.driver.OUTLINE_PIPELINE) with runs
# of 2+ ops, so that the small random programs get outlined too.
OUTLINED = OUTLINE_PIPELINE.replace(f"outline{{min-ops={OUTLINE_MIN_OPS}}}", "outline{min-ops=2}")
assert OUTLINED != OUTLINE_PIPELINE


def check_program(p: Program) -> None:
    """Build `p` with popxl, run it on both plans, compare with the NumPy reference."""
    try:
        want_outs, want_vars, out_errs, var_errs = reference(p)
    except Rejected:
        reject()
    source = popxl_source(p)
    if currently_in_test_context():
        note(f"program:\n{source}")
        note(f"runs: {p.recipe.runs}, inputs: {[[x.tolist() for x in run_inputs(p, r)] for r in range(p.recipe.runs)]}")
    built = build(p, source)

    with popxl.Session(built.ir, "cpu") as session:
        for run in range(p.recipe.runs):
            outs = session.run(dict(zip(built.h2d, run_inputs(p, run), strict=True)))
            for n, stream in enumerate(built.d2h):
                _check("Session", f"o{n}", run, outs[stream], want_outs[run][n], out_errs[run][n])
            for n, v in enumerate(built.variables):
                got = session.get_tensor_data(v)
                _check("Session", f"variable w{n}", run, got, want_vars[run][n], var_errs[run][n])

    for plan, exe in (
        ("straightforward plan", compile_module(built.ir._module, optimize=False)),
        ("outlined plan", compile_module(built.ir._module, pipeline=OUTLINED)),
    ):
        for run in range(p.recipe.runs):
            outs = exe.run({f"x{n}": x for n, x in enumerate(run_inputs(p, run))})
            for n in range(len(built.d2h)):
                _check(plan, f"o{n}", run, outs[f"o{n}"], want_outs[run][n], out_errs[run][n])
            for n in range(len(built.variables)):
                got = exe.get_state(f"w{n}")
                _check(plan, f"variable w{n}", run, got, want_vars[run][n], var_errs[run][n])


# The two silent wrong results of issue 9, pinned (the generator finds them on its own too):
# a transposed view reshaped, and scaled_add_ whose destination is also its operand.
@example(Recipe(((2, 3),), (), (("transpose", 0, 0, 0, 1.0), ("reshape", 0, 0, 0, 1.0)), 1, 0))
@example(Recipe(((2,),), ((2, 3),), (("scaled_add_", 0, 0, 6, 0.5),), 2, 0))
@given(recipes())
def test_random_programs_match_numpy(recipe):
    check_program(resolve(recipe))


# --- gradients of random chains of the NN ops against central differences -------------------

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.helpers.property_programs import (  # noqa: E402
    Step,
    _conv_ref,
    _conv_transpose_ref,
    _divisors,
    _nn_reference,
    _pool_windows,
)

GRAD_OPS = ("erf", "geluerf", "clip", "fmod_c", "prod", "log_softmax", "topk", "conv", "conv_transpose", "max_pool", "scatter",
            "average_pool", "scatter_reduce", "layer_norm", "group_norm")  # fmt: skip
# CI: half the profile's programs (100); the long profile: 1500.
_GRAD_EXAMPLES = max(10, settings().max_examples // 2)


@st.composite
def grad_chains(draw):
    shape = (draw(st.integers(1, 2)), draw(st.sampled_from((2, 3, 4))), draw(st.integers(3, 6)))
    n = draw(st.integers(1, 3))
    return (
        shape,
        [(draw(st.sampled_from(GRAD_OPS)), draw(st.integers(0, 2**16))) for _ in range(n)],
        draw(st.integers(0, 2**16)),
    )


def _grad_step(kind: str, k: int, shape: tuple[int, ...]) -> tuple[Step, tuple[int, ...], list[np.ndarray]]:
    """One op of a chain on a rank-3 (N, C, L) value: the step, its result shape and the
    initial values of its extra differentiable inputs (conv weight, norm weight and bias)."""
    r = np.random.default_rng(k)
    N, C, L = shape
    if kind == "clip":
        lo = float(r.uniform(-1.5, 0.0))
        return Step("nn", "clip", (0,), 0, dict(lo=lo, hi=lo + float(r.uniform(0.5, 2.0)))), shape, []
    if kind == "fmod_c":
        return Step("nn", "fmod_c", (0,), 0, dict(c=0.75)), shape, []
    if kind == "prod":
        ax = int(r.integers(0, 3))
        return Step("nn", "prod", (0,), 0, dict(axes=(ax,), keepdims=True)), tuple(
            1 if d == ax else s for d, s in enumerate(shape)), []  # fmt: skip
    if kind == "log_softmax":
        return Step("nn", "log_softmax", (0,), 0, dict(axis=int(r.integers(-3, 3)))), shape, []
    if kind == "topk":
        ax = int(r.integers(0, 3))
        kk = int(r.integers(1, shape[ax] + 1))
        return Step("nn", "topk", (0,), 0, dict(axis=ax, k=kk, largest=bool(r.integers(0, 2)))), tuple(
            kk if d == ax else s for d, s in enumerate(shape)), []  # fmt: skip
    if kind == "scatter":  # repeated indices: the last write wins, the others get no gradient
        ax = int(r.integers(0, 3))
        vshape = tuple(int(r.integers(1, s + 1)) if d == ax else s for d, s in enumerate(shape))
        idx = r.integers(-shape[ax], shape[ax], size=vshape).astype(np.int32)
        return Step("nn", "scatter", (0, 1), 0, dict(axis=ax, indices=idx)), shape, [r.uniform(-1, 1, vshape)]
    if kind == "scatter_reduce":
        ax = int(r.integers(0, 3))
        size = int(r.integers(1, 4))
        idx = r.integers(0, size, size=(shape[ax],)).astype(np.int32)
        return Step("nn", "scatter_reduce", (0,), 0, dict(axis=ax, axis_size=size, indices=idx, reduction="sum")), tuple(
            size if d == ax else s for d, s in enumerate(shape)), []  # fmt: skip
    if kind in ("layer_norm", "group_norm"):
        groups = 1 if kind == "layer_norm" else int(r.choice(_divisors(C)))
        return Step("nn", kind, (0,), 0, dict(groups=groups)), shape, [r.uniform(-1, 1, C), r.uniform(-1, 1, C)]
    if kind == "conv_transpose":
        kern, dil, stride = int(r.integers(1, 4)), int(r.integers(1, 3)), int(r.integers(1, 3))
        pads = (int(r.integers(0, 2)), int(r.integers(0, 2)))
        outp = (int(r.integers(0, max(stride, dil))),)
        groups = int(r.choice(_divisors(C)))
        m = groups * int(r.integers(1, 3))
        out = (L - 1) * stride - sum(pads) + dil * (kern - 1) + 1 + outp[0]
        if out < 1:
            pads = (0, 0)
            out += sum(pads)
        out = (L - 1) * stride - sum(pads) + dil * (kern - 1) + 1 + outp[0]
        q = dict(stride=(stride,), pads=pads, dilation=(dil,), groups=groups, output_padding=outp)
        return Step("nn", "conv_transpose", (0,), 0, q), (N, m, out), [r.uniform(-1, 1, (C, m // groups, kern))]
    if kind in ("conv", "max_pool", "average_pool"):
        while True:
            kern, dil, stride = int(r.integers(1, 4)), int(r.integers(1, 3)), int(r.integers(1, 3))
            pads = (int(r.integers(0, kern // 2 + 1)), int(r.integers(0, kern // 2 + 1)))
            ceil = kind != "conv" and bool(r.integers(0, 2))
            wins = _pool_windows(L, kern, stride, dil, *pads, ceil)
            if wins and all(wins):
                break
        if kind == "conv":
            groups = int(r.choice(_divisors(C)))
            m = groups * int(r.integers(1, 3))
            q = dict(stride=(stride,), pads=pads, dilation=(dil,), groups=groups)
            return Step("nn", "conv", (0,), 0, q), (N, m, len(wins)), [r.uniform(-1, 1, (m, C // groups, kern))]
        q = dict(kernel=(kern,), stride=(stride,), pads=pads, dilation=(dil,), ceil_mode=ceil, windows=[wins])
        return Step("nn", kind, (0,), 0, q), (N, C, len(wins)), []
    return Step("nn", kind, (0,), 0, {}), shape, []  # erf, geluerf


def _grad_apply(s: Step, x: Any, extra: list[Any]) -> Any:
    """The step through the popxl frontend (Tensors) or the NumPy reference (arrays)."""
    q = s.params
    if isinstance(x, np.ndarray):
        if s.op == "conv":
            return _conv_ref(x, extra[0], q["stride"], q["pads"], q["dilation"], q["groups"])
        if s.op == "conv_transpose":
            return _conv_transpose_ref(
                x, extra[0], q["stride"], q["pads"], q["dilation"], q["groups"], q["output_padding"]
            )
        if s.op == "scatter":
            return _nn_reference(s, [x, extra[0]], [0.0, 0.0])[0]
        if s.op in ("layer_norm", "group_norm"):
            return _nn_reference(Step("nn", s.op, (0,), 0, dict(q, weight=extra[0], bias=extra[1])), [x], [0.0])[0]
        return _nn_reference(s, [x], [0.0])[0]
    import popxl.ops as ops

    if s.op == "conv":
        return ops.conv(x, extra[0], stride=q["stride"], padding=q["pads"], dilation=q["dilation"], groups=q["groups"])
    if s.op == "conv_transpose":
        return ops.conv_transpose(x, extra[0], stride=q["stride"], padding=q["pads"], dilation=q["dilation"],
                                  groups=q["groups"], output_padding=q["output_padding"])  # fmt: skip
    if s.op == "layer_norm":
        return ops.layer_norm(x, extra[0], extra[1])
    if s.op == "group_norm":
        return ops.group_norm(x, extra[0], extra[1], q["groups"])
    if s.op in ("max_pool", "average_pool"):
        return getattr(ops, s.op)(x, q["kernel"], stride=q["stride"], padding=q["pads"], dilation=q["dilation"],
                                  ceil_mode=q["ceil_mode"])  # fmt: skip
    if s.op == "scatter":
        return ops.scatter(x, popxl.constant(q["indices"]), extra[0], axis=q["axis"])
    if s.op == "scatter_reduce":
        return ops.scatter_reduce(x, popxl.constant(q["indices"]), "sum", axis=q["axis"], axis_size=q["axis_size"])
    if s.op == "topk":
        return ops.topk(x, q["k"], axis=q["axis"], largest=q["largest"])[0]
    if s.op == "prod":
        return ops.prod(x, axis=q["axes"], keepdims=True)
    if s.op == "log_softmax":
        return ops.log_softmax(x, axis=q["axis"])
    if s.op == "clip":
        return ops.clip(x, q["lo"], q["hi"])
    if s.op == "fmod_c":
        return ops.fmod(x, q["c"])
    return getattr(ops, s.op)(x)


def _grad_kinks(s: Step, x: np.ndarray) -> bool:
    """Whether `x` is within 1e-4 of a point where the step is not differentiable."""
    q = s.params
    if s.op == "clip":
        return bool(np.any(np.minimum(np.abs(x - q["lo"]), np.abs(x - q["hi"])) < 1e-4))
    if s.op == "fmod_c":
        f = x / q["c"]
        return bool(np.any(np.abs(f - np.round(f)) * q["c"] < 1e-4))
    if s.op in ("topk", "max_pool"):  # near-ties decide which element is taken
        ax = q["axis"] if s.op == "topk" else 2
        srt = np.sort(x, axis=ax)
        return bool(np.any(np.diff(srt, axis=ax) < 1e-4))
    return False


def _fwd_bwd64(fn: Any, inputs: list[np.ndarray], seed: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """`fn(*inputs)` in float64 in a called subgraph, and the gradients of sum(fn * dy)
    (popxl.transforms.autodiff of the subgraph) for every input."""
    from popxl import ops, transforms

    ir = popxl.Ir()
    with ir.main_graph:
        vs = [popxl.variable(a, dtype=popxl.float64, name=f"in{i}") for i, a in enumerate(inputs)]
        graph = ir.create_graph(fn, *[v.spec for v in vs])
        info = ops.call_with_info(graph, *vs)
        (y,) = info.outputs
        dy = np.random.default_rng(seed).standard_normal(y.shape)
        grad_info = transforms.autodiff(graph)
        grads = ops.call(grad_info.graph, popxl.constant(dy, dtype=popxl.float64),
                         inputs_dict=grad_info.inputs_dict(info))  # fmt: skip
        streams = []
        for t in (y, *grads):
            streams.append(popxl.d2h_stream(t.shape, t.dtype))
            ops.host_store(streams[-1], t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return out[streams[0]], [out[s] for s in streams[1:]], dy


@settings(max_examples=_GRAD_EXAMPLES)
@example(((2, 2, 4), [("conv_transpose", 5)], 5))  # bugs.md P4: output_padding 1 >= stride 1
@example(((1, 2, 3), [("scatter", 1)], 0))  # bugs.md P5: repeated scatter indices
@given(grad_chains())
def test_random_nn_chains_gradients_match_finite_differences(chain):
    shape, ops_, seed = chain
    rng = np.random.default_rng(seed)
    steps, extras, sh = [], [], shape
    for kind, k in ops_:
        s, sh, ex = _grad_step(kind, k, sh)
        if np.prod(sh) > 200:
            reject()
        steps.append((s, len(extras), len(ex)))
        extras += ex
    x0 = rng.uniform(-1.5, 1.5, shape)
    inputs = [x0, *extras]

    def ref(xs: list[np.ndarray]) -> np.ndarray:
        v = xs[0]
        for s, at, n in steps:
            if _grad_kinks(s, v):
                raise Rejected(s.op)
            v = _grad_apply(s, v, xs[1 + at : 1 + at + n])
        return v

    try:
        want = ref(inputs)
    except Rejected:
        reject()
    if not np.all(np.isfinite(want)) or np.max(np.abs(want)) > 1e3:
        reject()
    note(f"chain: {[(s.op, s.params) for s, _, _ in steps]}; input shape {shape}, seed {seed}")

    def fn(x, *ws):
        v = x
        for s, at, n in steps:
            v = _grad_apply(s, v, list(ws[at : at + n]))
        return v

    y, grads, dy = _fwd_bwd64(fn, inputs, seed)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, want, rtol=1e-9, atol=1e-9, err_msg="forward")
    eps = 1e-6
    for i, (g, a) in enumerate(zip(grads, inputs, strict=True)):
        num = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            xp = [b.copy() for b in inputs]
            xm = [b.copy() for b in inputs]
            xp[i][idx] += eps
            xm[i][idx] -= eps
            try:
                num[idx] = (np.sum(ref(xp) * dy) - np.sum(ref(xm) * dy)) / (2 * eps)
            except Rejected:
                reject()
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6, err_msg=f"gradient of input {i} (0: x)")


# --- replicas ------------------------------------------------------------------------------------

from tests.helpers.property_programs import recipes as _recipes  # noqa: E402

C_KINDS = ("all_reduce", "all_reduce_", "all_gather", "all_gather_new_axis", "reduce_scatter", "sharded_slice")
REDUCE_OPS = ("add", "mean", "max", "min", "mul", "square_add")
_COLLECTIVE_EXAMPLES = max(8, settings().max_examples // 2)  # CI 100, long 1500
_REPLICA_EXAMPLES = max(8, settings().max_examples // 10)  # CI 20, long 300


def _groupings(r: int) -> list[tuple[int, int]]:
    """(stride, group_size) with stride * group_size dividing the replica count."""
    return [(s, g) for s in (1, 2, 4) for g in (1, 2, 4) if s * g <= r and r % (s * g) == 0]


def _members(r: int, stride: int, size: int) -> list[int]:
    """Replica r's group, ascending: replicas in blocks of stride*size, every stride-th."""
    block = stride * size
    base = (r // block) * block + r % stride
    return [base + i * stride for i in range(size)]


_NP_RED = {"add": lambda a: a.sum(0), "mean": lambda a: a.mean(0), "max": lambda a: a.max(0),
           "min": lambda a: a.min(0), "mul": lambda a: a.prod(0), "square_add": lambda a: (a * a).sum(0)}  # fmt: skip


@st.composite
def collective_programs(draw):
    R = draw(st.sampled_from((2, 4)))
    shape = draw(st.sampled_from(((4,), (2, 4), (2, 2), (3, 4), (1, 4), (2, 2, 2), (6,))))
    stages = draw(st.lists(st.tuples(st.sampled_from(("none", "tanh", "mul_c", "add_input")),
                                     st.sampled_from((*C_KINDS, "sgd_update", "sgd_update")),
                                     st.sampled_from(REDUCE_OPS), st.integers(0, 15), st.integers(0, 3)),
                           min_size=1, max_size=3))  # fmt: skip
    return R, shape, stages, draw(st.integers(1, 2)), draw(st.integers(0, 2**16))


@settings(max_examples=_COLLECTIVE_EXAMPLES)
# x reduced in place, then added to a later value (x is the reduced value from then on)
@example((2, (4,), [("none", "all_reduce_", "add", 1, 0), ("add_input", "all_reduce", "add", 0, 0)], 1, 0))
@given(collective_programs())
def test_random_collective_programs_match_numpy_per_replica(prog):
    """Stages of an elementwise op and a collective; `sgd_update` is a weight update
    `w += b * all_reduce_(g)` (the pattern rt-fold-all-reduce fuses) of a replicated
    variable, checked per replica after every run."""
    import popxl.ops as ops

    R, shape, stages, runs, seed = prog
    Cl = ops.collectives
    data = [(np.random.default_rng([seed, run]).integers(-8, 9, size=(R, *shape)) / 8).astype(np.float32)
            for run in range(runs)]  # fmt: skip
    ir = popxl.Ir(replication=R)
    # The reference: functions of (per-replica values, this run's data), run in program order.
    ref_steps: list[Any] = []
    stores: list[Any] = []
    variables: list[tuple[Any, np.ndarray]] = []  # (Variable, initial value)
    lines = []

    def store(t: Any) -> None:
        s = popxl.d2h_stream(t.shape, t.dtype, f"o{len(stores)}")
        ops.host_store(s, t)
        stores.append(s)
        ref_steps.append(("store", None))

    with ir.main_graph:
        xs = popxl.h2d_stream(shape, popxl.float32, "x")
        x = ops.host_load(xs)
        t = x
        sharded: tuple[Any, ...] | None = None  # (meta shape, grouping, members) of a sharded t
        for pre, kind, red, gk, axk in stages:
            if pre == "tanh":
                t = ops.tanh(t)
                ref_steps.append(("map", lambda vs, d: [np.tanh(v) for v in vs]))
            elif pre == "mul_c":
                t = t * 0.5
                ref_steps.append(("map", lambda vs, d: [v * 0.5 for v in vs]))
            elif pre == "add_input" and t.shape == x.shape:
                t = t + x  # x's current value: an in-place collective on x changed it
                ref_steps.append(("map", lambda vs, d: [v + xv for v, xv in zip(vs, d, strict=True)]))
            gs = _groupings(R)
            stride, size = gs[gk % len(gs)]
            group = ir.replica_grouping(stride, size)
            members = [_members(r, stride, size) for r in range(R)]
            n = int(np.prod(t.shape))
            if kind in ("reduce_scatter", "sharded_slice") and n % size:
                kind = "all_reduce"
            if kind == "sgd_update":
                red = ("add", "mean")[axk % 2]
            lines.append(f"{pre}; {kind}({red}) group=(stride {stride}, size {size}) on {t.shape}")

            def reduced(vs: list[np.ndarray], red: str = red, members: list[list[int]] = members) -> list[np.ndarray]:
                return [_NP_RED[red](np.stack([vs[m] for m in members[r]])) for r in range(R)]

            if kind == "sgd_update":
                init = (np.arange(n).reshape(t.shape) % 5 / 4 - 0.5).astype(np.float32)
                w = popxl.variable(init, name=f"w{len(variables)}", retrieval_mode="all_replicas")
                g = t * 1.0
                Cl.replicated_all_reduce_(g, red, group)
                ops.scaled_add_(w, g, b=-0.5)
                k = len(variables)
                variables.append((w, init))
                ref_steps.append(("sgd", (k, reduced)))
                continue  # t unchanged
            new_sharded = None  # the sharding a replica_sharded_slice step records for later gathers
            if kind in ("all_reduce", "all_reduce_"):
                if kind == "all_reduce_":
                    store(t)  # the value before the in-place collective
                    Cl.replicated_all_reduce_(t, red, group)
                    if t is x:
                        ref_steps.append(("x", reduced))
                else:
                    t = Cl.replicated_all_reduce(t, red, group)
                ref_steps.append(("map", lambda vs, d, f=reduced: f(vs)))
            elif kind == "all_gather" and sharded is not None and getattr(t, "meta_shape", None) and axk % 2 == 0:
                # a replica-sharded tensor gathered back over its own grouping: the meta shape
                meta, group, members = sharded
                t = Cl.replicated_all_gather(t, 0, group)
                lines[-1] += f" (gathered to its meta shape {meta} over its sharding group)"
                ref_steps.append(("map", lambda vs, d, mb=members, meta=meta: [
                    np.concatenate([vs[m] for m in mb[r]]).reshape(meta) for r in range(R)]))  # fmt: skip
            elif kind == "all_gather":
                ax = axk % len(t.shape)
                t = Cl.replicated_all_gather(t, ax, group, "concat")
                ref_steps.append(("map", lambda vs, d, ax=ax, mb=members: [
                    np.concatenate([vs[m] for m in mb[r]], axis=ax) for r in range(R)]))  # fmt: skip
            elif kind == "all_gather_new_axis":
                t = Cl.replicated_all_gather(t, 0, group, "new_axis")
                ref_steps.append(
                    ("map", lambda vs, d, mb=members: [np.stack([vs[m] for m in mb[r]]) for r in range(R)])
                )
            elif kind == "reduce_scatter":
                t = Cl.replicated_reduce_scatter(t, red, group)
                ref_steps.append(("map", lambda vs, d, f=reduced, mb=members, size=size: [
                    np.split(v.reshape(-1), size)[mb[r].index(r)] for r, v in enumerate(f(vs))]))  # fmt: skip
            else:
                meta = t.shape
                t = Cl.replica_sharded_slice(t, group)
                ref_steps.append(("map", lambda vs, d, mb=members, size=size: [
                    np.split(v.reshape(-1), size)[mb[r].index(r)] for r, v in enumerate(vs)]))  # fmt: skip
                if kind == "sharded_slice":
                    new_sharded = (meta, group, members)
            sharded = new_sharded
            store(t)
        if not stores:
            store(t)
    note("\n".join(lines) + f"\nreplicas {R}, input shape {shape}, runs {runs}, seed {seed}")
    wvals = [[init.astype(np.float64) for _ in range(R)] for _, init in variables]
    with popxl.Session(ir, "cpu") as session:
        for run in range(runs):
            out = session.run({xs: data[run]})
            vals = [data[run][r].astype(np.float64) for r in range(R)]
            xvals = list(vals)  # x's value, per replica
            want_outs = []
            for kind, f in ref_steps:
                if kind == "map":
                    vals = f(vals, xvals)
                elif kind == "x":
                    xvals = f(xvals)
                elif kind == "store":
                    want_outs.append(np.stack(vals))
                else:
                    k, reduce_ = f
                    gsum = reduce_(vals)
                    wvals[k] = [wvals[k][r] - 0.5 * gsum[r] for r in range(R)]
            for n, (s, want) in enumerate(zip(stores, want_outs, strict=True)):
                got = out[s]
                assert got.shape == want.shape, (n, got.shape, want.shape)
                tol = 1e-5 * (1.0 + np.max(np.abs(want)))
                np.testing.assert_allclose(got, want, rtol=0, atol=tol, err_msg=f"o{n} in run {run}: {lines}")
            for k, (w, _) in enumerate(variables):
                want = np.stack(wvals[k])
                got = session.get_tensor_data(w)
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * (1.0 + np.max(np.abs(want))),
                                           err_msg=f"w{k} after run {run}: {lines}")  # fmt: skip


@settings(max_examples=_REPLICA_EXAMPLES)
@given(_recipes(max_ops=12), st.sampled_from((2, 4)))
def test_replicas_equal_one_replica_runs(recipe, R):
    """A program without collectives on R replicas gives each replica what the program gives
    alone with that replica's inputs: outputs and variables after each run, bit for bit."""
    p = resolve(recipe)
    try:
        reference(p)
    except Rejected:
        reject()
    source = popxl_source(p)
    note(f"program:\n{source}")
    ins = [
        [[(x + r / 32).astype(np.float32) for x in run_inputs(p, run)] for run in range(recipe.runs)] for r in range(R)
    ]
    rep_src = source.replace("ir = popxl.Ir()", f"ir = popxl.Ir(replication={R})", 1)
    for n in range(len(p.variables)):
        rep_src = rep_src.replace(f"name='w{n}')", f"name='w{n}', retrieval_mode='all_replicas')", 1)
    built = build(p, rep_src)
    got_outs, got_vars = [], []
    with popxl.Session(built.ir, "cpu") as session:
        for run in range(recipe.runs):
            feed = {h: np.stack([ins[r][run][n] for r in range(R)]) for n, h in enumerate(built.h2d)}
            got_outs.append(session.run(feed))
            # copies: the Session's array is updated by later runs (bugs.md P3)
            got_vars.append([session.get_tensor_data(v).copy() for v in built.variables])
    for r in range(R):
        one = build(p, source)
        with popxl.Session(one.ir, "cpu") as session:
            for run in range(recipe.runs):
                outs = session.run(dict(zip(one.h2d, ins[r][run], strict=True)))
                for n, (s1, sR) in enumerate(zip(one.d2h, built.d2h, strict=True)):
                    np.testing.assert_array_equal(
                        got_outs[run][sR][r], outs[s1], err_msg=f"o{n}, replica {r}, run {run}"
                    )
                for n, v in enumerate(one.variables):
                    np.testing.assert_array_equal(
                        got_vars[run][n][r], session.get_tensor_data(v), err_msg=f"w{n}, replica {r}, run {run}"
                    )


def test_conv_transpose_gradient_with_output_padding_of_a_stride_or_more() -> None:
    """Found by the gradient property test (bugs.md P4): output_padding >= stride (allowed
    when below the dilation) used to give a dx of the wrong size (VerifyException in
    conv_weight_grad). Central differences at the IR level, float64."""
    from tests.passes.test_grad_rules import Body, check_grads, rand

    def conv_transpose(pads: tuple[int, ...], stride: tuple[int, ...], dil: tuple[int, ...],
                       opad: tuple[int, ...]) -> Body:  # fmt: skip
        return lambda e, c, x, w: [e("popxl.conv_transpose", x, w, stride=stride, pads=pads, dilation=dil,
                                     groups=2, output_padding=opad)]  # fmt: skip

    for pads, stride, dil, opad in (((1, 0), (1,), (2,), (1,)), ((0, 1), (1,), (2,), (1,)),
                                    ((0, 0, 1, 0), (2, 1), (3, 2), (2, 1))):  # fmt: skip
        nd = len(stride)
        check_grads(
            conv_transpose(pads, stride, dil, opad),
            [rand((2, 2, *(4,) * nd)), rand((2, 1, *(3,) * nd))],
        )


def test_scatter_gradient_with_repeated_indices() -> None:
    """Found by the gradient property test (bugs.md P5): with repeated indices only the
    value written last reaches the result, so only it gets a gradient (the others used to
    get dy at their index too). Central differences at the IR level, float64."""
    from tests.passes.test_grad_rules import Body, check_grads, rand

    idx = np.array([[1, 1, -2], [-2, 1, 1]], np.int32)  # column 1: rows 0 and 1 both write x[1, 1]

    def scatter(axis: int) -> Body:
        return lambda e, c, x, v: [e("popxl.scatter", x, c(idx), v, axis=axis)]

    for axis in (0, 1):
        check_grads(scatter(axis), [rand((2, 3)), rand((2, 3))])
    check_grads(
        lambda e, c, x, v: [e("popxl.scatter", x, c(np.array([[0, 0, 0, 2]], np.int32)), v, axis=1)],
        [rand((1, 4)), rand((1, 4))],
    )
