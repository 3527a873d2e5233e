"""popxl.group_norm: one op (PopART's GroupNormalization) with the mean and inverse standard
deviation of each (sample, group) as results, and its gradient op reading them. Forward and
statistics vs NumPy (and torch.nn.functional.group_norm when installed), the gradients vs
finite differences, float16 statistics in float32, the gradient graph's inputs (as PopART's:
the statistics, not a recomputation), errors."""

from __future__ import annotations

import numpy as np
import pytest

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl.ops._utils import emit
from popxl_addons.testing_utils import ops_of_type
from tests.helpers.deferred import refused_by_session
from xl.dialects.popxl import GroupNormOp
from xl.passes.autodiff_info import AutodiffError


def np_group_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, g: int, eps: float):
    n, c = x.shape[:2]
    xg = x.reshape(n, g, -1).astype(np.float64)
    mean = xg.mean(axis=2)
    var = ((xg - mean[..., None]) ** 2).mean(axis=2)
    inv = 1 / np.sqrt(var + eps)
    y = ((xg - mean[..., None]) * inv[..., None]).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return y * w.reshape(bshape) + b.reshape(bshape), mean.reshape(-1), inv.reshape(-1)


def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, g: int, eps: float, dy: np.ndarray | None = None):
    """y, mean, inv_std (and dx, dw, db for `dy`) from xl, in the dtype of `x`."""
    dt = popxl.dtypes.dtype.as_dtype(x.dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        vs = [popxl.variable(a, dt, name=n) for a, n in ((x, "x"), (w, "w"), (b, "b"))]
        if dy is None:
            outs = emit(GroupNormOp, vs, None, None, num_groups=g, epsilon=eps)
            streams = [addons.host_store(t) for t in outs]
        else:
            graph = ir.create_graph(lambda t, a, c: ops.group_norm(t, a, c, g, eps), *[v.spec for v in vs])
            info = ops.call_with_info(graph, *vs)
            grad = popxl.transforms.autodiff(graph)
            grads = ops.call(grad.graph, popxl.constant(dy, dt), inputs_dict=grad.inputs_dict(info))
            streams = [addons.host_store(t) for t in (info.outputs[0], *grads)]
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    return [got[s] for s in streams]


@pytest.mark.parametrize(("shape", "groups"), [((5, 6), 1), ((4, 6, 3), 2), ((2, 8, 3, 2), 4), ((3, 4, 5), 4)])
def test_forward_and_statistics_vs_numpy(shape: tuple[int, ...], groups: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 2.0, size=shape).astype(np.float32)
    w, b = rng.normal(size=shape[1]).astype(np.float32), rng.normal(size=shape[1]).astype(np.float32)
    y, mean, inv = run(x, w, b, groups, 1e-5)
    ry, rmean, rinv = np_group_norm(x, w, b, groups, 1e-5)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean, rmean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv, rinv, rtol=1e-5)
    assert mean.shape == inv.shape == (shape[0] * groups,)
    torch = pytest.importorskip("torch")
    ty = torch.nn.functional.group_norm(torch.tensor(x), groups, torch.tensor(w), torch.tensor(b), 1e-5)
    np.testing.assert_allclose(y, ty.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("shape", "groups"), [((4, 6), 1), ((3, 6, 2), 3)])
def test_gradients_vs_finite_differences(shape: tuple[int, ...], groups: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape)
    w, b = rng.normal(size=shape[1]), rng.normal(size=shape[1])
    dy = rng.normal(size=shape)
    _, dx, dw, db = run(x, w, b, groups, 1e-5, dy)

    def loss(xx: np.ndarray, ww: np.ndarray, bb: np.ndarray) -> float:
        return float(np.sum(np_group_norm(xx, ww, bb, groups, 1e-5)[0] * dy))

    eps = 1e-6
    for got, which in ((dx, 0), (dw, 1), (db, 2)):
        args = [x, w, b]
        fd = np.zeros_like(args[which])
        for i in np.ndindex(fd.shape):
            p = [a.copy() for a in args]
            m = [a.copy() for a in args]
            p[which][i] += eps
            m[which][i] -= eps
            fd[i] = (loss(*p) - loss(*m)) / (2 * eps)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)


def test_float16_statistics_in_float32() -> None:
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(3, 64)) * 100 + 1000).astype(np.float16)  # float16 sums would lose digits
    w, b = np.ones(64, np.float16), np.zeros(64, np.float16)
    y, mean, inv = run(x, w, b, 1, 1e-5)
    ry, rmean, rinv = np_group_norm(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32), 1, 1e-5)
    assert y.dtype == mean.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), ry, atol=3e-3)
    np.testing.assert_allclose(mean.astype(np.float64), rmean, rtol=1e-3)
    np.testing.assert_allclose(inv.astype(np.float64), rinv, rtol=1e-3)


def test_one_op_and_the_gradient_reads_the_statistics() -> None:
    """A layer norm is one PopART GroupNormOp; the gradient graph's inputs are the input,
    the weight, the mean and inverse standard deviation (shape (N,)) and the gradient."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((6, 8), np.float32), name="x")
        w = popxl.variable(np.ones(8, np.float32), name="w")
        b = popxl.variable(np.zeros(8, np.float32), name="b")
        graph = ir.create_graph(lambda t, a, c: ops.layer_norm(t, a, c), x.spec, w.spec, b.spec)
        pb = graph._pb_graph.getOps()
        assert ops_of_type(pb, _ir.op.GroupNormOp) == 1 and len(pb) == 1
        grad = popxl.transforms.autodiff(graph)
        shapes = sorted(t.shape for t in grad.graph.inputs)
        assert shapes == sorted([(6, 8), (6, 8), (8,), (6,), (6,)])
        gops = grad.graph._pb_graph.getOps()
        assert [o.opType() for o in gops] == ["GroupNormalizationGrad"]
        assert type(gops[0]).__name__ == "GroupNormGradOp"


def test_errors() -> None:
    # int operands: built, refused when compiled (as PopXL)
    refused_by_session(
        lambda: emit(
            GroupNormOp,
            [popxl.variable(np.ones((2, 6), np.int32))] + [popxl.variable(np.ones(6, np.int32))] * 2,
            None,
            None,
            num_groups=1,
            epsilon=1e-5,
        ),
        "expects floating-point tensors",
    )
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 6), np.float32), name="x")
        w = popxl.variable(np.ones(6, np.float32), name="w")
        with pytest.raises(ValueError, match="6 channels are not divisible by 4 groups"):
            ops.group_norm(x, w, w, 4)
        with pytest.raises(ValueError, match=r"num_groups 4 does not divide the 6 channels"):
            emit(GroupNormOp, [x, w, w], None, None, num_groups=4, epsilon=1e-5)
        # a gradient reaching the statistics is refused by name
        g = ir.create_graph(
            lambda t, a: ops.sum(emit(GroupNormOp, [t, a, a], None, None, num_groups=1, epsilon=1e-5)[1]),
            x.spec,
            w.spec,
        )
        with pytest.raises(AutodiffError, match="mean / inv_std_dev results of popxl.group_norm"):
            popxl.transforms.autodiff(g)
