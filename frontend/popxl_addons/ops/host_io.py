"""Host IO helpers: a stream plus its load/store in one call (popxl_addons/ops/host_load.py, host_store.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl.utils import to_numpy

__all__ = ["host_load", "host_store"]


def host_load(
    np_data: Any, dtype: Any, name: str | None = None
) -> tuple[np.ndarray, popxl.HostToDeviceStream, popxl.Tensor]:
    """An h2d stream `<name>_stream` for data like `np_data` and a `host_load` from it.

    Returns `(np_data cast to dtype, stream, loaded tensor)`. `np_data` is host data of any
    kind `popxl.utils.to_numpy` takes, as upstream converts it: a NumPy array, nested lists,
    or a torch tensor (detached first, so one that requires grad works).
    """
    dtype = popxl.dtypes.checked_dtype(dtype, "addons.host_load")
    np_data = to_numpy(np_data, dtype)
    name = name or "input"
    stream = popxl.h2d_stream(np_data.shape, dtype, f"{name}_stream")
    return np_data, stream, ops.host_load(stream, name)


def host_store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    """A d2h stream `<t.name>_stream` and a `host_store` of `t` into it."""
    if not isinstance(t, popxl.Tensor):
        raise TypeError(f"addons.host_store: expected a popxl Tensor, got {type(t).__name__}")
    stream = popxl.d2h_stream(t.shape, t.dtype, f"{t.name}_stream")
    ops.host_store(stream, t)
    return stream
