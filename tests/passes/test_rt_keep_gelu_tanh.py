"""`rt-keep-gelu-tanh`: a gelu keeps the tanh its gradient needs (`xl.passes.rt_keep_gelu_tanh`).

- The kernels: every rt kernel class that replaces another (`REPLACES`) gives that kernel's
  bits, in both plans, on random values of every float dtype and adversarial ones (zeros,
  ties, +-1000): `xl.gelu_tanh`'s first result is `popxl.gelu`'s, `xl.gelu_grad_tanh` fed
  that `t` gives `popxl.gelu_grad`'s. The `t` itself is checked against float64 NumPy
  in `tests/helpers/kernel_cases.py` (registry-derived kernel tests).
- Programs: an MLP training step (matmul, gelu, autodiff) optimised has the two kernels,
  the values of a float64 NumPy reference written here and the bits of the same plan
  without the pass.
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
from tests.helpers.kernel_cases import adv, gelu64, gelu_grad64
from tests.runtime.test_matmul_kernels import run_kernel
from xl.compiler import compile_module, lower
from xl.compiler.driver import DEFAULT_PIPELINE
from xl.dialects import rt
from xl.dialects.rt_kernels import RT_KERNEL_OPS, GeluGradTanhOp, GeluTanhOp
from xl.dialects.traits import popart_type

FLOATS = [np.float16, np.float32, np.float64]
WIDTHS: dict[type, Literal[16, 32, 64]] = {np.float16: 16, np.float32: 32, np.float64: 64}
REPLACING = [c for c in RT_KERNEL_OPS if getattr(c, "REPLACES", None) is not None]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _run(name: str, ins: list[np.ndarray], n_out: int, optimize: bool) -> list[np.ndarray]:
    outs = [np.full(ins[0].shape, np.nan, ins[0].dtype) for _ in range(n_out)]
    with np.errstate(all="ignore"):
        run_kernel(name, ins, outs, optimize)
    return outs


def _same_as_replaced(x: np.ndarray, dy: np.ndarray, optimize: bool) -> None:
    """xl.gelu_tanh and xl.gelu_grad_tanh give popxl.gelu's and popxl.gelu_grad's bits."""
    y, t = _run(GeluTanhOp.name, [x], 2, optimize)
    (want_y,) = _run(GeluTanhOp.REPLACES.name, [x], 1, optimize)
    np.testing.assert_array_equal(_bits(y), _bits(want_y))
    (dx,) = _run(GeluGradTanhOp.name, [dy, x, t], 1, optimize)
    (want_dx,) = _run(GeluGradTanhOp.REPLACES.name, [dy, x], 1, optimize)
    np.testing.assert_array_equal(_bits(dx), _bits(want_dx))


def test_every_replacing_kernel_is_checked() -> None:
    """A kernel class replacing another must be covered here (extend `_same_as_replaced`)."""
    assert set(REPLACING) == {GeluTanhOp, GeluGradTanhOp}


@pytest.mark.parametrize("cls", REPLACING, ids=lambda c: c.name)
def test_profiles_name_the_replaced_op(cls: type) -> None:
    """A profile groups a replacing kernel under the PopART type of the op it replaces."""
    assert popart_type(cls) == popart_type(cls.REPLACES) != ""


@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_adversarial_values(dtype: type, optimize: bool) -> None:
    rng = np.random.default_rng(0)
    _same_as_replaced(adv(rng, (7, 5), dtype, big=1e3), adv(rng, (7, 5), dtype), optimize)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from(FLOATS),
    shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
    optimize=st.booleans(),
)
def test_random_values(data: st.DataObject, dtype: type, shape: tuple[int, ...], optimize: bool) -> None:
    floats = st.floats(-20, 20, width=WIDTHS[dtype])
    x = data.draw(hnp.arrays(dtype, shape, elements=floats))
    dy = data.draw(hnp.arrays(dtype, shape, elements=floats))
    _same_as_replaced(x, dy, optimize)


# ------------------------------------------------------------------------------------
# Programs
# ------------------------------------------------------------------------------------


def _mlp(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> popxl.Ir:
    """loss = sum(gelu(x @ w1) @ w2); stores the loss and both weight gradients."""
    ir = popxl.Ir()
    with ir.main_graph:
        xt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "x"))
        a, b = popxl.variable(w1, name="w1"), popxl.variable(w2, name="w2")
        g = ir.create_graph(lambda v, p, q: ops.sum(ops.gelu(v @ p) @ q), xt, a, b)
        dg = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, xt, a, b)
        _, dw1, dw2 = ops.call(dg.graph, popxl.constant(np.float32(1.0)), inputs_dict=dg.inputs_dict(info))
        for name, t in (("loss", info.outputs[0]), ("dw1", dw1), ("dw2", dw2)):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    return ir


def _kernels(ir: popxl.Ir) -> list[str]:
    low = lower(ir._module, DEFAULT_PIPELINE + ",rt-optimize")
    return [op.kernel.data for op in low.walk() if isinstance(op, rt.KernelOp)]


def test_training_step_keeps_the_tanh(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    w2 = rng.standard_normal((8, 3)).astype(np.float32)
    ir = _mlp(x, w1, w2)
    names = _kernels(ir)
    assert names.count("xl.gelu_tanh") == 1 and names.count("xl.gelu_grad_tanh") == 1
    assert "popxl.gelu" not in names and "popxl.gelu_grad" not in names
    got = compile_module(ir._module).run({"x": x})

    # independent: float64 NumPy
    h = x.astype(np.float64) @ w1
    dh = np.ones((6, 3)) @ w2.T.astype(np.float64) * gelu_grad64(h)
    np.testing.assert_allclose(got["loss"], (gelu64(h) @ w2).sum(), rtol=1e-5)
    np.testing.assert_allclose(got["dw2"], gelu64(h).T @ np.ones((6, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["dw1"], x.T.astype(np.float64) @ dh, rtol=1e-5, atol=1e-5)

    # the same plan without the pass: the same bits
    skip: Callable[[rt.ProgramOp], int] = lambda p: 0  # noqa: E731
    monkeypatch.setattr(rt_optimize, "keep_gelu_tanh", skip)
    assert "xl.gelu_tanh" not in _kernels(ir)
    want = compile_module(ir._module).run({"x": x})
    for k in ("loss", "dw1", "dw2"):
        np.testing.assert_array_equal(_bits(np.asarray(got[k])), _bits(np.asarray(want[k])), err_msg=k)
