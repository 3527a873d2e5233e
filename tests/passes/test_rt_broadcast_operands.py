"""`rt-broadcast-operands`: elementwise kernels read a broadcast operand instead of an
expanded copy (`xl.passes.rt_broadcast_operands`).

- The fact the pass relies on, derived from the registry: every kernel of an `Elementwise`
  op class with two or more operands (`tests/helpers/kernel_cases.py`), in both plans,
  gives the same values (bit for bit) when one operand is passed with a leading axis of 1
  as when that operand is materialised to the full shape. A kernel added later is covered
  without editing this test.
- Programs: the expands go from the optimised `rt` program (`rt-optimize`) where every
  reader broadcasts, and the results equal the straightforward plan's; an autodiff
  gradient of a sum (an expand of the output gradient) is checked likewise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.kernel_cases import CASES, KernelCase, kernel_form
from tests.helpers.plan_tolerance import assert_plans_agree
from tests.runtime.test_matmul_kernels import run_kernel
from xl.compiler import compile_module, lower
from xl.compiler.driver import DEFAULT_PIPELINE
from xl.dialects import rt
from xl.dialects.traits import is_elementwise


def _binary_elementwise_cases() -> list[Any]:
    out = []
    for c in CASES:
        if not is_elementwise(c.cls) or c.rt is not None or c.replicas > 1:
            continue
        ins = [a for a in c.inputs(np.random.default_rng(0)) if a is not None]
        if len(ins) >= 2:
            out.append(pytest.param(c, id=c.id))
    return out


@pytest.mark.parametrize("case", _binary_elementwise_cases())
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_elementwise_kernels_read_broadcast_operands(case: KernelCase, optimize: bool) -> None:
    ins = [a for a in case.inputs(np.random.default_rng(1)) if a is not None]
    form = kernel_form(case, ins)
    if any(isinstance(o, int) for o in form.outs):
        pytest.skip("writes an operand in place: the pass never substitutes it")
    shapes = [o[0] for o in form.outs if not isinstance(o, int)]
    tried = 0
    for j, a in enumerate(ins):
        if a.ndim == 0 or a.shape[0] < 2 or any(s != a.shape for s in shapes):
            continue
        small = a[:1].copy()
        results = []
        for x in (small, np.broadcast_to(small, a.shape).copy()):
            xs = list(ins)
            xs[j] = x
            outs = [np.zeros(s, d) for o in form.outs if not isinstance(o, int) for s, d in [o]]
            with np.errstate(all="ignore"):
                run_kernel(form.name, xs, outs, optimize, form.attrs)
            results.append(outs)
        for got, want in zip(*results):
            u = np.dtype(f"u{got.dtype.itemsize}") if got.dtype.kind == "f" else got.dtype
            np.testing.assert_array_equal(got.view(u), want.view(u), err_msg=f"{case.id}, operand {j} broadcast")
        tried += 1
    if not tried:
        pytest.skip("no operand of the result's shape")


def _expands(module: Any, rt_passes: str = ",rt-optimize") -> int:
    """The `popxl.expand` kernels of `module` lowered (and optimised, by default)."""
    low = lower(module, DEFAULT_PIPELINE + rt_passes)
    return sum(1 for op in low.walk() if isinstance(op, rt.KernelOp) and op.kernel.data == "popxl.expand")


def test_program_reads_the_bias_not_a_copy() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    c = rng.standard_normal((4, 1)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "x"))
        bt = ops.host_load(popxl.h2d_stream(b.shape, popxl.float32, "b"))
        ct = ops.host_load(popxl.h2d_stream(c.shape, popxl.float32, "c"))
        eb = ops.expand(bt, (4, 3))
        y = xt * eb + eb - ops.expand(ct, (4, 3))
        ops.host_store(popxl.d2h_stream(y.shape, popxl.float32, "y"), y)
        # a matmul needs the copy
        m = ops.expand(bt, (2, 3)) @ xt.T
        ops.host_store(popxl.d2h_stream(m.shape, popxl.float32, "m"), m)
    assert _expands(ir._module, "") == 3 and _expands(ir._module) == 1
    feeds = {"x": x, "b": b, "c": c}
    got = compile_module(ir._module).run(feeds)
    want = compile_module(ir._module, optimize=False).run(feeds)
    for k in ("y", "m"):
        assert_plans_agree(got[k], want[k])
    np.testing.assert_allclose(got["y"], x * b + b - c, rtol=1e-6)


def test_gradient_of_a_sum() -> None:
    """autodiff of sum(tanh(x) * w) expands the output gradient for both products' gradients;
    with w of x's shape, both readers have a full-shape partner: no copy. With a broadcast
    w, the reader `expand * w` has none and keeps the copy."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    for w0 in (rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)):
        _check_gradient_of_a_sum(x, w0)


def _check_gradient_of_a_sum(x: np.ndarray, w0: np.ndarray) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        xt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "x"))
        w = popxl.variable(w0, name="w")

        g = ir.create_graph(lambda a, v: ops.sum(ops.tanh(a) * v), xt, w)
        dg = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, xt, w)
        loss = info.outputs[0]
        dx, dw = ops.call(dg.graph, popxl.constant(np.float32(1.0)), inputs_dict=dg.inputs_dict(info))
        for name, t in (("loss", loss), ("dx", dx), ("dw", dw)):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    got = compile_module(ir._module).run({"x": x})
    want = compile_module(ir._module, optimize=False).run({"x": x})
    for k in ("loss", "dx", "dw"):
        assert_plans_agree(got[k], want[k])
    t = np.tanh(x.astype(np.float64))
    np.testing.assert_allclose(got["dw"], t if w0.ndim == 2 else t.sum(0), rtol=1e-5)
    np.testing.assert_allclose(got["dx"], (1 - t * t) * w0, rtol=1e-5, atol=1e-6)
    assert _expands(ir._module, "") == 1
    assert _expands(ir._module) == (0 if w0.ndim == 2 else 1)
