"""Every tensor op, run through IR -> passes -> rt -> runtime, against NumPy on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers.op_runner import run_op
from xl.dialects import popxl as P
from xl.dialects.utils import tensor_type

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype=np.float32, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(dtype)


def close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    assert actual.shape == np.shape(expected)
    assert actual.dtype == np.asarray(expected).dtype or np.asarray(expected).dtype == np.float64
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


BROADCAST_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2))]


@pytest.mark.parametrize(
    "op,ref",
    [
        (P.AddOp, np.add),
        (P.SubOp, np.subtract),
        (P.MulOp, np.multiply),
        (P.DivOp, np.divide),
        (P.MaximumOp, np.maximum),
    ],
)
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_binary_float(op, ref, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    if op is P.DivOp:
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    (y,) = run_op(op, [a, b])
    close(y, ref(a, b))


def test_pow():
    a, b = rand(3, 4, low=0.1, high=2.0), rand(4)
    (y,) = run_op(P.PowOp, [a, b])
    close(y, np.power(a, b), rtol=1e-5)


@pytest.mark.parametrize("op,ref", [(P.EqualOp, np.equal), (P.GreaterOp, np.greater)])
def test_compare(op, ref):
    a = RNG.integers(0, 3, size=(3, 4)).astype(np.int32)
    b = RNG.integers(0, 3, size=(4,)).astype(np.int32)
    (y,) = run_op(op, [a, b])
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, ref(a, b))


def test_integer_ops():
    a = RNG.integers(-9, 9, size=(5,)).astype(np.int32)
    b = RNG.integers(1, 4, size=(5,)).astype(np.int32)
    (s,) = run_op(P.AddOp, [a, b])
    np.testing.assert_array_equal(s, a + b)
    (d,) = run_op(P.DivOp, [a, b])
    np.testing.assert_array_equal(d, np.trunc(a / b).astype(np.int32))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))


@pytest.mark.parametrize(
    "op,ref,low",
    [
        (P.NegOp, np.negative, -2.0),
        (P.AbsOp, np.abs, -2.0),
        (P.ReluOp, lambda x: np.maximum(x, 0), -2.0),
        (P.GeluOp, gelu_tanh, -3.0),
        (P.TanhOp, np.tanh, -2.0),
        (P.SigmoidOp, lambda x: 1 / (1 + np.exp(-x.astype(np.float64))), -3.0),
        (P.ExpOp, np.exp, -2.0),
        (P.LogOp, np.log, 0.1),
        (P.SqrtOp, np.sqrt, 0.0),
        (P.CosOp, np.cos, -2.0),
        (P.SinOp, np.sin, -2.0),
        (P.IdentityOp, lambda x: x, -2.0),
    ],
)
def test_unary(op, ref, low):
    x = rand(4, 5, low=low)
    (y,) = run_op(op, [x])
    close(y, ref(x).astype(np.float32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "sa,sb",
    [((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((2, 1, 2, 3), (4, 3, 5)), ((3,), (3, 4)), ((2, 3), (3,))],
)
def test_matmul(sa, sb):
    a, b = rand(*sa), rand(*sb)
    (y,) = run_op(P.MatmulOp, [a, b])
    close(y, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(axis):
    x = rand(3, 4, low=-5, high=5)
    (y,) = run_op(P.SoftmaxOp, [x], axis=axis)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    close(y, e / e.sum(axis=axis, keepdims=True))


def test_reshape_transpose_cast():
    x = rand(2, 3, 4)
    (y,) = run_op(P.ReshapeOp, [x], [tensor_type((6, 4), np.float32)])
    np.testing.assert_array_equal(y, x.reshape(6, 4))
    (t,) = run_op(P.TransposeOp, [x], perm=(2, 0, 1))
    np.testing.assert_array_equal(t, x.transpose(2, 0, 1))
    (c,) = run_op(P.CastOp, [x], [tensor_type((2, 3, 4), np.int32)])
    np.testing.assert_array_equal(c, x.astype(np.int32))


@pytest.mark.parametrize(
    "op,ref",
    [(P.ReduceSumOp, np.sum), (P.ReduceMeanOp, np.mean), (P.ReduceMaxOp, np.max), (P.ReduceMinOp, np.min)],
)
@pytest.mark.parametrize("axis,keepdims", [(None, False), ((0,), False), ((1, 2), True), ((-1,), False)])
def test_reductions(op, ref, axis, keepdims):
    x = rand(2, 3, 4)
    props = {"keepdims": keepdims}
    if axis is not None:
        props["axis"] = axis
    (y,) = run_op(op, [x], **props)
    close(y, ref(x.astype(np.float64), axis=axis, keepdims=keepdims), rtol=1e-5, atol=1e-6)


def test_scaled_add_and_inplace():
    x, y = rand(3, 4), rand(4)
    (z,) = run_op(P.ScaledAddOp, [x, y], a=0.5, b=-2.0)
    close(z, 0.5 * x.astype(np.float64) - 2.0 * y)
    (w,) = run_op(P.ScaledAddInplaceOp, [x, y], a=1.0, b=-0.05)
    close(w, x.astype(np.float64) - 0.05 * y)


def test_concat():
    a, b, c = rand(2, 3), rand(2, 1), rand(2, 4)
    (y,) = run_op(P.ConcatOp, [a, b, c], axis=1)
    np.testing.assert_array_equal(y, np.concatenate([a, b, c], axis=1))


@pytest.mark.parametrize(
    "start,stop,step,axes,index",
    [
        ((1,), (3,), (1,), (0,), np.s_[1:3]),
        ((0, 1), (4, 5), (2, 2), (0, 1), np.s_[0:4:2, 1:5:2]),
        ((-2,), (5,), (1,), (1,), np.s_[:, -2:5]),
        ((3,), (0,), (-1,), (0,), np.s_[3:0:-1]),
    ],
)
def test_slice(start, stop, step, axes, index):
    x = rand(4, 5)
    (y,) = run_op(P.SliceOp, [x], start=start, stop=stop, step=step, axes=axes)
    np.testing.assert_array_equal(y, x[index])


@pytest.mark.parametrize("axis", [0, 1])
def test_gather(axis):
    x = rand(4, 5)
    idx = RNG.integers(0, x.shape[axis], size=(2, 3)).astype(np.int32)
    (y,) = run_op(P.GatherOp, [x, idx], axis=axis)
    np.testing.assert_array_equal(y, np.take(x, idx, axis=axis))


def test_where():
    cond = RNG.integers(0, 2, size=(3, 4)).astype(np.bool_)
    a, b = rand(3, 4), rand(4)
    (y,) = run_op(P.WhereOp, [cond, a, b])
    np.testing.assert_array_equal(y, np.where(cond, a, b))


def test_onehot():
    idx = np.array([0, 3, 1], np.int32)
    values = np.array([0.0, 1.0], np.float32)
    (y,) = run_op(P.OnehotOp, [idx, values], num_classes=4)
    np.testing.assert_array_equal(y, np.eye(4, dtype=np.float32)[idx])


def test_nll_loss_with_softmax_grad():
    logits = rand(5, 10, low=-3, high=3)
    labels = RNG.integers(0, 10, size=(5,)).astype(np.int32)
    e = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    probs = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    loss, dx = run_op(P.NllLossWithSoftmaxGradOp, [probs, labels], reduction="mean")
    close(loss, -np.mean(np.log(probs.astype(np.float64)[np.arange(5), labels])), rtol=1e-6)
    close(dx, (probs - np.eye(10)[labels]) / 5, rtol=1e-5, atol=1e-7)
