"""Tensors (popxl/tensor.py): thin views over SSA values of the IR.

A `Tensor` wraps one `SSAValue` of one graph; `Graph._tensor(value)` always returns
the same object for the same value, so tensors hash and compare by identity. This module
also creates the tensors that are not op results: `variable`, `constant`, the remote and
replica-sharded variables (in a `popxl.RemoteBuffer`), `graph_input`. Host data becomes
their value through `popxl._host.host_array`. Tensor's ops as methods (`t.reshape`,
`t + 1`, `t[0]`) are set by `popxl.ops` (`popxl/ops/_tensor_methods.py`): this module
imports no op.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, StringAttr, TensorType
from xdsl.ir import Attribute, BlockArgument, Operation, OpResult, SSAValue

from popxl._checks import check_name, check_shape, describe
from popxl._host import NotHostDataError, host_array
from popxl._logging import logger
from popxl.context import gcg
from popxl.dtypes import checked_dtype, dtype
from popxl.errors import UndefinedValue
from popxl.fp8_utils import float8_view
from popxl.remote_buffer import (
    RemoteBuffer,
    ReplicatedTensorSharding,
    TensorLocation,
    TensorLocationInfo,
    TensorStorage,
    checked_buffer,
)
from popxl.replica_grouping import ReplicaGrouping, checked_grouping, checked_shard_over, replica_group_size
from popxl.utils import to_numpy
from xl.dialects.graph import ConstantOp, VariableOp
from xl.dialects.ipu import IPU_ATTR, TILE_SET_ATTR, CopyOp, RemoteVariableOp, ReplicaShardedVariableOp
from xl.dialects.replica import shard_size
from xl.dialects.replica_layout import group_host_shape
from xl.dialects.utils import dense_attr, dense_to_numpy, tensor_type

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.ir import Ir

__all__ = [
    "Constant",
    "Tensor",
    "TensorByRef",
    "TensorSpec",
    "Variable",
    "constant",
    "graph_input",
    "graph_output",
    "remote_replica_sharded_variable",
    "remote_variable",
    "replica_sharded_variable",
    "variable",
]

ScalarType = int | float | bool
HostTensor = Any  # np.ndarray, torch.Tensor, Python scalars and nested lists


class TensorSpec(Mapping):
    """Shape, dtype and meta-shape of a tensor; a Mapping so `**spec` works."""

    __slots__ = ("dtype", "meta_shape", "shape")

    def __init__(self, shape: Iterable[int], dtype: dtype, meta_shape: Iterable[int] = ()):
        self.shape = check_shape(shape, "popxl.TensorSpec")
        self.dtype = checked_dtype(dtype, "popxl.TensorSpec")
        self.meta_shape = check_shape(meta_shape, "popxl.TensorSpec meta_shape") if meta_shape else ()

    def to_dict(self) -> dict[str, Any]:
        """`{"shape": ..., "dtype": ..., "meta_shape": ...}`."""
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}

    def to_tuple(self) -> tuple[Any, ...]:
        """`(shape, dtype, meta_shape)`."""
        return (self.shape, self.dtype, self.meta_shape)

    def __getitem__(self, key: str) -> Any:
        if key not in ("shape", "dtype", "meta_shape"):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(("shape", "dtype", "meta_shape"))

    def __len__(self) -> int:
        return 3

    def __hash__(self) -> int:
        return hash(self.to_tuple())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and self.to_tuple() == other.to_tuple()

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype}, meta_shape={self.meta_shape})"


class Tensor:
    """A tensor of a graph: a view over one SSA value. Create with `popxl.variable`,
    `popxl.constant`, `popxl.graph_input`, ops or `ops.host_load` — not directly."""

    # Make NumPy defer to our reflected operators (`np_array + tensor`).
    __array_ufunc__ = None

    # set by `_create` (the only constructor)
    _value: SSAValue
    _graph: Graph
    _name: str
    _meta_shape: tuple[int, ...]

    def __init__(self) -> None:
        raise TypeError(
            "Tensor cannot be constructed directly; use popxl.variable, popxl.constant, popxl.graph_input or an op"
        )

    @classmethod
    def _create(cls, value: SSAValue, graph: Graph, name: str) -> Self:
        t = cls.__new__(cls)
        t._value = value
        t._graph = graph
        t._name = name
        t._meta_shape = ()
        return t

    @classmethod
    def _from_pb_tensor(cls, t: Tensor) -> Tensor:
        """The popxl Tensor of what a PopART binding's op gives (`op.outTensor(i)`, which
        for xl's custom ops (`popxl.custom_ops`) is the popxl Tensor itself)."""
        if not isinstance(t, Tensor):
            raise TypeError(f"Tensor._from_pb_tensor: expected a custom op's output tensor, got {type(t).__name__}")
        return t

    # -- identity -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The tensor's name, with the name scopes it was created in (`"layer1/w"`)."""
        return self._name

    @property
    def id(self) -> str:
        """`name` in the main graph, `<graph name>/<name>` in a subgraph."""
        if self._graph._is_main:
            return self._name
        return f"{self._graph.name}/{self._name}"

    @property
    def scope(self) -> str:
        """The name scopes of `name` (`"layer1"` for `"layer1/w"`; `""` when there are none)."""
        return self._name.rsplit("/", 1)[0] if "/" in self._name else ""

    @property
    def ir(self) -> Ir:
        """The Ir of the tensor's graph."""
        return self._graph._ir

    @property
    def graph(self) -> Graph:
        """The graph the tensor belongs to."""
        return self._graph

    # -- type ---------------------------------------------------------------------------
    @property
    def _type(self) -> TensorType:
        t = self._value.type
        assert isinstance(t, TensorType), f"{self._name} is not a tensor value"
        return t

    @property
    def dtype(self) -> dtype:
        """The element type (`popxl.float32`, ...)."""
        return dtype._from_element_type(self._type.get_element_type())

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, a tuple of ints (`()` for a scalar)."""
        return tuple(self._type.get_shape())

    @property
    def meta_shape(self) -> tuple[int, ...]:
        """The full shape a replica-sharded tensor is a shard of; `()` for other tensors."""
        return self._meta_shape

    @property
    def spec(self) -> TensorSpec:
        """`TensorSpec(shape, dtype, meta_shape)`."""
        return TensorSpec(self.shape, self.dtype, self.meta_shape)

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def nelms(self) -> int:
        """The number of elements (1 for a scalar)."""
        return math.prod(self.shape)

    def strides(self, shape: Iterable[int] | None = None) -> tuple[int, ...]:
        """The bytes to step in each dimension of the tensor (or of `shape`) laid out in
        row-major order, as `numpy.ndarray.strides`: `(48, 12, 4)` for a float32 (2, 4, 3)."""
        shape = tuple(shape) if shape is not None else self.shape
        out, acc = [], self.dtype._compute_np().itemsize
        for d in reversed(shape):
            out.append(acc)
            acc *= int(d)
        return tuple(out[::-1])

    @property
    def location_info(self) -> Any:
        """Where a remote or replica-sharded variable lives (`popxl.remote_buffer.TensorLocationInfo`);
        None otherwise."""
        return getattr(self, "_location_info", None)

    @property
    def in_sync_with_ipu(self) -> bool:
        """Always True in xl: host and device values are synchronised by the Session."""
        return True

    # -- placement ----------------------------------------------------------------------
    def _placement_attr(self, key: str) -> Any:
        v = self._value
        if isinstance(v, OpResult):
            return v.op.attributes.get(key)
        if isinstance(v, BlockArgument):
            op = self._graph._op
            arg_attrs = getattr(op, "arg_attrs", None)
            if arg_attrs is not None and v.index < len(arg_attrs.data):
                return arg_attrs.data[v.index].data.get(key)
        return None

    @property
    def _ipu_or_none(self) -> int | None:
        a = self._placement_attr(IPU_ATTR)
        return a.value.data if isinstance(a, IntegerAttr) else None

    @property
    def _tile_set_or_none(self) -> str | None:
        a = self._placement_attr(TILE_SET_ATTR)
        return a.data if isinstance(a, StringAttr) else None

    def _first_consumer(self) -> Operation | None:
        """The first op of the graph (in program order) that reads this tensor."""
        users = {use.operation for use in self._value.uses}
        if not users:
            return None
        return next((op for op in self._graph._block.ops if op in users), next(iter(users)))

    def _placement(self, key: str, what: str) -> Attribute | None:
        """The placement attribute `key` of this tensor: that of the op producing it; for a
        tensor no op computes (a variable, constant or graph input) its own when it has
        one, else that of its first consumer (the source side of an IPU copy). None: placed
        by default; UndefinedValue when nothing places it yet (no op uses it)."""
        a = self._placement_attr(key)
        if a is not None or (isinstance(self._value, OpResult) and not isinstance(self, Variable | Constant)):
            return a
        op = self._first_consumer()
        if op is None:
            raise UndefinedValue(f"Tensor.{what}: {self.id} is not computed by an op and no op uses it yet")
        if key == IPU_ATTR and isinstance(op, CopyOp):
            return op.source
        return op.attributes.get(key)

    @property
    def ipu(self) -> int:
        """The virtual IPU of the op producing this tensor (0 when that op was placed on
        none, PopXL's default). A variable, constant or graph input takes the IPU of its
        first consumer (popxl.errors.UndefinedValue while no op uses it)."""
        a = self._placement(IPU_ATTR, "ipu")
        return a.value.data if isinstance(a, IntegerAttr) else 0

    @property
    def tile_set(self) -> str:
        """The tile set ("compute" or "io") of the op producing this tensor, or for a
        variable, constant or graph input that of its first consumer
        (popxl.errors.UndefinedValue while no op uses it)."""
        a = self._placement(TILE_SET_ATTR, "tile_set")
        return a.data if isinstance(a, StringAttr) else "compute"

    # -- repr / identity ------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Tensor[{self.id} {self.dtype!r} {self.shape}]"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __len__(self) -> int:
        if not self.shape:
            raise ValueError("Tensor is a scalar and doesn't have a length.")
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("popxl Tensors cannot be iterated; index them explicitly (t[i]) or use ops.split")

    def __contains__(self, item: Any) -> bool:
        raise TypeError("popxl Tensors do not support `in`")

    def __bool__(self) -> bool:
        return True

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        """A Tensor is a value of the program, not host data: NumPy cannot convert it."""
        raise NotHostDataError(self)

    # Shape methods and operators (`t.reshape(...)`, `t + 1`, `t[0]`, ...) are set by
    # `popxl.ops` (`popxl/ops/_tensor_methods.py`) when it is imported; their types:
    if TYPE_CHECKING:

        def reshape(self, shape: Iterable[int]) -> Tensor: ...
        def reshape_(self, shape: Iterable[int]) -> Tensor: ...
        def flatten(self) -> Tensor: ...
        def flatten_(self) -> Tensor: ...
        def transpose(self, permutation: Iterable[int] | None = None) -> Tensor: ...
        def transpose_(self, permutation: Iterable[int] | None = None) -> Tensor: ...
        @property
        def T(self) -> Tensor: ...
        @property
        def T_(self) -> Tensor: ...
        def detach(self) -> Tensor: ...
        def detach_(self) -> Tensor: ...
        def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor: ...
        def diag(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...
        def __add__(self, o: Any) -> Tensor: ...
        def __radd__(self, o: Any) -> Tensor: ...
        def __iadd__(self, o: Any) -> Tensor: ...
        def __sub__(self, o: Any) -> Tensor: ...
        def __rsub__(self, o: Any) -> Tensor: ...
        def __mul__(self, o: Any) -> Tensor: ...
        def __rmul__(self, o: Any) -> Tensor: ...
        def __truediv__(self, o: Any) -> Tensor: ...
        def __rtruediv__(self, o: Any) -> Tensor: ...
        def __mod__(self, o: Any) -> Tensor: ...
        def __rmod__(self, o: Any) -> Tensor: ...
        def __pow__(self, o: Any) -> Tensor: ...
        def __rpow__(self, o: Any) -> Tensor: ...
        def __matmul__(self, o: Any) -> Tensor: ...
        def __rmatmul__(self, o: Any) -> Tensor: ...
        def __and__(self, o: Any) -> Tensor: ...
        def __rand__(self, o: Any) -> Tensor: ...
        def __or__(self, o: Any) -> Tensor: ...
        def __ror__(self, o: Any) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __pos__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...


# An op argument that becomes a constant when it is not a Tensor: a Tensor or host data.
TensorLike = Tensor | ScalarType | np.ndarray | np.generic | Sequence[Any]


class Variable(Tensor):
    """A variable: persistent state, created in the main graph with `popxl.variable`."""

    # Set by the functions creating variables (`variable`, `remote_variable`, ...).
    _replica_grouping: ReplicaGrouping | None = None
    _retrieval_mode: str = "one_per_group"
    _location_info: TensorLocationInfo | None = None
    _host_init: np.ndarray | None = None  # the data of every group (more than one group)
    _memmap_arr: np.memmap | None = None  # the user's np.memmap holding the variable's host value

    @property
    def replica_grouping(self) -> Any:
        """The `popxl.ReplicaGrouping` of the variable: replicas of one group share a value
        (default: all replicas in one group)."""
        rg = getattr(self, "_replica_grouping", None)
        return rg if rg is not None else self._graph._ir.replica_grouping()

    @property
    def retrieval_mode(self) -> str:
        """How the host reads the variable: `one_per_group` (default) or `all_replicas`."""
        return getattr(self, "_retrieval_mode", "one_per_group")

    @property
    def _num_groups(self) -> int:
        rg = getattr(self, "_replica_grouping", None)
        return int(rg.num_groups) if rg is not None else 1

    @property
    def shape_on_replica(self) -> tuple[int, ...]:
        """The shape each replica holds (the variable's shape)."""
        return self.shape

    @property
    def shape_on_host(self) -> tuple[int, ...]:
        """The shape of the host data: `(num_groups, *shape)` with more than one group."""
        return group_host_shape(self.shape, self._num_groups)

    @property
    def _var_name(self) -> str:
        op = self._value.owner
        assert isinstance(op, VariableOp | RemoteVariableOp | ReplicaShardedVariableOp), f"{self._name}: not a variable"
        return op.var_name.data

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        if source is None:
            raise ValueError(
                f"Variable.copy_to_ipu: Could not infer the ipu of {self.id}: variables have no producing op. "
                "Please specify `source`"
            )
        return super().copy_to_ipu(destination, source)


class Constant(Tensor):
    """A constant tensor (`popxl.constant`)."""

    @property
    def _data(self) -> np.ndarray:
        op = self._value.owner
        assert isinstance(op, ConstantOp), f"{self._name} is not defined by a graph.constant"
        return dense_to_numpy(op.value)


# `TensorByRef` is a type-hint alias of `Tensor`: graph inputs annotated with it are by-ref.
class TensorByRef(Tensor):
    """Annotation marking a `create_graph` parameter as a by-reference graph input."""


# ---------------------------------------------------------------------------------------
# Creation functions
# ---------------------------------------------------------------------------------------


def _main_graph(what: str) -> Graph:
    g = gcg()
    if not g._is_main:
        raise ValueError(
            "You cannot initialise a variable tensor within a graph. Create it in the main "
            f"graph (`with ir.main_graph:`) and pass it to graph {g.name!r} as an input. ({what})"
        )
    return g


def _what(fn: str, name: Any) -> str:
    """`popxl.variable 'w'`: the function called and the name given, for error messages."""
    return fn + (f" {name!r}" if isinstance(name, str) else "")


def _retrieval(mode: Any, what: str) -> str:
    mode = "one_per_group" if mode is None else mode
    if mode not in ("one_per_group", "all_replicas"):
        raise ValueError(f"{what}: invalid retrieval_mode {mode!r}")
    return mode


def _variable_data(
    g: Graph,
    data: Any,
    dtype: dtype | None,
    downcast: bool,
    log2_scale: Any,
    nan_on_overflow: Any,
    replica_grouping: Any,
    what: str,
) -> tuple[np.ndarray, np.memmap | None]:
    """The host array of a variable's `data`, and the `np.memmap` itself when `data` is one
    the variable can keep as its storage (no copy, as PopXL): C-ordered and aligned, of a
    dtype that needs no downcast, `dtype` None or its own (ValueError otherwise, PopXL's
    messages). With a replica grouping whose groups are not strided alike (not `is_const`)
    the data is copied, with PopXL's warning (`popxl._logging`)."""
    if not isinstance(data, np.memmap):
        arr, _ = host_array(
            data, dtype, downcast=downcast, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow, what=what
        )
        return arr, None
    mm = to_numpy(data, dtype, downcast, copy=False, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow)
    f8 = float8_view(mm)  # float8 data: the bits as xl computes with them (a view of the file)
    mm = mm if f8 is None else f8
    if isinstance(replica_grouping, ReplicaGrouping) and not replica_grouping.is_const:
        logger.warning(
            f"In creation of variable {what}, you have passed np.memmap data and a non-const replica "
            "grouping, which requires us to make a copy of your np.memmap data. Your variable will be "
            "treated as NOT an np.memmap."
        )
        return np.array(mm), None
    if not isinstance(mm, np.memmap):  # a copy was unavoidable (e.g. float8 data cast on the host)
        return mm, None
    if not mm.flags.writeable:
        g._ir._has_read_only_memmap = True
    return mm, mm


def _value_shape(arr: np.ndarray, num_groups: int, replica_grouping: Any, what: str) -> tuple[int, ...]:
    """The shape of the variable holding `arr`: `arr`'s, without the leading `num_groups`
    dim when there are several groups."""
    if num_groups > 1:
        if arr.ndim == 0 or arr.shape[0] != num_groups:
            raise ValueError(
                f"{what}: with {replica_grouping!r} the data must have shape "
                f"(num_groups={num_groups}, *shape), got {arr.shape}"
            )
        return tuple(arr.shape[1:])
    return tuple(arr.shape)


def _register(
    g: Graph,
    value: SSAValue,
    name: str,
    replica_grouping: ReplicaGrouping | None,
    mode: str,
    arr: np.ndarray,
    num_groups: int,
    info: TensorLocationInfo | None = None,
) -> Variable:
    """The Variable `name` of `value` (result 0 of a variable op just inserted into `g`)."""
    v = g._tensor(value, name)
    assert isinstance(v, Variable)
    v._replica_grouping = replica_grouping
    v._retrieval_mode = mode
    v._location_info = info
    if isinstance(arr, np.memmap):
        v._memmap_arr = arr  # the host value stays in the user's file (Session keeps no copy)
    elif num_groups > 1:
        v._host_init = arr
    return v


def variable(
    data: HostTensor,
    dtype: dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> Variable:
    """A variable of the main graph initialised with `data` (stored as its `init` value).

    float64 data becomes float32 and int64 int32 unless `dtype` is given or `downcast=False`.
    """
    what = _what("popxl.variable", name)
    g = _main_graph(what)
    name = check_name(name, what)
    if retrieval_mode not in (None, "one_per_group", "all_replicas"):
        raise ValueError(f"{what}: invalid retrieval_mode {retrieval_mode!r}")
    arr, mm = _variable_data(g, data, dtype, downcast, log2_scale, nan_on_overflow, replica_grouping, what)
    grouping_attr, num_groups = checked_grouping(g._ir, replica_grouping, what)
    shape = _value_shape(arr, num_groups, replica_grouping, what)
    vname = g._unique_name(name if name is not None else "t", scoped=True)
    mode = retrieval_mode if grouping_attr is not None else None
    init = dense_attr(arr) if mm is None else None  # a memmap's value stays in its file
    op = VariableOp(vname, tensor_type(shape, arr.dtype), init, grouping=grouping_attr, retrieval_mode=mode)
    g._insert(op)
    return _register(g, op.result, vname, replica_grouping, retrieval_mode or "one_per_group", arr, num_groups)


def constant_of(arr: np.ndarray, dt: dtype, name: str | None = None) -> Constant:
    """A constant in the current graph holding `arr` (of popxl dtype `dt`: the result of
    `host_array`), named `name` (scoped, made unique) when given."""
    assert arr.dtype == dt._compute_np(), f"constant_of: {arr.dtype} is not {dt}"
    g = gcg()
    op = ConstantOp(dense_attr(arr))
    g._insert(op)
    t = g._tensor(op.result, g._unique_name(name, scoped=True) if name is not None else None)
    assert isinstance(t, Constant)
    return t


def constant(
    data: HostTensor,
    dtype: dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> Constant:
    """A constant tensor in the current graph."""
    what = _what("popxl.constant", name)
    name = check_name(name, what)
    arr, dt = host_array(
        data, dtype, downcast=downcast, log2_scale=log2_scale, nan_on_overflow=nan_on_overflow, what=what
    )
    return constant_of(arr, dt, name)


def remote_variable(
    data: Any,
    remote_buffer: RemoteBuffer,
    offset: int = 0,
    dtype: dtype | None = None,
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
    what = _what("popxl.remote_variable", name)
    g = _main_graph(what)
    arr, _ = _variable_data(g, data, dtype, downcast, log2_scale, nan_on_overflow, replica_grouping, what)
    return _remote_variable(g, arr, remote_buffer, offset, name, replica_grouping, retrieval_mode, None, what)


def _remote_variable(
    g: Graph,
    arr: np.ndarray,
    remote_buffer: Any,
    offset: Any,
    name: Any,
    replica_grouping: Any,
    retrieval_mode: Any,
    shard_over: int | None,
    what: str,
) -> Variable:
    rb = checked_buffer(remote_buffer, what)
    name = check_name(name, what)
    mode = _retrieval(retrieval_mode, what)
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
        raise TypeError(f"{what}: offset must be an int, got {describe(offset)}")
    offset = int(offset)
    if not 0 <= offset < rb.entries:
        raise ValueError(f"{what}: offset {offset} is out of range [0, {rb.entries}) (entries of {rb!r})")
    attr, groups = checked_grouping(g._ir, replica_grouping, what)
    shape = _value_shape(arr, groups, replica_grouping, what)
    vdt = dtype.as_dtype(arr.dtype)
    if vdt != rb.tensor_dtype:
        raise ValueError(f"{what}: dtype {vdt.name} does not match {rb!r} (dtype {rb.tensor_dtype.name})")
    # the entry holds the value in row-major order: another shape of as many elements is
    # accepted (as upstream, which stores the bytes); `remote_load` gives the buffer's shape.
    # A value of another element count is built, as in PopXL, and the program refused when a
    # Session compiles it (the op's verifier: "... does not match remote buffer ...").
    stored = (shard_size(math.prod(shape), shard_over),) if shard_over is not None and shard_over > 1 else shape
    fits = math.prod(stored) == math.prod(rb.tensor_shape)
    for op in g._block.ops:
        if isinstance(op, RemoteVariableOp) and op.buffer_name == rb._name and op.entry == offset:
            raise ValueError(f"{what}: entry {offset} of {rb!r} already holds remote variable {op.var_name.data!r}")
    vname = g._unique_name(name if name is not None else "t", scoped=True)
    init = None if isinstance(arr, np.memmap) else dense_attr(arr)  # a memmap's value stays in its file
    op = RemoteVariableOp(
        vname, rb._name, offset, tensor_type(shape, arr.dtype), init,
        grouping=attr, retrieval_mode=mode if attr is not None else None, shard_over=shard_over,
    )  # fmt: skip
    g._insert(op, verify_as=op.name if fits else None)  # its verifier looks the buffer up in the module
    rts = ReplicatedTensorSharding.On if shard_over is not None else ReplicatedTensorSharding.Off
    info = TensorLocationInfo(TensorLocation(TensorStorage.OffChip, rts), rb, offset)
    return _register(g, op.result, vname, replica_grouping, mode, arr, groups, info)


def _require_replication(g: Graph) -> None:
    rf = g._ir.replication_factor
    if rf <= 1:
        raise ValueError(
            f"The IR's global replication factor is {rf}. It must be greater than 1 to create "
            "a replica sharded variable."
        )


def remote_replica_sharded_variable(
    data: Any,
    remote_buffer: RemoteBuffer,
    offset: int = 0,
    dtype: dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = "one_per_group",
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> Variable:
    """A variable sharded over replicas and stored in entry `offset` of `remote_buffer`:
    each replica's copy of the entry holds its shard. Sets `remote_buffer.meta_shape` to the
    variable's shape. The number of shards is the buffer's (`replica_sharded_buffer`); a
    buffer of the variable's full shape is made to hold its shards over the replica group
    (as upstream); otherwise the largest divisor of the replica group size whose shards fit
    the entry. Entries that fit no shard of the value do not stop the variable's creation
    (as in PopXL): it is sharded over the replica group and a Session refuses the program,
    naming the variable and the buffer. Needs replication_factor > 1."""
    what = _what("popxl.remote_replica_sharded_variable", name)
    g = _main_graph(what)
    _require_replication(g)
    rb = checked_buffer(remote_buffer, what)
    arr, _ = _variable_data(g, data, dtype, downcast, log2_scale, nan_on_overflow, replica_grouping, what)
    _, groups = checked_grouping(g._ir, replica_grouping, what)
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
    size = replica_group_size(g._ir, replica_grouping)
    if s is None and rb.tensor_shape == shape and size > 1:
        # a buffer of the variable's full shape (as upstream accepts): its entries become the
        # shards over the replica group (`replica_sharded_buffer`'s layout)
        if rb._used():
            raise ValueError(
                f"{what}: {rb!r} holds the full shape {shape}; it would hold the shards over "
                f"{size} replicas, but ops already load or store its entries: create the "
                "variable before using the buffer, or use popxl.replica_sharded_buffer"
            )
        s = size
        rb.set_remote_buffer_info(rb.tensor_dtype, (shard_size(n, s),), rb.entries)
    elif s is None:
        fits = [d for d in range(size, 0, -1) if size % d == 0 and shard_size(n, d) == per]
        # entries that hold no shard of the value: built over the replica group, as in PopXL,
        # and refused when a Session compiles the program (the op's verifier)
        s = fits[0] if fits else size
    elif shard_size(n, s) != per:
        raise ValueError(
            f"{what}: shards of {shape} over {s} replicas have {shard_size(n, s)} elements, "
            f"but entries of {rb!r} have {per}"
        )
    return _remote_variable(g, arr, rb, offset, name, replica_grouping, retrieval_mode, s, what)


def replica_sharded_variable(
    data: Any,
    dtype: dtype | None = None,
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
    what = _what("popxl.replica_sharded_variable", name)
    g = _main_graph(what)
    _require_replication(g)
    name = check_name(name, what)
    mode = _retrieval(retrieval_mode, what)
    arr, mm = _variable_data(g, data, dtype, downcast, log2_scale, nan_on_overflow, replica_grouping, what)
    attr, groups = checked_grouping(g._ir, replica_grouping, what)
    shape = _value_shape(arr, groups, replica_grouping, what)
    s = checked_shard_over(g._ir, replica_grouping, shard_over, what)
    n = shard_size(math.prod(shape), s)
    vname = g._unique_name(name if name is not None else "t", scoped=True)
    init = dense_attr(arr) if mm is None else None  # a memmap's value stays in its file
    op = ReplicaShardedVariableOp(
        vname, tensor_type(shape, arr.dtype), tensor_type((n,), arr.dtype), init,
        shard_over=s, grouping=attr, retrieval_mode=mode if attr is not None else None,
    )  # fmt: skip
    g._insert(op, verify_as=op.name)
    info = TensorLocationInfo(TensorLocation(TensorStorage.OnChip, ReplicatedTensorSharding.On), None, None)
    v = _register(g, op.results[0], vname, replica_grouping, mode, arr, groups, info)
    shard = g._tensor(op.shard, g._unique_name(vname + "_rts"))
    shard._meta_shape = shape
    return v, shard


def graph_input(
    shape: Iterable[int],
    dtype: dtype,
    name: str | None = None,
    by_ref: bool = False,
    meta_shape: Iterable[int] | None = None,
) -> Tensor:
    """Add an input to the current (sub)graph."""
    return gcg()._add_input(shape, dtype, name, by_ref, meta_shape)


def graph_output(t: Tensor) -> None:
    """Mark `t` as the next output of the current (sub)graph."""
    gcg()._add_output(t)
