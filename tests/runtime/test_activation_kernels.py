"""Softmax, softmax_grad, gelu and gelu_grad (`xl.runtime.kernels.activation`), and the erf
family (erf, geluerf, geluerf_grad in `xl.runtime.kernels.core`), in both plans:
the straightforward plan's kernel and the generated plan's template call one function each,
checked here against float64 NumPy written from the definitions and, for the gradients,
against central differences of the float64 forward function.

The softmax cases reach each path of the row kernel: blocks of rows sharing one shift (an
attention head's scores under a causal mask), a row far below its block's maximum (the
recomputation with per-row maxima), NaN and -inf rows, the output written over the input
(per-row shifts), another axis than the last and float16 (through contiguous copies).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from tests.helpers.kernel_cases import RtForm, gelu64, gelu_grad64, softmax64
from tests.helpers.one_kernel import run_kernel as run_one
from tests.runtime.test_erf_kernels import assert_within, float32_grid, ref_erf, ref_geluerf, ref_geluerf_grad
from xl.dialects.popxl import ErfOp, GeluErfGradOp, GeluErfOp, GeluGradOp, GeluOp, SoftmaxGradOp, SoftmaxOp
from xl.dialects.rt_kernels import KernelClass, SoftmaxFusedOp, SoftmaxGradFusedOp
from xl.passes.rt_fuse_elementwise import _steps_attr

PLANS = pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])


def run_kernel(
    cls: KernelClass, ins: list[np.ndarray], props: dict, optimize: bool, inplace: int | None = None
) -> np.ndarray:
    return run_one(cls, ins, props, optimize, inplace)[0]


def run_fused(cls: KernelClass, ins: list[np.ndarray], steps: list, axis: int, optimize: bool) -> np.ndarray:
    """`xl.softmax` / `xl.softmax_grad` with these steps, its result shaped as `ins[0]`."""
    form = RtForm({"axis": axis, "steps": _steps_attr(steps)}, [(ins[0].shape, ins[0].dtype)])
    return run_one(cls, ins, {}, optimize, rt=form)[0]


def softmax_grad64(dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    dy, y = np.asarray(dy, np.float64), np.asarray(y, np.float64)
    return y * (dy - (dy * y).sum(axis, keepdims=True))


def attention_scores(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Scaled scores plus a causal mask of -1e9 (the GPT example's), as `(B, H, T, T)`."""
    t = shape[-1]
    mask = np.triu(np.full((t, t), -1e9), k=1)
    return (rng.standard_normal(shape) * 3.0 + mask).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-7) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol, equal_nan=True)


SOFTMAX_INPUTS: dict[str, Callable[[np.random.Generator], np.ndarray]] = {
    "attention": lambda r: attention_scores(r, (2, 3, 16, 16)),
    "rows-far-below-their-block": lambda r: r.standard_normal((6, 8)) + np.array([[0], [-60], [0], [90], [0], [-200]]),
    "nan-row": lambda r: np.where(np.arange(8)[:, None] == 3, np.nan, r.standard_normal((8, 5))),
    "minus-inf-row": lambda r: np.where(np.arange(8)[:, None] == 2, -np.inf, r.standard_normal((8, 5))),
    "logits-near-1000": lambda r: 1000.0 + r.standard_normal((7, 33)) * 3,
    "long-rows": lambda r: r.standard_normal((3, 5000)) * 10,
}


@PLANS
@pytest.mark.parametrize("name", list(SOFTMAX_INPUTS))
def test_softmax_rows(name: str, optimize: bool) -> None:
    x = SOFTMAX_INPUTS[name](np.random.default_rng(0)).astype(np.float32)
    got = run_kernel(SoftmaxOp, [x], {"axis": -1}, optimize)
    with np.errstate(invalid="ignore"):
        want = softmax64(x, -1)
    _close(got, want)
    if name == "rows-far-below-their-block":
        assert np.isfinite(got).all() and np.allclose(got.sum(-1), 1.0, atol=1e-6)


@PLANS
@pytest.mark.parametrize("inplace", [None, 0], ids=["new-buffer", "over-x"])
@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_softmax_layouts(axis: int, dtype: type, inplace: int | None, optimize: bool) -> None:
    x = (np.random.default_rng(1).standard_normal((4, 6, 5)) * 4).astype(dtype)
    got = run_kernel(SoftmaxOp, [x], {"axis": axis}, optimize, inplace)
    tol = {"rtol": 2e-3, "atol": 1e-4} if dtype is np.float16 else {}
    _close(got, softmax64(x, axis), **tol)


@PLANS
@pytest.mark.parametrize("inplace", [None, 0, 1], ids=["new-buffer", "over-dy", "over-y"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_grad_against_reference_and_differences(axis: int, inplace: int | None, optimize: bool) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 8)) * 2
    dy = rng.standard_normal(x.shape)
    y = softmax64(x, axis)
    got = run_kernel(SoftmaxGradOp, [dy.astype(np.float32), y.astype(np.float32)], {"axis": axis}, optimize, inplace)
    _close(got, softmax_grad64(dy, y, axis), rtol=1e-5, atol=1e-6)
    # the gradient of sum(dy * softmax(x)) with respect to x, by central differences
    eps = 1e-6
    fd = np.empty_like(x)
    for i in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        fd[i] = ((dy * softmax64(x + e, axis)).sum() - (dy * softmax64(x - e, axis)).sum()) / (2 * eps)
    _close(got, fd, rtol=1e-4, atol=1e-5)


