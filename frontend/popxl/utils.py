"""`popxl.utils`: host-side helpers (PopXL's `popxl/utils.py`): `to_numpy` (host data ->
NumPy with PopXL's downcast and float8 rules), `downcast_np_dtypes`, `table_to_string`;
`create_seeds` (also `popxl.create_seeds`); the float8 host casts of `popxl.fp8_utils`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popxl._checks import check_int
from popxl._host import downcast_np_dtypes, host_array, is_torch
from popxl.dtypes import checked_dtype, np_dtype_float8_143, np_dtype_float8_152
from popxl.dtypes import dtype as _dtype
from popxl.fp8_utils import host_float8

# Upstream's popxl.utils imports these two (programs import them from here); `popxl.fp8_utils` is
# their home and lists them.
from popxl.fp8_utils import host_pow2scale_cast_from_fp8 as host_pow2scale_cast_from_fp8
from popxl.fp8_utils import host_pow2scale_cast_to_fp8 as host_pow2scale_cast_to_fp8

__all__ = [
    "create_seeds",
    "downcast_np_dtypes",
    "np_dtype_float8_143",
    "np_dtype_float8_152",
    "table_to_string",
    "to_numpy",
]

#: The largest uint64: seeds are drawn from [0, MAX_UINT64].
MAX_UINT64 = 2**64 - 1


def to_numpy(
    x: Any,
    dtype: _dtype | None = None,
    downcast: bool = True,
    copy: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> np.ndarray:
    """`x` (an array, torch tensor, scalar or nested lists) as a C-ordered NumPy array,
    converted by the rules of `popxl.variable` / `constant` (`popxl._host.host_array`):

    - `dtype` given: converted to it. For `popxl.float8_143` / `float8_152`, float16/32/64
      data is converted by `popxl.fp8_utils.host_pow2scale_cast_to_fp8` (scaled by
      `2**log2_scale`, default 0; NaN on overflow unless `nan_on_overflow` is False);
      float8 data (the host format `np_dtype_float8_143` / `np_dtype_float8_152`, or
      ml_dtypes) is taken as it is; other data raises TypeError. float8 results are in the
      host format.
    - no `dtype` and `downcast`: int64, uint64 and float64 become int32, uint32 and
      float32 (`downcast_np_dtypes`).
    - `log2_scale` / `nan_on_overflow` with a non-float8 `dtype`: RuntimeError.
    - `copy=False` may return `x` itself. An `np.memmap` is never copied then: it must be
      C-ordered and aligned, need no downcast and match `dtype` (ValueError otherwise).
    """
    what = "popxl.utils.to_numpy"
    if isinstance(x, np.memmap):
        dt = None if dtype is None else checked_dtype(dtype, what)
        if dt is not None and x.dtype not in (np.dtype(dt.as_numpy()), dt._compute_np()):
            raise ValueError(
                "When passing a memory-mapped NumPy array, the `dtype` parameter must be "
                "None or the same as the array's dtype"
            )
        if not (x.flags.c_contiguous and x.flags.aligned):
            raise ValueError(
                "When passing a memory-mapped NumPy array, it must already be in C-ordered and aligned form."
            )
        if x.dtype in downcast_np_dtypes:
            raise ValueError(  # names the `dtype` argument, as PopXL
                f"When passing a memory-mapped NumPy array, the dtype {dtype} is not "
                "supported, as it requires downcasting the array into a new array with a "
                "dtype supported by PopXL."
            )
    elif is_torch(x):
        x = x.detach().cpu().numpy()
    arr, _ = host_array(
        x,
        dtype,
        downcast=downcast,
        log2_scale=log2_scale,
        nan_on_overflow=nan_on_overflow,
        what=what,
        allow_complex=True,
    )
    arr = host_float8(arr)
    if isinstance(x, np.ndarray) and np.may_share_memory(arr, x):
        if copy:
            return arr.copy(order="C")
        if isinstance(x, np.memmap) and arr.dtype == x.dtype and arr.shape == x.shape:
            return x
    return arr


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
    what = "popxl.create_seeds"
    if seed is not None:
        seed = check_int(seed, what, "seed")
    offset = check_int(offset, what, "offset")
    batches_per_step = check_int(batches_per_step, what, "batches_per_step", minimum=1)
    gradient_accumulation_factor = check_int(
        gradient_accumulation_factor, what, "gradient_accumulation_factor", minimum=1
    )
    replicas = check_int(replicas, what, "replicas", minimum=1)
    n = batches_per_step * gradient_accumulation_factor * replicas
    rng = np.random.default_rng(None if seed is None else seed + offset)
    values = rng.integers(0, MAX_UINT64, endpoint=True, dtype="uint64", size=n)
    seeds = np.array([uint64_to_two_uint32(int(v)) for v in values], dtype=np.uint32).reshape(n, 2)
    return np.squeeze(seeds.reshape(batches_per_step, gradient_accumulation_factor, replicas, 2))
