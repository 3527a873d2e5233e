"""Host data as tensor data (popxl/_host.py): `host_array`, the one conversion.

Everything a user passes as data (a NumPy array or scalar, a Python number or nested
lists, a torch tensor, float8 data) becomes a C-contiguous array and its popxl dtype here,
with PopXL's rules, for every entry point: `popxl.variable` and `popxl.constant`, the
remote and replica-sharded variables, an op operand that is not a Tensor
(`ops.add(x, 2.0)`) and `popxl.utils.to_numpy`.

```python
host_array(2.0, popxl.float16)                  # (array(2., dtype=float16), popxl.float16)
host_array(np.arange(3))                        # (array([0, 1, 2], dtype=int32), popxl.int32)
host_array([1.0, 300.0], popxl.float8_143)      # (array([1, nan], dtype=float8_e4m3fnuz), ...)
```

float8 data comes out as the ml_dtypes array xl computes with (`dtype._compute_np()`);
functions returning data to the user give it in the host format (`fp8_utils.host_float8`).

A popxl Tensor is no host data: `Tensor.__array__` raises `NotHostDataError` (as a JAX
tracer refuses to become an array), which `host_array` reports naming the function called.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popxl import dtypes
from popxl._checks import describe
from popxl.dtypes import float8_143, float8_152
from popxl.fp8_utils import float8_view, host_pow2scale_cast_to_fp8

__all__ = ["NotHostDataError", "downcast_np_dtype", "downcast_np_dtypes", "host_array", "is_torch"]

downcast_np_dtypes: dict[np.dtype, np.dtype] = {
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("uint32"),
    np.dtype("float64"): np.dtype("float32"),
}
"""The NumPy dtypes host data is narrowed from (to 32 bits) when no dtype is given and
`downcast` is True (`popxl.utils.downcast_np_dtypes`)."""

_FLOAT8 = (float8_143, float8_152)
_FLOAT8_SOURCES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


class NotHostDataError(TypeError):
    """Raised by `Tensor.__array__`: a popxl Tensor (`self.tensor`) is a value of the
    program, not host data."""

    def __init__(self, tensor: Any) -> None:
        super().__init__(f"expected host data (array, scalar), got a popxl Tensor {tensor!r}")
        self.tensor = tensor


def is_torch(x: Any) -> bool:
    """Whether `x` is a torch object (torch stays optional: never imported here)."""
    return type(x).__module__.startswith("torch")


def downcast_np_dtype(npd: np.dtype) -> np.dtype:
    """The NumPy dtype host data of dtype `npd` is downcast to (`npd` when it stays)."""
    return downcast_np_dtypes.get(npd, npd)


def _as_array(data: Any, what: str) -> np.ndarray:
    if data is None or isinstance(data, str | bytes):
        raise TypeError(f"{what}: expected host data (array, scalar), got {describe(data)}")
    if is_torch(data):
        data = data.detach().cpu().numpy()
    try:
        return np.asarray(data)
    except NotHostDataError as e:
        if e.tensor is data:
            raise TypeError(f"{what}: {e}") from None
        raise TypeError(
            f"{what}: expected host data (array, scalar), got a {type(data).__name__} "
            "containing popxl Tensors; use ops.concat to combine tensors"
        ) from None
    except ValueError as e:  # ragged nested lists
        raise ValueError(f"{what}: cannot convert {describe(data)} to an array: {e}") from None


def _to_float8(
    arr: np.ndarray, f8: np.ndarray | None, dt: dtypes.dtype, log2_scale: Any, nan_on_overflow: Any
) -> np.ndarray:
    if f8 is not None:  # float8 data is taken as it is
        if f8.dtype != dt._compute_np():
            raise TypeError(f"float8 data of dtype {f8.dtype} cannot be used as {dt}")
        return f8
    if arr.dtype not in _FLOAT8_SOURCES:
        raise TypeError(
            f"Type {arr.dtype} is not supported for float8 tensors. Please use float16, float32 or float64 types."
        )
    host = host_pow2scale_cast_to_fp8(
        arr,
        dt,
        0 if log2_scale is None else log2_scale,
        True if nan_on_overflow is None else nan_on_overflow,
    )
    return host.view(dt._compute_np())  # the host format's bits, as xl computes with them


def host_array(
    data: Any,
    dtype: Any = None,
    *,
    downcast: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
    what: str = "popxl.constant",
    allow_complex: bool = False,
) -> tuple[np.ndarray, dtypes.dtype]:
    """`data` as a C-contiguous array and its popxl dtype.

    - `dtype` given (anything `popxl.dtypes.checked_dtype` accepts): the data converted to
      it. For `popxl.float8_143` / `float8_152`, float16/32/64 data is cast by
      `popxl.fp8_utils.host_pow2scale_cast_to_fp8` (scaled by `2**log2_scale`, default 0;
      NaN on overflow unless `nan_on_overflow` is False) and float8 data (the host format
      `np_dtype_float8_143` / `np_dtype_float8_152`, or ml_dtypes) is taken as it is, as an
      ml_dtypes array; other data: TypeError.
    - no `dtype`: float8 data stays float8; with `downcast`, int64, uint64 and float64
      become int32, uint32 and float32 (`downcast_np_dtypes`).
    - `log2_scale` / `nan_on_overflow` with a dtype that is not float8: RuntimeError.

    Errors name `what` (the function the user called): TypeError for a bad dtype and for
    what is no host data (None, strings, popxl Tensors, lists of Tensors, data of a NumPy
    dtype without a popxl dtype), ValueError for ragged lists and unknown dtypes."""
    dt = None if dtype is None else dtypes.checked_dtype(dtype, what)
    arr = _as_array(data, what)
    f8 = float8_view(arr)
    if f8 is None and (arr.dtype == np.dtype(object) or arr.dtype.kind in "USVOM"):
        raise TypeError(f"{what}: cannot convert {describe(data)} to a tensor")
    if dt in _FLOAT8:
        assert dt is not None
        return np.require(_to_float8(arr, f8, dt, log2_scale, nan_on_overflow), requirements="C"), dt
    if log2_scale is not None:
        raise RuntimeError(
            "Non-default value for 'log2scale' is not supported for dtypes that are not "
            "popxl.float8_143 or popxl.float8_152"
        )
    if nan_on_overflow is not None:
        raise RuntimeError(
            "Non-default value for 'nan_on_overflow' is not supported for dtypes that are "
            "not popxl.float8_143 or popxl.float8_152"
        )
    if f8 is not None:
        arr = f8
    if dt is not None:
        arr = arr.astype(dt.as_numpy(), copy=False)
    else:
        if downcast:
            arr = arr.astype(downcast_np_dtype(arr.dtype), copy=False)
        try:
            dt = dtypes.dtype.as_dtype(arr.dtype)
        except ValueError:
            raise TypeError(f"{what}: data of NumPy dtype {arr.dtype} has no popxl dtype") from None
    if dt.is_complex and not allow_complex:  # popxl has complex dtypes; xl computes on real ones
        raise TypeError(f"{what}: complex data ({dt.name}) is not supported by xl: its runtime computes on real dtypes")
    return np.require(arr, requirements="C"), dt
