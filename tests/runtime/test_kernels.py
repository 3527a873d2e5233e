"""NumPy kernels of the popxl ops against independent references.

Each kernel is reached the way the runtime reaches it: the op is built (types
inferred and verified) and `KERNELS[OpClass](op_props(op))` is called with preallocated,
garbage-filled outputs. References are hand-written NumPy formulas (and PyTorch where
installed); every `*_grad` op is checked against finite differences in float64.
"""

from __future__ import annotations

import inspect
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from xdsl.dialects import test as xdsl_test

import xl.dialects.popxl as P
from xl.dialects.effects import written_operands
from xl.dialects.rt_kernels import RT_KERNEL_OPS
from xl.dialects.utils import dtype_of, shape_of, tensor_type
from xl.runtime.kernels import KERNELS, KernelFactory, kernel_factory

RTOL = 1e-6


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def factory(name: str) -> KernelFactory:
    """The kernel factory registered for the op `name` (which has one)."""
    f = kernel_factory(name)
    assert f is not None, name
    return f


def run(cls, ins, result_types=None, props_from="op_props", **props):
    """Build `cls` on values typed like `ins` (None: absent optional operand), verify,
    run its kernel. Returns (results, ins after the call).

    `props_from`: "op_props" (the documented contract), "properties" (the raw
    properties, as lower-to-rt copies them) or "bare" (raw, without segment sizes)."""
    arrays = [None if a is None else np.array(a, copy=True) for a in ins]
    present = [a for a in arrays if a is not None]
    src = xdsl_test.TestOp.create(result_types=[tensor_type(a.shape, a.dtype) for a in present])
    it = iter(src.results)
    operands = [None if a is None else next(it) for a in arrays]
    if result_types is not None:
        result_types = [tensor_type(s, d) for s, d in result_types]
    op = cls.make(operands, result_types, **props)
    op.verify()
    if props_from == "op_props":
        kprops = P.op_props(op)
    else:
        kprops = {k: P.from_attr(v) for k, v in op.properties.items()}
        if props_from == "bare":
            kprops.pop("operandSegmentSizes", None)
    fn = KERNELS[cls](kprops)
    outs = []
    for r in op.results:
        dt = dtype_of(r.type)
        buf = np.empty(shape_of(r.type), dt)
        buf.fill(np.nan if dt.kind == "f" else 7)
        outs.append(buf)
    written = [present[i] for i in written_operands(op)]
    fn(*present, *written, *outs)
    return outs, present


def run1(cls, ins, result_types=None, **props):
    outs, _ = run(cls, ins, result_types, **props)
    (out,) = outs
    return out


def close(actual, expected, rtol=RTOL, atol=0.0):
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------------------------
# Elementwise
# ------------------------------------------------------------------------------------

BINARY = [
    (P.AddOp, np.add),
    (P.SubOp, np.subtract),
    (P.MulOp, np.multiply),
    (P.DivOp, np.divide),
    (P.MaximumOp, np.maximum),
    (P.EqualOp, np.equal),
    (P.GreaterOp, np.greater),
]


@pytest.mark.parametrize("cls,ref", BINARY, ids=[c.name for c, _ in BINARY])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (3, 1)), ((4,), (2, 1, 4)), ((), (3,))])
def test_binary_broadcast(rng, cls, ref, shapes):
    a, b = f32(rng, *shapes[0]), f32(rng, *shapes[1])
    if cls is P.EqualOp:
        b = np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape)).copy()
        b.reshape(-1)[::2] += 1
    out = run1(cls, [a, b])
    expected = ref(a.astype(np.float64), b.astype(np.float64))
    if expected.dtype == np.bool_:
        np.testing.assert_array_equal(out, expected)
    else:
        assert out.dtype == np.float32
        close(out, expected)


def test_pow(rng):
    a = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)
    b = rng.uniform(-2, 2, (4,)).astype(np.float32)
    close(run1(P.PowOp, [a, b]), a.astype(np.float64) ** b)
    ai = np.array([[1, 2, 3], [-2, 0, 5]], np.int32)
    np.testing.assert_array_equal(run1(P.PowOp, [ai, np.int32(2) + np.zeros(3, np.int32)]), ai**2)


def test_int_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, -1, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5, 4], np.int32)
    expected = np.array([int(x / y) for x, y in zip(a.tolist(), b.tolist())], np.int32)
    out = run1(P.DivOp, [a, b])
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)
    big = np.array([2**62 + 1, -(2**62) - 3], np.int64)
    np.testing.assert_array_equal(
        run1(P.DivOp, [big, np.array([3, 7], np.int64)]), [(2**62 + 1) // 3, -((2**62 + 3) // 7)]
    )


def test_logical(rng):
    a = rng.random((3, 4)) > 0.5
    b = rng.random((4,)) > 0.5
    np.testing.assert_array_equal(run1(P.LogicalAndOp, [a, b]), a & b)
    np.testing.assert_array_equal(run1(P.LogicalOrOp, [a, b]), a | b)
    np.testing.assert_array_equal(run1(P.LogicalNotOp, [a]), ~a)


def _gelu_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


UNARY = [
    (P.NegOp, lambda x: -x),
    (P.AbsOp, np.abs),
    (P.SignOp, np.sign),
    (P.ReluOp, lambda x: np.where(x > 0, x, 0)),
    (P.GeluOp, _gelu_ref),
    (P.TanhOp, np.tanh),
    (P.SigmoidOp, lambda x: 1 / (1 + np.exp(-x))),
    (P.ExpOp, np.exp),
    (P.LogOp, np.log),
    (P.SqrtOp, np.sqrt),
    (P.CosOp, np.cos),
    (P.SinOp, np.sin),
    (P.IdentityOp, lambda x: x),
]


@pytest.mark.parametrize("cls,ref", UNARY, ids=[c.name for c, _ in UNARY])
def test_unary(rng, cls, ref):
    x = (rng.standard_normal((3, 5)) * 3).astype(np.float32)
    if cls in (P.LogOp, P.SqrtOp):
        x = np.abs(x) + 0.1
    x.reshape(-1)[0] = 0.0 if cls is not P.LogOp else 1.0
    out = run1(cls, [x])
    assert out.dtype == np.float32
    close(out, ref(x.astype(np.float64)), atol=1e-7)


def test_unary_int():
    x = np.array([-3, 0, 4], np.int32)
    np.testing.assert_array_equal(run1(P.NegOp, [x]), -x)
    np.testing.assert_array_equal(run1(P.AbsOp, [x]), [3, 0, 4])
    np.testing.assert_array_equal(run1(P.SignOp, [x]), [-1, 0, 1])


def test_sigmoid_extremes():
    x = np.array([-200.0, -30.0, 0.0, 30.0, 200.0], np.float32)
    with np.errstate(over="raise"):
        out = run1(P.SigmoidOp, [x])
    close(out, 1 / (1 + np.exp(-x.astype(np.float64))), atol=1e-30)


def test_gelu_float16():
    x = np.linspace(-50, 50, 101).astype(np.float16)
    out = run1(P.GeluOp, [x])
    assert out.dtype == np.float16
    close(out, _gelu_ref(x), rtol=2e-3, atol=2e-3)


def test_cast():
    x = np.array([1.7, -1.7, 0.0, 3.0], np.float32)
    np.testing.assert_array_equal(run1(P.CastOp, [x], [((4,), np.int32)]), [1, -1, 0, 3])
    np.testing.assert_array_equal(run1(P.CastOp, [x], [((4,), np.bool_)]), [1, 1, 0, 1])
    close(run1(P.CastOp, [x], [((4,), np.float16)]), x.astype(np.float16))


# ------------------------------------------------------------------------------------
# Linear algebra, NN, shape
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,))]
)
def test_matmul(rng, sa, sb):
    a, b = f32(rng, *sa), f32(rng, *sb)
    close(run1(P.MatmulOp, [a, b]), np.matmul(a.astype(np.float64), b), rtol=1e-5, atol=1e-6)


