"""`fp8_mse_scale`: the float8 scale that loses the least by the estimated mean squared
error (popxl_addons.ops.fp8_mse_scale), computed on the device.

As upstream, the error is estimated from a histogram of the data's powers of two: the
magnitudes are counted in 254 bins (`ops.histogram` at the levels 2**-126 ... 2**126), each
bin's count over the number of values weighs its cost for each candidate scale bias in
[-31, 31] (the tables of `popxl.fp8_utils.fp8_mse_costs`), and the candidate with the
smallest estimate is taken (the middle one among equal estimates). The result is the
`log2_scale` of `popxl.fp8_utils.host_fp8_mse_scale` for the same data, bit for bit: the
estimates are summed bin by bin in the same order, in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl.fp8_utils import fp8_mse_costs
from popxl_addons.ops.fp8_amax_scale import check_float_source, float8_format

__all__ = ["fp8_mse_scale"]

_LOW = -31


def fp8_mse_scale(src: popxl.Tensor, dtype: Any = popxl.float8_143) -> popxl.Tensor:
    """The int32 scalar `log2_scale` in [-31, 31] for `ops.pow2scale_cast_to_fp8(src,
    log2_scale, dtype)` with the smallest estimated mean squared error (see the module
    docstring; NaN values count in the bin of [0.5, 1), as upstream's estimate puts them).

    Args:
        src: a float16 or float32 tensor (RuntimeError otherwise).
        dtype: `popxl.float8_143` (default) or `popxl.float8_152`.
    """
    what = "addons.ops.fp8_mse_scale"
    check_float_source(src, what)
    float8_format(dtype, what)
    f64 = popxl.float64
    levels, start, costs = fp8_mse_costs(dtype, src.dtype.as_numpy())
    x = ops.cast(src.reshape((src.nelms,)), popxl.float32)  # float16 data is exact in float32
    x = ops.where(ops.isnan(x), popxl.constant(np.float32(0.75)), x)  # upstream counts NaN there
    counts = ops.cast(ops.histogram(x, [float(v) for v in levels], True), f64)
    weights = counts / popxl.constant(float(src.nelms), f64)
    n_bins = costs.shape[1]

    def add_bin(k: popxl.Tensor, mse: popxl.Tensor, weights: popxl.Tensor, costs: popxl.Tensor):
        w = ops.dynamic_slice(weights, k + popxl.constant(np.uint32(1)), [0], [1]).reshape(())
        c = ops.dynamic_slice(costs, k, [0], [1]).reshape((costs.shape[1],))
        return k + popxl.constant(np.uint32(1)), mse + c * w

    k0 = popxl.constant(np.uint32(0))
    mse0 = popxl.constant(start, f64)
    costs_t = popxl.constant(np.ascontiguousarray(costs.T), f64)  # one row per bin
    graph = popxl.gcg().ir.create_graph(add_bin, k0, mse0, weights, costs_t)
    _, mse = ops.repeat(graph, n_bins, k0, mse0, weights, costs_t)
    tied = ops.equal(mse, ops.min(mse))
    tied_i = ops.cast(tied, popxl.int32)
    middle = ops.sum(tied_i) / popxl.constant(np.int32(2))  # the k-th tied candidate, k = ties // 2
    hit = ops.logical_and(tied, ops.equal(ops.cumsum(tied_i, 0), middle + popxl.constant(np.int32(1))))
    bias = ops.cast(ops.argmax(ops.cast(hit, popxl.int32), 0), popxl.int32) + popxl.constant(np.int32(_LOW))
    return ops.neg(bias)  # the scale is minus the format's bias, as upstream
