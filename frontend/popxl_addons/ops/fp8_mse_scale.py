"""`fp8_mse_scale`: the float8 scale that loses the least, by mean squared error
(popxl_addons.ops.fp8_mse_scale).

Every candidate `log2_scale` in [-31, 31] is tried on the device in a `repeat` of 63
iterations: `src * 2**s` saturated to the format's range, cast to float8, cast back and
scaled by `2**-s`; the error is the mean of the squared differences over the finite
values. The result is the candidate with the smallest error, the middle one among equal
errors: the same rule and the same numbers as `popxl.fp8_utils.host_fp8_mse_scale_pb`
(upstream estimates the error from a histogram of exponents instead, as
`popxl.fp8_utils.host_fp8_mse_scale` does on the host).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.ops.fp8_amax_scale import check_float_source, float8_format

__all__ = ["fp8_mse_scale"]

_LOW, _HIGH = -31, 31


def fp8_mse_scale(src: popxl.Tensor, dtype: Any = popxl.float8_143) -> popxl.Tensor:
    """The int32 scalar `log2_scale` in [-31, 31] minimising the mean squared error of
    `pow2scale_cast_from_fp8(pow2scale_cast_to_fp8(src, s, dtype), -s)` against `src`
    (values beyond the format's range saturated; non-finite values ignored; 0 when no
    value is finite).

    Args:
        src: a float16 or float32 tensor (RuntimeError otherwise).
        dtype: `popxl.float8_143` (default) or `popxl.float8_152`.
    """
    what = "addons.ops.fp8_mse_scale"
    check_float_source(src, what)
    float8_format(dtype, what)
    f64 = popxl.float64
    big = float(ml_dtypes.finfo(dtype.as_numpy()).max)
    n = _HIGH - _LOW + 1
    x = ops.cast(src.reshape((src.nelms,)), f64)
    finite = ops.isfinite(x)
    keep = ops.cast(finite, f64)
    x = ops.where(finite, x, popxl.constant(0.0, f64))
    count = ops.maximum(ops.sum(keep), popxl.constant(1.0, f64))
    slots = np.arange(n, dtype=np.int32)

    def candidate(s: popxl.Tensor, errors: popxl.Tensor, x: popxl.Tensor, keep: popxl.Tensor, count: popxl.Tensor):
        bound = popxl.constant(big, f64) * ops.pow(popxl.constant(2.0, f64), ops.neg(ops.cast(s, f64)))
        low = ops.maximum(x, ops.neg(bound))
        clipped = ops.neg(ops.maximum(ops.neg(low), ops.neg(bound)))
        f8 = ops.pow2scale_cast_to_fp8(clipped, s, dtype)
        back = ops.cast(ops.pow2scale_cast_from_fp8(f8, ops.neg(s), popxl.float32), f64)
        diff = back - x
        error = ops.sum(diff * diff * keep) / count
        at = ops.cast(ops.equal(popxl.constant(slots), s - popxl.constant(np.int32(_LOW))), f64)
        return s + popxl.constant(np.int32(1)), errors + at * error

    s0 = popxl.constant(np.int32(_LOW))
    e0 = popxl.constant(np.zeros(n), f64)
    graph = popxl.gcg().ir.create_graph(candidate, s0, e0, x, keep, count)
    _, errors = ops.repeat(graph, n, s0, e0, x, keep, count)
    tied = ops.equal(errors, ops.min(errors))
    tied_i = ops.cast(tied, popxl.int32)
    middle = ops.sum(tied_i) / popxl.constant(np.int32(2))  # the k-th tied candidate, k = ties // 2
    hit = ops.logical_and(tied, ops.equal(ops.cumsum(tied_i, 0), middle + popxl.constant(np.int32(1))))
    return ops.cast(ops.argmax(ops.cast(hit, popxl.int32), 0), popxl.int32) + popxl.constant(np.int32(_LOW))
