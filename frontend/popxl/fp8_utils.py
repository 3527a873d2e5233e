"""`popxl.fp8_utils`: host-side float8 conversions (PopXL's `popxl/fp8_utils.py`).

`popxl.float8_143` / `popxl.float8_152` are Graphcore's formats (exponent bias 8 / 16, no
infinities, NaN 0x80). Host float8 data is, as in PopXL, an array of the structured dtype
`popxl.dtypes.np_dtype_float8_143` (`np.dtype([("float8_143", "u1")])`: the format's bits
as one uint8); `host_pow2scale_cast_to_fp8` and `Session` return such arrays. xl computes
with ml_dtypes (`float8_e4m3fnuz` / `float8_e5m2fnuz`, the same bits); every function
taking float8 data accepts both, and `float8_view` / `host_float8` convert between them
without copying.

```python
x8 = host_pow2scale_cast_to_fp8(np.array([1.0, 300.0], np.float32), popxl.float8_143)
# array([(64,), (128,)], dtype=[('float8_143', 'u1')]): 300 overflows (max 240) -> NaN
host_pow2scale_cast_from_fp8(x8, popxl.float32, log2_scale=1)   # [2.0, nan]
float8_view(x8).astype(np.float32)                              # [1.0, nan]
```
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from popxl.dtypes import _UPSTREAM_FLOAT8, dtype, float8_143, float8_152, float16, float32, float64
from xl.runtime.float8 import to_float8

__all__ = [
    "float8_view",
    "fp8_mse_costs",
    "host_float8",
    "host_fp8_mse_scale",
    "host_fp8_mse_scale_pb",
    "host_pow2scale_cast_from_fp8",
    "host_pow2scale_cast_to_fp8",
]

_FLOAT8 = (float8_143, float8_152)
_MIN_SCALE, _MAX_SCALE = -32, 32  # log2_scale in [-32, 32)


def _host_array(src: Any) -> np.ndarray:
    if type(src).__module__.startswith("torch"):
        src = src.detach().cpu().numpy()
    return src if isinstance(src, np.ndarray) else np.asarray(src, order="C")


def _check_log2_scale(log2_scale: Any, what: str) -> int:
    if isinstance(log2_scale, bool) or not isinstance(log2_scale, int | np.integer):
        raise RuntimeError(f"{what}: log2_scale must be an int, got {log2_scale!r}")
    if not _MIN_SCALE <= int(log2_scale) < _MAX_SCALE:
        raise RuntimeError(f"{what}: log2_scale {int(log2_scale)} is not in [-32, 32)")
    return int(log2_scale)


_COMPUTE_FLOAT8 = {float8_143._compute_np(): float8_143, float8_152._compute_np(): float8_152}


def float8_view(arr: np.ndarray) -> np.ndarray | None:
    """`arr` as the ml_dtypes float8 array xl computes with when it holds float8 data (an
    ml_dtypes float8 array itself, or the host format `np_dtype_float8_143` /
    `np_dtype_float8_152` reinterpreted: the same memory), else None."""
    if arr.dtype in _COMPUTE_FLOAT8:
        return arr
    dt = _UPSTREAM_FLOAT8.get(arr.dtype)
    if dt is None:
        return None
    return arr.view(dt._compute_np())  # same item size: a view of any layout


def host_float8(arr: np.ndarray) -> np.ndarray:
    """`arr` in the host format of its dtype: an ml_dtypes float8 array becomes a view of
    the structured `np_dtype_float8_143` / `np_dtype_float8_152` (the same bits, as PopXL
    returns float8 data); any other array is returned as it is."""
    dt = _COMPUTE_FLOAT8.get(arr.dtype)
    return arr if dt is None else arr.view(dt.as_numpy())


def host_pow2scale_cast_to_fp8(
    src: Any, dtype: dtype | None = None, log2_scale: int = 0, nan_on_overflow: bool = True
) -> np.ndarray:
    """`cast(src * 2**log2_scale, dtype)` on the host: float16/32/64 data (NumPy or torch)
    to a float8 array (`dtype` `popxl.float8_143` or `popxl.float8_152`), rounding to
    nearest even (correctly also from float64, see `xl.runtime.float8`), in the host format
    `np_dtype_float8_143` / `np_dtype_float8_152` (PopXL's). Values too large for the format
    become NaN, or the largest finite value of their sign when `nan_on_overflow` is False;
    NaN (and infinity) become NaN.

    RuntimeError when `dtype` is not a float8 dtype, `src` is not float16/32/64 or
    `log2_scale` is not an int in [-32, 32)."""
    src = _host_array(src)
    if dtype not in _FLOAT8:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    if src.dtype not in (np.float16, np.float32, np.float64):
        raise RuntimeError(f"src.dtype {src.dtype} not currently supported.")
    scale = _check_log2_scale(log2_scale, "host_pow2scale_cast_to_fp8")
    x = src.astype(np.float64) * 2.0**scale
    np_dt = dtype._compute_np()
    if not nan_on_overflow:
        big = float(ml_dtypes.finfo(np_dt).max)
        # finite values saturate; NaN and the infinities (the format has none) become NaN
        x = np.where(np.isinf(x), np.nan, np.clip(x, -big, big))
    return host_float8(to_float8(x, np_dt))


def host_pow2scale_cast_from_fp8(src: Any, dtype: dtype | None = None, log2_scale: int = 0) -> np.ndarray:
    """`cast(src, dtype) * 2**log2_scale` on the host: float8 data (the host format
    `np_dtype_float8_143` / `np_dtype_float8_152`, or ml_dtypes float8) to `dtype` (`popxl.float16`, `float32` or
    `float64`). RuntimeError for other dtypes or a `log2_scale` outside [-32, 32)."""
    src = _host_array(src)
    f8 = float8_view(src)
    if f8 is None:
        raise RuntimeError(f"src.dtype {src.dtype} not currently supported.")
    if dtype not in (float16, float32, float64):
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    scale = _check_log2_scale(log2_scale, "host_pow2scale_cast_from_fp8")
    return (f8.astype(np.float64) * 2.0**scale).astype(dtype.as_numpy())


# The histogram estimate of `host_fp8_mse_scale` (PopXL's algorithm): the data's magnitudes
# are counted per power of two over float32's normal exponents (bin k, 1 <= k <= 253, holds
# [2**(k-127), 2**(k-126)); bin 0 what is below 2**-126, zeros included; values above 2**126
# and infinities go to the last bin; NaN lands in bin 126, where frexp puts it). A scale
# candidate b in [-31, 31] keeps 2**span consecutive bins in the format's range (span: its
# number of exponents, subnormals included); below them a value is lost (error its bin's
# lower edge squared), inside it costs the relative quantisation error 2**(-2 * (m_src -
# m_f8)) of its edge squared, above it the distance from a fixed edge squared.
_SRC_EXP = (-126, 127)  # float32's exponent range (the estimate uses it for float16 data too)
_F8_EXP = {"float8_143": (-10, 7), "float8_152": (-17, 15)}  # smallest subnormal .. largest
_F8_MANTISSA = {"float8_143": 3, "float8_152": 2}
_SCALE_LOW, _SCALE_HIGH = -31, 31


def _log2_histogram(x: np.ndarray) -> np.ndarray:
    """Counts of |x| per power-of-two bin (see above): 254 bins."""
    low, high = _SRC_EXP
    a = np.abs(x.astype(np.float64).reshape(-1))
    hist = np.zeros(high - low + 1)
    with np.errstate(invalid="ignore"):
        under = a < 2.0**low
        over = a > 2.0 ** (high - 1)
    inside = ~(under | over)
    _, e = np.frexp(a[inside])
    np.add.at(hist, e - low, 1)
    hist[0] += np.count_nonzero(under)
    hist[-1] += np.count_nonzero(over)
    return hist


def fp8_mse_costs(dtype: dtype, src_dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tables of `host_fp8_mse_scale`'s estimate (the comment above `_log2_histogram`),
    for a float8 `dtype` and float16 / float32 source data: `(levels, start, costs)`.

    - `levels`: the 253 bin edges 2**-126 ... 2**126 (`popxl.ops.histogram`'s levels give
      the 254 bins of `_log2_histogram`);
    - `start`: (63,) the estimate before any bin, candidate bias -31 first;
    - `costs`: (63, 253) the cost of bin `k + 1` for each unit of its weight (its count
      over the number of values); bin 0 costs nothing.

    The estimate of candidate `c` adds `costs[c, k] * weight[k + 1]` to `start[c]` for k in
    increasing order (`popxl_addons.ops.fp8_mse_scale` does the same on the device). Each
    product equals PopXL's (the factors that differ in order are powers of two)."""
    if dtype not in _FLOAT8:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    low, high = _SRC_EXP
    f8_low, f8_high = _F8_EXP[dtype.name]
    span = f8_high - f8_low + 1
    src_mantissa = 23 if np.dtype(src_dtype) == np.float32 else 10
    q_error = 2.0 ** (-2.0 * (src_mantissa - _F8_MANTISSA[dtype.name]))
    edges = 2.0 ** np.arange(low, high, dtype=np.float64)  # 253 lower edges
    n = _SCALE_HIGH - _SCALE_LOW + 1
    first = (max(f8_low + _SCALE_LOW - low, 0) + np.arange(n))[:, None]  # first bin each keeps
    # The overflow cost is measured from edges[candidate index + span - 1], as PopXL does.
    top = edges[np.arange(n) + span - 1][:, None]
    i = np.arange(len(edges))[None, :]
    costs = np.where(i < first, edges**2, np.where(i >= first + span, (top - edges) ** 2, edges**2 * q_error))
    start = np.full(n, (edges[0] / 2) ** 2)  # PopXL adds this once for every candidate
    return edges, start, costs


def _mse_per_scale(hist: np.ndarray, dtype: dtype, src_dtype: np.dtype) -> np.ndarray:
    """The estimated error of each candidate scale bias -31..31 (index 0 is -31), summed bin
    by bin in increasing order, as PopXL does, so that equal sums compare equal."""
    _, mse, costs = fp8_mse_costs(dtype, src_dtype)
    weights = hist / hist.sum()
    for k in range(costs.shape[1]):
        w = weights[k + 1]
        if w != 0.0:  # adding 0 changes nothing
            mse = mse + costs[:, k] * w
    return mse


def _check_mse_args(src: Any, dtype: dtype | None) -> tuple[np.ndarray, dtype]:
    src = _host_array(src)
    if src.dtype not in (np.float16, np.float32):
        raise RuntimeError(f"dtype {src.dtype} not currently supported.")
    if dtype is None:
        dtype = float8_143
    if dtype not in _FLOAT8:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    return src, dtype


def host_fp8_mse_scale(src: Any, dtype: dtype | None = None) -> tuple[float, int]:
    """`(metric, log2_scale)`: PopXL's estimate of the scale in [-31, 31] for which
    `cast(src * 2**log2_scale, dtype)` loses the least, and the estimated mean squared
    error. The estimate works on a histogram of the data's powers of two (the comment
    above `_log2_histogram` gives the cost of each bin); among equal costs the middle
    candidate is taken. The same numbers as upstream's Python `host_fp8_mse_scale`, which
    returns this pair although it is documented as returning the scale.

    `src`: float16 or float32 data (NumPy or torch); `dtype` `popxl.float8_143` (default)
    or `popxl.float8_152`; RuntimeError otherwise. `host_fp8_mse_scale_pb` measures the
    error exactly instead and returns the scale alone."""
    src, dtype = _check_mse_args(src, dtype)
    mse = _mse_per_scale(_log2_histogram(src), dtype, src.dtype)
    best = float(mse.min())
    tied = [b for b, e in zip(range(_SCALE_LOW, _SCALE_HIGH + 1), mse) if e == best]
    return best, -tied[len(tied) // 2]


def host_fp8_mse_scale_pb(src: Any, dtype: dtype | None = None) -> int:
    """The `log2_scale` in [-31, 31] for which casting `src * 2**log2_scale` to `dtype`
    (`popxl.float8_143`, the default, or `popxl.float8_152`) and scaling back loses the
    least: the smallest mean squared error `mean((cast(src * 2**s) * 2**-s - src)**2)`,
    measured exactly over the finite values, values beyond the format's range counted at
    its largest value (saturation); 0 when no value is finite. Among equal errors the
    middle candidate is taken. (Upstream calls Poplar's `calculateMetadataForConversion`
    with the MSE metric here, whose search is not published; xl measures every candidate.)

    `src`: float16 or float32 data (NumPy or torch); RuntimeError otherwise."""
    src, dtype = _check_mse_args(src, dtype)
    x = src.astype(np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return 0
    np_dt = dtype._compute_np()
    big = float(ml_dtypes.finfo(np_dt).max)
    errors = []
    for s in range(_SCALE_LOW, _SCALE_HIGH + 1):
        f = 2.0**s
        y = np.clip(x * f, -big, big).astype(np_dt).astype(np.float64) / f
        errors.append(float(np.mean((y - x) ** 2)))
    best = min(errors)
    tied = [s for s, e in zip(range(_SCALE_LOW, _SCALE_HIGH + 1), errors) if e == best]
    return tied[len(tied) // 2]
