"""Random structured popxl programs (subgraphs, calls, repeats, conditionals, virtual IPUs)
through every compile path, against NumPy computed independently.

Hypothesis draws programs (tests/helpers/property_structured.py) whose main graph calls subgraphs
from several places, with inputs by reference updated in place inside the callee, loops
(`ops.repeat`, 0-4 iterations, loop-carried values), `ops.conditional` on a host-loaded
boolean, graphs calling graphs, and statements placed on 1-3 virtual IPUs. Each program runs

- in `popxl.Session` (the default compile), concurrently and, on several IPUs, serially too
  (both with one BLAS thread: their results must be equal bit for bit);
- through `compile_module` with `optimize=False` (the straightforward plan), `outline=False`,
  the outlining pipeline forced on small programs (runs of 2+ ops, as
  tests/programs/test_property_programs.py does), `functions=False` (every call expanded), and the
  forced outlining with `functions=False`; on several IPUs the outlined plan also runs serially
  and must equal its concurrent run bit for bit;

and every stored output and every variable after every run is compared with the float64
NumPy reference, within its float32 rounding bound. A failure prints the program as popxl
source. `--hypothesis-profile=long` runs thousands of programs (random seed; add
`--hypothesis-seed=N` to repeat a run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import currently_in_test_context, given, note, reject, settings
from threadpoolctl import threadpool_limits

import popxl
from tests.helpers.property_structured import (
    Program,
    Recipe,
    Rejected,
    Val,
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

# The default compile's outlining pipeline with runs of 2+ ops, so that small programs get
# outlined too (as in tests/programs/test_property_programs.py).
OUTLINED = OUTLINE_PIPELINE.replace(f"outline{{min-ops={OUTLINE_MIN_OPS}}}", "outline{min-ops=2}")
assert OUTLINED != OUTLINE_PIPELINE

PATHS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("straightforward plan (optimize=False)", dict(optimize=False)),
    ("outline=False", dict(outline=False)),
    ("outlined (min-ops=2)", dict(pipeline=OUTLINED)),
    ("functions=False", dict(functions=False)),
    ("outlined (min-ops=2), functions=False", dict(pipeline=OUTLINED, functions=False)),
)

# CI: 3/10 of the profile's examples (60); the long profile: 900 per call.
_EXAMPLES = max(5, settings().max_examples * 3 // 10)

Results = list[tuple[list[np.ndarray], list[np.ndarray]]]  # per run: (stores, variables)


def _compare(plan: str, p: Program, got: Results, want_outs: list[list[Val]], want_vars: list[list[Val]]) -> None:
    for run, (outs, variables) in enumerate(got):
        for what, g, w in [
            *((f"o{n}", g, w) for n, (g, w) in enumerate(zip(outs, want_outs[run], strict=True))),
            *((f"variable w{n}", g, w) for n, (g, w) in enumerate(zip(variables, want_vars[run], strict=True))),
        ]:
            assert g.shape == w.a.shape, f"{plan}: {what} after run {run}: shape {g.shape}, expected {w.a.shape}"
            assert g.dtype == np.float32, f"{plan}: {what} after run {run}: dtype {g.dtype}"
            tol = tolerance(w)
            diff = np.abs(g.astype(np.float64) - w.a)
            if not np.all(diff <= tol):  # also catches NaN
                raise AssertionError(
                    f"{plan}: {what} after run {run} differs from NumPy by up to {np.nanmax(diff):.3g} "
                    f"(tolerance {tol:.3g})\n got: {g.tolist()}\nwant: {w.a.astype(np.float32).tolist()}"
                )


def _same(plan: str, other: str, a: Results, b: Results) -> None:
    for run, ((ao, av), (bo, bv)) in enumerate(zip(a, b, strict=True)):
        for n, (x, y) in enumerate(zip(ao + av, bo + bv, strict=True)):
            what = f"o{n}" if n < len(ao) else f"variable w{n - len(ao)}"
            assert np.array_equal(x, y), f"{plan} != {other}: {what} after run {run}\n{x.tolist()}\n{y.tolist()}"


def run_session(p: Program, source: str, concurrent: bool) -> Results:
    built = build(p, source)
    got: Results = []
    with popxl.Session(built.ir, "cpu", concurrent=concurrent) as session:
        for run in range(p.recipe.runs):
            xs, cond = run_inputs(p, run)
            feed: dict[Any, np.ndarray] = dict(zip(built.h2d, xs, strict=True))
            if cond is not None:
                feed[built.cond] = cond
            outs = session.run(feed)
            got.append(
                ([outs[s].copy() for s in built.d2h], [session.get_tensor_data(v).copy() for v in built.variables])
            )
    return got


def run_compiled(p: Program, module: Any, **kwargs: Any) -> Results:
    exe = compile_module(module, **kwargs)
    got: Results = []
    for run in range(p.recipe.runs):
        xs, cond = run_inputs(p, run)
        feed = {f"x{n}": x for n, x in enumerate(xs)}
        if cond is not None:
            feed["c"] = cond
        outs = exe.run(feed)
        got.append(
            (
                [np.array(outs[f"o{n}"]) for n in range(len(p.stores))],
                [np.array(exe.get_state(f"w{n}")) for n in range(p.recipe.variables)],
            )
        )
    return got


def check_program(p: Program) -> None:
    """Build `p` with popxl, run it through every compile path, compare with NumPy."""
    try:
        want_outs, want_vars = reference(p)
    except Rejected:
        reject()
    source = popxl_source(p)
    if currently_in_test_context():
        note(f"program:\n{source}")
        note(f"runs: {p.recipe.runs}, inputs: {[[x.tolist() for x in run_inputs(p, r)[0]] for r in range(p.recipe.runs)]}"
             f", conditions: {[run_inputs(p, r)[1] for r in range(p.recipe.runs)]}")  # fmt: skip
    multi = p.recipe.ipus > 1
    with threadpool_limits(1, "blas"):
        conc = run_session(p, source, concurrent=True)
        _compare("Session", p, conc, want_outs, want_vars)
        if multi:
            serial = run_session(p, source, concurrent=False)
            _compare("Session(concurrent=False)", p, serial, want_outs, want_vars)
            _same("Session", "Session(concurrent=False)", conc, serial)
        module = build(p, source).ir._module
        for plan, kwargs in PATHS:
            got = run_compiled(p, module, **kwargs)
            _compare(plan, p, got, want_outs, want_vars)
            if multi and kwargs.get("pipeline") == OUTLINED and "functions" not in kwargs:
                serial = run_compiled(p, module, concurrent=False, **kwargs)
                _same(plan, f"{plan}, concurrent=False", got, serial)


@settings(max_examples=_EXAMPLES)
@given(recipes())
def test_random_structured_programs_match_numpy(recipe: Recipe) -> None:
    check_program(resolve(recipe))


# CI: 15 larger programs (6 graphs of up to 10 ops, 24 main statements, 3 runs); long: 225.
_LARGE_EXAMPLES = max(3, settings().max_examples * 3 // 40)


@settings(max_examples=_LARGE_EXAMPLES)
@given(recipes(max_graphs=6, max_body=10, max_main=24))
def test_larger_random_structured_programs_match_numpy(recipe: Recipe) -> None:
    check_program(resolve(recipe))


# --- regressions found by the generator ----------------------------------------------------------


def _aliased_by_ref_program(kind: str) -> tuple[Any, Any, Any, Any]:
    """One tensor passed to a by-reference input the callee updates (`a0 += a1`) and to an
    input not by reference (`a1`, returned): `a1` is a copy made at the call (at the start of
    the loop for repeat), so the output is the value before the update. `kind`: call (twice, so that outlining keeps a function),
    repeat (2 iterations, a1 not carried) or conditional."""
    import popxl.ops as ops

    ir = popxl.Ir()
    spec = popxl.TensorSpec((2, 3), popxl.float32)
    with ir.main_graph:

        def g(a0: popxl.TensorByRef, a1: popxl.Tensor) -> popxl.Tensor:
            ops.add_(a0, a1)
            return a1 * 1.0

        def g_rep(h: popxl.Tensor, a0: popxl.TensorByRef, a1: popxl.Tensor) -> popxl.Tensor:
            ops.add_(a0, a1)
            return h + a1

        xs = popxl.h2d_stream((2, 3), popxl.float32, "x0")
        x = ops.host_load(xs, "x")
        y = x * 1.0
        if kind == "call":
            graph = ir.create_graph(g, spec, spec)
            (r,) = ops.call(graph, x, x)
            (r2,) = ops.call(graph, y, inputs_dict={graph.inputs[1]: y})
            r = r + r2
        elif kind == "repeat":
            graph = ir.create_graph(g_rep, spec, spec, spec)
            (r,) = ops.repeat(graph, 2, y, x, x)
        else:
            then_g = ir.create_graph(g, spec, spec)
            else_g = ir.create_graph(lambda a: a * 2.0, spec)
            c = ops.host_load(popxl.h2d_stream((), popxl.bool, "c"), "c")
            (r,) = ops.conditional(c, then_g, else_g, [x, x], [x])
        out = popxl.d2h_stream((2, 3), popxl.float32, "o0")
        ops.host_store(out, r)
        out_x = popxl.d2h_stream((2, 3), popxl.float32, "o1")
        ops.host_store(out_x, x)
    return ir, xs, out, out_x


def test_input_aliasing_an_updated_by_ref_input_is_copied_at_the_call() -> None:
    """Found by the structured generator: `ops.call(G, x, x)` with G's first input by
    reference and updated (`a0 += a1`) and its second not by reference used to give the
    second input the updated value (inline and lower-to-rt copied an input not by reference
    only when the callee itself updates that input). Every compile path, NumPy values."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    want = {  # (o0, o1): the output, then x after the program
        "call": (2 * x, 2 * x),  # r = x (before x += x), r2 = y = x (before y += y)
        # a1 is x from before the loop in both iterations (upstream copies it into the loop
        # once): iteration 1: x = 2x, h = x + x; iteration 2: x = 3x, h = 2x + x
        "repeat": (3 * x, 3 * x),
        "conditional": (x, 2 * x),
    }
    for kind, (want_r, want_x) in want.items():
        ir, _, _, _ = _aliased_by_ref_program(kind)
        feed = {"x0": x, "c": np.array(True)}
        for plan, kwargs in (("default", {}), *PATHS):
            exe = compile_module(ir._module, **kwargs)
            outs = exe.run(feed if kind == "conditional" else {"x0": x})
            np.testing.assert_array_equal(outs["o0"], want_r, err_msg=f"{kind}, {plan}: the output")
            np.testing.assert_array_equal(outs["o1"], want_x, err_msg=f"{kind}, {plan}: x after the call")


