"""Correctly rounded conversion to the float8 dtypes (popxl.float8_143 / float8_152).

ml_dtypes converts float64 to its float8 types through float32, rounding twice: a float64
just above a float8 halfway point can land on the halfway point in float32 and then round
to even, the wrong neighbour (`1 + 2**-4 + 2**-30` becomes 1.0 instead of 1.125 in
float8_143). `to_float8` rounds to float32 *to odd* first (truncate, then set the last bit
when inexact): with 20 or more extra bits that intermediate rounding never changes the
final round-to-nearest-even result.

```python
to_float8(np.array([1 + 2**-4 + 2**-30]), np.dtype(ml_dtypes.float8_e4m3fnuz))  # [1.125]
```
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike


def round_to_odd_float32(x: np.ndarray) -> np.ndarray:
    """`x` (float64) as float32, rounded towards zero and with the last mantissa bit set
    when inexact (round to odd). Infinities and NaN pass through; values beyond the float32
    range become infinite."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        back = f.astype(np.float64)
        away = np.abs(back) > np.abs(x)  # rounded away from zero: step back towards it
        f = np.where(away & np.isfinite(x), np.nextafter(f, np.float32(0)), f)
        inexact = (f.astype(np.float64) != x) & np.isfinite(x) & np.isfinite(f)
    bits = f.view(np.uint32)
    bits |= inexact.astype(np.uint32)
    return f


def to_float8(x: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    """`x` rounded to the float8 `dtype` (a dtype or scalar type) (nearest, ties to even; too large -> NaN)."""
    x = np.asarray(x)
    if x.dtype in (np.float16, np.float32):
        return x.astype(dtype)
    return round_to_odd_float32(x).astype(dtype)