@PLANS
def test_softmax_grad_of_attention_rows(optimize: bool) -> None:
    rng = np.random.default_rng(3)
    y = softmax64(attention_scores(rng, (2, 2, 16, 16)), -1).astype(np.float32)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    got = run_kernel(SoftmaxGradOp, [dy, y], {"axis": -1}, optimize)
    _close(got, softmax_grad64(dy, y, -1), rtol=1e-5, atol=1e-6)


SCALE_MASK = [("popxl.mul", [0, 1], {}), ("popxl.add", [-1, 2], {})]


@PLANS
@pytest.mark.parametrize("name", ["attention", "rows-far-below-their-block", "nan-row"])
def test_softmax_with_scale_and_mask_prologue(name: str, optimize: bool) -> None:
    """`xl.softmax`: the scores computed in the output, normalised in place; a row far below
    its block's maximum makes the kernel compute the scores again (the prologue) and use
    per-row maxima."""
    x = SOFTMAX_INPUTS[name](np.random.default_rng(5)).astype(np.float32)
    t = x.shape[-1]
    mask = np.triu(np.full((t, t) if x.ndim > 2 else (x.shape[-2], t), -1e9, np.float32), k=1)
    scale = np.array(0.5, np.float32)
    got = run_fused(SoftmaxFusedOp, [x, scale, mask], SCALE_MASK, -1, optimize)
    with np.errstate(invalid="ignore"):
        want = softmax64(np.float64(x) * 0.5 + mask, -1)
    _close(got, want)


@PLANS
def test_softmax_grad_with_scale_epilogue(optimize: bool) -> None:
    """`xl.softmax_grad`: the softmax gradient, then times the scale, against float64 NumPy
    and central differences of sum(dy * softmax(0.25 x)) in x."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 8, 8)) * 2
    dy = rng.standard_normal(x.shape)
    y = softmax64(0.25 * x, -1)
    ins = [dy.astype(np.float32), y.astype(np.float32), np.array(0.25, np.float32)]
    got = run_fused(SoftmaxGradFusedOp, ins, [("popxl.mul", [-1, 2], {})], -1, optimize)
    _close(got, 0.25 * softmax_grad64(dy, y, -1), rtol=1e-5, atol=1e-6)
    eps = 1e-6
    fd = np.empty_like(x)
    for i in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        fd[i] = ((dy * softmax64(0.25 * (x + e), -1)).sum() - (dy * softmax64(0.25 * (x - e), -1)).sum()) / (2 * eps)
    _close(got, fd, rtol=1e-4, atol=1e-5)


GELU_X = np.concatenate([np.linspace(-12, 12, 97), [0.0, -0.0, 1e-6, -1e-6, 30.0, -30.0, np.inf, -np.inf, np.nan]])


@PLANS
@pytest.mark.parametrize("inplace", [None, 0], ids=["new-buffer", "over-x"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_gelu(dtype: type, inplace: int | None, optimize: bool) -> None:
    x = GELU_X.astype(dtype).reshape(-1, 1)
    got = run_kernel(GeluOp, [x], {}, optimize, inplace)
    with np.errstate(invalid="ignore"):
        want = gelu64(x)
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype is np.float16 else {"rtol": 1e-5, "atol": 1e-6}
    _close(got, want, **tol)


def gelu_tanh64(z: np.ndarray) -> np.ndarray:
    return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))


@PLANS
@pytest.mark.parametrize("inplace", [None, 0, 1], ids=["new-buffer", "over-dy", "over-x"])
def test_gelu_grad_against_reference_and_differences(inplace: int | None, optimize: bool) -> None:
    x = GELU_X[np.isfinite(GELU_X)][:102].reshape(-1, 2)
    dy = np.random.default_rng(4).standard_normal(x.shape)
    got = run_kernel(GeluGradOp, [dy.astype(np.float32), x.astype(np.float32)], {}, optimize, inplace)
    _close(got, dy * gelu_grad64(x), rtol=1e-5, atol=1e-6)
    eps = 1e-6
    fd = dy * (gelu_tanh64(x + eps) - gelu_tanh64(x - eps)) / (2 * eps)
    _close(got, fd, rtol=1e-4, atol=1e-5)
    x16 = x.astype(np.float16)
    got16 = run_kernel(GeluGradOp, [dy.astype(np.float16), x16], {}, optimize, inplace)
    _close(got16, dy.astype(np.float16) * gelu_grad64(x16), rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("cls", [ErfOp, GeluErfOp, GeluErfGradOp])
@pytest.mark.parametrize("inplace", [None, 0], ids=["new-buffer", "over-input"])
def test_erf_family_plans_agree_bit_for_bit_and_within_1ulp(cls: KernelClass, inplace: int | None) -> None:
    """The generated plan's template calls the kernel's function (`in_blocks`, blocks written
    straight to the output or, in place, through one result buffer): the same bits, within
    1 ulp of libm, on a float32 grid crossing the approximation's range boundaries."""
    x = float32_grid()[::4]
    x = x[: x.size - x.size % 64].reshape(-1, 64)
    ins = [x] if cls is not GeluErfGradOp else [np.ones_like(x), x]
    got = [run_kernel(cls, ins, {}, optimize, inplace) for optimize in (False, True)]
    np.testing.assert_array_equal(got[0], got[1])
    ref = {ErfOp: ref_erf, GeluErfOp: ref_geluerf}.get(cls)
    with np.errstate(invalid="ignore", over="ignore"):
        want = ref(x) if ref is not None else ref_geluerf_grad(np.ones_like(x), x)
    assert_within(got[1], want, 1, x, cls.__name__)
