"""`popxl.ops.topk`, `median`, `scatter`, `scatter_reduce`, `groupedgather`, `prod`,
`log_softmax`, `histogram`: kernels against NumPy, gradients against central
differences, the frontend (forward and autodiff in a Session) against PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import popxl
import xl.dialects.popxl as P
from popxl import ops
from tests.helpers.deferred import refused_by_session
from tests.helpers.nn_testing import run_fwd, run_fwd_bwd
from tests.passes.test_grad_rules import check_grads, rand
from tests.runtime.test_kernels import run, run1
from xl.runtime.kernels import DataRangeError

RNG = np.random.default_rng(3)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


# ------------------------------------------------------------------------------------
# kernels
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_topk_kernel_sorted_with_lower_index_first_on_ties(largest, dtype) -> None:
    x = np.array([[3, 1, 3, 2, 1], [0, 5, 5, 5, -1]], dtype)
    (v, i), _ = run(P.TopkOp, [x], k=3, axis=1, largest=largest)
    if largest:
        np.testing.assert_array_equal(i, [[0, 2, 3], [1, 2, 3]])
        np.testing.assert_array_equal(v, [[3, 3, 2], [5, 5, 5]])
    else:
        np.testing.assert_array_equal(i, [[1, 4, 3], [4, 0, 1]])
        np.testing.assert_array_equal(v, [[1, 1, 2], [-1, 0, 5]])
    assert i.dtype == np.int32 and v.dtype == dtype


def test_topk_kernel_axis0_against_sort() -> None:
    x = _f32(7, 3)
    (v, i), _ = run(P.TopkOp, [x], k=4, axis=0)
    np.testing.assert_array_equal(v, -np.sort(-x, axis=0)[:4])
    np.testing.assert_array_equal(np.take_along_axis(x, i, 0), v)


def test_scatter_and_take_along_axis_kernels() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([[3, -4, 1]], np.int32)  # -4 is row 0
    vals = np.array([[100, 200, 300]], np.float32)
    y = run1(P.ScatterOp, [x, idx, vals], axis=0)
    ref = x.copy()
    ref[3, 0], ref[0, 1], ref[1, 2] = 100, 200, 300
    np.testing.assert_array_equal(y, ref)
    g = run1(P.TakeAlongAxisOp, [x, idx], axis=0)
    np.testing.assert_array_equal(g, [[x[3, 0], x[0, 1], x[1, 2]]])
    # indices smaller than data off the axis: only that region is touched
    y = run1(P.ScatterOp, [x, np.array([[2], [0]], np.int32), np.array([[-1], [-2]], np.float32)], axis=1)
    ref = x.copy()
    ref[0, 2], ref[1, 0] = -1, -2
    np.testing.assert_array_equal(y, ref)
    with pytest.raises(DataRangeError, match=r"popxl.scatter: index 4 .* out of range \[-4, 4\)"):
        run1(P.ScatterOp, [x, np.array([[4, 0, 0]], np.int32), vals], axis=0)


def _loop_scatter_reduce(data, idx, axis, n, reduction, init=None):
    """Element by element, in order."""
    idx = (
        np.broadcast_to(idx.reshape((1,) * axis + (-1,) + (1,) * (data.ndim - axis - 1)), data.shape)
        if idx.shape != data.shape
        else idx
    )
    shape = list(data.shape)
    shape[axis] = n
    out = np.zeros(shape) if init is None else init.astype(np.float64).copy()
    seen = np.zeros(shape, bool)
    for pos in np.ndindex(data.shape):
        tgt = list(pos)
        tgt[axis] = idx[pos]
        tgt = tuple(tgt)
        v = float(data[pos])
        first = not seen[tgt] and init is None
        if reduction == "sum":
            out[tgt] += v
        elif reduction == "max":
            out[tgt] = v if first else max(out[tgt], v)
        elif reduction == "min":
            out[tgt] = v if first else min(out[tgt], v)
        else:
            out[tgt] = v
        seen[tgt] = True
    return out


@pytest.mark.parametrize("reduction", ["sum", "max", "min", "none"])
@pytest.mark.parametrize("with_init", [False, True])
@pytest.mark.parametrize("broadcast", [False, True])
def test_scatter_reduce_kernel_against_loop(reduction, with_init, broadcast) -> None:
    data = _f32(3, 5, 2)
    idx = np.array([0, 3, 0, 1, 3], np.int32) if broadcast else RNG.integers(0, 4, (3, 5, 2)).astype(np.int32)
    init = _f32(3, 4, 2) if with_init else None
    y = run1(P.ScatterReduceOp, [data, idx] + ([init] if with_init else []), axis=1, axis_size=4, reduction=reduction)
    np.testing.assert_allclose(y, _loop_scatter_reduce(data, idx, 1, 4, reduction, init), rtol=1e-6, atol=1e-6)
    assert y.shape == (3, 4, 2)


def test_scatter_reduce_kernel_index_out_of_range() -> None:
    with pytest.raises(DataRangeError, match=r"popxl.scatter_reduce: index 3 .* out of range \[0, 3\)"):
        run1(P.ScatterReduceOp, [_f32(4), np.array([0, 1, 3, 2], np.int32)], axis=0, axis_size=3, reduction="sum")


def test_scatter_reduce_grad_kernel_ties_share() -> None:
    data = np.array([1.0, 3.0, 3.0, 2.0], np.float32)
    idx = np.array([0, 0, 0, 1], np.int32)
    y = run1(P.ScatterReduceOp, [data, idx], axis=0, axis_size=2, reduction="max")
    dy = np.array([6.0, 5.0], np.float32)
    props = dict(axis=0, axis_size=2, reduction="max")
    dx = run1(P.ScatterReduceGradOp, [dy, data, idx, y], wrt="data", **props)
    np.testing.assert_array_equal(dx, [0, 3, 3, 5])
    init = np.array([3.0, 0.0], np.float32)
    y = run1(P.ScatterReduceOp, [data, idx, init], **props)
    dx = run1(P.ScatterReduceGradOp, [dy, data, idx, y, init], wrt="data", **props)
    di = run1(P.ScatterReduceGradOp, [dy, data, idx, y, init], wrt="initial", **props)
    np.testing.assert_array_equal(dx, [0, 2, 2, 5])
    np.testing.assert_array_equal(di, [2, 0])


def test_reduce_prod_and_grad_kernels_with_zeros() -> None:
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 4.0], [1.0, 5.0, -2.0]], np.float32)
    np.testing.assert_array_equal(run1(P.ReduceProdOp, [x], axis=(1,)), [0, 0, -10])
    dy = np.array([1.0, 1.0, 2.0], np.float32)
    dx = run1(P.ReduceProdGradOp, [x, dy], axis=(1,))
    np.testing.assert_array_equal(dx, [[0, 6, 0], [0, 0, 0], [-20, -4, 10]])
    dx = run1(P.ReduceProdGradOp, [x, np.array(3.0, np.float32)])
    np.testing.assert_array_equal(dx, np.zeros_like(x))  # two zeros: every partial product is 0


def test_log_softmax_kernel_is_stable() -> None:
    x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]], np.float32)
    y = run1(P.LogSoftmaxOp, [x], axis=1)
    x64 = x.astype(np.float64) - x.max(1, keepdims=True)
    np.testing.assert_allclose(y, x64 - np.log(np.exp(x64).sum(1, keepdims=True)), rtol=1e-6, atol=1e-6)


def test_histogram_kernel_as_popart_documents() -> None:
    x = np.array([-10, -0.1, 0.01, 0.09, 1.1, 4, 6.9, 7, 8.0, 900], np.float32)
    h = run1(P.HistogramOp, [x], levels=(0.1, 3.1, 7.0))
    np.testing.assert_array_equal(h, [4, 1, 2, 3])
    assert h.dtype == np.uint32
    h = run1(P.HistogramOp, [x.reshape(2, 5)], levels=(0.1, 3.1, 7.0), absolute_of_input=True)
    np.testing.assert_array_equal(h, [2, 2, 2, 4])


# ------------------------------------------------------------------------------------
# gradients against central differences
# ------------------------------------------------------------------------------------


def test_topk_gradient() -> None:
    x = np.linspace(-1, 1, 12).reshape(3, 4)[:, ::-1].copy()
    RNG.shuffle(x.reshape(-1))
    check_grads(lambda e, c, x: [e("popxl.topk", x, k=2, axis=1)[0]], [x])
    check_grads(lambda e, c, x: [e("popxl.topk", x, k=3, axis=0, largest=False)[0]], [x])


def test_scatter_gradients() -> None:
    idx = np.array([[2, 0, 1], [0, 2, 2]], np.int32)
    check_grads(lambda e, c, x, v: [e("popxl.scatter", x, c(idx), v, axis=0)], [rand((3, 3)), rand((2, 3))])


@pytest.mark.parametrize("reduction", ["sum", "max", "min", "none"])
def test_scatter_reduce_gradients(reduction) -> None:
    idx = np.array([2, 0, 2, 1, 2], np.int32)
    x = np.linspace(-2, 2, 10).reshape(5, 2)
    RNG.shuffle(x.reshape(-1))  # distinct values: no ties for max/min
    init = np.linspace(-3, 3, 6).reshape(3, 2)
    check_grads(lambda e, c, d: [e("popxl.scatter_reduce", d, c(idx), axis=0, axis_size=3, reduction=reduction)], [x])
    check_grads(
        lambda e, c, d, i: [e("popxl.scatter_reduce", d, c(idx), i, axis=0, axis_size=3, reduction=reduction)],
        [x, init],
    )


def test_prod_and_log_softmax_gradients() -> None:
    x = rand((3, 4))
    x[0, 1] = 0.0
    x[2, 0] = x[2, 3] = 0.0
    check_grads(lambda e, c, x: [e("popxl.reduce_prod", x, axis=(1,))], [x])
    check_grads(lambda e, c, x: [e("popxl.reduce_prod", x, axis=(0, 1), keepdims=True)], [rand((2, 3))])
    check_grads(lambda e, c, x: [e("popxl.log_softmax", x, axis=0)], [rand((3, 4))])


# ------------------------------------------------------------------------------------
# frontend against PyTorch / NumPy
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("axis", "largest"), [(1, True), (0, False), (-1, False)])
def test_ops_topk_matches_torch(torch, axis, largest) -> None:
    x = _f32(4, 6)
    k = 3
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.topk(a, k, axis=axis, largest=largest)[0], [x])
    idx = run_fwd(lambda a: ops.topk(a, k, axis=axis, largest=largest)[1], [x])
    xt = torch.tensor(x, requires_grad=True)
    vt, it = torch.topk(xt, k, dim=axis, largest=largest, sorted=True)
    vt.backward(torch.tensor(dy))
    np.testing.assert_array_equal(y, vt.detach().numpy())
    np.testing.assert_array_equal(idx, it.numpy())
    np.testing.assert_array_equal(dx, xt.grad.numpy())


def test_ops_log_softmax_and_prod_match_torch(torch) -> None:
    x = _f32(3, 5)
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.log_softmax(a, axis=1), [x])
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.log_softmax(xt, 1)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    x[1, 2] = 0.0
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.prod(a, axis=1), [x])
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.prod(xt, 1)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_fwd(lambda a: ops.prod(a), [x]), np.prod(x), rtol=1e-6)


@pytest.mark.parametrize(("axis", "keepdims"), [(1, False), (0, True), (None, False), ((0, 2), True)])
def test_ops_median_is_the_lower_middle(axis, keepdims) -> None:
    x = _f32(4, 3, 2)
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.median(a, axis=axis, keepdims=keepdims), [x])
    axes = tuple(range(3)) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    keep = [i for i in range(3) if i not in axes]
    moved = np.transpose(x, keep + list(axes)).reshape((*[x.shape[i] for i in keep], -1))
    n = moved.shape[-1]
    ref = np.sort(moved, -1)[..., (n - 1) // 2]
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keepdims else tuple(x.shape[i] for i in keep)
    np.testing.assert_array_equal(y, ref.reshape(shape))
    # the gradient goes to the median element only
    assert np.count_nonzero(dx) == np.count_nonzero(dy)
    np.testing.assert_allclose(np.sort(dx[dx != 0]), np.sort(dy.reshape(-1)), rtol=1e-6)


def test_ops_median_matches_torch(torch) -> None:
    x = _f32(5, 4)
    y = run_fwd(lambda a: ops.median(a, axis=1), [x])
    np.testing.assert_array_equal(y, torch.median(torch.tensor(x), 1).values.numpy())


@pytest.mark.parametrize(("reduction", "treduce"), [("sum", "sum"), ("max", "amax"), ("min", "amin")])
def test_ops_scatter_reduce_matches_torch(torch, reduction, treduce) -> None:
    x = _f32(3, 6)
    idx = np.array([[0, 1, 2, 3, 0, 1], [2, 2, 1, 0, 3, 3], [1, 1, 1, 1, 1, 1]], np.int32)
    init = _f32(3, 4)
    y, (dx, di), dy = run_fwd_bwd(
        lambda a, b: ops.scatter_reduce(a, idx, reduction, initial_values=b, axis=1), [x, init]
    )
    xt, it = torch.tensor(x, requires_grad=True), torch.tensor(init, requires_grad=True)
    yt = it.scatter_reduce(1, torch.tensor(idx, dtype=torch.int64), xt, treduce, include_self=True)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(di, it.grad.numpy(), rtol=1e-6, atol=1e-6)
    # without initial values: torch's include_self=False on zeros (empty slots stay 0)
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.scatter_reduce(a, idx, reduction, axis=1, axis_size=5), [x])
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.zeros(3, 5).scatter_reduce(1, torch.tensor(idx, dtype=torch.int64), xt, treduce, include_self=False)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_ops_scatter_reduce_broadcast_index() -> None:
    x = _f32(5, 3)
    y = run_fwd(lambda a: ops.scatter_reduce(a, np.array([1, 0, 1, 2, 1], np.int32), "sum", axis_size=3), [x])
    np.testing.assert_allclose(y, np.stack([x[1], x[0] + x[2] + x[4], x[3]]), rtol=1e-6)


def test_ops_scatter_matches_torch(torch) -> None:
    x, vals = _f32(3, 6), _f32(2, 6)
    idx = np.array([[0, 1, 2, 0, 1, 2], [2, 0, 1, 1, 2, 0]], np.int32)
    y, (dx, dv), dy = run_fwd_bwd(lambda a, b: ops.scatter(a, idx, b, axis=0), [x, vals])
    xt, vt = torch.tensor(x, requires_grad=True), torch.tensor(vals, requires_grad=True)
    yt = xt.scatter(0, torch.tensor(idx, dtype=torch.int64), vt)
    yt.backward(torch.tensor(dy))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_array_equal(dx, xt.grad.numpy())
    np.testing.assert_array_equal(dv, vt.grad.numpy())


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_ops_groupedgather_per_group(axis) -> None:
    t = _f32(2, 5, 4)
    a = axis % 2
    n = t.shape[1 + a]
    gi = np.array([[1, n - 1, -1], [0, 0, 2]], np.int32)
    y, (dt,), dy = run_fwd_bwd(lambda x: ops.groupedgather(x, gi, axis=axis, group_size=2), [t])
    ref = np.stack([np.take(t[g], gi[g], axis=a) for g in range(2)])
    np.testing.assert_array_equal(y, ref)
    dref = np.zeros_like(t)
    for g in range(2):
        moved = np.moveaxis(dref[g], a, 0)
        np.add.at(moved, gi[g] % n, np.moveaxis(dy[g], a, 0))
    np.testing.assert_allclose(dt, dref, rtol=1e-6)


def test_ops_groupedgather_zero_oor_and_errors() -> None:
    t = _f32(2, 3)
    y = run_fwd(lambda x: ops.groupedgather(x, np.array([[0, 3], [-4, 2]], np.int32), group_size=2, zero_OOR=True), [t])
    np.testing.assert_array_equal(y, [[t[0, 0], 0], [0, t[1, 2]]])
    import popxl

    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(t)
        with pytest.raises(
            ValueError,
            match=r"ops.groupedgather: t \(2, 3\) and indices \(3, 1\) must both have the leading group dim of size 2",
        ):
            ops.groupedgather(v, np.zeros((3, 1), np.int32), group_size=2)


def test_ops_histogram() -> None:
    x = np.array([[-2.0, -0.5, 0.0], [0.5, 1.0, 3.0]], np.float32)
    h = run_fwd(lambda a: ops.histogram(a, [-1.0, 0.0, 1.0], absolute_of_input=False), [x])
    np.testing.assert_array_equal(h, [1, 1, 2, 2])


def test_select_errors_name_the_op() -> None:
    # an int operand: built, refused when compiled (as PopXL)
    refused_by_session(
        lambda: ops.log_softmax(popxl.variable(np.zeros(3, np.int32)), 0),
        r"popxl.log_softmax: input must be a floating point tensor",
    )
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((3, 4), np.float32))
        with pytest.raises(ValueError, match=r"popxl.topk: k = 5 must be in \[1, 4\]"):
            ops.topk(x, 5, axis=1)
        with pytest.raises(
            ValueError, match=r"ops.scatter_reduce: one of initial_values and axis_size must be specified"
        ):
            ops.scatter_reduce(x, np.zeros(3, np.int32), "sum")
        with pytest.raises(
            ValueError, match=r"ops.scatter_reduce: the reduction must be one of \['sum', 'max', 'min', 'none'\]"
        ):
            ops.scatter_reduce(x, np.zeros(3, np.int32), "mean", axis_size=2)
        with pytest.raises(
            ValueError,
            match=r"popxl.scatter_reduce: indices \(2,\) must have the shape of data \(3, 4\) or be 1-D of size 3",
        ):
            ops.scatter_reduce(x, np.zeros(2, np.int32), "sum", axis_size=2)
        with pytest.raises(ValueError, match=r"enable_index_broadcast=False"):
            ops.scatter_reduce(x, np.zeros(3, np.int32), "sum", axis_size=2, enable_index_broadcast=False)
        with pytest.raises(ValueError, match=r"popxl.scatter: indices .* and values .* must have one shape"):
            ops.scatter(x, np.zeros((2, 4), np.int32), np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match=r"popxl.histogram: levels \(1.0, 0.0\) must be in ascending order"):
            ops.histogram(x, [1.0, 0.0], False)


def test_ops_subsample_forward_and_gradient() -> None:
    x = _f32(5, 6)
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.subsample(a, [2, 3]), [x])
    np.testing.assert_array_equal(y, x[::2, ::3])
    ref = np.zeros_like(x)
    ref[::2, ::3] = dy
    np.testing.assert_array_equal(dx, ref)


def test_ops_subsample_strides_as_upstream() -> None:
    """An int stride is dim 0's; missing strides are 1; more strides than dims, or a stride
    below 1, are ValueErrors."""
    x = _f32(5, 6, 2)
    for strides, ref in (
        (2, x[::2]),
        ([3], x[::3]),
        ((2, 4), x[::2, ::4]),
        (np.array([1, 5, 2]), x[:, ::5, ::2]),
    ):
        np.testing.assert_array_equal(run_fwd(lambda a, s=strides: ops.subsample(a, s), [x]), ref)
    with popxl.Ir().main_graph:
        v = popxl.variable(x)
        with pytest.raises(ValueError, match="must not be greater than the rank"):
            ops.subsample(v, [1, 1, 1, 1])
        with pytest.raises(ValueError, match="strides must be positive"):
            ops.subsample(v, -2)
