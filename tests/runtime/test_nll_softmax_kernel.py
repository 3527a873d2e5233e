"""`popxl.nll_loss_with_softmax_grad` (`xl.runtime.kernels.core`) in both plans: the
straightforward plan's kernel and the generated plan's template call one function,
`nll_softmax_grad_`, checked here against a float64 NumPy reference written from the op's
definition (loss = -log p[label], dx = (p - onehot(label)) loss_grad, mean over kept rows,
ignored rows 0), for each reduction, with and without ignore_index, loss_grad as a
property or a tensor, float16 / float32 / float64 and int32 / int64 labels.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.helpers.one_kernel import run_kernel
from xl.dialects.popxl import NllLossWithSoftmaxGradOp
from xl.runtime import codegen
from xl.runtime.kernels import DataRangeError

PLANS = pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
TOL = {np.float16: (2e-3, 2e-3), np.float32: (1e-5, 1e-6), np.float64: (1e-12, 1e-14)}


def reference(
    probs: np.ndarray, labels: np.ndarray, red: str, ignore: int | None, lg: float
) -> tuple[np.ndarray, np.ndarray]:
    """(loss, dx) in float64, row by row."""
    c = probs.shape[-1]
    p = probs.astype(np.float64).reshape(-1, c)
    lab = labels.reshape(-1)
    losses = np.zeros(len(lab))
    dx = np.zeros_like(p)
    kept = 0
    for r, y in enumerate(lab):
        if ignore is not None and y == ignore:
            continue
        kept += 1
        losses[r] = -np.log(p[r, y])
        dx[r] = p[r]
        dx[r, y] -= 1.0
    if red == "none":
        loss = losses.reshape(labels.shape)
    elif red == "sum":
        loss = np.array(losses.sum())
    else:
        loss = np.array(losses.sum() / max(kept, 1))
        dx /= max(kept, 1)
    return loss, (dx * lg).reshape(probs.shape)


def softmax_rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape) * 2
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _inputs(
    dtype: type, label_dtype: type, shape: tuple[int, ...], lg: str, red: str, ignore: int | None
) -> tuple[list[np.ndarray], dict[str, Any], float]:
    rng = np.random.default_rng(zlib.crc32(repr((shape, red, lg, ignore)).encode()))
    probs = softmax_rows(rng, shape).astype(dtype)
    labels = rng.integers(0, shape[-1], shape[:-1]).astype(label_dtype)
    if ignore is not None:
        labels.reshape(-1)[::3] = ignore  # every third row ignored
    ins = [probs, labels]
    props: dict[str, Any] = {"reduction": red}
    if ignore is not None:
        props["ignore_index"] = ignore
    value = 1.0
    if lg == "tensor":
        value = 0.375
        ins.append(np.array(value, dtype))
    elif lg == "property":
        value = 0.25
        props["loss_grad"] = value
    return ins, props, value


def _template_lines(monkeypatch: pytest.MonkeyPatch) -> list[list[str] | None]:
    """What the registered template returns, recorded on each call."""
    seen: list[list[str] | None] = []
    inner = codegen.TEMPLATES[NllLossWithSoftmaxGradOp]

    def spy(*a: Any) -> list[str] | None:
        seen.append(inner(*a))
        return seen[-1]

    monkeypatch.setitem(codegen.TEMPLATES, NllLossWithSoftmaxGradOp, spy)
    return seen


def _cases() -> Iterator[Any]:
    for dtype in (np.float16, np.float32, np.float64):
        for red in ("mean", "sum", "none"):
            for ignore in (None, 2):
                for lg in ("default", "property", "tensor"):
                    yield pytest.param(dtype, red, ignore, lg, id=f"{np.dtype(dtype).name}-{red}-{ignore}-{lg}")


@PLANS
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(9, 5), (2, 3, 7)], ids=["rows", "batch-of-rows"])
@pytest.mark.parametrize(("dtype", "red", "ignore", "lg"), list(_cases()))
def test_against_float64_reference(
    dtype: type,
    red: str,
    ignore: int | None,
    lg: str,
    shape: tuple[int, ...],
    label_dtype: type,
    optimize: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _template_lines(monkeypatch)
    ins, props, value = _inputs(dtype, label_dtype, shape, lg, red, ignore)
    loss, dx = run_kernel(NllLossWithSoftmaxGradOp, ins, props, optimize)
    want_loss, want_dx = reference(ins[0], ins[1], red, ignore, value)
    rtol, atol = TOL[dtype]
    assert loss.dtype == dx.dtype == np.dtype(dtype)
    np.testing.assert_allclose(loss.astype(np.float64), want_loss, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx.astype(np.float64), want_dx, rtol=rtol, atol=atol)
    if optimize:  # the template takes what has neither ignore_index nor a loss_grad tensor
        assert len(seen) == 1 and (seen[0] is not None) == (ignore is None and lg != "tensor")
    else:
        assert not seen


@PLANS
def test_mean_over_many_rows_in_float16(optimize: bool) -> None:
    """3001 rows, a count float16 does not hold (it rounds to 3000): the mean within
    float16's tolerance of the exact one."""
    rng = np.random.default_rng(7)
    probs = softmax_rows(rng, (3001, 4)).astype(np.float16)
    labels = rng.integers(0, 4, 3001).astype(np.int32)
    loss, dx = run_kernel(NllLossWithSoftmaxGradOp, [probs, labels], {"reduction": "mean"}, optimize)
    want_loss, want_dx = reference(probs, labels, "mean", None, 1.0)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=2e-3)
    np.testing.assert_allclose(dx.astype(np.float64), want_dx, rtol=2e-3, atol=1e-6)


@PLANS
@pytest.mark.parametrize("bad", [4, -1])
def test_label_out_of_range_names_the_op(bad: int, optimize: bool) -> None:
    probs = softmax_rows(np.random.default_rng(1), (3, 4)).astype(np.float32)
    labels = np.array([0, bad, 1], np.int32)
    with pytest.raises(DataRangeError, match="nll_loss_with_softmax_grad.*label"):
        run_kernel(NllLossWithSoftmaxGradOp, [probs, labels], {"reduction": "sum"}, optimize)


@PLANS
@pytest.mark.parametrize("label_dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16])
def test_other_label_dtypes(label_dtype: type, optimize: bool) -> None:
    """uint64 labels too (uint64 + int64 row offsets is float64 in NumPy: the gather index is
    built from their int64 view)."""
    probs = softmax_rows(np.random.default_rng(2), (6, 5)).astype(np.float32)
    labels = np.array([0, 4, 2, 1, 3, 4], label_dtype)
    loss, dx = run_kernel(NllLossWithSoftmaxGradOp, [probs, labels], {"reduction": "sum"}, optimize)
    want_loss, want_dx = reference(probs, labels, "sum", None, 1.0)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-6)
    np.testing.assert_allclose(dx.astype(np.float64), want_dx, rtol=1e-6, atol=1e-7)
