"""`popxl.ops.interpolate` and `popxl.ops.roi_align`: kernels against ONNX's documented
examples and a per-sample loop reference, gradients against central differences, the
frontend (forward and autodiff in a Session) against PyTorch `F.interpolate`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import xl.dialects.popxl as P
from popxl import ops
from tests.helpers.nn_testing import run_fwd_bwd
from tests.passes.test_grad_rules import check_grads, rand
from tests.runtime.test_kernels import run1
from xl.runtime.kernels import DataRangeError

RNG = np.random.default_rng(5)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


# ------------------------------------------------------------------------------------
# interpolate
# ------------------------------------------------------------------------------------


def test_interpolate_onnx_examples() -> None:
    """The ONNX Resize documentation's upsampling examples."""
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    y = run1(P.InterpolateOp, [x], scales=(1.0, 1.0, 2.0, 3.0), mode="nearest")
    np.testing.assert_array_equal(
        y[0, 0], [[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]
    )
    y = run1(P.InterpolateOp, [x], scales=(1.0, 1.0, 2.0, 2.0), mode="linear")
    np.testing.assert_allclose(
        y[0, 0],
        [[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5], [3, 3.25, 3.75, 4]],
    )
    y = run1(
        P.InterpolateOp, [x], scales=(1.0, 1.0, 2.0, 2.0), mode="linear", coordinate_transformation_mode="align_corners"
    )
    np.testing.assert_allclose(y[0, 0, 0], [1, 4 / 3, 5 / 3, 2], rtol=1e-6)


def test_interpolate_nearest_modes_and_downsampling() -> None:
    x = np.arange(5, dtype=np.float32).reshape(1, 5)
    # scale 0.8 -> 4 outputs; half_pixel source coordinates (i + 0.5) / 0.8 - 0.5 = 0.125, 1.375, 2.625, 3.875
    for nm, want in (("round_prefer_floor", [0, 1, 3, 4]), ("floor", [0, 1, 2, 3]), ("ceil", [1, 2, 3, 4])):
        y = run1(P.InterpolateOp, [x], scales=(1.0, 0.8), mode="nearest", nearest_mode=nm)
        np.testing.assert_array_equal(y[0], want, err_msg=nm)
    # a tie: asymmetric, scale 2 -> source 0.5 at output 1
    y = run1(
        P.InterpolateOp,
        [x[:, :2]],
        scales=(1.0, 2.0),
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="round_prefer_ceil",
    )
    np.testing.assert_array_equal(y[0], [0, 1, 1, 1])
    y = run1(
        P.InterpolateOp, [x[:, :2]], scales=(1.0, 2.0), mode="nearest", coordinate_transformation_mode="asymmetric"
    )
    np.testing.assert_array_equal(y[0], [0, 0, 1, 1])


def test_interpolate_grad_kernel_is_the_adjoint() -> None:
    x = _f32(2, 3, 4)
    props = dict(scales=(1.0, 2.5, 0.5), mode="cubic", coordinate_transformation_mode="pytorch_half_pixel")
    y = run1(P.InterpolateOp, [x], **props)
    dy = _f32(*y.shape)
    dx = run1(P.InterpolateGradOp, [dy], result_types=[(x.shape, x.dtype)], **props)
    np.testing.assert_allclose(np.sum(dx * x), np.sum(y * dy), rtol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_interpolate_gradients(mode) -> None:
    check_grads(lambda e, c, x: [e("popxl.interpolate", x, scales=(1.0, 2.5, 1.5), mode=mode)], [rand((2, 3, 4))])
    check_grads(
        lambda e, c, x: [
            e("popxl.interpolate", x, scales=(0.5, 1.0), mode=mode, coordinate_transformation_mode="align_corners")
        ],
        [rand((5, 2))],
    )


TORCH_MODES = [
    ("nearest", "asymmetric", "floor", dict(mode="nearest")),
    ("nearest", "half_pixel", "round_prefer_ceil", dict(mode="nearest-exact")),
    ("linear", "pytorch_half_pixel", "round_prefer_floor", dict(mode="bilinear", align_corners=False)),
    ("linear", "align_corners", "round_prefer_floor", dict(mode="bilinear", align_corners=True)),
    ("cubic", "half_pixel", "round_prefer_floor", dict(mode="bicubic", align_corners=False)),
    ("cubic", "align_corners", "round_prefer_floor", dict(mode="bicubic", align_corners=True)),
]


@pytest.mark.parametrize("case", TORCH_MODES, ids=lambda c: c[3]["mode"] + str(c[3].get("align_corners", "")))
@pytest.mark.parametrize("scale", [(2.0, 3.0), (1.5, 2.5), (0.5, 0.6)])
def test_ops_interpolate_matches_torch(torch, case, scale) -> None:
    mode, coord, nearest, targs = case
    x = _f32(2, 3, 4, 5)
    y, (dx,), dy = run_fwd_bwd(
        lambda a: ops.interpolate(
            a, (1.0, 1.0) + scale, mode=mode, nearest_mode=nearest, coordinate_transformation_mode=coord
        ),
        [x],
    )
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.interpolate(xt, scale_factor=scale, **targs)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_interpolate_errors() -> None:
    import popxl

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((1, 1, 2, 2), np.float32))
        with pytest.raises(
            ValueError, match=r"ops.interpolate: mode 'bilinear' is not valid, must be one of nearest, linear, cubic"
        ):
            ops.interpolate(x, mode="bilinear")
        with pytest.raises(ValueError, match=r"ops.interpolate: scale_factor \(2.0, 2.0\) must have 4 entries"):
            ops.interpolate(x, (2.0, 2.0))
        with pytest.raises(ValueError, match=r"popxl.interpolate: scales \(1.0, 1.0, 0.1, 1.0\) give an empty output"):
            ops.interpolate(x, (1.0, 1.0, 0.1, 1.0))


# ------------------------------------------------------------------------------------
# roi_align
# ------------------------------------------------------------------------------------


def _bilinear(img: np.ndarray, y: float, x: float) -> np.ndarray:
    """One sample (all channels), as torchvision / ONNX RoiAlign."""
    c, h, w = img.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return np.zeros(c)
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return (
        (1 - ly) * (1 - lx) * img[:, y0, x0]
        + (1 - ly) * lx * img[:, y0, x1]
        + ly * (1 - lx) * img[:, y1, x0]
        + ly * lx * img[:, y1, x1]
    )


def ref_roi_align(t, rois, bidx, out_size, scale, ratio, aligned=False):
    ph, pw = out_size
    out = np.zeros((len(rois), t.shape[1], ph, pw))
    off = 0.5 if aligned else 0.0
    for r, (x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        sx, sy = x1 * scale - off, y1 * scale - off
        rw, rh = x2 * scale - off - sx, y2 * scale - off - sy
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        img = t[bidx[r]].astype(np.float64)
        for i in range(ph):
            for j in range(pw):
                acc = np.zeros(t.shape[1])
                for iy in range(gh):
                    for ix in range(gw):
                        y = sy + i * bh + (iy + 0.5) * bh / gh
                        x = sx + j * bw + (ix + 0.5) * bw / gw
                        acc += _bilinear(img, y, x)
                out[r, :, i, j] = acc / max(gh * gw, 1)
    return out


ROIS = np.array([[0.0, 0.0, 7.0, 7.0], [2.5, 1.0, 6.0, 4.5], [-2.0, 3.0, 20.0, 6.0], [5.0, 5.0, 5.5, 5.2]], np.float32)
BIDX = np.array([0, 1, 1, 0], np.int32)


@pytest.mark.parametrize(
    ("scale", "ratio", "aligned"), [(1.0, 2, False), (0.5, 1, False), (1.0, 0, False), (0.75, 3, True), (1.0, 0, True)]
)
def test_roi_align_kernel_matches_loop_reference(scale, ratio, aligned) -> None:
    t = _f32(2, 3, 8, 9)
    props = dict(output_size=(3, 2), spatial_scale=scale, sampling_ratio=ratio, aligned=aligned)
    y = run1(P.RoiAlignOp, [t, ROIS, BIDX], **props)
    np.testing.assert_allclose(y, ref_roi_align(t, ROIS, BIDX, (3, 2), scale, ratio, aligned), rtol=1e-5, atol=1e-5)
    # the gradient kernel is the adjoint
    dy = _f32(*y.shape)
    dx = run1(P.RoiAlignGradOp, [dy, ROIS, BIDX], result_types=[(t.shape, t.dtype)], **props)
    np.testing.assert_allclose(np.sum(dx * t), np.sum(y * dy), rtol=1e-4)


def test_roi_align_gradient_and_frontend() -> None:
    rois = ROIS[:2].astype(np.float64)
    bidx = BIDX[:2]
    check_grads(
        lambda e, c, x: [
            e("popxl.roi_align", x, c(rois), c(bidx), output_size=(2, 2), spatial_scale=1.0, sampling_ratio=2)
        ],
        [rand((2, 2, 6, 7))],
    )
    t = _f32(2, 3, 8, 9)
    y, (dt,), dy = run_fwd_bwd(lambda a: ops.roi_align(a, ROIS, BIDX, (2, 3), 0.5, 2), [t])
    np.testing.assert_allclose(y, ref_roi_align(t, ROIS, BIDX, (2, 3), 0.5, 2), rtol=1e-5, atol=1e-5)
    assert dt.shape == t.shape and np.sum(dt * t) == pytest.approx(np.sum(y * dy), rel=1e-4)


def test_roi_align_errors() -> None:
    t = _f32(2, 3, 8, 9)
    with pytest.raises(DataRangeError, match=r"popxl.roi_align: batch index 2 .* out of range \[0, 2\)"):
        run1(
            P.RoiAlignOp,
            [t, ROIS, np.array([0, 2, 0, 0], np.int32)],
            output_size=(2, 2),
            spatial_scale=1.0,
            sampling_ratio=1,
        )
    import popxl

    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(t)
        with pytest.raises(ValueError, match=r"popxl.roi_align: rois must be \(num_rois, 4\)"):
            ops.roi_align(v, np.zeros((3, 5), np.float32), np.zeros(3, np.int32), (2, 2), 1.0, 1)
        with pytest.raises(ValueError, match=r"popxl.roi_align: batch_index must be \(3,\), one per RoI"):
            ops.roi_align(v, np.zeros((3, 4), np.float32), np.zeros(2, np.int32), (2, 2), 1.0, 1)
        with pytest.raises(ValueError, match=r"popxl.roi_align: sampling_ratio must be >= 0"):
            ops.roi_align(v, np.zeros((3, 4), np.float32), np.zeros(3, np.int32), (2, 2), 1.0, -1)
