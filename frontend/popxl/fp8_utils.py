"""`popxl.fp8_utils`: host-side float8 conversions (PopXL's `popxl/fp8_utils.py`).

xl emulates `popxl.float8_143` / `popxl.float8_152` with ml_dtypes (`float8_e4m3fnuz` /
`float8_e5m2fnuz`: Graphcore's formats, exponent bias 8 / 16, no infinities, NaN 0x80).
Host float8 data is a NumPy array of that ml_dtypes dtype: `arr.astype(np.float32)`
decodes it, `arr.view(np.uint8)` gives the bytes (the payload of upstream's structured
`np.dtype([("float8_143", "u1")])` arrays, which every function here also accepts).

```python
x8 = host_pow2scale_cast_to_fp8(np.array([1.0, 300.0], np.float32), popxl.float8_143)
# array([1, nan], dtype=float8_e4m3fnuz): 300 overflows (max 240) -> NaN
host_pow2scale_cast_from_fp8(x8, popxl.float32, log2_scale=1)   # [2.0, nan]
```
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from popxl.dtypes import _UPSTREAM_FLOAT8, dtype, float8_143, float8_152, float16, float32, float64
from xl.runtime.float8 import to_float8

__all__ = ["host_fp8_mse_scale", "host_pow2scale_cast_from_fp8", "host_pow2scale_cast_to_fp8"]

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


def float8_view(arr: np.ndarray) -> np.ndarray | None:
    """`arr` as an ml_dtypes float8 array when it holds float8 data (an ml_dtypes float8
    array, or upstream's structured float8 dtype reinterpreted), else None."""
    if arr.dtype in (float8_143.as_numpy(), float8_152.as_numpy()):
        return arr
    dt = _UPSTREAM_FLOAT8.get(arr.dtype)
    if dt is None:
        return None
    return np.ascontiguousarray(arr).view(np.uint8).view(dt.as_numpy()).reshape(arr.shape)


def host_pow2scale_cast_to_fp8(
    src: Any, dtype: dtype | None = None, log2_scale: int = 0, nan_on_overflow: bool = True
) -> np.ndarray:
    """`cast(src * 2**log2_scale, dtype)` on the host: float16/32/64 data (NumPy or torch)
    to a float8 array (`dtype` `popxl.float8_143` or `popxl.float8_152`), rounding to
    nearest even (correctly also from float64, see `xl.runtime.float8`). Values too large for
    the format become NaN, or the largest finite value of their sign when `nan_on_overflow` is
    False; NaN stays NaN.

    RuntimeError when `dtype` is not a float8 dtype, `src` is not float16/32/64 or
    `log2_scale` is not an int in [-32, 32)."""
    src = _host_array(src)
    if dtype not in _FLOAT8:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    if src.dtype not in (np.float16, np.float32, np.float64):
        raise RuntimeError(f"src.dtype {src.dtype} not currently supported.")
    scale = _check_log2_scale(log2_scale, "host_pow2scale_cast_to_fp8")
    x = src.astype(np.float64) * 2.0**scale
    np_dt = dtype.as_numpy()
    if not nan_on_overflow:
        big = float(ml_dtypes.finfo(np_dt).max)
        np.clip(x, -big, big, out=x)  # NaN stays NaN
    return to_float8(x, np_dt)


def host_pow2scale_cast_from_fp8(src: Any, dtype: dtype | None = None, log2_scale: int = 0) -> np.ndarray:
    """`cast(src, dtype) * 2**log2_scale` on the host: float8 data (ml_dtypes float8 or
    upstream's structured float8 arrays) to `dtype` (`popxl.float16`, `float32` or
    `float64`). RuntimeError for other dtypes or a `log2_scale` outside [-32, 32)."""
    src = _host_array(src)
    f8 = float8_view(src)
    if f8 is None:
        raise RuntimeError(f"src.dtype {src.dtype} not currently supported.")
    if dtype not in (float16, float32, float64):
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    scale = _check_log2_scale(log2_scale, "host_pow2scale_cast_from_fp8")
    return (f8.astype(np.float64) * 2.0**scale).astype(dtype.as_numpy())


def host_fp8_mse_scale(src: Any, dtype: dtype | None = None) -> int:
    """The `log2_scale` in [-31, 31] for which casting `src * 2**log2_scale` to `dtype`
    (`popxl.float8_143`, the default, or `popxl.float8_152`) and scaling back loses the
    least: the smallest mean squared error `mean((cast(src * 2**s) * 2**-s - src)**2)`,
    values beyond the format's range counted at its largest value (saturation). Among
    equal errors the middle candidate is taken.

    `src`: float16 or float32 data (NumPy or torch); RuntimeError otherwise. Upstream's
    pure-Python version returns `(metric, scale)` although documented as returning the
    scale; this returns the scale, as documented (and as its C++-backed variant)."""
    src = _host_array(src)
    if src.dtype not in (np.float16, np.float32):
        raise RuntimeError(f"dtype {src.dtype} not currently supported.")
    if dtype is None:
        dtype = float8_143
    if dtype not in _FLOAT8:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    x = src.astype(np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return 0
    np_dt = dtype.as_numpy()
    big = float(ml_dtypes.finfo(np_dt).max)
    errors = []
    for s in range(-31, 32):
        f = 2.0**s
        y = np.clip(x * f, -big, big).astype(np_dt).astype(np.float64) / f
        errors.append(float(np.mean((y - x) ** 2)))
    best = min(errors)
    tied = [s for s, e in zip(range(-31, 32), errors) if e == best]
    return tied[len(tied) // 2]