def _softmax_ref(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(rng, axis):
    x = f32(rng, 3, 4, 5) * 10
    x[0, 0, 0] = 500.0  # numerically stable
    close(run1(P.SoftmaxOp, [x], axis=axis), _softmax_ref(x, axis), atol=1e-7)


def test_shape_ops(rng):
    x = f32(rng, 2, 3, 4)
    close(run1(P.ReshapeOp, [x], [((6, 4), np.float32)]), x.reshape(6, 4))
    close(run1(P.TransposeOp, [x], perm=(2, 0, 1)), x.transpose(2, 0, 1))
    close(run1(P.SqueezeOp, [x[:, :1, None]], axes=(1,)), x[:, 0, None])
    close(run1(P.SqueezeOp, [x[None, :, :1]]), x[:, 0])
    b = f32(rng, 3, 1)
    close(run1(P.ExpandOp, [b], [((2, 3, 4), np.float32)]), np.broadcast_to(b, (2, 3, 4)))
    ys = [f32(rng, 2, n, 4) for n in (1, 3, 2)]
    close(run1(P.ConcatOp, ys, axis=1), np.concatenate(ys, axis=1))
    close(run1(P.ConcatOp, ys[:1], axis=-1), ys[0])


@pytest.mark.parametrize(
    "props,index",
    [
        (dict(start=(1,), stop=(3,)), np.s_[1:3]),
        (dict(start=(-3,), stop=(100,), axes=(2,)), np.s_[:, :, -3:100]),
        (dict(start=(5, 0), stop=(-100, 2**63 - 1), step=(-2, 2), axes=(2, 0)), np.s_[0::2, :, 5:-100:-2]),
        (dict(stop=(2,), axes=(-2,)), np.s_[:, :2]),
        (dict(start=(2**63 - 1,), stop=(-(2**63),), step=(-1,), axes=(1,)), np.s_[:, ::-1]),
        (dict(), np.s_[:]),
    ],
)
def test_slice_and_grad(rng, props, index):
    x = f32(rng, 3, 4, 6)
    out = run1(P.SliceOp, [x], **props)
    close(out, x[index])
    dy = f32(rng, *out.shape)
    dx = run1(P.SliceGradOp, [dy], [(x.shape, np.float32)], **props)
    expected = np.zeros_like(x)
    expected[index] = dy
    close(dx, expected)


def test_gather(rng):
    w = f32(rng, 10, 4)
    idx = np.array([[0, 9, 3], [-1, 3, 2]], np.int32)
    close(run1(P.GatherOp, [w, idx], axis=0), w[idx])
    idx1 = np.array([0, 3, -2], np.int32)
    close(run1(P.GatherOp, [w, idx1], axis=-1), w[:, [0, 3, 2]])
    oor = np.array([0, 10, -11, 9], np.int32)
    out = run1(P.GatherOp, [w, oor], axis=0, zero_oor=True)
    close(out, np.stack([w[0], np.zeros(4), np.zeros(4), w[9]]).astype(np.float32))


def test_gather_grad_scatter_adds(rng):
    idx = np.array([[1, 3, 1], [0, 1, 2]], np.int64)
    dy = f32(rng, 5, 2, 3)
    dx = run1(P.GatherGradOp, [dy, idx], [((5, 4), np.float32)], axis=1)
    expected = np.zeros((5, 4))
    for i in range(2):
        for j in range(3):
            expected[:, idx[i, j]] += dy[:, i, j]
    close(dx, expected, atol=1e-6)


def test_where(rng):
    c = rng.random((3, 1)) > 0.5
    a, b = f32(rng, 3, 4), f32(rng)
    close(run1(P.WhereOp, [c, a, b]), np.where(c, a, b))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot(axis):
    idx = np.array([[0, 3], [-1, 7]], np.int32)
    vals = np.array([0.5, 2.0], np.float32)
    out = run1(P.OnehotOp, [idx, vals], num_classes=4, axis=axis)
    expected = np.full((2, 2, 4), 0.5, np.float32)
    for (i, j), c in np.ndenumerate(idx):
        c = c + 4 if c < 0 else c
        if 0 <= c < 4:
            expected[i, j, c] = 2.0
    close(out, np.moveaxis(expected, -1, axis % 3))


def test_reduce_to_shape(rng):
    g = f32(rng, 2, 3, 4)
    close(run1(P.ReduceToShapeOp, [g], [((3, 1), np.float32)]), g.sum(axis=(0, 2)).reshape(3, 1), atol=1e-6)
    close(run1(P.ReduceToShapeOp, [g], [((1, 3, 4), np.float32)]), g.sum(0, keepdims=True), atol=1e-6)
    close(run1(P.ReduceToShapeOp, [g], [((), np.float32)]), g.sum(), rtol=1e-5)
    close(run1(P.ReduceToShapeOp, [g], [((2, 3, 4), np.float32)]), g)


def test_init():
    z = run1(P.InitOp, [], [((2, 3), np.float32)], init_type="zero")
    np.testing.assert_array_equal(z, np.zeros((2, 3)))
    u = run1(P.InitOp, [], [((2,), np.int32)], init_type="undef")
    assert u.shape == (2,) and u.dtype == np.int32


@pytest.mark.parametrize("keep", [False, True])
def test_argmax_argmin(rng, keep):
    x = f32(rng, 3, 5)
    x[1, :] = 1.0  # ties: first index
    out = run1(P.ArgmaxOp, [x], axis=1, keepdims=keep)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.argmax(x, axis=1, keepdims=keep))
    np.testing.assert_array_equal(run1(P.ArgminOp, [x], axis=0, keepdims=keep), np.argmin(x, axis=0, keepdims=keep))


