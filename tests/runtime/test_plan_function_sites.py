"""The generated plan's `rt.call` sites (`xl.runtime.functions`): a function's body is
generated once per binding signature, other sites with that signature derive their
parameters (argument arrays, views of them, bound BLAS calls) from a recorded recipe.

Checked against NumPy computed here, against the straightforward plan (every call
expanded) and against the generated plan with every site generating its body
(`SHARE_SITES = False`), bit for bit; the derivations on arrays with offsets into one
allocation; errors at a site that reuses a body name the failing op; profiling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest
from xdsl.parser import Parser

import xl.runtime.functions as functions
from xl.dialects import rt
from xl.runtime.blas import gemm_acc
from xl.runtime.executable import Executable, compile_program
from xl.runtime.profile import Profile
from xl.tools.context import xl_context

M44 = "memref<4x4xf32>"


def _program(text: str) -> rt.ProgramOp:
    module = Parser(xl_context(), text).parse_module()
    return next(op for op in module.ops if isinstance(op, rt.ProgramOp))


def _dense(a: np.ndarray) -> str:
    return "dense<[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in a) + "]>"


# f(x, w, g) -> y:  y = gelu(x @ w.T) (w.T a view of the argument), then w -= 0.5 x.T @ g
# (a BLAS call bound to w, x, g). Sites: three with independent buffers (one signature),
# x passed as x and g (aliasing: another), x's transpose as x (other strides: another),
# then again the first signature.
WEIGHTS = [np.round(np.random.default_rng(k).normal(0, 0.5, (4, 4)) * 8) / 8 for k in range(6)]
G = np.round(np.random.default_rng(9).normal(0, 0.5, (4, 4)) * 8) / 8
SITES = [("x", 0, "g"), ("y0", 1, "g"), ("y1", 2, "g"), ("x", 3, "x"), ("xt", 4, "g"), ("y2", 5, "g")]


def _text() -> str:
    t = M44
    lines = [
        "rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {",
        f"  rt.func @f(%x: {t}, %w: {t}, %g: {t}) -> (%y: {t}) {{",
        f"    %wt = rt.alloc : {t}",
        f'    rt.kernel "popxl.transpose"(%w) -> (%wt) {{perm = array<i64: 1, 0>, rt.view}} : ({t}) -> {t}',
        f'    rt.kernel "popxl.matmul"(%x, %wt) -> (%y) : ({t}, {t}) -> {t}',
        f'    rt.kernel "popxl.gelu"(%y) -> (%y) : ({t}) -> {t}',
        '    rt.kernel "xl.gemm_acc"(%x, %g, %w) -> (%w) {alpha = -5.000000e-01 : f64, beta = 1.000000e+00 : f64, '
        f"trans_a = true, trans_b = false}} : ({t}, {t}, {t}) -> {t}",
        "  }",
        f"  %x = rt.alloc : {t}",
        f'  rt.h2d "x", %x : {t}',
        f"  %xt = rt.alloc : {t}",
        f'  rt.kernel "popxl.transpose"(%x) -> (%xt) {{perm = array<i64: 1, 0>, rt.view}} : ({t}) -> {t}',
        f'  %g = rt.state "g" = {_dense(G)} : tensor<4x4xf32> : {t}',
    ]
    for k, w in enumerate(WEIGHTS):
        lines.append(f'  %w{k} = rt.state "w{k}" = {_dense(w)} : tensor<4x4xf32> : {t}')
    for k, (x, w, g) in enumerate(SITES):
        lines.append(f"  %y{k} = rt.alloc : {t}")
        lines.append(f"  rt.call @f(%{x}, %w{w}, %{g}) -> (%y{k}) : ({t}, {t}, {t}) -> ({t})")
        lines.append(f'  rt.d2h "y{k}", %y{k} : {t}')
    lines.append("}")
    return "\n".join(lines)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _reference(x: np.ndarray, steps: int) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray]]:
    ws = [w.astype(np.float64) for w in WEIGHTS]
    g = G.astype(np.float64)
    outs = []
    for _ in range(steps):
        vals = {"x": x.astype(np.float64), "xt": x.astype(np.float64).T, "g": g}
        out = {}
        for k, (xn, wi, gn) in enumerate(SITES):
            a, gg = vals[xn], vals[gn]
            y = _gelu(a @ ws[wi].T)
            ws[wi] = ws[wi] - 0.5 * a.T @ gg
            vals[f"y{k}"] = out[f"y{k}"] = y
        outs.append(out)
    return outs, ws


@pytest.fixture
def call_tables() -> Iterator[None]:
    old = functions.CALL_TABLES
    functions.CALL_TABLES = True
    try:
        yield
    finally:
        functions.CALL_TABLES = old


@pytest.fixture
def regenerate() -> Iterator[None]:
    functions.SHARE_SITES = False
    try:
        yield
    finally:
        functions.SHARE_SITES = True


def _run(exe: Executable, x: np.ndarray, steps: int) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray]]:
    outs = [exe.run({"x": x}) for _ in range(steps)]
    return outs, [exe.get_state(f"w{k}").copy() for k in range(len(WEIGHTS))]


X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)


def test_sites_share_bodies_and_match_numpy() -> None:
    prog = _program(_text())
    exe = compile_program(prog, optimize=True)
    outs, ws = _run(exe, X, 3)
    ref_outs, ref_ws = _reference(X, 3)
    for got, want in zip(outs, ref_outs, strict=True):
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    for got, want in zip(ws, ref_ws, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    src = exe.sources[0]
    calls = re.findall(r"^    (_f\d+_f)\(.*# rt\.call @f", src, re.M)
    assert len(calls) == len(SITES)
    # one body per signature at most (independent buffers, x aliasing g, transposed x);
    # here the code is the same for all three
    assert len(set(calls)) == 1
    # each site passes its own BLAS call (bound to its weight) and its own weight view
    site_lines = re.findall(r"^    _f\d+_f\((.*)\)  # rt\.call @f", src, re.M)
    gemms = [set(re.findall(r"\bgemm\d+\b", line)) for line in site_lines]
    assert all(len(g) == 1 for g in gemms) and len(set.union(*gemms)) == len(SITES)


def test_sites_equal_every_site_generating_its_body(regenerate: None) -> None:
    prog = _program(_text())
    regen = compile_program(prog, optimize=True)
    functions.SHARE_SITES = True
    shared = compile_program(prog, optimize=True)
    plain = compile_program(prog, optimize=False)
    a, b, c = (_run(e, X, 3) for e in (regen, shared, plain))
    for (oa, wa), (ob, wb), (oc, wc) in [(a, b, c)]:
        for x, y, z in zip(oa, ob, oc, strict=True):
            for k in x:
                np.testing.assert_array_equal(x[k], y[k])
                np.testing.assert_array_equal(x[k], z[k])
        for x, y, z in zip(wa, wb, wc, strict=True):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    # the recipes make no more code than generating each body
    assert len(shared.sources[0].splitlines()) <= len(regen.sources[0].splitlines())


def test_signature_and_derivations_on_offset_views() -> None:
    # two allocations; at each site the arguments are views into one of them
    def site(buf: np.ndarray) -> list[np.ndarray]:
        return [buf[1:5, 2:6], buf[3:7, 0:4].T, buf[0]]

    b1, b2 = np.arange(80, dtype=np.float32).reshape(8, 10), np.zeros((8, 10), np.float32)
    other = np.zeros((8, 10), np.float32)
    a1, a2 = site(b1), site(b2)
    names = ["p", "q", "r"]
    assert functions._signature(a1, names) == functions._signature(a2, names)  # noqa: SLF001
    # different offsets between the arguments, aliasing by name, strides: other signatures
    moved = [b2[2:6, 2:6], b2[3:7, 0:4].T, b2[0]]
    assert functions._signature(moved, names) != functions._signature(a1, names)  # noqa: SLF001
    assert functions._signature(a1, ["p", "p", "r"]) != functions._signature(a1, names)  # noqa: SLF001
    assert functions._signature([a1[0].T, *a1[1:]], names) != functions._signature(a1, names)  # noqa: SLF001
    # objects of the first site: an argument, views reaching into arguments 0 and 1, an
    # array outside them, a BLAS call bound to argument views
    v0 = a1[0][1:, ::-2]
    v1 = a1[1][::2, 1:]
    gemm = gemm_acc(a1[0], a1[1], other[:4, :4], 1.0, 0.0)
    ns = {"a": a1[2], "v0": v0, "v1": v1, "o": other, "k": gemm}
    ds = functions._derivations(list(ns), ns, a1)  # noqa: SLF001
    assert ds is not None
    assert [d[0] for d in ds] == ["arg", "view", "view", "same", "bind"]
    got = [functions._rebuild(d, a2) for d in ds]  # noqa: SLF001
    assert got[0] is a2[2] and got[3] is other
    for old, new in ((v0, got[1]), (v1, got[2])):
        assert new.shape == old.shape and new.strides == old.strides and new.dtype == old.dtype
        assert np.shares_memory(new, b2) and not np.shares_memory(new, b1)
    # the views are the same elements of the other allocation
    b2[...] = b1 + 1000
    np.testing.assert_array_equal(got[1], v0 + 1000)
    np.testing.assert_array_equal(got[2], v1 + 1000)
    # the rebound BLAS call writes the other site's product
    got[4]()
    np.testing.assert_allclose(other[:4, :4], a2[0] @ a2[1], rtol=1e-6)
    # an object holding argument memory without a way to bind it again: no recipe
    assert functions._derivations(["h"], {"h": (lambda: a1[0])}, a1) is None  # noqa: SLF001
    assert functions._derivations(["h"], {"h": [np.zeros(3), [a1[1]]]}, a1) is None  # noqa: SLF001


PICK = """
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @pick(%t: memref<4x3xf32>, %i: memref<1xui32>) -> (%r: memref<2x3xf32>) {
    rt.kernel "popxl.dynamic_slice"(%t, %i) -> (%r) {axes = array<i64: 0>, sizes = array<i64: 2>, no_overlap = false} : (memref<4x3xf32>, memref<1xui32>) -> memref<2x3xf32>
  }
  %t = rt.const dense<1.0> : tensor<4x3xf32> : memref<4x3xf32>
  %i = rt.alloc : memref<1xui32>
  rt.h2d "i", %i : memref<1xui32>
  %j = rt.alloc : memref<1xui32>
  rt.h2d "j", %j : memref<1xui32>
  %a = rt.alloc : memref<2x3xf32>
  rt.call @pick(%t, %i) -> (%a) : (memref<4x3xf32>, memref<1xui32>) -> (memref<2x3xf32>)
  %b = rt.alloc : memref<2x3xf32>
  rt.call @pick(%t, %j) -> (%b) : (memref<4x3xf32>, memref<1xui32>) -> (memref<2x3xf32>)
  rt.d2h "b", %b : memref<2x3xf32>
}
"""


def test_error_at_a_site_reusing_the_body_names_the_op() -> None:
    exe = compile_program(_program(PICK), optimize=True)
    src = exe.sources[0]
    assert len(re.findall(r"^def _f\d+_pick\(", src, re.M)) == 1
    ok = np.array([2], np.uint32)
    np.testing.assert_array_equal(exe.run({"i": ok, "j": ok})["b"], np.ones((2, 3), np.float32))
    # the second site fails: its call runs the body generated at the first
    with pytest.raises(
        Exception, match=r"^DynamicSlice \(popxl\.dynamic_slice\) failed: popxl\.dynamic_slice: offset 3"
    ) as info:
        exe.run({"i": ok, "j": np.array([3], np.uint32)})
    assert getattr(info.value, "xl_kernel").name == "popxl.dynamic_slice"  # noqa: B009


def test_profiled_sites_record_each_kernel() -> None:
    exe = compile_program(_program(_text()), optimize=True, profile=True)
    rec = exe.profile
    assert rec is not None
    start = rec.mark()
    exe.run({"x": X})
    prof = Profile(rec, start)
    prof.stop()
    labels = [e.info.name for e in prof.events()]
    # matmul, gelu and the BLAS update at each site (the transposes are views)
    for kind in ("popxl.matmul", "popxl.gelu", "xl.gemm_acc"):
        assert sum(kind in lab for lab in labels) == len(SITES), kind
    # and the results are the unprofiled plan's
    plain = compile_program(_program(_text()), optimize=True)
    plain.run({"x": X})
    a, b = exe.run({"x": X}), plain.run({"x": X})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_profiled_sites_share_the_body_code_and_record_their_own_kernels() -> None:
    """Profiled, the sites still share one function (the timing lines name their kernels
    relative to a per-site base index), and every kernel entry of every site is recorded
    exactly once per step (the program has no loops)."""
    exe = compile_program(_program(_text()), optimize=True, profile=True)
    src = exe.sources[0]
    assert len(re.findall(r"^def _f\d+_", src, re.M)) == 1
    rec = exe.profile
    assert rec is not None
    start = rec.mark()
    exe.run({"x": X})
    events = rec.events[0][start[1][0] :]
    kernels = [k for k, _, _ in events]
    assert len(kernels) == len(set(kernels))  # no entry recorded twice
    # every entry that times something is reached, each site's matmul at its own entry
    matmuls = [k for k in kernels if rec.infos[0][k].name == "popxl.matmul"]
    assert len(matmuls) == len(SITES)


RUN = """
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @pick(%t: memref<4x3xf32>, %i: memref<1xui32>) -> (%r: memref<2x3xf32>) {
    rt.kernel "popxl.dynamic_slice"(%t, %i) -> (%r) {axes = array<i64: 0>, sizes = array<i64: 2>, no_overlap = false} : (memref<4x3xf32>, memref<1xui32>) -> memref<2x3xf32>
  }
  rt.func @twice(%x: memref<2x3xf32>) -> (%y: memref<2x3xf32>) {
    rt.kernel "popxl.add"(%x, %x) -> (%y) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  }
  %t = rt.state "t" = dense<[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]> : tensor<4x3xf32> : memref<4x3xf32>
  %i = rt.alloc : memref<1xui32>
  rt.h2d "i", %i : memref<1xui32>
  %j = rt.alloc : memref<1xui32>
  rt.h2d "j", %j : memref<1xui32>
  %a = rt.alloc : memref<2x3xf32>
  %b = rt.alloc : memref<2x3xf32>
  %c = rt.alloc : memref<2x3xf32>
  %d = rt.alloc : memref<2x3xf32>
  %e = rt.alloc : memref<2x3xf32>
  rt.call @pick(%t, %i) -> (%a) : (memref<4x3xf32>, memref<1xui32>) -> (memref<2x3xf32>)
  rt.call @pick(%t, %j) -> (%b) : (memref<4x3xf32>, memref<1xui32>) -> (memref<2x3xf32>)
  rt.call @pick(%t, %i) -> (%c) : (memref<4x3xf32>, memref<1xui32>) -> (memref<2x3xf32>)
  rt.call @twice(%a) -> (%d) : (memref<2x3xf32>) -> (memref<2x3xf32>)
  rt.call @twice(%d) -> (%e) : (memref<2x3xf32>) -> (memref<2x3xf32>)
  rt.kernel "popxl.add"(%e, %b) -> (%e) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  rt.call @twice(%c) -> (%d) : (memref<2x3xf32>) -> (memref<2x3xf32>)
  rt.d2h "e", %e : memref<2x3xf32>
  rt.d2h "d", %d : memref<2x3xf32>
}
"""


def test_consecutive_calls_become_one_line_over_a_table(call_tables: None) -> None:
    exe = compile_program(_program(RUN), optimize=True)
    src = exe.sources[0]
    # three picks in a row, two doublings in a row: one line each; the last doubling
    # (after another kernel) is a call of its own
    assert len(re.findall(r"^    for _a in t\d+: _f\d+_pick\(\*_a\)  # rt\.call @pick \(3 sites\)$", src, re.M)) == 1
    assert len(re.findall(r"^    for _a in t\d+: _f\d+_twice\(\*_a\)  # rt\.call @twice \(2 sites\)$", src, re.M)) == 1
    assert len(re.findall(r"^    _f\d+_twice\(\w+, \w+\)  # rt\.call @twice$", src, re.M)) == 1
    t = np.arange(12, dtype=np.float32).reshape(4, 3)
    i, j = np.array([2], np.uint32), np.array([1], np.uint32)
    out = exe.run({"i": i, "j": j})
    np.testing.assert_array_equal(out["e"], 4 * t[2:4] + t[1:3])
    np.testing.assert_array_equal(out["d"], 2 * t[2:4])
    plain = compile_program(_program(RUN), optimize=False).run({"i": i, "j": j})
    np.testing.assert_array_equal(out["e"], plain["e"])
    # the second site of the table fails: the op is named
    with pytest.raises(
        Exception, match=r"^DynamicSlice \(popxl\.dynamic_slice\) failed: popxl\.dynamic_slice: offset 7"
    ) as info:
        exe.run({"i": i, "j": np.array([7], np.uint32)})
    assert getattr(info.value, "xl_kernel").name == "popxl.dynamic_slice"  # noqa: B009


LOOP = """
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @inc(%x: memref<3xf32>, %k: memref<3xf32>) -> () {
    rt.kernel "popxl.add"(%x, %k) -> (%x) : (memref<3xf32>, memref<3xf32>) -> memref<3xf32>
  }
  %k = rt.const dense<[1.0, 2.0, 4.0]> : tensor<3xf32> : memref<3xf32>
  %x = rt.alloc : memref<3xf32>
  rt.h2d "x", %x : memref<3xf32>
  rt.call @inc(%x, %k) -> () : (memref<3xf32>, memref<3xf32>) -> ()
  rt.loop 3 {
    rt.call @inc(%x, %k) -> () : (memref<3xf32>, memref<3xf32>) -> ()
    rt.call @inc(%x, %k) -> () : (memref<3xf32>, memref<3xf32>) -> ()
  }
  rt.call @inc(%x, %k) -> () : (memref<3xf32>, memref<3xf32>) -> ()
  rt.d2h "x", %x : memref<3xf32>
}
"""


def test_call_tables_stay_inside_their_block(call_tables: None) -> None:
    # a call before a loop, two in its body, one after: only the body's two share a line
    exe = compile_program(_program(LOOP), optimize=True)
    functions.CALL_TABLES = False
    plain = compile_program(_program(LOOP), optimize=True)
    assert len(re.findall(r"# rt\.call @inc$", plain.sources[0], re.M)) == 4
    body = exe.sources[0].split("def _step():\n", 1)[1].splitlines()
    calls = [line for line in body if "rt.call @inc" in line]
    assert len(calls) == 3
    assert calls[0].startswith("    _f") and calls[2].startswith("    _f")
    assert re.fullmatch(r"        for _a in t\d+: _f\d+_inc\(\*_a\)  # rt\.call @inc \(2 sites\)", calls[1])
    x = np.array([0.0, 1.0, -1.0], np.float32)
    want = x + 8 * np.array([1.0, 2.0, 4.0], np.float32)
    np.testing.assert_array_equal(exe.run({"x": x})["x"], want)


def test_replicas_each_bind_their_sites() -> None:
    # two replicas: each builds its own bodies and recipes over its own buffers
    text = _text().replace("replication_factor = 1", "replication_factor = 2")
    shared = compile_program(_program(text), optimize=True)
    plain = compile_program(_program(text), optimize=False)
    x = np.stack([X, 0.5 * X])
    shared.run({"x": x})
    plain.run({"x": x})
    a, b = shared.run({"x": x}), plain.run({"x": x})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["y5"][0], a["y5"][1])
    ref, _ = _reference(0.5 * X, 2)
    np.testing.assert_allclose(a["y5"][1], ref[1]["y5"], rtol=1e-5, atol=1e-5)
