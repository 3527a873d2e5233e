"""`rt-keep-gelu-factor`: a gelu keeps the factor its gradient needs (`xl.passes.rt_keep_gelu_factor`).

- The kernels, derived from the registry of keeping gelus (`KEEPING_GELUS`): each keeping
  kernel and its gradient give the bits of the kernels they replace (`REPLACES`), in both
  plans, on every float dtype, adversarial values (zeros, ties, +-1000) and random ones
  (hypothesis): `xl.gelu_tanh` / `xl.geluerf_keep`'s first result is `popxl.gelu` /
  `popxl.geluerf`'s, the gradient kernel fed the kept factor gives `popxl.gelu_grad` /
  `popxl.geluerf_grad`'s. The factors themselves are checked against float64 NumPy in
  `tests/helpers/kernel_cases.py` (registry-derived kernel tests).
- Programs: MLP training steps (matmul, gelu or geluerf, autodiff) optimised have the
  kernels, the values of a float64 NumPy reference written here and the bits of the same
  plan without the pass; also outlined, where each gelu and its gradient are in two
  functions and the factor passes from one call to the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popxl
import xl.passes.rt_optimize as rt_optimize
from popxl import ops
from tests.helpers.kernel_cases import adv, gelu64, gelu_grad64, geluerf64, geluerf_grad64
from tests.runtime.test_matmul_kernels import run_kernel
from xl.compiler import compile_module, lower
from xl.compiler.driver import DEFAULT_PIPELINE, OUTLINE_MIN_OPS, OUTLINE_PIPELINE
from xl.dialects import rt
from xl.dialects.rt_kernels import KEEPING_GELUS, RT_KERNEL_OPS, GeluErfKeepOp, GeluTanhOp
from xl.dialects.traits import popart_type

FLOATS = [np.float16, np.float32, np.float64]
WIDTHS: dict[type, Literal[16, 32, 64]] = {np.float16: 16, np.float32: 32, np.float64: 64}
REPLACING = [c for c in RT_KERNEL_OPS if getattr(c, "REPLACES", None) is not None]
Keeper = type[GeluTanhOp] | type[GeluErfKeepOp]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _run(name: str, ins: list[np.ndarray], outs: list[np.dtype], optimize: bool) -> list[np.ndarray]:
    arrays = [np.full(ins[0].shape, np.nan, d) for d in outs]
    with np.errstate(all="ignore"):
        run_kernel(name, ins, arrays, optimize)
    return arrays


def _same_as_replaced(keeper: Keeper, x: np.ndarray, dy: np.ndarray, optimize: bool) -> None:
    """The keeping gelu and its gradient give the bits of the kernels they replace."""
    kept = np.dtype(np.float64) if keeper.KEEPS_FLOAT64 else x.dtype
    y, factor = _run(keeper.name, [x], [x.dtype, kept], optimize)
    (want_y,) = _run(keeper.REPLACES.name, [x], [x.dtype], optimize)
    np.testing.assert_array_equal(_bits(y), _bits(want_y), err_msg=keeper.name)
    (dx,) = _run(keeper.GRADIENT.name, [dy, x, factor], [x.dtype], optimize)
    (want_dx,) = _run(keeper.GRADIENT.REPLACES.name, [dy, x], [x.dtype], optimize)
    np.testing.assert_array_equal(_bits(dx), _bits(want_dx), err_msg=keeper.GRADIENT.name)


def test_every_replacing_kernel_is_a_keeping_gelu_or_its_gradient() -> None:
    """Every kernel class replacing another is covered by the tests below."""
    assert set(REPLACING) == {k for c in KEEPING_GELUS for k in (c, c.GRADIENT)}


@pytest.mark.parametrize("cls", REPLACING, ids=lambda c: c.name)
def test_profiles_name_the_replaced_op(cls: type) -> None:
    """A profile groups a replacing kernel under the PopART type of the op it replaces."""
    assert popart_type(cls) == popart_type(cls.REPLACES) != ""


@pytest.mark.parametrize("keeper", KEEPING_GELUS, ids=lambda c: c.name)
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_adversarial_values(keeper: Keeper, dtype: type, optimize: bool) -> None:
    rng = np.random.default_rng(0)
    _same_as_replaced(keeper, adv(rng, (7, 5), dtype, big=1e3), adv(rng, (7, 5), dtype), optimize)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    keeper=st.sampled_from(KEEPING_GELUS),
    dtype=st.sampled_from(FLOATS),
    shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
    optimize=st.booleans(),
)
def test_random_values(
    data: st.DataObject, keeper: Keeper, dtype: type, shape: tuple[int, ...], optimize: bool
) -> None:
    floats = st.floats(-20, 20, width=WIDTHS[dtype])
    x = data.draw(hnp.arrays(dtype, shape, elements=floats))
    dy = data.draw(hnp.arrays(dtype, shape, elements=floats))
    _same_as_replaced(keeper, x, dy, optimize)


# ------------------------------------------------------------------------------------
# Programs
# ------------------------------------------------------------------------------------


# the gelus of `popxl.ops`, with float64 NumPy references of the gelu and its derivative
GELUS = {
    "gelu": (ops.gelu, gelu64, gelu_grad64, GeluTanhOp),
    "geluerf": (ops.geluerf, geluerf64, geluerf_grad64, GeluErfKeepOp),
}


def _mlp(gelu: Callable[[popxl.Tensor], popxl.Tensor], x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> popxl.Ir:
    """loss = sum(gelu(x @ w1) @ w2); stores the loss and both weight gradients."""
    ir = popxl.Ir()
    with ir.main_graph:
        xt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "x"))
        a, b = popxl.variable(w1, name="w1"), popxl.variable(w2, name="w2")
        g = ir.create_graph(lambda v, p, q: ops.sum(gelu(v @ p) @ q), xt, a, b)
        dg = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, xt, a, b)
        _, dw1, dw2 = ops.call(dg.graph, popxl.constant(np.float32(1.0)), inputs_dict=dg.inputs_dict(info))
        for name, t in (("loss", info.outputs[0]), ("dw1", dw1), ("dw2", dw2)):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    return ir


def _kernels(ir: popxl.Ir) -> list[str]:
    low = lower(ir._module, DEFAULT_PIPELINE + ",rt-optimize")
    return [op.kernel.data for op in low.walk() if isinstance(op, rt.KernelOp)]


@pytest.mark.parametrize("gelu", sorted(GELUS))
def test_training_step_keeps_the_factor(gelu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    op, ref, ref_grad, keeper = GELUS[gelu]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    w2 = rng.standard_normal((8, 3)).astype(np.float32)
    ir = _mlp(op, x, w1, w2)
    names = _kernels(ir)
    assert names.count(keeper.name) == 1 and names.count(keeper.GRADIENT.name) == 1
    assert keeper.REPLACES.name not in names and keeper.GRADIENT.REPLACES.name not in names
    got = compile_module(ir._module).run({"x": x})

    # independent: float64 NumPy
    h = x.astype(np.float64) @ w1
    dh = np.ones((6, 3)) @ w2.T.astype(np.float64) * ref_grad(h)
    np.testing.assert_allclose(got["loss"], (ref(h) @ w2).sum(), rtol=1e-5)
    np.testing.assert_allclose(got["dw2"], ref(h).T @ np.ones((6, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["dw1"], x.T.astype(np.float64) @ dh, rtol=1e-5, atol=1e-5)

    # the same plan without the pass: the same bits
    skip: Callable[[rt.ProgramOp], int] = lambda p: 0  # noqa: E731
    monkeypatch.setattr(rt_optimize, "keep_gelu_factors", skip)
    assert keeper.name not in _kernels(ir)
    want = compile_module(ir._module).run({"x": x})
    for k in ("loss", "dw1", "dw2"):
        np.testing.assert_array_equal(_bits(np.asarray(got[k])), _bits(np.asarray(want[k])), err_msg=k)


# outlining with runs of two ops or more: the repeated layers become functions
OUTLINED = OUTLINE_PIPELINE.replace(f"outline{{min-ops={OUTLINE_MIN_OPS}}}", "outline{min-ops=2}")


def _deep(gelu: Callable[[popxl.Tensor], popxl.Tensor], x: np.ndarray, ws: list[np.ndarray]) -> popxl.Ir:
    """loss = sum(h_L), h_i = gelu(h_{i-1} @ w_i), h_0 = x; stores the loss and every gradient."""
    ir = popxl.Ir()
    with ir.main_graph:
        xt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "x"))
        vs = [popxl.variable(w, name=f"w{i}") for i, w in enumerate(ws)]

        def net(h: popxl.Tensor, *w: popxl.Tensor) -> popxl.Tensor:
            for wi in w:
                h = gelu(h @ wi)
            return ops.sum(h)

        g = ir.create_graph(net, xt, *vs)
        dg = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, xt, *vs)
        grads = ops.call(dg.graph, popxl.constant(np.float32(1.0)), inputs_dict=dg.inputs_dict(info))
        for name, t in [("loss", info.outputs[0]), *((f"dw{i}", d) for i, d in enumerate(grads[1:]))]:
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    return ir


@pytest.mark.parametrize("gelu", sorted(GELUS))
def test_outlined_layers_keep_the_factor_across_functions(gelu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outlined, each layer's gelu and its gradient are in two functions: the gelu's
    function gets a destination for the factor, the gradient's function an input."""
    op, ref, ref_grad, keeper = GELUS[gelu]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    ws = [(rng.standard_normal((6, 6)) * 0.5).astype(np.float32) for _ in range(6)]
    ir = _deep(op, x, ws)
    low = lower(ir._module, OUTLINED + ",rt-optimize")
    funcs = [f for f in low.walk() if isinstance(f, rt.FuncOp)]
    in_funcs = {k.kernel.data for f in funcs for k in f.walk() if isinstance(k, rt.KernelOp)}
    assert {keeper.name, keeper.GRADIENT.name} <= in_funcs
    names = [k.kernel.data for k in low.walk() if isinstance(k, rt.KernelOp)]
    assert keeper.REPLACES.name not in names and keeper.GRADIENT.REPLACES.name not in names
    got = compile_module(ir._module, pipeline=OUTLINED).run({"x": x})

    # independent: float64 NumPy, forward then backward through the layers
    hs = [x.astype(np.float64)]
    for w in ws:
        hs.append(hs[-1] @ w)
        hs.append(ref(hs[-1]))
    np.testing.assert_allclose(got["loss"], hs[-1].sum(), rtol=1e-5)
    d = np.ones_like(hs[-1])
    for i in reversed(range(len(ws))):
        d = d * ref_grad(hs[2 * i + 1])
        np.testing.assert_allclose(got[f"dw{i}"], hs[2 * i].T @ d, rtol=1e-4, atol=1e-5, err_msg=f"dw{i}")
        d = d @ ws[i].T.astype(np.float64)

    # the same plan without the pass: the same bits
    monkeypatch.setattr(rt_optimize, "keep_gelu_factors", lambda p: 0)
    want = compile_module(ir._module, pipeline=OUTLINED).run({"x": x})
    for k in got:
        np.testing.assert_array_equal(_bits(np.asarray(got[k])), _bits(np.asarray(want[k])), err_msg=k)