@pytest.mark.parametrize(
    "cls,ref",
    [(P.ReduceSumOp, np.sum), (P.ReduceMeanOp, np.mean), (P.ReduceMaxOp, np.max), (P.ReduceMinOp, np.min)],
)
@pytest.mark.parametrize("axis,keep", [(None, False), ((1,), False), ((0, -1), True), ((), False)])
def test_reductions(rng, cls, ref, axis, keep):
    x = f32(rng, 2, 3, 4)
    props = {"keepdims": keep} if keep else {}
    if axis is not None:
        props["axis"] = axis
    out = run1(cls, [x], **props)
    close(out, ref(x.astype(np.float64), axis=axis, keepdims=keep), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------


def _probs(rng, *shape):
    return _softmax_ref(rng.standard_normal(shape), -1)


def _nll_ref(probs, labels, reduction, ignore=None, log_prob=False):
    p2, lab = probs.reshape(-1, probs.shape[-1]), labels.reshape(-1)
    keep = np.ones(lab.shape, bool) if ignore is None else lab != ignore
    picked = p2[np.arange(lab.size), np.where(keep, lab, 0)]
    loss = np.where(keep, -picked if log_prob else -np.log(picked), 0.0)
    if reduction == "none":
        return loss.reshape(labels.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / max(keep.sum(), 1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [None, 2])
@pytest.mark.parametrize("log_prob", [False, True])
def test_nll_loss(rng, reduction, ignore, log_prob):
    probs = _probs(rng, 2, 3, 5).astype(np.float32)
    labels = rng.integers(0, 5, (2, 3)).astype(np.int32)
    labels[0, 0] = 2
    x = np.log(probs) if log_prob else probs
    out = run1(P.NllLossOp, [x, labels], reduction=reduction, ignore_index=ignore, log_prob=log_prob)
    close(out, _nll_ref(x.astype(np.float64), labels, reduction, ignore, log_prob), rtol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [None, 1])
@pytest.mark.parametrize("scalar_tensor", [False, True])
def test_nll_loss_with_softmax_grad(rng, reduction, ignore, scalar_tensor):
    probs = _probs(rng, 6, 4).astype(np.float32)
    labels = np.array([0, 1, 2, 3, 1, 0], np.int32)
    lg = 0.25
    ins = [probs, labels] + ([np.float32(lg) * np.ones((), np.float32)] if scalar_tensor else [])
    props: dict[str, Any] = {} if scalar_tensor else {"loss_grad": lg}
    (loss, dx), _ = run(P.NllLossWithSoftmaxGradOp, ins, reduction=reduction, ignore_index=ignore, **props)
    close(loss, _nll_ref(probs.astype(np.float64), labels, reduction, ignore), rtol=1e-5)
    keep = np.ones(6, bool) if ignore is None else labels != ignore
    onehot = np.eye(4)[labels]
    expected = (probs - onehot) * lg * keep[:, None]
    if reduction == "mean":
        expected /= keep.sum()
    close(dx, expected, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------
# Gradients against finite differences (float64)
# ------------------------------------------------------------------------------------


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def check_grad(forward, grad, x, rng, atol=1e-6):
    y = forward(x)
    w = rng.standard_normal(y.shape)
    num = numeric_grad(lambda z: float(np.sum(w * forward(z))), x)
    close(grad(w, x, y), num, rtol=1e-5, atol=atol)


def test_gelu_grad_fd(rng):
    x = rng.standard_normal((3, 4)) * 2
    check_grad(lambda z: run1(P.GeluOp, [z]), lambda w, z, y: run1(P.GeluGradOp, [w, z]), x, rng)


def test_relu_grad_fd(rng):
    x = rng.standard_normal((3, 4))
    x[np.abs(x) < 1e-3] = 0.5
    check_grad(lambda z: run1(P.ReluOp, [z]), lambda w, z, y: run1(P.ReluGradOp, [w, z]), x, rng)


@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_grad_fd(rng, axis):
    x = rng.standard_normal((3, 4))
    check_grad(
        lambda z: run1(P.SoftmaxOp, [z], axis=axis),
        lambda w, z, y: run1(P.SoftmaxGradOp, [w, y], axis=axis),
        x,
        rng,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("log_prob", [False, True])
def test_nll_loss_grad_fd(rng, reduction, log_prob):
    probs = rng.uniform(0.2, 1.0, (5, 3))
    if log_prob:
        probs = np.log(probs)
    labels = np.array([0, 2, 1, 2, 0], np.int32)
    props = dict(reduction=reduction, ignore_index=2, log_prob=log_prob)
    check_grad(
        lambda z: run1(P.NllLossOp, [z, labels], **props),
        lambda w, z, y: run1(P.NllLossGradOp, [z, labels, np.asarray(w)], **props),
        probs,
        rng,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nll_loss_with_softmax_grad_fd(rng, reduction):
    """dx is d nll(softmax(x)) / dx, scaled by loss_grad."""
    x = rng.standard_normal((4, 5))
    labels = np.array([1, 4, 0, 4], np.int32)

    def loss(z):
        return run1(P.NllLossOp, [_softmax_ref(z, -1), labels], reduction=reduction, ignore_index=0)

    num = numeric_grad(loss, x)
    (_, dx), _ = run(
        P.NllLossWithSoftmaxGradOp,
        [_softmax_ref(x, -1), labels],
        loss_grad=3.0,
        reduction=reduction,
        ignore_index=0,
    )
    close(dx, 3.0 * num, rtol=1e-5, atol=1e-7)


def test_gather_grad_fd(rng):
    x = rng.standard_normal((4, 5))
    idx = np.array([[1, 1], [4, 0]], np.int32)
    check_grad(
        lambda z: run1(P.GatherOp, [z, idx], axis=1),
        lambda w, z, y: run1(P.GatherGradOp, [w, idx], [(z.shape, np.float64)], axis=1),
        x,
        rng,
    )


def test_slice_grad_fd(rng):
    x = rng.standard_normal((4, 5))
    props = dict(start=(3, -1), stop=(0, -6), step=(-2, -2), axes=(0, 1))
    check_grad(
        lambda z: run1(P.SliceOp, [z], **props),
        lambda w, z, y: run1(P.SliceGradOp, [w], [(z.shape, np.float64)], **props),
        x,
        rng,
    )


def test_expand_reduce_to_shape_fd(rng):
    x = rng.standard_normal((3, 1))
    check_grad(
        lambda z: run1(P.ExpandOp, [z], [((2, 3, 4), np.float64)]),
        lambda w, z, y: run1(P.ReduceToShapeOp, [w], [(z.shape, np.float64)]),
        x,
        rng,
    )


@pytest.mark.parametrize("axis,keep", [((1,), False), ((0, 2), True), (None, False)])
def test_reduce_max_grad_fd(rng, axis, keep):
    x = rng.standard_normal((3, 4, 2))
    props = {"keepdims": keep} if keep else {}
    if axis is not None:
        props["axis"] = axis
    check_grad(
        lambda z: run1(P.ReduceMaxOp, [z], **props),
        lambda w, z, y: run1(P.ReduceMaxGradOp, [z, y, np.asarray(w)], **props),
        x,
        rng,
    )


def test_reduce_max_grad_ties_each_get_the_gradient():
    # PopART's ReduceMaxGrad: mask (x == max) times dy, so every tied maximum gets all of dy
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    dx = run1(P.ReduceMaxGradOp, [x, x.max(1), np.array([6.0, 3.0])], axis=(1,))
    close(dx, [[0, 6, 6], [3, 3, 3]])


# ------------------------------------------------------------------------------------
# In-place updates
# ------------------------------------------------------------------------------------


def written(cls, ins, **props):
    outs, present = run(cls, ins, **props)
    assert outs == []
    return present[0]


UPDATES = [
    (P.AccumulateOp, lambda t, x, f: t + f * x, 0.5),
    (P.AccumulateSquareOp, lambda t, x, f: t + f * x * x, 0.5),
    (P.AccumulateMovingAverageOp, lambda t, x, f: f * t + (1 - f) * x, 0.9),
    (P.AccumulateMovingAverageSquareOp, lambda t, x, f: f * t + (1 - f) * x * x, 0.99),
    (P.AccumulateMeanOp, lambda t, x, s: t * s / (s + 1) + x / (s + 1), 3.0),
]


@pytest.mark.parametrize("cls,ref,f", UPDATES, ids=[u[0].name for u in UPDATES])
@pytest.mark.parametrize("as_tensor", [False, True])
@pytest.mark.parametrize("state_dtype", [np.float32, np.float16])
def test_accumulate_family(rng, cls, ref, f, as_tensor, state_dtype):
    t = f32(rng, 3, 4).astype(state_dtype)
    x = f32(rng, 4)  # broadcasts to t
    name = "step" if cls is P.AccumulateMeanOp else "f"
    if as_tensor:
        out = written(cls, [t, x, np.full((1,), f, np.float32)])
    else:
        out = written(cls, [t, x], **{name: f})
    assert out.dtype == state_dtype
    rtol = RTOL if state_dtype == np.float32 else 1e-3
    close(out, ref(t.astype(np.float64), x.astype(np.float64), f), rtol=rtol, atol=rtol)


def test_accumulate_defaults(rng):
    t, x = f32(rng, 4), f32(rng, 4)
    close(written(P.AccumulateOp, [t, x]), t + x)
    close(written(P.AccumulateSquareOp, [t, x]), t + x * x)
    counter = np.zeros((), np.float32)
    close(written(P.AccumulateOp, [counter, np.ones((), np.float32)]), 1.0)


def test_accumulator_scale_zero(rng):
    t = f32(rng, 3)
    close(written(P.AccumulatorScaleOp, [t], f=0.5), t * 0.5)
    close(written(P.AccumulatorScaleOp, [t, np.array([2.0], np.float32)]), t * 2)
    inf = np.array([np.inf, 1.0], np.float32)
    np.testing.assert_array_equal(written(P.AccumulatorScaleOp, [inf], f=0.0), [0, 0])
    np.testing.assert_array_equal(written(P.AccumulatorZeroOp, [t]), np.zeros(3))


@pytest.mark.parametrize("as_tensor", [False, True])
def test_sparse_accumulate(rng, as_tensor):
    t = f32(rng, 6, 3)
    idx = np.array([1, 4, 1], np.int32)
    x = f32(rng, 3, 3)
    f = 0.5
    ins = [t, x, idx] + ([np.float32(f) * np.ones((), np.float32)] if as_tensor else [])
    out = written(P.SparseAccumulateOp, ins, axis=0, **({} if as_tensor else {"f": f}))
    expected = t.astype(np.float64)
    for j, i in enumerate(idx):
        expected[i] += f * x[j]
    close(out, expected)
    t2 = f32(rng, 2, 5)
    out = written(P.SparseAccumulateOp, [t2, f32(rng, 2, 2), np.array([0, 0], np.int32)], axis=1)
    assert out.shape == (2, 5)


def test_copy_var_update(rng):
    t, x = f32(rng, 3).astype(np.float16), f32(rng, 3)
    close(written(P.CopyVarUpdateOp, [t, x]), x.astype(np.float16))


def test_increment_mod():
    t = np.array([0, 1, 2], np.uint32)
    out = run1(P.IncrementModOp, [t], increment=1.0, modulus=3.0)
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out, [1, 2, 0])
    np.testing.assert_array_equal(written(P.IncrementModInplaceOp, [t], increment=2.0, modulus=3.0), [2, 0, 1])
    tf = np.array([0.5, 2.5], np.float32)
    close(run1(P.IncrementModOp, [tf], increment=0.75, modulus=2.0), [1.25, 1.25])


def test_dynamic_slice_update(rng):
    t = f32(rng, 4, 3, 5)
    idx = np.array([2, 1], np.uint32)
    props = dict(axes=(0, 2), sizes=(1, 3))
    close(run1(P.DynamicSliceOp, [t, idx], **props), t[2:3, :, 1:4])
    with pytest.raises(ValueError, match=r"offset 9 on axis 0 .* out of range \[0, 3\]"):
        run1(P.DynamicSliceOp, [t, np.array([9, 9], np.int32)], **props)  # past the end
    upd = f32(rng, 1, 3, 3)
    expected = t.copy()
    expected[2:3, :, 1:4] = upd
    close(run1(P.DynamicUpdateOp, [t, idx, upd], **props), expected)
    close(written(P.DynamicUpdateInplaceOp, [t, idx, upd], **props), expected)


# ------------------------------------------------------------------------------------
# Optimiser maths
# ------------------------------------------------------------------------------------


def _adam_ref(m, v, w, t, wd, b1, b2, eps, kind="adam"):
    m, v = m.astype(np.float64), v.astype(np.float64)
    if t is not None:
        m = m / (1 - b1**t)
        if kind != "adamax":
            v = v / (1 - b2**t)
    den = v + eps if kind == "adamax" else np.sqrt(v) + eps
    x = m / den
    if w is not None:
        x = x + wd * w
    return x


@pytest.mark.parametrize(
    "cls,kind", [(P.AdamUpdaterOp, "adam"), (P.LambUpdaterOp, "lamb"), (P.AdamaxUpdaterOp, "adamax")]
)
@pytest.mark.parametrize("variant", ["props", "tensors", "no_bias", "no_weight"])
def test_updaters(rng, cls, kind, variant):
    m = f32(rng, 5).astype(np.float16)
    v = np.abs(f32(rng, 5))
    w = f32(rng, 5)
    step = np.array(2.0, np.float32)
    wd, b1, b2, eps = 0.01, 0.9, 0.999, 1e-6
    names = ["weight_decay", "beta1", "epsilon"] if kind == "adamax" else ["weight_decay", "beta1", "beta2", "epsilon"]
    vals = {"weight_decay": wd, "beta1": b1, "beta2": b2, "epsilon": eps}
    props: dict[str, Any] = {n: vals[n] for n in names}
    ins: list = [m, v, w, step]
    if variant == "tensors":
        ins += [np.full((), vals[n], np.float32) for n in names]
        props = {}
    if variant == "no_bias":
        ins = [m, v, w, None]
    if variant == "no_weight":
        ins = [m, v, None, step]
        props["weight_decay"] = 0.0
    (out,), present = run(cls, ins, **props)
    assert out.dtype == np.float32
    has_t = ins[3] is not None
    expected = _adam_ref(m, v, None if ins[2] is None else w, 3.0 if has_t else None, wd, b1, b2, eps, kind)
    rtol = 1e-5 if variant == "tensors" else 1e-6  # float32 factors
    close(out, expected, rtol=rtol)
    if has_t:
        ts = present[2] if ins[2] is None else present[3]
        assert float(ts) == 3.0  # incremented in place


@pytest.mark.parametrize("mwn", [None, 0.5])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_adam_var_update(rng, mwn, as_tensor):
    t, x = f32(rng, 4), f32(rng, 4)
    r1 = np.array(np.sum(t.astype(np.float64) ** 2), np.float32)
    r2 = np.array(np.sum(x.astype(np.float64) ** 2), np.float32)
    lr = 0.1
    if as_tensor:
        ins = [t, x, r1, r2, np.array(lr, np.float32), None if mwn is None else np.array(mwn, np.float32)]
        out = written(P.AdamVarUpdateOp, ins)
    else:
        out = written(P.AdamVarUpdateOp, [t, x, r1, r2], learning_rate=lr, max_weight_norm=mwn)
    n1 = math.sqrt(float(r1))
    n1 = n1 if mwn is None else min(n1, mwn)
    close(out, t - lr * n1 / math.sqrt(float(r2)) * x, rtol=1e-5)
    zero = np.zeros((), np.float32)
    close(written(P.AdamVarUpdateOp, [t, x, zero, r2], learning_rate=lr), t - lr * x, rtol=1e-6)


def test_scaled_add(rng):
    x, y = f32(rng, 3, 4), f32(rng, 4)
    close(run1(P.ScaledAddOp, [x, y], a=0.5, b=-2.0), 0.5 * x.astype(np.float64) - 2.0 * y)
    close(run1(P.ScaledAddOp, [x, y], a=1.0, b=1.0), x + y)
    close(written(P.ScaledAddInplaceOp, [x, y], a=0.9, b=-0.1), 0.9 * x.astype(np.float64) - 0.1 * y)
    close(written(P.ScaledAddInplaceOp, [x, y.astype(np.float16)], a=1.0, b=1.0), x + y.astype(np.float16))


# ------------------------------------------------------------------------------------
# PyTorch references
# ------------------------------------------------------------------------------------


def test_torch_forward_ops(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = f32(rng, 4, 6)
    tx = torch.from_numpy(x)
    close(run1(P.GeluOp, [x]), F.gelu(tx, approximate="tanh").numpy(), atol=1e-6)
    close(run1(P.SoftmaxOp, [x], axis=1), torch.softmax(tx, 1).numpy(), atol=1e-7)
    close(run1(P.SigmoidOp, [x]), torch.sigmoid(tx).numpy(), atol=1e-7)
    probs = _probs(rng, 6, 5).astype(np.float32)
    labels = np.array([0, 1, 4, 2, 2, 3], np.int64)
    for red in ("mean", "sum", "none"):
        ref = F.nll_loss(torch.log(torch.from_numpy(probs)), torch.from_numpy(labels), ignore_index=2, reduction=red)
        close(run1(P.NllLossOp, [probs, labels], reduction=red, ignore_index=2), ref.numpy(), rtol=1e-5)
    idx = np.array([[0, 3], [1, 1]], np.int64)
    close(run1(P.GatherOp, [x, idx], axis=0), torch.from_numpy(x)[torch.from_numpy(idx)].numpy())
    oh = run1(P.OnehotOp, [labels, np.array([0.0, 1.0], np.float32)], num_classes=5)
    close(oh, F.one_hot(torch.from_numpy(labels), 5).float().numpy())


def test_torch_softmax_cross_entropy_grad(rng):
    torch = pytest.importorskip("torch")
    x = torch.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    labels = torch.tensor([0, 1, 4, 2, 2, 3])
    loss = torch.nn.functional.cross_entropy(x, labels, ignore_index=2)
    loss.backward()
    probs = torch.softmax(x, 1).detach().numpy()
    (l, dx), _ = run(
        P.NllLossWithSoftmaxGradOp,
        [probs, labels.numpy().astype(np.int32)],
        loss_grad=1.0,
        reduction="mean",
        ignore_index=2,
    )
    close(l, loss.item(), rtol=1e-10)
    close(dx, x.grad.numpy(), rtol=1e-8, atol=1e-12)


def test_torch_adam_three_steps(rng):
    """accumulate_moving_average(_square)_ + adam_updater + scaled_add_ == torch Adam."""
    torch = pytest.importorskip("torch")
    w0 = f32(rng, 8)
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-5
    tw = torch.tensor(w0.copy(), requires_grad=True)
    opt = torch.optim.Adam([tw], lr=lr, betas=(b1, b2), eps=eps)
    w, m, v, step = w0.copy(), np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros((), np.float32)
    for _ in range(3):
        g = f32(rng, 8)
        tw.grad = torch.from_numpy(g.copy())
        opt.step()
        factory("popxl.accumulate_moving_average_")({"f": b1, "operand_segments": (1, 1, 0)})(m, g, m)
        factory("popxl.accumulate_moving_average_square_")({"f": b2, "operand_segments": (1, 1, 0)})(v, g, v)
        u = np.empty(8, np.float32)
        segs = (1, 1, 0, 1, 0, 0, 0, 0)
        factory("popxl.adam_updater")({"beta1": b1, "beta2": b2, "epsilon": eps, "operand_segments": segs})(
            m, v, step, step, u
        )
        factory("popxl.scaled_add_")({"a": 1.0, "b": -lr})(w, u, w)
    assert float(step) == 3.0
    close(w, tw.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("props_from", ["properties", "bare"])
def test_optional_operands_without_op_props(rng, props_from):
    """Kernels work from raw properties: presence from segment sizes or argument count."""
    t, x, f = f32(rng, 3), f32(rng, 3), np.array([0.5], np.float32)
    for cls, ref in [(P.AccumulateOp, t + 0.5 * x), (P.AccumulateMeanOp, t * 0.5 / 1.5 + x / 1.5)]:
        _, (out, *_) = run(cls, [t, x, f], props_from=props_from)
        close(out, ref)
    _, (out, _) = run(P.AccumulatorScaleOp, [t, f], props_from=props_from)
    close(out, t * 0.5)
    _, (out, *_) = run(P.SparseAccumulateOp, [t, x[:1], np.array([2], np.int32), f], axis=0, props_from=props_from)
    close(out, t + np.array([0, 0, 0.5 * x[0]]))
    probs, labels = _probs(rng, 2, 3).astype(np.float32), np.array([0, 2], np.int32)
    (loss, dx), _ = run(P.NllLossWithSoftmaxGradOp, [probs, labels, f], reduction="sum", props_from=props_from)
    close(loss, -np.log(probs[[0, 1], labels].astype(np.float64)).sum(), rtol=1e-6)
    close(dx, (probs - np.eye(3)[labels]) * 0.5, rtol=1e-6, atol=1e-7)
    m, v, w, step = f32(rng, 3), np.abs(f32(rng, 3)), f32(rng, 3), np.zeros((), np.float32)
    (u,), present = run(P.AdamUpdaterOp, [m, v, w, step], beta1=0.9, beta2=0.99, props_from=props_from)
    close(u, _adam_ref(m, v, w, 1.0, 0.0, 0.9, 0.99, 1e-7), rtol=1e-5)
    assert float(present[3]) == 1.0
    if props_from == "properties":  # non-greedy layouts need the segment sizes
        (u,), present = run(P.AdamUpdaterOp, [m, v, None, step], beta1=0.9, beta2=0.99, props_from=props_from)
        close(u, _adam_ref(m, v, None, 1.0, 0.0, 0.9, 0.99, 1e-7), rtol=1e-5)
        (u,), _ = run(P.AdamUpdaterOp, [m, v, w, None, np.array(0.1, np.float32)], props_from=props_from)
        close(u, _adam_ref(m, v, w, None, 0.1, 0.9, 0.999, 1e-7), rtol=1e-5)
    _, (out, *_) = run(
        P.AdamVarUpdateOp,
        [w, x, np.ones((), np.float32), np.ones((), np.float32), np.array(0.1, np.float32)],
        props_from=props_from,
    )
    close(out, w - 0.1 * x, rtol=1e-6)


# Kernels that must stay correct when the output shares storage with a same-typed input
# (the rt buffer-reuse passes rely on it).
ALIAS_SAFE = [
    (P.AddOp, 2),
    (P.SubOp, 2),
    (P.MulOp, 2),
    (P.DivOp, 2),
    (P.PowOp, 2),
    (P.MaximumOp, 2),
    (P.NegOp, 1),
    (P.AbsOp, 1),
    (P.SignOp, 1),
    (P.ReluOp, 1),
    (P.GeluOp, 1),
    (P.TanhOp, 1),
    (P.SigmoidOp, 1),
    (P.ExpOp, 1),
    (P.LogOp, 1),
    (P.SqrtOp, 1),
    (P.CosOp, 1),
    (P.SinOp, 1),
    (P.IdentityOp, 1),
    (P.GeluGradOp, 2),
    (P.ReluGradOp, 2),
    (P.ScaledAddOp, 2),
    (P.SoftmaxOp, 1),
    (P.SoftmaxGradOp, 2),
]


@pytest.mark.parametrize("cls,n", ALIAS_SAFE, ids=[c.name for c, _ in ALIAS_SAFE])
def test_alias_safe(rng, cls, n):
    ins = [np.abs(f32(rng, 3, 4)) + 0.5 for _ in range(n)]
    props = {"a": 0.5, "b": 2.0} if cls is P.ScaledAddOp else {}
    if cls in (P.SoftmaxOp, P.SoftmaxGradOp):
        props = {"axis": 1}
    expected = run1(cls, ins, **props)
    fn = KERNELS[cls](props)
    for i in range(n):
        arrays = [a.copy() for a in ins]
        fn(*arrays, arrays[i])
        close(arrays[i], expected, rtol=1e-6)


# ------------------------------------------------------------------------------------
# Coverage
# ------------------------------------------------------------------------------------


def test_every_op_has_a_kernel_and_a_test():
    # registered by op class: every popxl op has one; the others are rt kernels (xl.*)
    # (and the remote buffer copies of the ipu dialect: tests/frontend/popxl/test_remote.py)
    from xl.dialects.ipu import REMOTE_ACCESS_OPS

    assert set(P.OPS) == {k for k in KERNELS if k not in RT_KERNEL_OPS and k not in REMOTE_ACCESS_OPS}
    # kernel tests live here and in the op families' own modules (tests/runtime/test_ops_*.py)
    here = Path(inspect.getsourcefile(sys.modules[__name__]) or __file__).parent
    src = "\n".join(f.read_text() for f in [here / "test_kernels.py", *sorted(here.glob("test_ops_*.py"))])
    untested = [op.__name__ for op in P.OPS if f"P.{op.__name__}" not in src]
    assert not untested, untested


def test_detach_copies(rng):
    x = f32(rng, 2, 3)
    (y,), _ = run(P.DetachOp, [x])
    np.testing.assert_array_equal(y, x)


def test_minimum_and_swish(rng):
    a, b = f32(rng, 2, 3), f32(rng, 3)
    (y,), _ = run(P.MinimumOp, [a, b])
    np.testing.assert_array_equal(y, np.minimum(a, b))
    x = f32(rng, 4, 5) * 10
    (s,), _ = run(P.SwishOp, [x])
    x64 = x.astype(np.float64)
    close(s, x64 / (1 + np.exp(-x64)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(rng, dim, reverse):
    x = f32(rng, 3, 4)
    props = {"dim": dim, "reverse": True} if reverse else {"dim": dim}
    out = run1(P.CumsumOp, [x], **props)
    # independent reference: explicit running sums along the axis
    ax = dim % 2
    moved = np.moveaxis(x.astype(np.float64), ax, 0)
    acc = np.zeros_like(moved)
    order = range(moved.shape[0] - 1, -1, -1) if reverse else range(moved.shape[0])
    running = np.zeros(moved.shape[1:])
    for i in order:
        running = running + moved[i]
        acc[i] = running
    close(out, np.moveaxis(acc, 0, ax), rtol=1e-5)
    assert out.dtype == np.float32


def test_cumsum_int_and_errors():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    np.testing.assert_array_equal(run1(P.CumsumOp, [x], dim=1), [[1, 3, 6], [4, 9, 15]])
    with pytest.raises(Exception, match="out of range"):
        run1(P.CumsumOp, [x], dim=2)
    with pytest.raises(Exception, match="rank >= 1"):
        run1(P.CumsumOp, [np.array(1.0, np.float32)], dim=0)
    with pytest.raises(Exception, match="numeric"):
        run1(P.CumsumOp, [np.array([True, False])], dim=0)


# ------------------------------------------------------------------------------------
# ceil, floor, erf, geluerf, fmod, bitwise, clip, print_tensor; float8; random
# ------------------------------------------------------------------------------------


def test_ceil_floor_erf(rng):
    x = np.array([-2.5, -1.0, -0.2, 0.0, 0.7, 3.0, np.nan], np.float32)
    np.testing.assert_array_equal(run1(P.CeilOp, [x]), [-2, -1, -0.0, 0, 1, 3, np.nan])
    np.testing.assert_array_equal(run1(P.FloorOp, [x]), [-3, -1, -1, 0, 0, 3, np.nan])
    z = rng.standard_normal(50) * 2
    close(run1(P.ErfOp, [z]), [math.erf(v) for v in z], rtol=1e-15)
    close(run1(P.ErfOp, [z.astype(np.float32)]), [math.erf(np.float32(v)) for v in z], rtol=1e-6)


def test_geluerf_and_grad(rng):
    x = rng.standard_normal(40) * 3
    # 1 + erf(v / sqrt(2)) as erfc(-v / sqrt(2)): no cancellation for v < 0 (the kernel's
    # accuracy there; tests/runtime/test_erf_kernels.py checks it element by element)
    ref = [0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x]
    close(run1(P.GeluErfOp, [x]), ref, rtol=1e-14, atol=1e-300)
    dy = rng.standard_normal(40)
    eps = 1e-6
    num = [
        (
            0.5 * (v + eps) * (1 + math.erf((v + eps) / math.sqrt(2)))
            - 0.5 * (v - eps) * (1 + math.erf((v - eps) / math.sqrt(2)))
        )
        / (2 * eps)
        for v in x
    ]
    close(run1(P.GeluErfGradOp, [dy, x]), dy * np.array(num), rtol=1e-6, atol=1e-9)
    torch = pytest.importorskip("torch")
    ref_t = torch.nn.functional.gelu(torch.tensor(x), approximate="none").numpy()
    # PyTorch computes 1 + erf: its rounding error (~1e-16 x) dominates for x < -3
    close(run1(P.GeluErfOp, [x]), ref_t, rtol=1e-12, atol=1e-15)


def test_fmod_sign_of_dividend():
    a = np.array([5.5, -5.5, 5.5, -5.5, 1.0, 3.0], np.float64)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 1.5], np.float64)
    out = run1(P.FmodOp, [a, b])
    np.testing.assert_array_equal(out[:4], [1.5, -1.5, 1.5, -1.5])
    assert math.isnan(out[4]) and out[5] == 0.0
    ai = np.array([7, -7, 7, -7, 3], np.int32)
    bi = np.array([3, 3, -3, -3, 0], np.int32)
    # C's % on ints truncates towards zero; x % 0 is 0 here
    np.testing.assert_array_equal(run1(P.FmodOp, [ai, bi]), [1, -1, 1, -1, 0])
    # broadcasting
    np.testing.assert_array_equal(
        run1(P.FmodOp, [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([4.0], np.float32)]),
        [[0, 1, 2], [3, 0, 1]],
    )


def test_bitwise_and_logical_xor(rng):
    a = rng.integers(-1000, 1000, 20).astype(np.int32)
    b = rng.integers(-1000, 1000, 20).astype(np.int32)
    ia, ib = [int(v) for v in a], [int(v) for v in b]
    np.testing.assert_array_equal(run1(P.BitwiseAndOp, [a, b]), [x & y for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(run1(P.BitwiseOrOp, [a, b]), [x | y for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(run1(P.BitwiseXorOp, [a, b]), [x ^ y for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(run1(P.BitwiseXnorOp, [a, b]), [~(x ^ y) for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(run1(P.BitwiseNotOp, [a]), [~x for x in ia])
    u = np.array([0, 1, 0xFFFF], np.uint16)
    np.testing.assert_array_equal(run1(P.BitwiseNotOp, [u]), [0xFFFF, 0xFFFE, 0])
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    np.testing.assert_array_equal(run1(P.LogicalXorOp, [p, q]), [False, True, True, False])


def test_clip_bounds_nan_and_ints():
    x = np.array([-3.0, -1.0, 0.5, 2.0, 9.0, np.nan], np.float32)
    np.testing.assert_array_equal(run1(P.ClipOp, [x], min=-1.0, max=2.0), [-1, -1, 0.5, 2, 2, np.nan])
    np.testing.assert_array_equal(run1(P.ClipOp, [x], min=0.0), [0, 0, 0.5, 2, 9, np.nan])
    np.testing.assert_array_equal(run1(P.ClipOp, [x]), x)
    i = np.array([-5, 0, 1, 2, 7], np.int32)
    # bounds rounded inwards on integers: [0.5, 2.5] -> [1, 2]
    np.testing.assert_array_equal(run1(P.ClipOp, [i], min=0.5, max=2.5), [1, 1, 1, 2, 2])
    np.testing.assert_array_equal(run1(P.ClipOp, [i.astype(np.int8)], min=-1e9, max=1e9), i)
    with pytest.raises(Exception, match="min 2.0 must not be greater than max 1.0"):
        run1(P.ClipOp, [x], min=2.0, max=1.0)


def test_print_tensor_prints_to_stderr_and_copies(capfd):
    x = np.array([5, 7, 9], np.int32)
    np.testing.assert_array_equal(run1(P.PrintTensorOp, [x], title="Add:0"), x)
    y = np.array([[1.0, 2.0], [1.5, 2.5]], np.float32)
    run1(P.PrintTensorOp, [y], title="w", digits=4, separator=",", open_bracket="{", close_bracket="}")
    run1(P.PrintTensorOp, [np.arange(2000, dtype=np.int32)], title="big", edge_items=2)
    run1(P.PrintTensorOp, [y], title="quiet", print_self=False)
    err = capfd.readouterr().err.splitlines()
    assert err[0] == "Add:0: [5 7 9]"
    assert err[1:3] == ["w: {{1.000,2.000},", " {1.500,2.500}}"]
    assert err[3] == "big: [   0    1 ... 1998 1999]"
    assert len(err) == 4  # print_self=False prints nothing


ALIAS_SAFE_MORE = [
    (P.CeilOp, 1, {}),
    (P.FloorOp, 1, {}),
    (P.ErfOp, 1, {}),
    (P.GeluErfOp, 1, {}),
    (P.GeluErfGradOp, 2, {}),
    (P.FmodOp, 2, {}),
    (P.ClipOp, 1, {"min": 0.7, "max": 1.2}),
]


@pytest.mark.parametrize("cls,n,props", ALIAS_SAFE_MORE, ids=[c.name for c, _, _ in ALIAS_SAFE_MORE])
def test_alias_safe_more(rng, cls, n, props):
    """The added elementwise kernels (fusable: `Elementwise`) write correctly into an input."""
    ins = [np.abs(f32(rng, 3, 4)) + 0.5 for _ in range(n)]
    expected = run1(cls, ins, **props)
    fn = KERNELS[cls](props)
    for i in range(n):
        arrays = [a.copy() for a in ins]
        fn(*arrays, arrays[i])
        close(arrays[i], expected, rtol=1e-6)


def test_float8_casts_and_matmul():
    import ml_dtypes

    e4, e5 = np.dtype(ml_dtypes.float8_e4m3fnuz), np.dtype(ml_dtypes.float8_e5m2fnuz)
    s0, s1, sm1 = np.int32(0), np.int32(1), np.int32(-1)
    x = np.array([1.0, 0.3, -2.75, 240.0, 250.0, 1e-4, np.nan], np.float32)
    y = run1(P.Pow2ScaleCastToFp8Op, [x, s0], [(x.shape, e4)])
    # e4m3 (bias 8): 0.3 lies between 0.28125 and 0.3125 (spacing 1/32), nearer 0.3125;
    # -2.75 is exact; 250 overflows (max 240) -> NaN; 1e-4 < half the smallest subnormal 2**-10
    got = y.astype(np.float64)
    np.testing.assert_array_equal(got[:4], [1.0, 0.3125, -2.75, 240.0])
    assert np.isnan(got[4]) and got[5] == 0.0 and np.isnan(got[6])
    assert y.view(np.uint8)[4] == 0x80  # the single NaN encoding
    # scaled: 0.3 * 2 = 0.6 -> 0.625 (spacing 1/16 in [0.5, 1))
    assert run1(P.Pow2ScaleCastToFp8Op, [x[1:2], s1], [((1,), e4)]).astype(np.float32)[0] == 0.625
    # e5m2 (bias 16): 0.3 between 0.25 and 0.3125 (spacing 1/16) -> 0.3125; spacing 64 in
    # [256, 512): 300 is 20 from 320, 44 from 256 -> 320; 288 is halfway: to even (256)
    y5 = run1(P.Pow2ScaleCastToFp8Op, [np.array([0.3, 300.0, 288.0], np.float32), s0], [((3,), e5)])
    np.testing.assert_array_equal(y5.astype(np.float32), [0.3125, 320.0, 256.0])
    back = run1(P.Pow2ScaleCastFromFp8Op, [y[:4], sm1], [((4,), np.float16)])
    np.testing.assert_array_equal(back, np.array([0.5, 0.15625, -1.375, 120.0], np.float16))
    a = np.array([[1.0, 2.0], [0.5, -1.0]], np.float32).astype(e4)
    b = np.array([[3.0, 0.25], [4.0, 8.0]], np.float32).astype(e5)
    out = run1(P.MatmulPow2ScaledOp, [a, b, np.int32(2)])
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.array([[44.0, 65.0], [-10.0, -31.5]], np.float16))
    with pytest.raises(Exception, match=r"log2_scale 40 .*out of range \[-32, 32\)"):
        run1(P.Pow2ScaleCastToFp8Op, [x, np.int32(40)], [(x.shape, e4)])


def _philox_words(seed, n, stream, counter=0):
    """The documented generator, written out: Philox keyed [seed64, stream]."""
    key = (int(seed[0]) << 32) | int(seed[1])
    return np.random.Philox(key=[key, stream], counter=counter).random_raw(n)


def test_random_kernels_follow_the_documented_generator():
    seed = np.array([7, 123456789], np.uint32)
    u = (_philox_words(seed, 12, 0) >> np.uint64(11)).astype(np.float64) / 2.0**53
    out = run1(P.RandomUniformOp, [seed], [((3, 4), np.float64)], low=-2.0, high=6.0)
    close(out, (-2.0 + 8.0 * u).reshape(3, 4), rtol=1e-15)
    x = np.arange(1, 13, dtype=np.float64).reshape(3, 4)
    d = run1(P.DropoutOp, [x, seed], ratio=0.25)
    np.testing.assert_array_equal(d, np.where(u.reshape(3, 4) >= 0.25, x * (1 / 0.75), 0.0))
    sd = run1(P.ShapedDropoutOp, [x, seed], shape=(3, 1), ratio=0.5)
    np.testing.assert_array_equal(sd, np.where(u[:3].reshape(3, 1) >= 0.5, 2 * x, 0.0))
    w = (_philox_words(seed, 6, 1) >> np.uint64(11)).astype(np.float64) / 2.0**53
    r = np.sqrt(-2 * np.log(1 - w[0::2]))
    t = 2 * np.pi * w[1::2]
    z = np.stack([r * np.cos(t), r * np.sin(t)], 1).reshape(-1)[:5]
    close(run1(P.RandomNormalOp, [seed], [((5,), np.float64)], mean=1.0, std=3.0), 1 + 3 * z, rtol=1e-14)
    (word,) = _philox_words(seed, 1, 2, counter=3)
    new = run1(P.ModifyRandomSeedOp, [seed, np.uint32(3)])
    np.testing.assert_array_equal(new, [int(word) >> 32, int(word) & 0xFFFFFFFF])


def test_custom_kernels_run_the_registered_numpy_code(rng):
    # popxl.custom / popxl.custom_grad run the NumPy functions registered under op_type,
    # with the op's attributes as keyword arguments; results are cast to the result types.
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64

    from xl.dialects.custom_ops import CustomOpDefinition, register_custom_op, unregister_custom_op

    definition = CustomOpDefinition(
        "KernelTestAxpy",
        forward=lambda x, b, scale: (scale * x + b,),
        grad=lambda dy, x, b, scale: (scale * dy, dy.sum(axis=0)),
    )
    register_custom_op(definition)
    try:
        x, b, dy = f32(rng, 3, 4), f32(rng, 4), f32(rng, 3, 4)
        attrs = DictionaryAttr({"scale": IntegerAttr(3, i64)})
        (y,), ins = run(P.CustomOp, [x, b], [((3, 4), np.float32)], op_type=StringAttr("KernelTestAxpy"), attrs=attrs)
        np.testing.assert_allclose(y, 3.0 * x.astype(np.float64) + b, rtol=1e-6)
        np.testing.assert_array_equal(ins[0], x)  # inputs are read only
        (dx, db), _ = run(
            P.CustomGradOp, [dy, x, b], op_type=StringAttr("KernelTestAxpy"), attrs=attrs, num_output_grads=1
        )
        np.testing.assert_allclose(dx, 3.0 * dy.astype(np.float64), rtol=1e-6)
        np.testing.assert_allclose(db, dy.astype(np.float64).sum(axis=0), rtol=1e-5)
    finally:
        unregister_custom_op("KernelTestAxpy")


def _group_norm64(x, w, b, groups, eps):
    n, c = x.shape[:2]
    g = x.astype(np.float64).reshape(n, groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    inv_std = 1.0 / np.sqrt(g.var(axis=2, keepdims=True) + eps)
    shape = (1, c) + (1,) * (x.ndim - 2)
    y = ((g - mean) * inv_std).reshape(x.shape) * w.reshape(shape) + b.reshape(shape)
    return y, mean.ravel(), inv_std.ravel()


def test_group_norm_kernels(rng):
    # popxl.group_norm: y, the mean and the inverse standard deviation per (sample, group),
    # against NumPy in float64; popxl.group_norm_grad against central differences of it.
    x, w, b = f32(rng, 2, 4, 3), f32(rng, 4), f32(rng, 4)
    eps = 1e-5
    (y, mean, inv_std), _ = run(P.GroupNormOp, [x, w, b], num_groups=2, epsilon=eps)
    ry, rmean, rinv = _group_norm64(x, w, b, 2, eps)
    close(y, ry, rtol=1e-5, atol=1e-5)
    close(mean, rmean, rtol=1e-5, atol=1e-6)
    close(inv_std, rinv, rtol=1e-5, atol=1e-5)
    dy = f32(rng, 2, 4, 3)
    (dx, dw, db), _ = run(P.GroupNormGradOp, [x, w, mean, inv_std, dy], num_groups=2, epsilon=eps)

    def loss(xx, ww, bb):
        return float((_group_norm64(xx, ww, bb, 2, eps)[0] * dy).sum())

    h = 1e-4
    x64, w64, b64 = x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)
    for got, arg in ((dx, 0), (dw, 1), (db, 2)):
        base = [x64, w64, b64]
        num = np.zeros_like(base[arg])
        for i in np.ndindex(num.shape):
            plus = [a.copy() for a in base]
            minus = [a.copy() for a in base]
            plus[arg][i] += h
            minus[arg][i] -= h
            num[i] = (loss(*plus) - loss(*minus)) / (2 * h)
        close(got, num, rtol=1e-3, atol=1e-3)
