"""Neural-network functions of `popxl.ops` besides the convolutions (`popxl.ops.conv`):
pooling (re-exported by `popxl/ops/__init__.py`)."""

from __future__ import annotations

from typing import Any

from xl.dialects.popxl import AveragePoolOp, MaxPoolOp

from popxl.ops._utils import current_op, emit1, wrap_public_ops
from popxl.ops.conv import PadType, _ints, check_pad_type, same_pads
from popxl.tensor import Tensor


def _pool_props(
    t: Tensor, kernel_size: Any, stride: Any, padding: Any, out_pads: Any, dilation: Any,
    in_dilations: Any, auto_pad: Any, ceil_mode: Any,
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


__all__ = ["average_pool", "max_pool"]
wrap_public_ops(globals(), __all__, "popxl.ops")
