"""`popxl.utils`: host-side helpers."""

from __future__ import annotations

from typing import Any

import numpy as np

from popxl.dtypes import _downcast_np
from popxl.dtypes import dtype as _dtype

__all__ = ["create_seeds", "to_numpy"]


def to_numpy(
    x: Any,
    dtype: _dtype | None = None,
    downcast: bool = True,
    copy: bool = True,
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> np.ndarray:
    """`x` as a NumPy array; with no `dtype`, float64/int64/uint64 are downcast to 32 bits."""
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().numpy()
    arr = np.array(x, copy=copy) if copy else np.asarray(x)
    if dtype is not None:
        return arr.astype(_dtype.as_dtype(dtype).as_numpy(), copy=False)
    if downcast:
        arr = arr.astype(_downcast_np(arr.dtype), copy=False)
    return arr


def create_seeds(
    seed: int | None = None,
    offset: int = 0,
    batches_per_step: int = 1,
    gradient_accumulation_factor: int = 1,
    replicas: int = 1,
) -> np.ndarray:
    """Random-op seeds (`uint32[2]` each), one per batch/accumulation step/replica
    (size-1 dims dropped), reproducible from `seed`."""
    rng = np.random.default_rng(None if seed is None else seed + offset)
    lead = [d for d in (batches_per_step, gradient_accumulation_factor, replicas) if d > 1]
    return rng.integers(0, 2**32, size=(*lead, 2), dtype=np.uint64).astype(np.uint32)
