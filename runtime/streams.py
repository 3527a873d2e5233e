"""Host streams of a compiled program: one entry per `rt.h2d` / `rt.d2h` stream name.

Each replica has its own entries; `Executable.run` points `data` at the replica's
`[num_host_transfers, *shape]` slice of the host array and resets `index`. Each executed
transfer uses `data[index % num_host_transfers]` and advances `index`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType

from xl.dialects import rt
from xl.dialects.utils import dtype_of, shape_of
from xl.runtime.errors import PlanError


@dataclass
class StreamIn:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None = None  # [n, *shape] view for the running replica
    index: int = 0


@dataclass
class StreamOut:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None = None
    index: int = 0


def stream_entry(op: rt.H2DOp | rt.D2HOp, table: dict[str, Any], cls: type, verb: str) -> Any:
    """The `cls(name, shape, dtype)` entry of `table` for the stream `op` loads or stores
    (made on first use); raises `PlanError` when the stream is `verb` with another type."""
    t = op.buffer.type
    assert isinstance(t, MemRefType)
    name = op.stream.data
    shape, dtype = shape_of(t), dtype_of(t)
    s = table.get(name)
    if s is None:
        s = table[name] = cls(name, shape, dtype)
    elif (s.shape, s.dtype) != (shape, dtype):
        raise PlanError(f'runtime: stream "{name}" is {verb} as {s.shape} {s.dtype} and as {shape} {dtype}')
    return s
