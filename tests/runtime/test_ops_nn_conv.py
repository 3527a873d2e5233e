"""`popxl.ops.conv`, `conv_transpose`, `max_pool`, `average_pool`: kernels against direct
loop references, gradients against central differences, and the frontend (forward and
autodiff in a Session) against PyTorch `nn.functional` when it is installed."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import xl.dialects.popxl as P
from popxl import ops
from tests.helpers.nn_testing import run_fwd, run_fwd_bwd
from tests.passes.test_grad_rules import check_grads, rand
from tests.runtime.test_kernels import run1

RNG = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


# ------------------------------------------------------------------------------------
# direct references: a loop over output positions (float64)
# ------------------------------------------------------------------------------------


def _pad(x: np.ndarray, pads: tuple[int, ...], value: float = 0.0) -> np.ndarray:
    nd = x.ndim - 2
    widths = [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)]
    return np.pad(x.astype(np.float64), widths, constant_values=value)


def ref_conv(x, w, stride, pads, dilation, groups):
    nd = x.ndim - 2
    xp = _pad(x, pads)
    n, c = x.shape[:2]
    m = w.shape[0]
    k = w.shape[2:]
    ext = [dilation[i] * (k[i] - 1) + 1 for i in range(nd)]
    out_sp = [(xp.shape[2 + i] - ext[i]) // stride[i] + 1 for i in range(nd)]
    y = np.zeros((n, m, *out_sp))
    cg, mg = c // groups, m // groups
    for pos in itertools.product(*(range(o) for o in out_sp)):
        sl = tuple(slice(pos[i] * stride[i], pos[i] * stride[i] + ext[i], dilation[i]) for i in range(nd))
        for g in range(groups):
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]  # (N, C/g, *k)
            wg = w[g * mg : (g + 1) * mg].astype(np.float64)  # (M/g, C/g, *k)
            y[(slice(None), slice(g * mg, (g + 1) * mg)) + pos] = np.tensordot(
                patch, wg, axes=(list(range(1, nd + 2)), list(range(1, nd + 2)))
            )
    return y


def ref_conv_transpose(x, w, stride, pads, dilation, groups, output_padding):
    """Scatter form: every input element adds `x * w` at its window."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    mg = w.shape[1]
    k = w.shape[2:]
    full = [(x.shape[2 + i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 + output_padding[i] for i in range(nd)]
    y = np.zeros((n, mg * groups, *full))
    cg = c // groups
    for pos in itertools.product(*(range(s) for s in x.shape[2:])):
        sl = tuple(
            slice(pos[i] * stride[i], pos[i] * stride[i] + dilation[i] * (k[i] - 1) + 1, dilation[i]) for i in range(nd)
        )
        for g in range(groups):
            xv = x[(slice(None), slice(g * cg, (g + 1) * cg)) + pos].astype(np.float64)  # (N, C/g)
            wg = w[g * cg : (g + 1) * cg].astype(np.float64)  # (C/g, M/g, *k)
            y[(slice(None), slice(g * mg, (g + 1) * mg)) + sl] += np.tensordot(xv, wg, axes=(1, 0))
    crop = tuple(slice(pads[i], full[i] - pads[nd + i]) for i in range(nd))
    return y[(slice(None), slice(None)) + crop]


def ref_pool(x, kernel, stride, pads, dilation, ceil_mode, mode, include_pad=False):
    nd = x.ndim - 2
    sp = x.shape[2:]
    ext = [dilation[i] * (kernel[i] - 1) + 1 for i in range(nd)]
    out_sp = []
    for i in range(nd):
        span = sp[i] + pads[i] + pads[nd + i] - ext[i]
        o = (-(-span // stride[i]) if ceil_mode else span // stride[i]) + 1
        if ceil_mode and (o - 1) * stride[i] >= sp[i] + pads[i]:
            o -= 1
        out_sp.append(o)
    y = np.zeros(x.shape[:2] + tuple(out_sp))
    for pos in itertools.product(*(range(o) for o in out_sp)):
        vals, count = [], 0
        for kp in itertools.product(*(range(k) for k in kernel)):
            idx = [pos[i] * stride[i] - pads[i] + kp[i] * dilation[i] for i in range(nd)]
            inside = all(0 <= idx[i] < sp[i] for i in range(nd))
            in_pad = all(-pads[i] <= idx[i] < sp[i] + pads[nd + i] for i in range(nd))
            if inside:
                vals.append(x[(slice(None), slice(None)) + tuple(idx)].astype(np.float64))
            if inside or (include_pad and in_pad):
                count += 1
        stack = np.stack(vals)
        y[(slice(None), slice(None)) + pos] = stack.max(0) if mode == "max" else stack.sum(0) / count
    return y


CONV_CASES = [
    # nd, N, C, M, size, k, stride, pads (begin, end), dilation, groups
    (1, 2, 4, 6, 9, 3, 2, (1, 2), 1, 2),
    (1, 1, 3, 2, 8, 4, 1, (0, 0), 2, 1),
    (2, 2, 4, 6, 7, 3, 2, (1, 1), 1, 2),
    (2, 1, 3, 4, 8, 3, 1, (2, 0), 2, 1),
    (2, 2, 4, 4, 6, 2, 3, (0, 1), 1, 4),
    (3, 1, 2, 3, 5, 3, 2, (1, 1), 1, 1),
]


def _conv_props(nd, s, pads, d, g):
    return dict(stride=(s,) * nd, pads=(pads[0],) * nd + (pads[1],) * nd, dilation=(d,) * nd, groups=g)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_kernel_matches_loop_reference(case) -> None:
    nd, n, c, m, size, k, s, pads, d, g = case
    x, w = _f32(n, c, *(size,) * nd), _f32(m, c // g, *(k,) * nd)
    props = _conv_props(nd, s, pads, d, g)
    y = run1(P.ConvOp, [x, w], **props)
    np.testing.assert_allclose(
        y, ref_conv(x, w, props["stride"], props["pads"], props["dilation"], g), rtol=1e-4, atol=1e-4
    )
    assert y.dtype == np.float32


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_transpose_kernel_matches_scatter_reference(case) -> None:
    nd, n, c, m, size, k, s, pads, d, g = case
    x, w = _f32(n, m, *(size // 2 + 1,) * nd), _f32(m, c // g, *(k,) * nd)
    props = _conv_props(nd, s, pads, d, g)
    opad = (min(s, d) - 1 if max(s, d) > 1 else 0,) * nd
    y = run1(P.ConvTransposeOp, [x, w], output_padding=opad, **props)
    ref = ref_conv_transpose(x, w, props["stride"], props["pads"], props["dilation"], g, opad)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_weight_grad_kernel_is_the_adjoint(case) -> None:
    """<conv(x, w), dy> = <w, conv_weight_grad(dy, x)> for every w: checked with the
    reference conv on a random w."""
    nd, n, c, m, size, k, s, pads, d, g = case
    x, w = _f32(n, c, *(size,) * nd), _f32(m, c // g, *(k,) * nd)
    props = _conv_props(nd, s, pads, d, g)
    y = ref_conv(x, w, props["stride"], props["pads"], props["dilation"], g)
    dy = _f32(*y.shape)
    dw = run1(P.ConvWeightGradOp, [dy, x], kernel=(k,) * nd, **props)
    np.testing.assert_allclose(np.sum(dw * w), np.sum(y * dy), rtol=1e-4)


# ------------------------------------------------------------------------------------
# gradients against central differences (float64, IR level)
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "props",
    [
        dict(stride=(2, 1), pads=(1, 0, 1, 2), dilation=(1, 2)),
        dict(groups=2),
        dict(stride=(3, 2), pads=(0, 1, 2, 0)),  # the last input rows/cols feed no window
    ],
)
def test_conv_gradients_match_finite_differences(props) -> None:
    g = props.get("groups", 1)
    check_grads(
        lambda e, c, x, w: [e("popxl.conv", x, w, **props)],
        [rand((2, 2, 5, 6)), rand((2, 2 // g, 3, 2))],
    )


def test_conv1d_and_conv3d_gradients_match_finite_differences() -> None:
    check_grads(
        lambda e, c, x, w: [e("popxl.conv", x, w, stride=(2,), pads=(1, 1))],
        [rand((2, 3, 7)), rand((2, 3, 3))],
    )
    check_grads(
        lambda e, c, x, w: [e("popxl.conv", x, w, pads=(1, 0, 0, 0, 1, 0))],
        [rand((1, 2, 3, 3, 2)), rand((1, 2, 2, 2, 2))],
    )


@pytest.mark.parametrize(
    "props",
    [dict(stride=(2, 2), pads=(1, 0, 0, 1), output_padding=(1, 0)), dict(groups=2, dilation=(2, 1))],
)
def test_conv_transpose_gradients_match_finite_differences(props) -> None:
    check_grads(
        lambda e, c, x, w: [e("popxl.conv_transpose", x, w, **props)],
        [rand((2, 2, 3, 4)), rand((2, 2, 3, 2))],
    )


@pytest.mark.parametrize(
    "props",
    [
        dict(kernel=(2, 2), stride=(2, 2)),
        dict(kernel=(3, 2), stride=(2, 1), pads=(1, 1, 1, 0), ceil_mode=True),
        dict(kernel=(2, 2), dilation=(2, 1)),
    ],
)
def test_pool_gradients_match_finite_differences(props) -> None:
    x = rand((2, 2, 5, 5))
    check_grads(lambda e, c, x: [e("popxl.max_pool", x, **props)], [x])
    check_grads(lambda e, c, x: [e("popxl.average_pool", x, **props)], [x])
    check_grads(lambda e, c, x: [e("popxl.average_pool", x, count_include_pad=True, **props)], [x])


# ------------------------------------------------------------------------------------
# pooling kernels against the loop reference
# ------------------------------------------------------------------------------------

POOL_CASES = [
    # nd, size, kernel, stride, pad, dilation, ceil_mode
    (1, 9, 3, 2, 1, 1, False),
    (2, 7, 3, 2, 1, 1, True),
    (2, 8, 2, 2, 0, 1, False),
    (2, 7, 3, 1, 1, 2, False),
    (3, 5, 2, 2, 1, 1, True),
]


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("include_pad", [False, True])
def test_pool_kernels_match_loop_reference(case, include_pad) -> None:
    nd, size, k, s, p, d, ceil = case
    x = _f32(2, 3, *(size,) * nd)
    props = dict(kernel=(k,) * nd, stride=(s,) * nd, pads=(p,) * (2 * nd), dilation=(d,) * nd, ceil_mode=ceil)
    mx = run1(P.MaxPoolOp, [x], **props)
    np.testing.assert_array_equal(mx, ref_pool(x, **props, mode="max").astype(np.float32))
    av = run1(P.AveragePoolOp, [x], count_include_pad=include_pad, **props)
    ref = ref_pool(x, **props, mode="avg", include_pad=include_pad)
    np.testing.assert_allclose(av, ref, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------
# the frontend, forward and backward, against PyTorch
# ------------------------------------------------------------------------------------

TORCH_CONV = [
    # nd, x shape, w shape, stride, padding (begins + ends), dilation, groups
    (1, (2, 4, 11), (6, 2, 3), (2,), (1, 1), (1,), 2),
    (2, (2, 3, 9, 8), (4, 3, 3, 2), (2, 1), (1, 0, 1, 0), (1, 2), 1),
    (2, (1, 4, 8, 8), (4, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),
    (3, (1, 2, 6, 5, 4), (3, 2, 2, 3, 2), (2, 1, 1), (0, 1, 1, 0, 1, 1), (1, 1, 2), 1),
]


def _torch_fn(torch: Any, kind: str, nd: int) -> Any:
    return getattr(torch.nn.functional, f"{kind}{nd}d")


@pytest.mark.parametrize("case", TORCH_CONV)
def test_ops_conv_forward_and_backward_match_torch(torch, case) -> None:
    nd, xs, ws, s, p, d, g = case
    x, w = _f32(*xs), _f32(*ws)
    y, (dx, dw), dy = run_fwd_bwd(lambda a, b: ops.conv(a, b, stride=s, padding=p, dilation=d, groups=g), [x, w])
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    assert p[:nd] == p[nd:]  # symmetric padding: torch's own padding argument
    yt = _torch_fn(torch, "conv", nd)(xt, wt, stride=s, padding=p[:nd], dilation=d, groups=g)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, wt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "case",
    [
        # nd, x shape, w shape (C, M/g, *k), stride, padding (symmetric), dilation, groups, output_padding
        (1, (2, 4, 5), (4, 3, 3), (2,), (1,), (1,), 2, (1,)),
        (2, (2, 3, 4, 5), (3, 2, 3, 3), (2, 3), (1, 0), (1, 1), 1, (1, 2)),
        (2, (1, 4, 3, 3), (4, 1, 2, 3), (1, 1), (0, 1), (2, 1), 2, (0, 0)),
        (3, (1, 2, 3, 3, 2), (2, 2, 2, 2, 3), (2, 2, 1), (0, 1, 1), (1, 1, 1), 1, (1, 0, 0)),
    ],
)
def test_ops_conv_transpose_forward_and_backward_match_torch(torch, case) -> None:
    nd, xs, ws, s, p, d, g, op = case
    x, w = _f32(*xs), _f32(*ws)
    y, (dx, dw), dy = run_fwd_bwd(
        lambda a, b: ops.conv_transpose(a, b, stride=s, padding=p + p, dilation=d, groups=g, output_padding=op),
        [x, w],
    )
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    yt = _torch_fn(torch, "conv_transpose", nd)(xt, wt, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, wt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "case",
    [
        # nd, x shape, kernel, stride, padding (symmetric), dilation, ceil_mode
        (1, (2, 3, 10), (3,), (2,), (1,), (1,), False),
        (2, (2, 3, 7, 8), (3, 2), (2, 2), (1, 1), (1, 1), True),
        (2, (1, 2, 9, 9), (2, 2), (2, 2), (0, 0), (1, 1), False),
        (2, (1, 2, 9, 9), (3, 3), (1, 2), (1, 0), (2, 1), False),
        (3, (1, 2, 5, 6, 5), (2, 2, 3), (2, 2, 1), (1, 0, 1), (1, 1, 1), True),
    ],
)
def test_ops_pools_forward_and_backward_match_torch(torch, case) -> None:
    nd, xs, k, s, p, d, ceil = case
    x = _f32(*xs)
    args = dict(kernel_size=k, stride=s, padding=p + p, dilation=d, ceil_mode=ceil)
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.max_pool(a, **args), [x])
    xt = torch.tensor(x, requires_grad=True)
    yt = _torch_fn(torch, "max_pool", nd)(xt, k, s, p, d, ceil_mode=ceil)
    yt.backward(torch.tensor(dy))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6, atol=1e-6)
    if any(di != 1 for di in d):
        return  # torch's average pooling has no dilation
    y, (dx,), dy = run_fwd_bwd(lambda a: ops.average_pool(a, **args), [x])
    xt = torch.tensor(x, requires_grad=True)
    # upstream PopXL does not count the padding
    yt = _torch_fn(torch, "avg_pool", nd)(xt, k, s, p, ceil_mode=ceil, count_include_pad=False)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------
# pad types, output_shape, defaults, errors
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pad_type", "k", "expected"),
    [
        # x = 7, stride 2 -> 4 outputs; total padding (4 - 1) * 2 + k - 7
        ("same_upper", 3, (1, 1)),
        ("same_upper", 4, (1, 2)),
        ("same_lower", 4, (2, 1)),
        ("valid", 4, (0, 0)),
    ],
)
def test_conv_pad_type_is_the_explicit_padding(pad_type, k, expected) -> None:
    x, w = _f32(1, 2, 7, 7), _f32(3, 2, k, k)
    y = run_fwd(lambda a, b: ops.conv(a, b, stride=(2, 2), padding=(5, 5, 5, 5), pad_type=pad_type), [x, w])
    b, e = expected
    ref = ref_conv(x, w, (2, 2), (b, b, e, e), (1, 1), 1)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    if pad_type != "valid":
        assert y.shape[2:] == (4, 4)


def test_pool_auto_pad_same_upper() -> None:
    x = _f32(1, 1, 5, 5)
    y = run_fwd(lambda a: ops.max_pool(a, (2, 2), stride=(2, 2), auto_pad="same_upper"), [x])
    # 3 outputs, total padding 1 at the end
    np.testing.assert_array_equal(y, ref_pool(x, (2, 2), (2, 2), (0, 0, 1, 1), (1, 1), False, "max").astype(np.float32))


def test_conv_transpose_output_shape_chooses_the_padding(torch) -> None:
    x, w = _f32(1, 2, 4, 4), _f32(2, 3, 3, 3)
    y = run_fwd(lambda a, b: ops.conv_transpose(a, b, stride=(2, 2), output_shape=(8, 7)), [x, w])
    assert y.shape == (1, 3, 8, 7)
    # full size 9: total padding 1 (begin, as ONNX NOTSET) by 2 (1 + 1)
    full = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), stride=2).numpy()
    np.testing.assert_allclose(y, full[:, :, 1:9, 1:8], rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_shape_larger_than_the_convolution(torch) -> None:
    """An output_shape beyond the full transposed convolution is negative padding, as in
    ONNX / PopART: zeros where no input reaches (ONNX halves the total padding toward 0 in
    C++: an odd element of a negative total goes to the beginning, NOTSET)."""
    x, w = _f32(1, 2, 3, 3), _f32(2, 3, 2, 2)
    y, (dx, dw), dy = run_fwd_bwd(lambda a, b: ops.conv_transpose(a, b, stride=(2, 2), output_shape=(8, 7)), [x, w])
    assert y.shape == (1, 3, 8, 7)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    full = torch.nn.functional.conv_transpose2d(tx, tw, stride=2)  # 6 x 6: total padding -2 by -1
    ref = torch.nn.functional.pad(full, (1, 0, 1, 1))  # (left, right, top, bottom)
    np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    (ref * torch.tensor(dy)).sum().backward()
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_defaults_follow_the_rank() -> None:
    """The 2-d defaults of stride/padding/dilation mean 1/0/1 for a 1-d or 3-d conv."""
    x, w = _f32(2, 3, 8), _f32(4, 3, 3)
    y = run_fwd(lambda a, b: ops.conv(a, b), [x, w])
    np.testing.assert_allclose(y, ref_conv(x, w, (1,), (0, 0), (1,), 1), rtol=1e-4, atol=1e-4)


def test_conv_errors_name_the_op() -> None:
    import popxl

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((1, 4, 6, 6), np.float32))
        w = popxl.variable(np.zeros((2, 4, 3, 3), np.float32))
        with pytest.raises(ValueError, match=r"ops.conv: pad_type 'same' is not valid"):
            ops.conv(x, w, pad_type="same")
        with pytest.raises(ValueError, match=r"ops.conv: stride \(2, 2, 2\) must have 2 entries"):
            ops.conv(x, w, stride=(2, 2, 2))
        with pytest.raises(
            ValueError, match=r"popxl.conv: 4 input channels and 2 output channels must be divisible by groups 3"
        ):
            ops.conv(x, w, groups=3)
        with pytest.raises(ValueError, match=r"ops.conv: t must be \(N, C, \*spatial\)"):
            ops.conv(popxl.variable(np.zeros((4, 6), np.float32)), w)
        with pytest.raises(ValueError, match=r"ops.max_pool: kernel_size \(2,\) must have 2 entries"):
            ops.max_pool(x, (2,))
        with pytest.raises(ValueError, match=r"ops.average_pool: in_dilations other than ones are not supported"):
            ops.average_pool(x, (2, 2), in_dilations=(2, 2))


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("include_pad", [False, True])
def test_average_pool_grad_kernel_is_the_adjoint(case, include_pad) -> None:
    nd, size, k, s, p, d, ceil = case
    x = _f32(2, 3, *(size,) * nd)
    props = dict(kernel=(k,) * nd, stride=(s,) * nd, pads=(p,) * (2 * nd), dilation=(d,) * nd, ceil_mode=ceil)
    y = ref_pool(x, **props, mode="avg", include_pad=include_pad)
    dy = _f32(*y.shape)
    dx = run1(P.AveragePoolGradOp, [dy], result_types=[(x.shape, x.dtype)], count_include_pad=include_pad, **props)
    np.testing.assert_allclose(np.sum(dx * x), np.sum(y * dy), rtol=1e-4)


def test_max_pool_grad_kernel_routes_to_the_first_maximum() -> None:
    x = np.array([[[[1.0, 3.0, 3.0, 0.0], [2.0, 3.0, -1.0, 0.0]]]], np.float32)  # (1, 1, 2, 4)
    dy = np.array([[[[10.0, 20.0]]]], np.float32)
    dx = run1(P.MaxPoolGradOp, [dy, x], kernel=(2, 2), stride=(2, 2))
    # window 0 ties at (0, 1) and (1, 1): the first in row-major order gets it; window 1 at (0, 2)
    np.testing.assert_array_equal(dx, [[[[0, 10, 20, 0], [0, 0, 0, 0]]]])
    # overlapping windows (stride 1) accumulate
    dx = run1(P.MaxPoolGradOp, [np.ones((1, 1, 1, 3), np.float32), x], kernel=(2, 2), stride=(1, 1))
    np.testing.assert_array_equal(dx, [[[[0, 2, 1, 0], [0, 0, 0, 0]]]])


@pytest.mark.parametrize("optimize", [True, False])
def test_small_cnn_in_both_plans(optimize) -> None:
    """conv -> relu -> max_pool -> conv_transpose -> average_pool, compiled with and without
    the runtime optimisations, against the loop references."""
    import popxl
    from xl.compiler import compile_module

    x, w1, w2 = _f32(2, 3, 8, 8), _f32(4, 3, 3, 3), _f32(4, 2, 2, 2)
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream(x.shape, popxl.float32, "x")
        t = ops.host_load(xs)
        a = ops.relu(ops.conv(t, popxl.variable(w1), padding=(1, 1, 1, 1)))
        b = ops.max_pool(a, (2, 2), stride=(2, 2))
        c = ops.conv_transpose(b, popxl.variable(w2), stride=(2, 2))
        y = ops.average_pool(c, (3, 3), stride=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    out = compile_module(ir._module, optimize=optimize).run({"x": x})["y"]
    a = np.maximum(ref_conv(x, w1, (1, 1), (1, 1, 1, 1), (1, 1), 1), 0)
    b = ref_pool(a, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, "max")
    c = ref_conv_transpose(b, w2, (2, 2), (0, 0, 0, 0), (1, 1), 1, (0, 0))
    ref = ref_pool(c, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, "avg")
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_kernels_fill_a_strided_result_buffer() -> None:
    """A preallocated result may be a view with strides (the runtime's buffer reuse): the
    kernels write into it, not into a reshaped copy."""
    from xl.runtime.kernels import KERNELS

    x, w = _f32(2, 4, 6, 6), _f32(6, 2, 3, 3)
    props = dict(stride=(1, 1), pads=(1, 1, 1, 1), groups=2)
    ref = ref_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 2)
    big = np.full((2, 6, 6, 12), np.nan, np.float32)
    out = big[..., ::2]  # (2, 6, 6, 6), not contiguous
    KERNELS[P.ConvOp](props)(x, w, out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    dy = _f32(*ref.shape)
    big = np.full((6, 2, 3, 6), np.nan, np.float32)
    dw = big[..., ::2]
    KERNELS[P.ConvWeightGradOp](dict(props, kernel=(3, 3)))(dy, x, dw)
    np.testing.assert_allclose(dw, run1(P.ConvWeightGradOp, [dy, x], kernel=(3, 3), **props), rtol=1e-5, atol=1e-5)
    data, idx = _f32(5, 2), np.array([0, 2, 0, 1, 2], np.int32)
    big = np.full((3, 4), np.nan, np.float32)
    res = big[:, ::2]
    KERNELS[P.ScatterReduceOp](dict(axis=0, axis_size=3, reduction="sum"))(data, idx, res)
    np.testing.assert_allclose(res, [data[0] + data[2], data[3], data[1] + data[4]], rtol=1e-6)
