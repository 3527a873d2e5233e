"""`popxl.ops.layer_norm`, `group_norm`, `batch_norm_inference`: forward and gradients
(autodiff in a Session) against PyTorch `nn.functional` and closed-form NumPy gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from popxl import ops
from tests.helpers.nn_testing import run_fwd_bwd

RNG = np.random.default_rng(11)


def _f32(*shape: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale + shift).astype(np.float32)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


def _torch_grads(torch: Any, fn: Any, arrays: list[np.ndarray], dy: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in arrays]
    y = fn(*ts)
    y.backward(torch.tensor(dy.astype(np.float64)))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("shape", [(4, 6), (3, 5)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layer_norm_matches_torch(torch, shape, eps) -> None:
    x, w, b = _f32(*shape, scale=3.0, shift=1.0), _f32(shape[1]), _f32(shape[1])
    y, grads, dy = run_fwd_bwd(lambda a, c, d: ops.layer_norm(a, c, d, eps=eps), [x, w, b])
    ref, ref_grads = _torch_grads(
        torch, lambda a, c, d: torch.nn.functional.layer_norm(a, (shape[1],), c, d, eps), [x, w, b], dy
    )
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 3, 4), 3), ((2, 4, 5), 1), ((3, 4, 2, 2), 4), ((2, 6), 2)])
def test_group_norm_matches_torch(torch, shape, groups) -> None:
    c = shape[1]
    x, w, b = _f32(*shape, scale=2.0, shift=-1.0), _f32(c), _f32(c)
    y, grads, dy = run_fwd_bwd(lambda a, p, q: ops.group_norm(a, p, q, groups), [x, w, b])
    ref, ref_grads = _torch_grads(
        torch, lambda a, p, q: torch.nn.functional.group_norm(a, groups, p, q, 1e-5), [x, w, b], dy
    )
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 5), (2, 3, 6)])
def test_batch_norm_inference_matches_torch(torch, shape) -> None:
    c = shape[1]
    x = _f32(*shape, scale=2.0, shift=0.5)
    scale, bias, mean = _f32(c), _f32(c), _f32(c)
    var = (RNG.uniform(0.5, 2.0, c)).astype(np.float32)
    eps = 1e-3
    y, (dx, dscale, dbias, dmean, dvar), dy = run_fwd_bwd(
        lambda a, s, b, m, v: ops.batch_norm_inference(a, s, b, m, v, epsilon=eps), [x, scale, bias, mean, var]
    )
    ref, (rdx, rscale, rbias) = _torch_grads(
        torch,
        lambda a, s, b: torch.nn.functional.batch_norm(
            a, torch.tensor(mean, dtype=torch.float64), torch.tensor(var, dtype=torch.float64), s, b, False, 0.1, eps
        ),
        [x, scale, bias],
        dy,
    )
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    for got, want in ((dx, rdx), (dscale, rscale), (dbias, rbias)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the running statistics are inputs too: closed-form gradients (torch has them as buffers)
    axes = tuple(i for i in range(len(shape)) if i != 1)
    bs = (1, c) + (1,) * (len(shape) - 2)
    inv = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    g = dy.astype(np.float64) * scale.reshape(bs)
    np.testing.assert_allclose(dmean, -(g * inv.reshape(bs)).sum(axes), rtol=1e-4, atol=1e-4)
    centred = x.astype(np.float64) - mean.reshape(bs)
    np.testing.assert_allclose(dvar, (-0.5 * g * centred * (inv**3).reshape(bs)).sum(axes), rtol=1e-4, atol=1e-4)


def test_norm_errors_name_the_op() -> None:
    import popxl

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 6, 4), np.float32))
        w = popxl.variable(np.ones(6, np.float32))
        with pytest.raises(ValueError, match=r"ops.group_norm: 6 channels are not divisible by 4 groups"):
            ops.group_norm(x, w, w, 4)
        with pytest.raises(ValueError, match=r"ops.group_norm: input must have rank >= 2"):
            ops.group_norm(popxl.variable(np.zeros(6, np.float32)), w, w, 1)
        with pytest.raises(
            ValueError, match=r"ops.batch_norm_inference: input must be \(N, C, ...\), got shape \(6,\)"
        ):
            ops.batch_norm_inference(popxl.variable(np.zeros(6, np.float32)), w, w, w, w)
        with pytest.raises(
            ValueError,
            match=r"ops.layer_norm: weight must have shape \(5,\) \(the channels of input \(2, 5\)\), got \(6,\)",
        ):
            ops.layer_norm(popxl.variable(np.zeros((2, 5), np.float32)), w, w)
        with pytest.raises(ValueError, match=r"ops.batch_norm_inference: var must have shape \(6,\)"):
            ops.batch_norm_inference(x, w, w, w, popxl.variable(np.ones(5, np.float32)))
