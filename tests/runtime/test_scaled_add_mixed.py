"""ops.scaled_add_ on a float16 tensor with a float32 update and tensor scale factors (an
fp16 weight updated by an fp32 optimiser term, `scaled_add_(w, updater, b=-lr)` with `lr` a
tensor, as the applications' Adam does): accepted as upstream, values vs NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons

DTYPES = {"f16": popxl.float16, "f32": popxl.float32}


@pytest.mark.parametrize("a_kind", ["number", "f16", "f32"])
@pytest.mark.parametrize("b_kind", ["number", "f16", "f32"])
def test_scaled_add_inplace_fp16_target_fp32_update(a_kind: str, b_kind: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8,)).astype(np.float16)
    y = rng.normal(size=(8,)).astype(np.float32)
    a, b = 0.75, -0.125
    ir = popxl.Ir()
    with ir.main_graph:
        vx = popxl.variable(x, popxl.float16, name="x")
        vy = popxl.variable(y, popxl.float32, name="y")
        fa = a if a_kind == "number" else popxl.constant(a, DTYPES[a_kind], name="a")
        fb = b if b_kind == "number" else popxl.constant(b, DTYPES[b_kind], name="b")
        out = ops.scaled_add_(vx, vy, a=fa, b=fb)
        assert out.dtype == popxl.float16 and out.shape == (8,)
        stream = addons.host_store(out)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[stream]
    want = (a * x.astype(np.float64) + b * y.astype(np.float64)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=2e-3)


def test_scaled_add_inplace_int_target_float_update_is_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        vx = popxl.variable(np.zeros(4, np.int32), popxl.int32, name="x")
        vy = popxl.variable(np.ones(4, np.float32), popxl.float32, name="y")
        with pytest.raises(ValueError, match="dtypes differ"):
            ops.scaled_add_(vx, vy, a=popxl.constant(1.0, popxl.float32, name="a"))