def test_a_value_output_twice_gives_two_tensors() -> None:
    """Found by the structured generator: a graph returning one value twice (`return t, t`)
    gives the caller two tensors; `inline` used to give both results the same value, so that
    updating one in place (`t3 += t3`) changed the other. Every compile path, NumPy values;
    called twice too (outlining keeps a function of it)."""
    import popxl.ops as ops

    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    for calls in (1, 2):
        ir = popxl.Ir()
        spec = popxl.TensorSpec((2, 3), popxl.float32)
        with ir.main_graph:
            graph = ir.create_graph(lambda a: (ops.tanh(a),) * 2, spec)
            xs = popxl.h2d_stream((2, 3), popxl.float32, "x0")
            x_t = ops.host_load(xs, "x")
            stores = []
            for _ in range(calls):
                t2, t3 = ops.call(graph, x_t)
                t3 += t3
                for t in (t2, t3):
                    stores.append(popxl.d2h_stream((2, 3), popxl.float32, f"o{len(stores)}"))
                    ops.host_store(stores[-1], t)
        want = [np.tanh(x.astype(np.float64)), 2 * np.tanh(x.astype(np.float64))] * calls
        for plan, kwargs in (("default", {}), *PATHS):
            outs = compile_module(ir._module, **kwargs).run({"x0": x})
            for n, w in enumerate(want):
                np.testing.assert_allclose(outs[f"o{n}"], w, rtol=1e-6, err_msg=f"{calls} call(s), {plan}: o{n}")
