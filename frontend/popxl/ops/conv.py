"""`popxl.ops.conv`, `popxl.ops.conv_transpose` and `PadType` (upstream `popxl/ops/conv.py`).

Tensors are NCHW as upstream: the input is `(N, C, *spatial)` with 1, 2 or 3 (or more)
spatial dims, `padding` is ONNX-ordered `[begin_1, ..., begin_n, end_1, ..., end_n]`.
`pad_type` other than `"not_set"` is resolved into explicit padding when the op is built
(shapes are static). The IPU hints (`available_memory_proportions`, `partials_types`,
`enable_conv_dithering`) are accepted and have no effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from popxl.ops._utils import as_int, composed, current_op, emit1, wrap_public_ops
from popxl.tensor import Tensor
from xl.dialects.popxl import ConvOp, ConvTransposeOp


class PadType(StrEnum):
    """How padding is chosen (upstream a `Literal` of these strings; the plain strings
    are accepted wherever a `PadType` is): `"not_set"` (the explicit `padding`),
    `"same_upper"` / `"same_lower"` (output size `ceil(input / stride)`; an odd total
    padding puts the extra element at the end / the beginning) or `"valid"` (no padding).
    """

    not_set = "not_set"
    same_upper = "same_upper"
    same_lower = "same_lower"
    valid = "valid"


PadType.__module__ = "popxl.ops"

PAD_TYPES: tuple[str, ...] = ("not_set", "same_upper", "same_lower", "valid")


def _ints(value: Any, arg: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (as_int(value, arg),)
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise TypeError(f"{current_op()}: {arg} must be a tuple of ints, got {value!r}")
    return tuple(as_int(v, arg) for v in value)


def spatial_arg(value: Any, arg: str, nd: int, default: Sequence[int], fill: int) -> tuple[int, ...]:
    """A per-spatial-dim argument with `nd` entries; the 2-d default given for other ranks
    means `fill` on every dim."""
    v = _ints(value, arg)
    if len(v) == nd:
        return v
    if v == tuple(default) and all(x == fill for x in v):
        return (fill,) * nd
    raise ValueError(f"{current_op()}: {arg} {v} must have {nd} entries for an input with {nd} spatial dims")


def check_pad_type(pad_type: Any, arg: str = "pad_type") -> str:
    if isinstance(pad_type, PadType):
        return pad_type.value
    if not isinstance(pad_type, str) or pad_type not in PAD_TYPES:
        raise ValueError(
            f"{current_op()}: {arg} {pad_type!r} is not valid, must be not_set, same_upper, same_lower or valid"
        )
    return str(pad_type)


def same_pads(in_sp: Sequence[int], extent: Sequence[int], stride: Sequence[int], upper: bool) -> tuple[int, ...]:
    """Pads giving `ceil(input / stride)` outputs for windows spanning `extent`."""
    nd = len(in_sp)
    begin, end = [0] * nd, [0] * nd
    for i, (x, e, s) in enumerate(zip(in_sp, extent, stride)):
        total = max(0, (-(-x // s) - 1) * s + e - x)
        small, large = total // 2, total - total // 2
        begin[i], end[i] = (small, large) if upper else (large, small)
    return (*begin, *end)


def _spatial_rank(t: Tensor) -> int:
    if not isinstance(t, Tensor):
        raise TypeError(f"{current_op()}: t must be a Tensor, got {type(t).__name__}")
    if t.rank < 3:
        raise ValueError(f"{current_op()}: t must be (N, C, *spatial), got shape {t.shape}")
    return t.rank - 2


def conv(
    t: Tensor,
    weight: Tensor,
    stride: tuple[int, ...] = (1, 1),
    padding: tuple[int, ...] = (0, 0, 0, 0),
    dilation: tuple[int, ...] = (1, 1),
    groups: int = 1,
    pad_type: PadType | str = "not_set",
    available_memory_proportions: list[float] | None = None,
    partials_types: list[str] | None = None,
    enable_conv_dithering: list[int] | None = None,
) -> Tensor:
    """Convolution (cross-correlation, as PyTorch `conv1d/2d/3d`) of `t` `(N, C, *spatial)`
    with `weight` `(M, C / groups, *kernel)`: the result is `(N, M, *out)` with
    `out = floor((x + pad_begin + pad_end - dilation * (k - 1) - 1) / stride) + 1`.

    `stride`, `dilation`: one entry per spatial dim; `padding`: begins then ends (ONNX).
    The defaults are those of a 2-d convolution and mean 1 / 0 / 1 for other ranks.
    `pad_type`: see `PadType` (`ValueError` for another value). Differentiable in `t` and
    `weight`.
    """
    nd = _spatial_rank(t)
    pad_type = check_pad_type(pad_type)
    s = spatial_arg(stride, "stride", nd, (1, 1), 1)
    d = spatial_arg(dilation, "dilation", nd, (1, 1), 1)
    p = spatial_arg(padding, "padding", 2 * nd, (0, 0, 0, 0), 0)
    if pad_type == "valid":
        p = (0,) * (2 * nd)
    elif pad_type in ("same_upper", "same_lower"):
        k = weight.shape[2:] if weight.rank == nd + 2 else (1,) * nd
        extent = [di * (ki - 1) + 1 for di, ki in zip(d, k)]
        p = same_pads(t.shape[2:], extent, s, pad_type == "same_upper")
    return emit1(ConvOp, [t, weight], stride=s, pads=p, dilation=d, groups=as_int(groups, "groups"))


def conv_transpose(
    t: Tensor,
    weight: Tensor,
    stride: tuple[int, ...] = (1, 1),
    padding: tuple[int, ...] = (0, 0, 0, 0),
    dilation: tuple[int, ...] = (1, 1),
    groups: int = 1,
    pad_type: PadType | str = "not_set",
    output_padding: tuple[int, ...] = (),
    output_shape: tuple[int, ...] = (),
    available_memory_proportions: list[float] | None = None,
    partials_types: list[str] | None = None,
    enable_conv_dithering: list[int] | None = None,
) -> Tensor:
    """Transposed convolution (PyTorch `conv_transpose1d/2d/3d`, ONNX ConvTranspose) of
    `t` `(N, C, *spatial)` with `weight` `(C, M / groups, *kernel)`: the result is
    `(N, M, *out)`, `out = (x - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + 1
    + output_padding`.

    `output_padding` (default zeros) adds elements at the end of each spatial dim; each
    entry must be smaller than the stride or the dilation. `output_shape` (the spatial
    output size) chooses the padding instead, as ONNX (`padding` is then ignored; the
    extra element of an odd total padding goes to the beginning, to the end with
    `"same_upper"`; the full output shape `(N, C_out, *spatial)` is accepted too; a size
    larger than the convolution gives is negative padding, as in ONNX: zeros where no
    input reaches).
    `pad_type` `"same_*"` asks for `out = x * stride`, `"valid"` for no padding. Differentiable in `t` and `weight`.
    """
    nd = _spatial_rank(t)
    pad_type = check_pad_type(pad_type)
    s = spatial_arg(stride, "stride", nd, (1, 1), 1)
    d = spatial_arg(dilation, "dilation", nd, (1, 1), 1)
    p = spatial_arg(padding, "padding", 2 * nd, (0, 0, 0, 0), 0)
    op = _ints(output_padding, "output_padding") if output_padding not in (None, ()) else (0,) * nd
    if len(op) != nd:
        raise ValueError(f"{current_op()}: output_padding {op} must have {nd} entries")
    shape = _ints(output_shape, "output_shape") if output_shape not in (None, ()) else ()
    if not shape and pad_type in ("same_upper", "same_lower"):
        shape = tuple(x * si for x, si in zip(t.shape[2:], s))
    if pad_type == "valid":
        p = (0,) * (2 * nd)
    elif shape:
        if len(shape) == nd + 2:  # the full output shape (N, C_out, spatial...), as upstream's tests give it
            c_out = weight.shape[1] * as_int(groups, "groups")
            if shape[:2] != (t.shape[0], c_out):
                raise ValueError(
                    f"{current_op()}: output_shape {shape} must start with the batch size and output "
                    f"channels ({t.shape[0]}, {c_out})"
                )
            shape = shape[2:]
        if len(shape) != nd:
            raise ValueError(
                f"{current_op()}: output_shape {shape} must have {nd} entries (the spatial dims) or {nd + 2} "
                "(the full output shape)"
            )
        k = weight.shape[2:] if weight.rank == nd + 2 else (1,) * nd
        begin, end = [0] * nd, [0] * nd
        for i in range(nd):
            total = s[i] * (t.shape[2 + i] - 1) + op[i] + d[i] * (k[i] - 1) + 1 - shape[i]
            small = total // 2 if total >= 0 else -(-total // 2)  # halved toward 0, as ONNX's C++
            large = total - small
            begin[i], end[i] = (small, large) if pad_type == "same_upper" else (large, small)
        p = (*begin, *end)
    if min(p, default=0) >= 0:
        return emit1(
            ConvTransposeOp,
            [t, weight],
            stride=s,
            pads=p,
            dilation=d,
            groups=as_int(groups, "groups"),
            output_padding=op if any(op) else None,
        )
    return _conv_transpose_grown(t, weight, s, p, d, as_int(groups, "groups"), op)


@composed("ConvTranspose")
def _conv_transpose_grown(
    t: Tensor,
    weight: Tensor,
    s: tuple[int, ...],
    p: tuple[int, ...],
    d: tuple[int, ...],
    groups: int,
    op: tuple[int, ...],
) -> Tensor:
    """A transposed convolution with negative pads (an `output_shape` larger than the
    convolution gives, as ONNX allows): the convolution with those pads at 0, then zeros
    on the sides of the negative pads (no input reaches those positions); one PopART op."""
    import numpy as np

    from popxl.ops._ops import concat
    from popxl.tensor import constant

    nd = len(s)
    out = emit1(
        ConvTransposeOp,
        [t, weight],
        stride=s,
        pads=tuple(max(x, 0) for x in p),
        dilation=d,
        groups=groups,
        output_padding=op if any(op) else None,
    )
    for i in range(nd):
        axis = 2 + i
        grow_begin, grow_end = max(-p[i], 0), max(-p[nd + i], 0)
        parts = []
        for n in (grow_begin, None, grow_end):
            if n is None:
                parts.append(out)
            elif n:
                zeros_shape = out.shape[:axis] + (n,) + out.shape[axis + 1 :]
                parts.append(constant(np.zeros(zeros_shape, out.dtype.as_numpy()), out.dtype))
        if len(parts) > 1:
            out = concat(parts, axis)
    return out


__all__ = ["PadType", "conv", "conv_transpose"]
wrap_public_ops(globals(), ["conv", "conv_transpose"], "popxl.ops")
