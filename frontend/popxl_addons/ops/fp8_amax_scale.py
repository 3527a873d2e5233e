"""`fp8_amax_scale`: the float8 scale from the absolute maximum of a tensor
(popxl_addons.ops.fp8_amax_scale)."""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.ops.fp8_utils import FpDef, float8_143_def, float8_152_def

__all__ = ["fp8_amax_scale"]


def float8_format(dtype: Any, what: str) -> FpDef:
    """The `FpDef` of `popxl.float8_143` / `float8_152` (RuntimeError for another dtype)."""
    if dtype == popxl.float8_143:
        return float8_143_def
    if dtype == popxl.float8_152:
        return float8_152_def
    raise RuntimeError(f"{what}: dtype {dtype} not currently supported (popxl.float8_143 or popxl.float8_152)")


def check_float_source(src: Any, what: str) -> None:
    if not isinstance(src, popxl.Tensor):
        raise TypeError(f"{what}: src must be a popxl Tensor, got {type(src).__name__}")
    if src.dtype not in (popxl.float16, popxl.float32):
        raise RuntimeError(f"{what}: dtype {src.dtype} not currently supported (float16 or float32)")


def fp8_amax_scale(src: popxl.Tensor, dtype: Any = popxl.float8_143) -> popxl.Tensor:
    """The `log2_scale` for `ops.pow2scale_cast_to_fp8(src, log2_scale, dtype)` that maps the
    largest `|src|` just below the format's largest value: `floor(log2(max_value /
    max|src|))` over the finite values of `src`, clipped to [-31, 31] (no finite non-zero
    value: 31), an int32 scalar.

    Args:
        src: a float16 or float32 tensor (RuntimeError otherwise).
        dtype: `popxl.float8_143` (default) or `popxl.float8_152`.
    """
    what = "addons.ops.fp8_amax_scale"
    check_float_source(src, what)
    fmt = float8_format(dtype, what)
    f64 = popxl.float64
    x = ops.cast(src, f64)
    magnitude = ops.where(ops.isfinite(x), ops.abs(x), popxl.constant(0.0, f64))
    # the smallest float32 normal keeps the quotient finite for an all-zero src
    amax = ops.maximum(ops.max(magnitude), popxl.constant(float(np.finfo(np.float32).tiny), f64))
    log2_scale = ops.floor(ops.log2(popxl.constant(fmt.max_value, f64) / amax))
    return ops.cast(ops.clip(log2_scale, -31.0, 31.0), popxl.int32)
