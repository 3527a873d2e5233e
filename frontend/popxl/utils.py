"""`popxl.utils`: host-side helpers (PopXL's `popxl/utils.py`): `to_numpy` (host data ->
NumPy with PopXL's downcast and float8 rules), `downcast_np_dtypes`, `table_to_string`;
`create_seeds` (also `popxl.create_seeds`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeGuard

import numpy as np

from popxl.dtypes import _UPSTREAM_FLOAT8, float8_143, float8_152, np_dtype_float8_143, np_dtype_float8_152
from popxl.dtypes import dtype as _dtype

__all__ = [
    "create_seeds",
    "downcast_np_dtypes",
    "np_dtype_float8_143",
    "np_dtype_float8_152",
    "table_to_string",
    "to_numpy",
]

downcast_np_dtypes: dict[np.dtype, np.dtype] = {
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("uint32"),
    np.dtype("float64"): np.dtype("float32"),
}
"""The NumPy dtypes `to_numpy` (and `popxl.variable` / `constant`) narrow to 32 bits when
no dtype is given and `downcast` is True."""

MAX_UINT64 = 2**64 - 1


def _is_float8(dtype: Any) -> TypeGuard[_dtype]:
    return dtype is float8_143 or dtype is float8_152


def to_numpy(
    x: Any,
    dtype: _dtype | None = None,
    downcast: bool = True,
    copy: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> np.ndarray:
    """`x` (an array, torch tensor, scalar or nested lists) as a C-ordered NumPy array.

    - `dtype` given: converted to it. For `popxl.float8_143` / `float8_152`, float16/32/64
      data is converted by `popxl.fp8_utils.host_pow2scale_cast_to_fp8` (scaled by
      `2**log2_scale`, default 0; NaN on overflow unless `nan_on_overflow` is False);
      float8 data (ml_dtypes, or upstream's structured float8 arrays) is taken as it is;
      other data raises TypeError.
    - no `dtype` and `downcast`: int64, uint64 and float64 become int32, uint32 and
      float32 (`downcast_np_dtypes`).
    - `log2_scale` / `nan_on_overflow` with a non-float8 `dtype`: RuntimeError.
    - `copy=False` may return `x` itself. An `np.memmap` is never copied then: it must be
      C-ordered and aligned, need no downcast and match `dtype` (ValueError otherwise).
    """
    from popxl.fp8_utils import float8_view, host_pow2scale_cast_to_fp8

    if dtype is not None:
        dtype = _dtype.as_dtype(dtype)
    if isinstance(x, np.memmap):
        if dtype is not None and np.dtype(dtype.as_numpy()) != x.dtype:
            raise ValueError(
                "When passing a memory-mapped NumPy array, the `dtype` parameter must be "
                "None or the same as the array's dtype"
            )
        if not (x.flags.c_contiguous and x.flags.aligned):
            raise ValueError(
                "When passing a memory-mapped NumPy array, it must already be in C-ordered and aligned form."
            )
        if x.dtype in downcast_np_dtypes:
            raise ValueError(
                f"When passing a memory-mapped NumPy array, the dtype {x.dtype} is not "
                "supported, as it requires downcasting the array into a new array with a "
                "dtype supported by PopXL."
            )
    elif type(x).__module__.startswith("torch"):
        x = x.detach().cpu().numpy()

    def asarray(v: Any, **kw: Any) -> np.ndarray:
        return v if isinstance(v, np.memmap) else np.asarray(v, order="C", **kw)

    if _is_float8(dtype):
        x = asarray(x)
        f8 = float8_view(x)
        if f8 is not None:
            if f8.dtype != np.dtype(dtype.as_numpy()):
                raise TypeError(f"float8 data of dtype {f8.dtype} cannot be used as {dtype}")
            x = f8
        else:
            if x.dtype not in (np.float16, np.float32, np.float64):
                raise TypeError(
                    f"Type {x.dtype} is not supported for float8 tensors. Please use float16, float32 or float64 types."
                )
            x = host_pow2scale_cast_to_fp8(
                x,
                dtype,
                0 if log2_scale is None else log2_scale,
                True if nan_on_overflow is None else nan_on_overflow,
            )
        return np.array(x, copy=True, order="C") if copy else np.require(x, requirements="C")

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
    if dtype is not None:
        arr = asarray(x, dtype=dtype.as_numpy())
    else:
        arr = asarray(x)
        if isinstance(arr, np.ndarray) and arr.dtype in _UPSTREAM_FLOAT8:
            view = float8_view(arr)
            assert view is not None, "an upstream float8 array always has an ml_dtypes view"
            arr = view
        elif downcast and arr.dtype in downcast_np_dtypes:
            arr = arr.astype(downcast_np_dtypes[arr.dtype], order="C")
    if copy and arr is x:
        arr = arr.copy(order="C")
    elif copy and isinstance(x, np.ndarray) and np.shares_memory(arr, x):
        arr = arr.copy(order="C")
    return arr


def host_data(data: Any, dtype: Any, log2_scale: Any, nan_on_overflow: Any) -> np.ndarray | None:
    """For `popxl.variable` / `constant`: the float8 array `data` stands for, when `dtype`
    is a float8 dtype or `data` is float8 data; else None (after refusing `log2_scale` /
    `nan_on_overflow` for non-float8 dtypes, as `to_numpy`)."""
    from popxl.fp8_utils import float8_view

    if dtype is not None and not isinstance(dtype, _dtype):
        try:
            dtype = _dtype.as_dtype(dtype)
        except (TypeError, ValueError):
            return None  # the caller reports a bad dtype
    if _is_float8(dtype):
        return to_numpy(data, dtype, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    if log2_scale is not None or nan_on_overflow is not None:
        to_numpy(0, dtype, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)  # raises
    if dtype is None and isinstance(data, np.ndarray):
        f8 = float8_view(data)
        if f8 is not None:
            return np.array(f8, copy=True, order="C")
    return None


def table_to_string(rows: Sequence[Sequence[Any]], delimiter: str = " | ", header: bool = True) -> str:
    """`rows` (equal-length sequences of printable items) as an aligned text table, one line
    per row, columns separated by `delimiter`; with `header`, the first row is underlined
    by a line of dashes as long as the row's line."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(c) for c in col) for col in zip(*cells)]
    out = []
    for i, row in enumerate(cells):
        line = delimiter.join(c.ljust(w) for c, w in zip(row, widths)) + "\n"
        out.append(line)
        if header and i == 0 and len(cells) > 1:
            out.append("-" * len(line) + "\n")
    return "".join(out)


def uint64_to_two_uint32(num: int) -> tuple[int, int]:
    """`num` (0 <= num < 2**64) as (most significant 32 bits, least significant 32 bits)."""
    if not 0 <= int(num) <= MAX_UINT64:
        raise ValueError(f"Number is negative or cannot be represented as a uint64: {num}")
    return int(num) >> 32, int(num) & 0xFFFFFFFF


def two_uint32_to_uint64(a: int, b: int) -> int:
    """The uint64 whose most significant 32 bits are `a` and least significant `b`."""
    for v in (a, b):
        if not 0 <= int(v) < 2**32:
            raise ValueError(f"Either `a` or `b` are negative or cannot be represented as a uint32: {a}, {b}")
    return (int(a) << 32) | int(b)


def create_seeds(
    seed: int | None = None,
    offset: int = 0,
    batches_per_step: int = 1,
    gradient_accumulation_factor: int = 1,
    replicas: int = 1,
) -> np.ndarray:
    """Seeds for the random ops, as PopXL's `popxl.create_seeds`: `batches_per_step *
    gradient_accumulation_factor * replicas` uint64 values drawn by
    `np.random.default_rng(seed + offset)`, each split into two uint32 (most significant
    first), shaped `[batches_per_step, gradient_accumulation_factor, replicas, 2]` with the
    size-1 dims dropped (a single seed has shape (2,)). The same arguments give the same
    seeds as upstream; `seed=None` (an xl extension) draws a fresh one."""
    n = batches_per_step * gradient_accumulation_factor * replicas
    rng = np.random.default_rng(None if seed is None else seed + offset)
    values = rng.integers(0, MAX_UINT64, endpoint=True, dtype="uint64", size=n)
    seeds = np.array([uint64_to_two_uint32(int(v)) for v in values], dtype=np.uint32).reshape(n, 2)
    return np.squeeze(seeds.reshape(batches_per_step, gradient_accumulation_factor, replicas, 2))
