"""Neural-network functions of `popxl.ops` besides the convolutions (`popxl.ops.conv`):
pooling, top-k and median, scatters, product, log-softmax, histogram, grouped gather
(re-exported by `popxl/ops/__init__.py`)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any

import numpy as np

from popxl import dtypes
from popxl.ops import _ops
from popxl.ops._utils import as_float, as_int, axes_tuple, current_op, emit, emit1, to_tensor, wrap_public_ops
from popxl.ops.conv import PadType, _ints, check_pad_type, same_pads
from popxl.tensor import Tensor, TensorLike, constant
from xl.dialects.popxl import (
    COORDINATE_MODES,
    INTERPOLATE_MODES,
    NEAREST_MODES,
    SCATTER_REDUCTIONS,
    AveragePoolOp,
    HistogramOp,
    InterpolateOp,
    LogSoftmaxOp,
    MaxPoolOp,
    ReduceProdOp,
    RoiAlignOp,
    ScatterOp,
    ScatterReduceOp,
    TopkOp,
)


def _pool_props(
    t: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    out_pads: Any,
    dilation: Any,
    in_dilations: Any,
    auto_pad: Any,
    ceil_mode: Any,
) -> dict[str, Any]:
    if not isinstance(t, Tensor):
        raise TypeError(f"{current_op()}: t must be a Tensor, got {type(t).__name__}")
    if t.rank < 3:
        raise ValueError(f"{current_op()}: t must be (N, C, *spatial), got shape {t.shape}")
    nd = t.rank - 2
    k = _ints(kernel_size, "kernel_size")
    if len(k) != nd:
        raise ValueError(f"{current_op()}: kernel_size {k} must have {nd} entries for input shape {t.shape}")

    def per_dim(v: Any, arg: str, n: int, fill: int) -> tuple[int, ...]:
        if v is None or v == () or v == []:
            return (fill,) * n
        got = _ints(v, arg)
        if len(got) != n:
            raise ValueError(f"{current_op()}: {arg} {got} must have {n} entries for input shape {t.shape}")
        return got

    s = per_dim(stride, "stride", nd, 1)
    p = per_dim(padding, "padding", 2 * nd, 0)
    d = per_dim(dilation, "dilation", nd, 1)
    if any(per_dim(out_pads, "out_pads", 2 * nd, 0)):
        raise ValueError(f"{current_op()}: out_pads other than zeros are not supported in xl")
    if any(x != 1 for x in per_dim(in_dilations, "in_dilations", nd, 1)):
        raise ValueError(f"{current_op()}: in_dilations other than ones are not supported in xl")
    auto_pad = check_pad_type(auto_pad, "auto_pad")
    if auto_pad == "valid":
        p = (0,) * (2 * nd)
    elif auto_pad in ("same_upper", "same_lower"):
        extent = [di * (ki - 1) + 1 for di, ki in zip(d, k)]
        p = same_pads(t.shape[2:], extent, s, auto_pad == "same_upper")
    return {"kernel": k, "stride": s, "pads": p, "dilation": d, "ceil_mode": True if ceil_mode else None}


def average_pool(
    t: Tensor,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None = None,
    padding: tuple[int, ...] | None = None,
    out_pads: tuple[int, ...] | None = None,
    dilation: tuple[int, ...] | None = None,
    in_dilations: tuple[int, ...] | None = None,
    auto_pad: PadType | str = "not_set",
    ceil_mode: bool | None = None,
) -> Tensor:
    """Mean over each `kernel_size` window of the spatial dims of `t` `(N, C, *spatial)`.

    As upstream the padding is not counted: a window's divisor is the number of its
    elements inside `t` (PyTorch `avg_pool*d(..., count_include_pad=False)`). `stride`
    (default 1), `padding` (ONNX order, begins then ends; each at most half the window),
    `dilation` (default 1), `auto_pad` (see `PadType`), `ceil_mode` (ceil instead of floor
    for the output size; the last window starts inside the input or its begin padding).
    `out_pads` and `in_dilations` (Poplar options) must be zeros / ones in xl.
    Differentiable.
    """
    props = _pool_props(t, kernel_size, stride, padding, out_pads, dilation, in_dilations, auto_pad, ceil_mode)
    return emit1(AveragePoolOp, [t], **props)


def max_pool(
    t: Tensor,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None = None,
    padding: tuple[int, ...] | None = None,
    out_pads: tuple[int, ...] | None = None,
    dilation: tuple[int, ...] | None = None,
    in_dilations: tuple[int, ...] | None = None,
    auto_pad: PadType | str = "not_set",
    ceil_mode: bool | None = None,
    storage_order: bool | None = None,
) -> Tensor:
    """Maximum over each `kernel_size` window of the spatial dims of `t` `(N, C, *spatial)`
    (padding never wins); arguments as `average_pool`. `storage_order` (the layout of
    upstream's unused index output) is accepted. Differentiable: the gradient of a window
    goes to its first maximum, as PyTorch.
    """
    props = _pool_props(t, kernel_size, stride, padding, out_pads, dilation, in_dilations, auto_pad, ceil_mode)
    return emit1(MaxPoolOp, [t], **props)


def _tensor(t: Any, arg: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{current_op()}: {arg} must be a Tensor, got {type(t).__name__}")
    return t


def topk(
    t: Tensor,
    k: int,
    axis: int,
    largest: bool = True,
    sorted: bool = True,
    available_memory_proportion: float | None = None,
) -> tuple[Tensor, Tensor]:
    """`(values, indices)` of the `k` largest (`largest=False`: smallest) elements of `t`
    along `axis`: `axis` has size `k` in both, the indices are int32. The values are in
    order (largest first, or smallest first) whatever `sorted` says (unsorted output may
    be in any order upstream); on ties the lower index comes first.

    Differentiable in `t` (the gradient of a value goes to where it was taken from).
    `available_memory_proportion` is an IPU hint, accepted and ignored.
    """
    values, indices = emit(
        TopkOp,
        [_tensor(t, "t")],
        k=as_int(k, "k"),
        axis=as_int(axis, "axis"),
        largest=None if largest else False,
        sorted=None if sorted else False,
    )
    return values, indices


def median(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Median over `axis` (all axes when None); dims as in `sum`. With an even number of
    elements it is the lower of the two middle ones (as PyTorch `median`), so it is
    always an element of `t`; the gradient goes to that element."""
    t = _tensor(t, "t")
    axes = axes_tuple(axis, t.rank)
    red = tuple(range(t.rank)) if axes is None else tuple(sorted({a % builtins.max(t.rank, 1) for a in axes}))
    keep = tuple(i for i in range(t.rank) if i not in red)
    moved = _ops.transpose(t, keep + red) if keep + red != tuple(range(t.rank)) else t
    n = int(np.prod([t.shape[i] for i in red])) if red else 1
    flat = _ops.reshape(moved, tuple(t.shape[i] for i in keep) + (n,))
    smallest, _ = topk(flat, (n + 1) // 2, axis=-1, largest=False)
    mid = _ops.slice(smallest, start=(n + 1) // 2 - 1, stop=(n + 1) // 2, axis=-1)
    shape = tuple(1 if i in red else d for i, d in enumerate(t.shape)) if keepdims else tuple(t.shape[i] for i in keep)
    return _ops.reshape(mid, shape)


def prod(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Product over `axis` (all axes when None); dims as in `sum`. Differentiable: the
    gradient of each element is the product of the others (exact with zeros)."""
    t = _tensor(t, "t")
    return emit1(ReduceProdOp, [t], axis=axes_tuple(axis, t.rank), keepdims=bool(keepdims) or None)


def log_softmax(t: Tensor, axis: int) -> Tensor:
    """`log(softmax(t))` along `axis` (required, as `softmax`), computed stably as
    `t - max - log(sum(exp(t - max)))` (float). Differentiable."""
    return emit1(LogSoftmaxOp, [_tensor(t, "t")], axis=as_int(axis, "axis"))


def scatter(
    t: Tensor,
    indices: TensorLike,
    values: TensorLike,
    axis: int = 0,
    available_memory_proportion: float | None = None,
) -> Tensor:
    """A copy of `t` with `values[i]` written at position `indices[i]` along `axis` (the
    other coordinates of `i` unchanged; ONNX ScatterElements). `indices` (int) and
    `values` have one shape, of `t`'s rank and at most its size per dim; negative
    indices count from the end, an index out of range is an error when the program runs.
    With repeated indices the last write wins. Differentiable in `t` and `values`.
    """
    t = _tensor(t, "t")
    return emit1(
        ScatterOp, [t, to_tensor(indices, dtypes.int32), to_tensor(values, t.dtype)], axis=as_int(axis, "axis")
    )


def scatter_reduce(
    data: Tensor,
    indices: TensorLike,
    reduction: str,
    initial_values: Tensor | None = None,
    axis: int = 0,
    axis_size: int | None = None,
    enable_index_broadcast: bool = True,
    available_memory_proportion: float | None = None,
) -> Tensor:
    """Reduces (`reduction`: `'sum'`, `'max'`, `'min'`, or `'none'`: the last slice
    written wins) the slices of `data` along `axis` whose `indices` are equal into slot
    `index` of a result with `axis_size` slots along `axis` (`data.shape` elsewhere).

    `indices` (int, in `[0, axis_size)`) have the shape of `data`, or are 1-D along
    `axis` and broadcast over the other dims (`enable_index_broadcast`). With
    `initial_values` (the result's shape; `axis_size` defaults to their size) the
    reduction starts from them; without, a slot no index refers to is 0. One of the two
    must be given (ValueError). Differentiable in `data` and `initial_values` (max/min:
    the gradient goes to the elements equal to the result, ties sharing it).
    """
    data = _tensor(data, "data")
    if initial_values is None and axis_size is None:
        raise ValueError(f"{current_op()}: one of initial_values and axis_size must be specified")
    if reduction not in SCATTER_REDUCTIONS:
        raise ValueError(f"{current_op()}: the reduction must be one of {list(SCATTER_REDUCTIONS)}, got {reduction!r}")
    ax = as_int(axis, "axis")
    if axis_size is None:
        assert initial_values is not None
        axis_size = _tensor(initial_values, "initial_values").shape[ax]
    indices = to_tensor(indices, dtypes.int32)
    if not enable_index_broadcast and indices.shape != data.shape:
        raise ValueError(
            f"{current_op()}: indices {indices.shape} must have the shape of data {data.shape} "
            "(enable_index_broadcast=False)"
        )
    return emit1(
        ScatterReduceOp,
        [data, indices, initial_values],
        axis=ax,
        axis_size=as_int(axis_size, "axis_size"),
        reduction=str(reduction),
    )


def histogram(t: Tensor, levels: list[float], absolute_of_input: bool) -> Tensor:
    """Counts (uint32, `len(levels) + 1` of them) of the elements of `t` (of `|t|` when
    `absolute_of_input`) in the bins `x < levels[0]`, `levels[i] <= x < levels[i + 1]`,
    `x >= levels[-1]`, as upstream (PopART Histogram); `levels` ascending. Not
    differentiable."""
    lv = tuple(as_float(v, "levels") for v in levels)
    return emit1(HistogramOp, [_tensor(t, "t")], levels=lv, absolute_of_input=True if absolute_of_input else None)


def groupedgather(
    t: Tensor,
    indices: TensorLike,
    axis: int = 0,
    group_size: int = 1,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """`gather` applied per group: `t` and `indices` have a leading group dim of size
    `group_size`, and group `g` of the result is `gather(t[g], indices[g], axis)`
    (`axis` counts the dims of `t[g]`), so the result is
    `(group_size, *t.shape[1:axis+1], *indices.shape[1:], *t.shape[axis+2:])`.

    An index out of range gives zeros, as `gather`: with `zero_OOR` the range is `[0, n)`
    (negative indices give zeros, as upstream), without it `[-n, n)`, negative indices
    counting from the end. Differentiable in `t` (out-of-range indices get no gradient).
    """
    t = _tensor(t, "t")
    g = as_int(group_size, "group_size")
    indices = to_tensor(indices, dtypes.int32)
    if t.rank < 2 or indices.rank < 1 or t.shape[0] != g or indices.shape[0] != g:
        raise ValueError(
            f"{current_op()}: t {t.shape} and indices {indices.shape} must both have the leading group dim of size {g}"
        )
    rank = t.rank - 1
    a = as_int(axis, "axis")
    if not -rank <= a < rank:
        raise ValueError(f"{current_op()}: axis {a} is out of range for the rank {rank} of each group")
    a = a % rank + 1  # in t's dims
    size = t.shape[a]
    before = list(range(1, a))
    after = list(range(a + 1, t.rank))
    table = _ops.reshape(_ops.transpose(t, [0, a, *before, *after]), (g * size, *(t.shape[i] for i in before + after)))
    if indices.dtype != dtypes.int32:
        indices = _ops.cast(indices, dtypes.int32)
    zero = constant(np.int32(0))
    idx = indices if zero_OOR else _ops.where(_ops.greater(zero, indices), indices + size, indices)
    oor = _ops.logical_or(_ops.greater(zero, idx), _ops.greater(idx, constant(np.int32(size - 1))))
    offsets = constant((np.arange(g, dtype=np.int32) * size).reshape((g,) + (1,) * (indices.rank - 1)))
    flat_idx = _ops.where(oor, constant(np.int32(g * size)), idx + offsets)
    out = _ops.gather(table, flat_idx, 0, zero_OOR=True)  # (g, *idx, *before, *after)
    ni, nb = indices.rank - 1, len(before)
    perm = [0, *range(1 + ni, 1 + ni + nb), *range(1, 1 + ni), *range(1 + ni + nb, out.rank)]
    return _ops.transpose(out, perm) if perm != list(range(out.rank)) else out


def interpolate(
    t: Tensor,
    scale_factor: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0),
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
    coordinate_transformation_mode: str = "half_pixel",
) -> Tensor:
    """`t` resized to `floor(t.shape * scale_factor)` (ONNX Resize): `scale_factor` has one
    entry per dim of `t`; `mode` is `"nearest"`, `"linear"` (multilinear) or `"cubic"`
    (a = -0.75, as PyTorch bicubic); `nearest_mode` (`"round_prefer_floor"`,
    `"round_prefer_ceil"`, `"floor"`, `"ceil"`) rounds the source coordinate of the
    nearest mode; `coordinate_transformation_mode` (`"half_pixel"`,
    `"pytorch_half_pixel"`, `"align_corners"`, `"asymmetric"`, `"tf_crop_and_resize"`
    with the whole input as region) maps an output coordinate to the input. Edges are
    replicated. Differentiable (the transposed weights).

    PyTorch equivalents: `F.interpolate(mode="bilinear")` is linear + pytorch_half_pixel,
    `align_corners=True` is align_corners, `mode="nearest"` is nearest + asymmetric + floor.
    """
    t = _tensor(t, "t")
    for name, value, allowed in (
        ("mode", mode, INTERPOLATE_MODES),
        ("nearest_mode", nearest_mode, NEAREST_MODES),
        ("coordinate_transformation_mode", coordinate_transformation_mode, COORDINATE_MODES),
    ):
        if value not in allowed:
            raise ValueError(f"{current_op()}: {name} {value!r} is not valid, must be one of {', '.join(allowed)}")
    scales = tuple(as_float(s, "scale_factor") for s in scale_factor)
    if len(scales) != t.rank:
        raise ValueError(f"{current_op()}: scale_factor {scales} must have {t.rank} entries (one per dim of {t.shape})")
    return emit1(
        InterpolateOp,
        [t],
        scales=scales,
        mode=str(mode),
        nearest_mode=str(nearest_mode),
        coordinate_transformation_mode=str(coordinate_transformation_mode),
    )


def roi_align(
    t: Tensor,
    rois: TensorLike,
    batch_index: TensorLike,
    output_size: tuple[int, int],
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool = False,
) -> Tensor:
    """Average RoI Align of the feature map `t` `(N, C, H, W)`: RoI `r` (`rois[r]` =
    `[x1, y1, x2, y2]` in input-image coordinates, scaled by `spatial_scale`, of image
    `batch_index[r]`) is split into `output_size` (height, width) bins, each the mean of
    `sampling_ratio` x `sampling_ratio` bilinear samples (0: `ceil(roi size / output
    size)` per dim). The result is `(num_rois, C, *output_size)`. As ONNX RoiAlign-10
    (PyTorch `torchvision.ops.roi_align(aligned=False)`); `aligned=True` shifts the boxes
    by half a pixel (torchvision's `aligned=True`). Differentiable in `t` (not in `rois`).
    """
    t = _tensor(t, "t")
    return emit1(
        RoiAlignOp,
        [t, to_tensor(rois, t.dtype), to_tensor(batch_index, dtypes.int32)],
        output_size=tuple(as_int(v, "output_size") for v in output_size),
        spatial_scale=as_float(spatial_scale, "spatial_scale"),
        sampling_ratio=as_int(sampling_ratio, "sampling_ratio"),
        aligned=True if aligned else None,
    )


__all__ = [
    "interpolate",
    "roi_align",
    "average_pool",
    "max_pool",
    "topk",
    "median",
    "prod",
    "log_softmax",
    "scatter",
    "scatter_reduce",
    "histogram",
    "groupedgather",
]
wrap_public_ops(globals(), __all__, "popxl.ops")
