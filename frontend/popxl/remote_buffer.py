"""Remote buffers, remote variables and replica-sharded variables (popxl/remote_buffer.py).

A `RemoteBuffer` is `entries` tensors of one shape and dtype in memory off the IPU
(streaming memory), declared in the main graph (`ipu.remote_buffer`). `ops.remote_load`,
`ops.remote_load_` and `ops.remote_store` copy one entry to or from a tensor, in any graph.
As upstream, there is no data dependency between a store and a later load of the same
entry: build them inside `popxl.in_sequence()` (program order is execution order in xl).

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

Replicated tensor sharding (RTS): `remote_replica_sharded_variable` stores each replica's
1-D shard of the value (flattened, zero-padded to `ceil(nelms / shard_over)` elements) in
its own copy of the buffer entry; `replica_sharded_buffer` makes a buffer of that shard
shape whose `meta_shape` is the full shape; `replica_sharded_variable` keeps the shard
resident (returns the host handle and the shard tensor). Replica `r` holds shard
`p % shard_over`, `p` its position in its replica group (upstream's layout). The Session
reads and writes these variables by their full, unsharded value (one per group).

`TensorStorage`, `ReplicatedTensorSharding` and `TensorLocation` describe where a
variable lives (`Variable.location_info`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from popxl._checks import check_dtype, check_name, check_shape, describe
from popxl.context import gcg
from popxl.dtypes import dtype as _dtype
from popxl.tensor import Tensor, Variable, _to_numpy
from xl.dialects.ipu import (
    RemoteBufferOp,
    RemoteLoadInplaceOp,
    RemoteLoadOp,
    RemoteStoreOp,
    RemoteVariableOp,
    ReplicaShardedVariableOp,
)
from xl.dialects.utils import dense_attr, tensor_type

if TYPE_CHECKING:
    from popxl.replica_grouping import ReplicaGrouping

__all__ = [
    "RemoteBuffer",
    "ReplicatedTensorSharding",
    "TensorLocation",
    "TensorStorage",
    "remote_buffer",
    "remote_replica_sharded_variable",
    "remote_variable",
    "replica_sharded_buffer",
    "replica_sharded_variable",
]


# ---------------------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------------------


class TensorStorage(Enum):
    """Whether a tensor is stored on chip (tile memory) or off chip (streaming memory)."""

    OnChip = "OnChip"
    OffChip = "OffChip"


class ReplicatedTensorSharding(Enum):
    """Whether a tensor is sharded over replicas."""

    On = "On"
    Off = "Off"


class TensorLocation:
    """The memory characteristics of a tensor: storage and replicated tensor sharding."""

    def __init__(
        self,
        storage: TensorStorage = TensorStorage.OnChip,
        replicated_tensor_sharding: ReplicatedTensorSharding = ReplicatedTensorSharding.Off,
    ) -> None:
        if not isinstance(storage, TensorStorage):
            raise TypeError(f"TensorLocation: storage must be a TensorStorage, got {describe(storage)}")
        if not isinstance(replicated_tensor_sharding, ReplicatedTensorSharding):
            raise TypeError(
                "TensorLocation: replicated_tensor_sharding must be a ReplicatedTensorSharding, "
                f"got {describe(replicated_tensor_sharding)}"
            )
        self._storage = storage
        self._replicated_tensor_sharding = replicated_tensor_sharding

    @property
    def storage(self) -> TensorStorage:
        return self._storage

    @property
    def replicated_tensor_sharding(self) -> ReplicatedTensorSharding:
        return self._replicated_tensor_sharding

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorLocation)
            and self._storage == other._storage
            and self._replicated_tensor_sharding == other._replicated_tensor_sharding
        )

    def __hash__(self) -> int:
        return hash((self._storage, self._replicated_tensor_sharding))

    def __repr__(self) -> str:
        return (
            f"TensorLocation(storage={self._storage.name}, "
            f"replicated_tensor_sharding={self._replicated_tensor_sharding.name})"
        )


class TensorLocationInfo:
    """`Variable.location_info` of a remote or sharded variable: its `location`, the
    `remote_buffer` and `offset` (entry) holding it (None for a resident sharded variable)."""

    def __init__(self, location: TensorLocation, remote_buffer: RemoteBuffer | None, offset: int | None):
        self.location = location
        self.remote_buffer = remote_buffer
        self.offset = offset

    def is_sharded(self) -> bool:
        return self.location.replicated_tensor_sharding == ReplicatedTensorSharding.On

    def is_remote(self) -> bool:
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
        dt = check_dtype(tensor_dtype, what)
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
        self._op = RemoteBufferOp(name, tensor_type(shape, dt.as_numpy()), entries)
        block = main._block
        first = next((op for op in block.ops if not isinstance(op, RemoteBufferOp)), None)
        if first is None:
            block.add_op(self._op)
        else:
            block.insert_op_before(self._op, first)
        ir._op_ids[self._op] = next(ir._op_counter)
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

    @property
    def entries(self) -> int:
        """The number of entries (settable; > 0)."""
        return self._op.num_entries

    @entries.setter
    def entries(self, entries: int) -> None:
        from xdsl.dialects.builtin import IntegerAttr, i64

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
        from xdsl.dialects.builtin import IntegerAttr, i64

        what = "RemoteBuffer.set_remote_buffer_info"
        entries = _check_entries(entries, what)
        shape = check_shape(tensor_shape, what)
        dt = check_dtype(tensor_dtype, what)
        self._op.type = tensor_type(shape, dt.as_numpy())
        self._op.entries = IntegerAttr(entries, i64)

    def validate_tensor_matches_buffer(self, t: Tensor, num_shards: int = 1) -> None:
        """ValueError unless `t` has the buffer's shape (its `meta_shape` when `num_shards`
        > 1) and dtype."""
        existing = self.tensor_shape if num_shards == 1 else self.meta_shape
        if t.shape != existing or t.dtype != self.tensor_dtype:
            raise ValueError(
                "Tensor does not match buffer.\n"
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


# ---------------------------------------------------------------------------------------
# ops (called by popxl.ops.remote_load / remote_load_ / remote_store)
# ---------------------------------------------------------------------------------------


def _buffer_of(rb: Any, what: str) -> RemoteBuffer:
    if not isinstance(rb, RemoteBuffer):
        raise TypeError(f"{what}: remote_buffer must be a popxl.RemoteBuffer, got {describe(rb)}")
    g = gcg()
    if rb._ir is not g._ir:
        raise ValueError(f"{what}: {rb!r} belongs to another Ir than the current graph {g.name!r}")
    if rb._op.parent is None:
        raise ValueError(f"{what}: {rb!r} is no longer part of its Ir")
    return rb


def _offset_of(rb: RemoteBuffer, offset: Any, what: str) -> int | Any:
    """A constant offset (int) or the SSA value of a scalar integer tensor of this graph."""
    from popxl.ops._utils import check_in_graph

    if isinstance(offset, Tensor):
        check_in_graph(gcg(), [offset], what)
        if offset.shape != () or not offset.dtype.is_int:
            raise ValueError(
                f"{what}: offset must be an int or a scalar integer Tensor, got {offset.id} "
                f"{offset.shape} {offset.dtype.name}"
            )
        return offset._value
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
        raise TypeError(f"{what}: offset must be an int or a Tensor, got {describe(offset)}")
    k = int(offset)
    if not 0 <= k < rb.entries:
        raise ValueError(f"{what}: offset {k} is out of range [0, {rb.entries}) (entries of {rb!r})")
    return k


def _insert(g: Any, op: Any, what: str) -> None:
    """Insert `op` into graph `g`, then verify it (its verifier looks the buffer up through
    the enclosing module); on failure the op is removed and ValueError raised."""
    from xdsl.utils.exceptions import VerifyException

    from popxl.ops._utils import insert

    insert(g, op, what, verify=False)
    try:
        op.verify_()  # the op's own checks (the block may still lack its terminator)
    except VerifyException as e:
        op.detach()
        op.erase()
        raise ValueError(f"{what}: " + str(e).split("\n\n")[0]) from None


def _remote_load(rb: Any, offset: Any, name: str | None) -> Tensor:
    what = "ops.remote_load"
    rb = _buffer_of(rb, what)
    name = check_name(name, what)
    off = _offset_of(rb, offset, what)
    g = gcg()
    op = RemoteLoadOp(rb._name, rb._op.type, off)
    _insert(g, op, what)
    if name is None:
        tag = off if isinstance(off, int) else getattr(offset, "name", "t")
        name = f"id_{rb.remote_buffer_id}_offset_{tag}"
    t = g._tensor(op.result, g._unique_name(name, scoped=True))
    t._meta_shape = rb.meta_shape
    return t


def _remote_load_(rb: Any, offset: Any, t: Tensor) -> Tensor:
    from popxl.ops._utils import check_in_graph

    what = "ops.remote_load_"
    rb = _buffer_of(rb, what)
    check_in_graph(gcg(), [t], what)
    rb.validate_tensor_matches_buffer(t)
    off = _offset_of(rb, offset, what)
    _insert(gcg(), RemoteLoadInplaceOp(rb._name, t._value, off), what)
    t._meta_shape = rb.meta_shape
    return t


def _remote_store(rb: Any, offset: Any, t: Tensor) -> None:
    from popxl.ops._utils import check_in_graph

    what = "ops.remote_store"
    rb = _buffer_of(rb, what)
    check_in_graph(gcg(), [t], what)
    rb.validate_tensor_matches_buffer(t)
    off = _offset_of(rb, offset, what)
    _insert(gcg(), RemoteStoreOp(rb._name, t._value, off), what)


# ---------------------------------------------------------------------------------------
# Creation functions
# ---------------------------------------------------------------------------------------


def _main_graph(what: str) -> Any:
    g = gcg()
    if not g._is_main:
        raise ValueError(
            "You cannot initialise a variable tensor within a graph. Create it in the main "
            f"graph (`with ir.main_graph:`) and pass it to graph {g.name!r} as an input. ({what})"
        )
    return g


def _host_array(data: Any, dtype: Any, downcast: bool, log2_scale: Any, nan_on_overflow: Any, what: str) -> np.ndarray:
    from popxl.utils import host_data

    arr = host_data(data, dtype, log2_scale, nan_on_overflow)
    if arr is None:
        arr = _to_numpy(data, check_dtype(dtype, what) if dtype is not None else None, downcast, what)
    return arr


def _grouping(g: Any, replica_grouping: Any, what: str) -> tuple[Any, int]:
    """(grouping attribute or None, number of groups)."""
    if replica_grouping is None:
        return None, 1
    from popxl.replica_grouping import ReplicaGrouping

    if not isinstance(replica_grouping, ReplicaGrouping):
        raise TypeError(
            f"{what}: replica_grouping must be a popxl.ReplicaGrouping (from ir.replica_grouping), "
            f"got {describe(replica_grouping)}"
        )
    replica_grouping._check_ir(g._ir, what)
    return replica_grouping._to_attr(), int(replica_grouping.num_groups)


def _value_shape(arr: np.ndarray, num_groups: int, replica_grouping: Any, what: str) -> tuple[int, ...]:
    if num_groups > 1:
        if arr.ndim == 0 or arr.shape[0] != num_groups:
            raise ValueError(
                f"{what}: with {replica_grouping!r} the data must have shape "
                f"(num_groups={num_groups}, *shape), got {arr.shape}"
            )
        return tuple(arr.shape[1:])
    return tuple(arr.shape)


def _retrieval(mode: Any, what: str) -> str:
    mode = "one_per_group" if mode is None else mode
    if mode not in ("one_per_group", "all_replicas"):
        raise ValueError(f"{what}: invalid retrieval_mode {mode!r}")
    return mode


def _register(
    g: Any,
    op: Any,
    name: str,
    replica_grouping: Any,
    mode: str,
    arr: np.ndarray,
    num_groups: int,
    info: TensorLocationInfo,
) -> Variable:
    _insert(g, op, op.name)
    from popxl.graph import _VALID_HINT

    if _VALID_HINT.fullmatch(name):
        op.results[0].name_hint = name
    v = Variable._create(op.results[0], g, name)
    g._values[op.results[0]] = v
    v._replica_grouping = replica_grouping
    v._retrieval_mode = mode
    v._location_info = info
    if num_groups > 1:
        v._host_init = arr
    return v


def remote_variable(
    data: Any,
    remote_buffer: RemoteBuffer,
    offset: int = 0,
    dtype: _dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = "one_per_group",
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> Variable:
    """A variable stored in entry `offset` of `remote_buffer` (`ipu.remote_variable`).

    Ops do not use the variable itself: load the entry with `ops.remote_load(remote_buffer,
    offset)`. `Session.get_tensor_data` / `write_variable_data` read and write the entry
    (one value per group of `replica_grouping`, data shaped `(num_groups, *shape)`)."""
    what = "popxl.remote_variable" + (f" {name!r}" if isinstance(name, str) else "")
    return _remote_variable(
        data, remote_buffer, offset, dtype, name, downcast, replica_grouping, retrieval_mode,
        log2_scale, nan_on_overflow, None, what,
    )  # fmt: skip


def _remote_variable(
    data: Any,
    remote_buffer: Any,
    offset: Any,
    dtype: Any,
    name: Any,
    downcast: bool,
    replica_grouping: Any,
    retrieval_mode: Any,
    log2_scale: Any,
    nan_on_overflow: Any,
    shard_over: int | None,
    what: str,
) -> Variable:
    g = _main_graph(what)
    rb = _buffer_of(remote_buffer, what)
    name = check_name(name, what)
    mode = _retrieval(retrieval_mode, what)
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
        raise TypeError(f"{what}: offset must be an int, got {describe(offset)}")
    offset = int(offset)
    if not 0 <= offset < rb.entries:
        raise ValueError(f"{what}: offset {offset} is out of range [0, {rb.entries}) (entries of {rb!r})")
    arr = _host_array(data, dtype, downcast, log2_scale, nan_on_overflow, what)
    attr, groups = _grouping(g, replica_grouping, what)
    shape = _value_shape(arr, groups, replica_grouping, what)
    vdt = _dtype.as_dtype(arr.dtype)
    if vdt != rb.tensor_dtype:
        raise ValueError(f"{what}: dtype {vdt.name} does not match {rb!r} (dtype {rb.tensor_dtype.name})")
    if shard_over is None and shape != rb.tensor_shape:
        raise ValueError(
            f"Tensor does not match buffer.\nExisting remote buffer has shape={rb.tensor_shape} "
            f"and dtype={rb.tensor_dtype.name}.\nThe tensor has shape={shape}, dtype={vdt.name}."
        )
    for op in g._block.ops:
        if isinstance(op, RemoteVariableOp) and op.buffer_name == rb._name and op.entry == offset:
            raise ValueError(f"{what}: entry {offset} of {rb!r} already holds remote variable {op.var_name.data!r}")
    vname = g._unique_name(name if name is not None else "t", scoped=True)
    op = RemoteVariableOp(
        vname, rb._name, offset, tensor_type(shape, arr.dtype), dense_attr(arr),
        grouping=attr, retrieval_mode=mode if attr is not None else None, shard_over=shard_over,
    )  # fmt: skip
    rts = ReplicatedTensorSharding.On if shard_over is not None else ReplicatedTensorSharding.Off
    info = TensorLocationInfo(TensorLocation(TensorStorage.OffChip, rts), rb, offset)
    return _register(g, op, vname, replica_grouping, mode, arr, groups, info)


def _group_size(g: Any, replica_grouping: Any) -> int:
    rf = g._ir.replication_factor
    if replica_grouping is None:
        return rf
    return rf // int(replica_grouping.num_groups)


def _shard_over(g: Any, replica_grouping: Any, shard_over: Any, what: str) -> int:
    size = _group_size(g, replica_grouping)
    if shard_over is None:
        return size
    if isinstance(shard_over, bool) or not isinstance(shard_over, int | np.integer) or shard_over < 1:
        raise ValueError(f"{what}: shard_over must be a positive int, got {describe(shard_over)}")
    if shard_over > size:
        raise ValueError(
            f"The sharding group size ({shard_over}) must be less than or equal to the replica "
            f"group size ({size}). Note that if no replica grouping was passed, the replica "
            "group size defaults to the IR's global replication factor; and if no sharding "
            "group size was passed, it defaults to the replica group size."
        )
    if size % shard_over:
        raise ValueError(
            f"The replica group size ({size}) must be divisible by the sharding group size "
            f"({shard_over}). Note that if no replica grouping was passed, the replica group "
            "size defaults to the IR's global replication factor; and if no sharding group "
            "size was passed, it defaults to the replica group size."
        )
    return int(shard_over)


def _require_replication(g: Any) -> None:
    rf = g._ir.replication_factor
    if rf <= 1:
        raise ValueError(
            f"The IR's global replication factor is {rf}. It must be greater than 1 to create "
            "a replica sharded variable."
        )


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
    g = gcg()
    shape = check_shape(shape, what)
    _grouping(g, replica_grouping, what)
    s = _shard_over(g, replica_grouping, shard_over, what)
    groups = int(replica_grouping.num_groups) if replica_grouping is not None else 1
    tensor_shape = shape[1:] if groups > 1 else shape
    n = math.prod(tensor_shape)
    buf = remote_buffer((-(-n // s),), dtype, entries)
    buf.meta_shape = tensor_shape
    buf._shard_over = s
    return buf


def remote_replica_sharded_variable(
    data: Any,
    remote_buffer: RemoteBuffer,
    offset: int = 0,
    dtype: _dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = "one_per_group",
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> Variable:
    """A variable sharded over replicas and stored in entry `offset` of `remote_buffer`:
    each replica's copy of the entry holds its shard. Sets `remote_buffer.meta_shape` to the
    variable's shape. The number of shards is the buffer's (`replica_sharded_buffer`), else
    the largest divisor of the replica group size whose shards fit the entry. Needs
    replication_factor > 1."""
    what = "popxl.remote_replica_sharded_variable" + (f" {name!r}" if isinstance(name, str) else "")
    g = _main_graph(what)
    _require_replication(g)
    rb = _buffer_of(remote_buffer, what)
    arr = _host_array(data, dtype, downcast, log2_scale, nan_on_overflow, what)
    _, groups = _grouping(g, replica_grouping, what)
    shape = _value_shape(arr, groups, replica_grouping, what)
    if rb.meta_shape == ():
        rb.meta_shape = shape
    elif rb.meta_shape != shape:
        raise ValueError(
            f"Cannot use RemoteBuffer[id={rb.remote_buffer_id}] for replica sharded variable of "
            f"shape {shape}. The buffer's meta_shape has already been set to: {rb.meta_shape}."
        )
    n, per = math.prod(shape), math.prod(rb.tensor_shape)
    s = rb._shard_over
    if s is None:
        size = _group_size(g, replica_grouping)
        fits = [d for d in range(size, 0, -1) if size % d == 0 and -(-n // d) == per]
        if not fits:
            raise ValueError(
                f"{what}: entries of {rb!r} ({per} elements) cannot hold the shards of {shape} "
                f"({n} elements) over any divisor of the replica group size {size}"
            )
        s = fits[0]
    elif -(-n // s) != per:
        raise ValueError(
            f"{what}: shards of {shape} over {s} replicas have {-(-n // s)} elements, but entries of {rb!r} have {per}"
        )
    return _remote_variable(
        arr, rb, offset, None, name, downcast, replica_grouping, retrieval_mode, None, None,
        s, what,
    )  # fmt: skip


def replica_sharded_variable(
    data: Any,
    dtype: _dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    shard_over: int | None = None,
    retrieval_mode: str | None = "one_per_group",
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> tuple[Variable, Tensor]:
    """A variable sharded over replicas (`ipu.replica_sharded_variable`): returns `(full,
    shard)`. `shard` is this replica's 1-D shard, resident state that ops use and update;
    `full` is the host's handle (Session get/write of the full value; not for ops).
    `shard_over` defaults to the replica group size. Needs replication_factor > 1."""
    what = "popxl.replica_sharded_variable" + (f" {name!r}" if isinstance(name, str) else "")
    g = _main_graph(what)
    _require_replication(g)
    name = check_name(name, what)
    mode = _retrieval(retrieval_mode, what)
    arr = _host_array(data, dtype, downcast, log2_scale, nan_on_overflow, what)
    attr, groups = _grouping(g, replica_grouping, what)
    shape = _value_shape(arr, groups, replica_grouping, what)
    s = _shard_over(g, replica_grouping, shard_over, what)
    n = -(-math.prod(shape) // s)
    vname = g._unique_name(name if name is not None else "t", scoped=True)
    op = ReplicaShardedVariableOp(
        vname, tensor_type(shape, arr.dtype), tensor_type((n,), arr.dtype), dense_attr(arr),
        shard_over=s, grouping=attr, retrieval_mode=mode if attr is not None else None,
    )  # fmt: skip
    info = TensorLocationInfo(TensorLocation(TensorStorage.OnChip, ReplicatedTensorSharding.On), None, None)
    v = _register(g, op, vname, replica_grouping, mode, arr, groups, info)
    shard = g._tensor(op.shard, g._unique_name(vname + "_rts"))
    shard._meta_shape = shape
    return v, shard


# ---------------------------------------------------------------------------------------
# Session support: host values of remote and sharded variables
# ---------------------------------------------------------------------------------------


class SessionRemote:
    """The remote and replica-sharded variables of a Session's Ir: their host copies hold
    the full (unsharded) value, one per group (`[num_groups, *shape]` with several groups;
    `[replication_factor, *shape]` with retrieval_mode 'all_replicas'), read from and
    written to every replica's buffer entry or shard."""

    def __init__(self, session: Any) -> None:
        from xl.dialects.utils import dense_to_numpy

        self._s = session
        self._ops: dict[Variable, RemoteVariableOp | ReplicaShardedVariableOp] = {}
        main = session.ir.main_graph
        for op in main._block.ops:
            if isinstance(op, RemoteVariableOp | ReplicaShardedVariableOp):
                v = main._tensor(op.results[0])
                assert isinstance(v, Variable)
                self._ops[v] = op
                init = getattr(v, "_host_init", None)
                if init is None:
                    init = (
                        dense_to_numpy(op.init) if op.init is not None
                        else np.zeros(v.shape_on_host, v.dtype.as_numpy())
                    )  # fmt: skip
                init = np.array(init)
                if session._all_replicas(v):
                    per = init if op.num_groups() > 1 else init[None]
                    init = np.stack([per[g] for g in op.group_assignment()])
                session._host[v] = init

    def __contains__(self, v: object) -> bool:
        return v in self._ops

    def _where(self, op: Any) -> tuple[str, int | None]:
        if isinstance(op, RemoteVariableOp):
            return op.buffer_name, op.entry
        return op.var_name.data, None

    def _full_values(self, op: Any) -> list[np.ndarray]:
        """The full value each replica sees (its shard group's shards joined)."""
        exe = self._s._exe
        slot, entry = self._where(op)
        if exe.comm.num_instances > 1:  # other instances' replicas through the comm
            every = np.asarray(exe.gather_state(slot))
            if entry is not None:
                every = every[:, entry]
        else:  # only this variable's entry of each replica's buffer
            at = (entry, ...) if entry is not None else (...,)
            every = np.stack([exe.get_state(slot, r)[at] for r in exe.local_replicas])
        full = op.full_type()
        shape = tuple(full.get_shape())
        shards = op.num_shards()
        if shards == 1:
            return [every[r].reshape(shape) for r in range(every.shape[0])]
        assign = op.group_assignment()
        members: dict[int, list[int]] = {}
        for r, g in enumerate(assign):
            members.setdefault(g, []).append(r)
        n = math.prod(shape)
        out = []
        for r, g in enumerate(assign):
            ms = members[g]
            p = ms.index(r)
            block = ms[(p // shards) * shards : (p // shards + 1) * shards]
            flat = np.concatenate([every[m].reshape(-1) for m in block])
            out.append(flat[:n].reshape(shape))
        return out

    def read(self, v: Variable) -> np.ndarray:
        """The host value of `v` from the device."""
        op = self._ops[v]
        values = self._full_values(op)
        if self._s._all_replicas(v):
            return np.stack(values)
        assign = op.group_assignment()
        if op.num_groups() > 1:
            return np.stack([values[assign.index(g)] for g in range(op.num_groups())])
        return values[0]

    def write(self, v: Variable, host: np.ndarray) -> None:
        """Write the host value of `v` (per group) into every local replica's entry or shard."""
        op = self._ops[v]
        exe = self._s._exe
        slot, entry = self._where(op)
        if slot not in exe.state:
            return
        host = np.asarray(host)
        if self._s._all_replicas(v):  # every replica's full value
            per_replica = [self._stored(op, host[r], r) for r in range(host.shape[0])]
        else:
            per_replica = op.replica_values(host)
        for r in exe.local_replicas:
            buf = exe.get_state(slot, r)
            dst = buf[entry, ...] if entry is not None else buf
            np.copyto(dst, per_replica[r].reshape(dst.shape))

    @staticmethod
    def _stored(op: Any, full: np.ndarray, replica: int) -> np.ndarray:
        """What `replica` stores of the full value `full`: itself, or its shard."""
        shards = op.num_shards()
        if shards == 1:
            return full
        n = op.shard_size()
        flat = np.zeros(n * shards, full.dtype)
        flat[: full.size] = full.reshape(-1)
        i = op.shard_index()[replica]
        return flat[i * n : (i + 1) * n]
