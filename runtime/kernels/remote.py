"""Kernels of the remote buffer copies (`ipu.remote_load`, `ipu.remote_load_`,
`ipu.remote_store`), registered by op class.

A remote buffer is the `rt.state` `[entries, *shape]` of each replica (see
`xl.passes.lower_remote`); a load copies entry `offset` into its tensor, a store copies its
tensor into entry `offset`. The offset is a kernel parameter (`offset`) or a scalar integer
input read at run time; a run-time offset outside `[0, entries)` raises `DataRangeError`
naming the op, the remote buffer and the value:

```python
from xl.runtime.kernels import KERNELS
from xl.dialects.ipu import RemoteLoadOp
import numpy as np

load = KERNELS[RemoteLoadOp]({"buffer": "rb", "offset": 1})
store, out = np.arange(6.0).reshape(3, 2), np.empty(2)
load(store, out)        # out == [2.0, 3.0]
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xl.dialects.ipu import RemoteLoadInplaceOp, RemoteLoadOp, RemoteStoreOp
from xl.runtime.kernels.registry import DataRangeError, kernel, op_label, operand

Kernel = Callable[..., None]


def _entry(p: dict[str, Any], default: str, index_operand: int) -> Callable[[np.ndarray, int], int]:
    """The run-time offset check: `entry(offset_array, entries) -> int`."""
    buffer = p.get("buffer", "?")

    def entry(off: np.ndarray, entries: int) -> int:
        k = int(off)
        if not 0 <= k < entries:
            raise DataRangeError(
                f"{op_label(p, default)}: offset {k} of {operand(p, index_operand)} is out of "
                f'range [0, {entries}) for remote buffer "{buffer}" ({entries} entries)'
            )
        return k

    return entry


@kernel(RemoteLoadOp, RemoteLoadInplaceOp)
def _remote_load(p: dict[str, Any]) -> Kernel:
    """ins `(buffer[, offset])`, out: the loaded tensor."""
    const = p.get("offset")
    if const is not None:
        k0 = int(const)

        def load(store: np.ndarray, out: np.ndarray) -> None:
            np.copyto(out, store[k0])

        return load
    entry = _entry(p, RemoteLoadOp.name, 1)

    def load_at(store: np.ndarray, off: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, store[entry(off, store.shape[0])])

    return load_at


@kernel(RemoteStoreOp)  # one entry of the buffer: RemoteStoreOp declares PartialWrite
def _remote_store(p: dict[str, Any]) -> Kernel:
    """ins `(tensor[, offset])`, out: the buffer (only the entry is written)."""
    const = p.get("offset")
    if const is not None:
        k0 = int(const)

        def store_(t: np.ndarray, store: np.ndarray) -> None:
            np.copyto(store[k0, ...], t)

        return store_
    entry = _entry(p, RemoteStoreOp.name, 1)

    def store_at(t: np.ndarray, off: np.ndarray, store: np.ndarray) -> None:
        np.copyto(store[entry(off, store.shape[0]), ...], t)

    return store_at
