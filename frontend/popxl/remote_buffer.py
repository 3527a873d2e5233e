"""Remote buffers and where variables live (popxl/remote_buffer.py).

A `RemoteBuffer` is `entries` tensors of one shape and dtype in memory off the IPU
(streaming memory), declared in the main graph (`ipu.remote_buffer`). `ops.remote_load`,
`ops.remote_load_` and `ops.remote_store` copy one entry to or from a tensor, in any graph;
`popxl.remote_variable` stores a variable in an entry. As upstream, there is no data
dependency between a store and a later load of the same entry: build them inside
`popxl.in_sequence()` (program order is execution order in xl).

```python
ir = popxl.Ir()
with ir.main_graph, popxl.in_sequence():
    buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
    w = popxl.remote_variable(np.ones(2, np.float32), buffer, 1)   # stored in entry 1
    x = ops.remote_load(buffer, 1)
    ops.remote_store(buffer, 1, x + 1)
with popxl.Session(ir) as s:
    s.run()
s.get_tensor_data(w)   # [2., 2.]
```

Replicated tensor sharding (RTS): `popxl.remote_replica_sharded_variable` stores each
replica's 1-D shard of the value (flattened, zero-padded to `ceil(nelms / shard_over)`
elements) in its own copy of the buffer entry; `replica_sharded_buffer` makes a buffer of
that shard shape whose `meta_shape` is the full shape. Replica `r` holds shard
`p % shard_over`, `p` its position in its replica group (upstream's layout).

`TensorStorage`, `ReplicatedTensorSharding` and `TensorLocation` (from
`popxl.tensorlocation`) describe where a variable lives (`Variable.location_info`). This
module knows no tensors: the variables are created in `popxl/tensor.py`, the remote ops
in `popxl/ops/_remote.py`, and the Session reads and writes remote variables through
`popxl/_session_remote.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, i64

from popxl._checks import check_int, check_shape, describe
from popxl.context import gcg
from popxl.dtypes import checked_dtype
from popxl.dtypes import dtype as _dtype
from popxl.replica_grouping import ReplicaGrouping, checked_grouping, checked_shard_over
from popxl.tensorlocation import ReplicatedTensorSharding, TensorLocation, TensorStorage
from xl.dialects.ipu import RemoteBufferOp
from xl.dialects.replica_layout import ReplicaLayout
from xl.dialects.utils import tensor_type

if TYPE_CHECKING:
    from popxl.tensor import Tensor

__all__ = [
    "RemoteBuffer",
    "ReplicatedTensorSharding",
    "TensorLocation",
    "TensorLocationInfo",
    "TensorStorage",
    "checked_buffer",
    "remote_buffer",
    "replica_sharded_buffer",
]


class TensorLocationInfo:
    """`Variable.location_info` of a remote or sharded variable: its `location`, the
    `remote_buffer` and `offset` (entry) holding it (None for a resident sharded variable)."""

    def __init__(self, location: TensorLocation, remote_buffer: RemoteBuffer | None, offset: int | None):
        self.location = location
        self.remote_buffer = remote_buffer
        self.offset = offset

    def is_sharded(self) -> bool:
        """True when each replica holds a shard of the variable (replicated tensor sharding)."""
        return self.location.replicated_tensor_sharding == ReplicatedTensorSharding.On

    def is_remote(self) -> bool:
        """True when the variable lives in a remote buffer (off-chip)."""
        return self.location.storage == TensorStorage.OffChip

    def __repr__(self) -> str:
        where = "" if self.remote_buffer is None else f" in {self.remote_buffer!r}[{self.offset}]"
        return f"TensorLocationInfo({self.location!r}{where})"


# ---------------------------------------------------------------------------------------
# RemoteBuffer
# ---------------------------------------------------------------------------------------


def _check_entries(entries: Any, what: str) -> int:
    if isinstance(entries, bool) or not isinstance(entries, int | np.integer):
        raise TypeError(f"{what}: entries must be an int, got {describe(entries)}")
    if entries < 1:
        raise ValueError(f"Entries must be a non-zero, positive integer. Got {entries}")
    return int(entries)


class RemoteBuffer:
    """`entries` tensors of shape `tensor_shape` and dtype `tensor_dtype` in remote memory
    (an `ipu.remote_buffer` of the current Ir's main graph). Ids count from 1 per Ir."""

    def __init__(self, tensor_shape: Iterable[int], tensor_dtype: _dtype, entries: int) -> None:
        what = "popxl.RemoteBuffer"
        entries = _check_entries(entries, what)
        shape = check_shape(tensor_shape, what)
        dt = checked_dtype(tensor_dtype, what)
        ir = gcg()._ir
        buffers: list[RemoteBuffer] = ir.__dict__.setdefault("_remote_buffers", [])
        self._ir = ir
        self._remote_buffer_id = len(buffers) + 1
        self._meta_shape: tuple[int, ...] = ()
        self._shard_over: int | None = None  # set by replica_sharded_buffer
        main = ir.main_graph
        taken = {op.buffer_name for op in main._block.ops if isinstance(op, RemoteBufferOp)}
        name = f"remote_buffer_{self._remote_buffer_id}"
        while name in taken:
            name += "_"
        self._op = RemoteBufferOp(name, tensor_type(shape, dt._compute_np()), entries)
        block = main._block
        first = next((op for op in block.ops if not isinstance(op, RemoteBufferOp)), None)
        if first is None:
            block.add_op(self._op)
        else:
            block.insert_op_before(self._op, first)
        ir._number_op(self._op)
        buffers.append(self)

    # -- properties -------------------------------------------------------------------------
    @property
    def remote_buffer_id(self) -> int:
        """The id of the buffer (read only)."""
        return self._remote_buffer_id

    @property
    def _name(self) -> str:
        return self._op.buffer_name

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        """The shape of the tensors stored in the buffer."""
        return tuple(self._op.type.get_shape())

    @property
    def tensor_dtype(self) -> _dtype:
        """The dtype of the tensors stored in the buffer."""
        return _dtype._from_element_type(self._op.type.get_element_type())

    # Read-only, refused in PopXL's words (Python 3.10's for a property without a setter).
    @tensor_shape.setter
    def tensor_shape(self, _: Any) -> None:
        raise AttributeError("can't set attribute 'tensor_shape'")

    @tensor_dtype.setter
    def tensor_dtype(self, _: Any) -> None:
        raise AttributeError("can't set attribute 'tensor_dtype'")

    @property
    def entries(self) -> int:
        """The number of entries (settable; > 0)."""
        return self._op.num_entries

    @entries.setter
    def entries(self, entries: int) -> None:
        entries = _check_entries(entries, "RemoteBuffer.entries")
        self._op.entries = IntegerAttr(entries, i64)

    @property
    def meta_shape(self) -> tuple[int, ...]:
        """The full (unsharded) shape of the tensors whose shards the buffer holds (() when
        the buffer holds whole tensors)."""
        return self._meta_shape

    @meta_shape.setter
    def meta_shape(self, shape: Iterable[int]) -> None:
        self._meta_shape = check_shape(shape, "RemoteBuffer.meta_shape") if shape else ()

    def set_remote_buffer_info(self, tensor_dtype: _dtype, tensor_shape: Iterable[int], entries: int) -> None:
        """Set the dtype, shape and number of entries of the buffer."""
        what = "RemoteBuffer.set_remote_buffer_info"
        entries = _check_entries(entries, what)
        shape = check_shape(tensor_shape, what)
        dt = checked_dtype(tensor_dtype, what)
        self._op.type = tensor_type(shape, dt._compute_np())
        self._op.entries = IntegerAttr(entries, i64)

    def _used(self) -> bool:
        """Whether an op other than its declaration names the buffer (loads, stores,
        remote variables): its entry shape is fixed then."""
        return any(
            op is not self._op and getattr(op, "buffer_name", None) == self._name for op in self._ir._module.walk()
        )

    def validate_tensor_matches_buffer(self, t: Tensor, num_shards: int = 1) -> None:
        """ValueError unless `t` has the buffer's shape (its `meta_shape` when `num_shards`
        > 1) and dtype."""
        num_shards = check_int(num_shards, "RemoteBuffer.validate_tensor_matches_buffer", "num_shards", minimum=1)
        existing = self.tensor_shape if num_shards == 1 else self.meta_shape
        if t.shape != existing or t.dtype != self.tensor_dtype:
            raise ValueError(
                f"Tensor {t.id} does not match buffer.\n"
                f"Existing remote buffer has shape={existing} and dtype={self.tensor_dtype.name}.\n"
                f"The tensor has shape={t.shape}, dtype={t.dtype.name}."
            )

    def __hash__(self) -> int:
        return hash((id(self._ir), self._remote_buffer_id))

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        meta = f" meta_shape={self.meta_shape}" if self.meta_shape else ""
        return (
            f"RemoteBuffer[id={self.remote_buffer_id} shape={self.tensor_shape} "
            f"dtype={self.tensor_dtype.name} entries={self.entries}{meta}]"
        )


def remote_buffer(tensor_shape: Iterable[int], tensor_dtype: _dtype, entries: int = 1) -> RemoteBuffer:
    """A remote buffer of the current Ir: `entries` tensors of `tensor_shape` and `tensor_dtype`."""
    return RemoteBuffer(tensor_shape, tensor_dtype, entries)


def checked_buffer(rb: Any, what: str) -> RemoteBuffer:
    """A `remote_buffer` argument: a RemoteBuffer of the current graph's Ir, still part of it."""
    if not isinstance(rb, RemoteBuffer):
        raise TypeError(f"{what}: remote_buffer must be a popxl.RemoteBuffer, got {describe(rb)}")
    g = gcg()
    if rb._ir is not g._ir:
        raise ValueError(f"{what}: {rb!r} belongs to another Ir than the current graph {g.name!r}")
    if rb._op.parent is None:
        raise ValueError(f"{what}: {rb!r} is no longer part of its Ir")
    return rb


def replica_sharded_buffer(
    shape: Iterable[int],
    dtype: _dtype,
    replica_grouping: ReplicaGrouping | None = None,
    shard_over: int | None = None,
    entries: int = 1,
) -> RemoteBuffer:
    """A remote buffer for replica-sharded variables of shape `shape` (with a leading
    `num_groups` dim when `replica_grouping` has several groups): entries of shape
    `(ceil(nelms / shard_over),)`, `meta_shape` the variable's shape. `shard_over` (default:
    the replica group size) must divide the group size."""
    what = "popxl.replica_sharded_buffer"
    ir = gcg()._ir
    shape = check_shape(shape, what)
    grouping, _ = checked_grouping(ir, replica_grouping, what)
    s = checked_shard_over(ir, replica_grouping, shard_over, what)
    layout = ReplicaLayout.from_host_shape(shape, ir.replication_factor, grouping, s)
    buf = remote_buffer((layout.shard_size,), dtype, entries)
    buf.meta_shape = layout.shape
    buf._shard_over = s
    return buf
