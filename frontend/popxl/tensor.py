"""Tensors (popxl/tensor.py): thin views over SSA values of the IR.

A `Tensor` wraps one `SSAValue` of one graph; `Graph._tensor(value)` always returns
the same object for the same value, so tensors hash and compare by identity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, StringAttr, TensorType
from xdsl.ir import BlockArgument, OpResult, SSAValue

from popxl import dtypes
from popxl._checks import check_dtype, check_name, check_shape, describe
from popxl.context import gcg
from popxl.dtypes import dtype
from xl.dialects.ipu import IPU_ATTR, TILE_SET_ATTR

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.ir import Ir
    from popxl.remote_buffer import TensorLocationInfo
    from popxl.replica_grouping import ReplicaGrouping

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
    "replica_sharded_buffer",
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
        self.dtype = check_dtype(dtype, "popxl.TensorSpec")
        self.meta_shape = check_shape(meta_shape, "popxl.TensorSpec meta_shape") if meta_shape else ()

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}

    def to_tuple(self) -> tuple[Any, ...]:
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

    # -- identity -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> str:
        """`name` in the main graph, `<graph name>/<name>` in a subgraph."""
        if self._graph._is_main:
            return self._name
        return f"{self._graph.name}/{self._name}"

    @property
    def scope(self) -> str:
        return self._name.rsplit("/", 1)[0] if "/" in self._name else ""

    @property
    def ir(self) -> Ir:
        return self._graph._ir

    @property
    def graph(self) -> Graph:
        return self._graph

    # -- type ---------------------------------------------------------------------------
    @property
    def _type(self) -> TensorType:
        t = self._value.type
        assert isinstance(t, TensorType), f"{self._name} is not a tensor value"
        return t

    @property
    def dtype(self) -> dtype:
        return dtype._from_element_type(self._type.get_element_type())

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._type.get_shape())

    @property
    def meta_shape(self) -> tuple[int, ...]:
        return self._meta_shape

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype, self.meta_shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nelms(self) -> int:
        return math.prod(self.shape)

    def strides(self, shape: Iterable[int] | None = None) -> list[int]:
        """Row-major strides in elements."""
        shape = tuple(shape) if shape is not None else self.shape
        out, acc = [], 1
        for d in reversed(shape):
            out.append(acc)
            acc *= d
        return out[::-1]

    @property
    def location_info(self) -> Any:
        """Where a remote or replica-sharded variable lives (`popxl.remote_buffer.TensorLocationInfo`);
        None otherwise."""
        return getattr(self, "_location_info", None)

    @property
    def in_sync_with_ipu(self) -> bool:
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
    def ipu(self) -> int:
        """The virtual IPU of the op producing this tensor (0 when unplaced)."""
        i = self._ipu_or_none
        return 0 if i is None else i

    @property
    def tile_set(self) -> str:
        a = self._placement_attr(TILE_SET_ATTR)
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

    # -- shape methods --------------------------------------------------------------------
    def reshape(self, shape: Iterable[int]) -> Tensor:
        from popxl import ops

        return ops.reshape(self, shape)

    def reshape_(self, shape: Iterable[int]) -> Tensor:
        from popxl import ops

        return ops.reshape_(self, shape)

    def flatten(self) -> Tensor:
        from popxl import ops

        return ops.flatten(self)

    def flatten_(self) -> Tensor:
        from popxl import ops

        return ops.flatten_(self)

    def transpose(self, permutation: Iterable[int] | None = None) -> Tensor:
        from popxl import ops

        return ops.transpose(self, permutation)

    def transpose_(self, permutation: Iterable[int] | None = None) -> Tensor:
        from popxl import ops

        return ops.transpose_(self, permutation)

    @property
    def T(self) -> Tensor:
        return self.transpose()

    @property
    def T_(self) -> Tensor:
        return self.transpose_()

    def detach(self) -> Tensor:
        from popxl import ops

        return ops.detach(self)

    def detach_(self) -> Tensor:
        from popxl import ops

        return ops.detach_(self)

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        """Copy to virtual IPU `destination` (`ipu.copy`); `source` defaults to this tensor's IPU."""
        from popxl import ops

        return ops.ipu_copy(self, destination, source)

    # -- indexing ---------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Tensor:
        from popxl.ops._ops import _getitem

        return _getitem(self, key)

    # -- operators --------------------------------------------------------------------------
    def _ensure_tensor(self, value: Any) -> Tensor:
        if isinstance(value, Tensor):
            return value
        return constant(value, dtype=self.dtype)

    def _binop(self, fn_name: str, other: Any, reflected: bool = False) -> Tensor:
        from popxl import ops

        if not isinstance(other, Tensor | int | float | bool | np.ndarray | np.generic | list | tuple):
            if type(other).__module__.startswith("torch"):
                other = np.asarray(other)
            else:
                return NotImplemented
        other_t = self._ensure_tensor(other)
        fn = getattr(ops, fn_name)
        return fn(other_t, self) if reflected else fn(self, other_t)

    def __add__(self, o: Any) -> Tensor:
        return self._binop("add", o)

    def __radd__(self, o: Any) -> Tensor:
        return self._binop("add", o, True)

    def __iadd__(self, o: Any) -> Tensor:
        """`t += o` updates `t` in place (`ops.add_`), as in PopXL."""
        from popxl import ops

        return ops.add_(self, o)

    def __sub__(self, o: Any) -> Tensor:
        return self._binop("sub", o)

    def __rsub__(self, o: Any) -> Tensor:
        return self._binop("sub", o, True)

    def __mul__(self, o: Any) -> Tensor:
        return self._binop("mul", o)

    def __rmul__(self, o: Any) -> Tensor:
        return self._binop("mul", o, True)

    def __truediv__(self, o: Any) -> Tensor:
        return self._binop("div", o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return self._binop("div", o, True)

    def __mod__(self, o: Any) -> Tensor:
        return self._binop("fmod", o)

    def __rmod__(self, o: Any) -> Tensor:
        return self._binop("fmod", o, True)

    def __pow__(self, o: Any) -> Tensor:
        return self._binop("pow", o)

    def __rpow__(self, o: Any) -> Tensor:
        return self._binop("pow", o, True)

    def __matmul__(self, o: Any) -> Tensor:
        return self._binop("matmul", o)

    def __rmatmul__(self, o: Any) -> Tensor:
        return self._binop("matmul", o, True)

    def __and__(self, o: Any) -> Tensor:
        return self._binop("logical_and", o)

    def __rand__(self, o: Any) -> Tensor:
        return self._binop("logical_and", o, True)

    def __or__(self, o: Any) -> Tensor:
        return self._binop("logical_or", o)

    def __ror__(self, o: Any) -> Tensor:
        return self._binop("logical_or", o, True)

    def __invert__(self) -> Tensor:
        from popxl import ops

        return ops.logical_not(self)

    def __neg__(self) -> Tensor:
        from popxl import ops

        return ops.negate(self)

    def __pos__(self) -> Tensor:
        return self

    def __abs__(self) -> Tensor:
        from popxl import ops

        return ops.abs(self)


# An op argument that becomes a constant when it is not a Tensor: a Tensor or host data.
TensorLike = Tensor | ScalarType | np.ndarray | np.generic | Sequence[Any]


class Variable(Tensor):
    """A variable: persistent state, created in the main graph with `popxl.variable`."""

    # Set by the functions creating variables (`variable`, `remote_variable`, ...).
    _replica_grouping: ReplicaGrouping | None = None
    _retrieval_mode: str = "one_per_group"
    _location_info: TensorLocationInfo | None = None
    _host_init: np.ndarray | None = None  # the data of every group (more than one group)

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
        n = self._num_groups
        return (n, *self.shape) if n > 1 else self.shape

    @property
    def _var_name(self) -> str:
        from xl.dialects.graph import VariableOp
        from xl.dialects.ipu import RemoteVariableOp, ReplicaShardedVariableOp

        op = self._value.owner
        assert isinstance(op, VariableOp | RemoteVariableOp | ReplicaShardedVariableOp), f"{self._name}: not a variable"
        return op.var_name.data

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        if source is None:
            raise ValueError(
                "Variable.copy_to_ipu: the source IPU must be given for a variable (variables have no producing op)"
            )
        return super().copy_to_ipu(destination, source)


class Constant(Tensor):
    """A constant tensor (`popxl.constant`)."""

    @property
    def _data(self) -> np.ndarray:
        from xl.dialects.graph import ConstantOp
        from xl.dialects.utils import dense_to_numpy

        op = self._value.owner
        assert isinstance(op, ConstantOp), f"{self._name} is not defined by a graph.constant"
        return dense_to_numpy(op.value)


# `TensorByRef` is a type-hint alias of `Tensor`: graph inputs annotated with it are by-ref.
class TensorByRef(Tensor):
    """Annotation marking a `create_graph` parameter as a by-reference graph input."""


# ---------------------------------------------------------------------------------------
# Host data
# ---------------------------------------------------------------------------------------


def _contains_tensor(data: Any) -> bool:
    if isinstance(data, Tensor):
        return True
    if isinstance(data, list | tuple):
        return any(_contains_tensor(d) for d in data)
    return False


def _to_numpy(data: HostTensor, dtype_: dtype | None, downcast: bool, what: str = "popxl.constant") -> np.ndarray:
    """`data` (array, scalar, nested lists, torch tensor) as a C-contiguous array; user
    mistakes (None, strings, Tensors inside lists, ragged lists) raise TypeError/ValueError
    naming `what`."""
    if isinstance(data, Tensor):
        raise TypeError(f"{what}: expected host data (array, scalar), got a popxl Tensor {data!r}")
    if _contains_tensor(data):
        raise TypeError(
            f"{what}: expected host data (array, scalar), got a {type(data).__name__} "
            "containing popxl Tensors; use ops.concat to combine tensors"
        )
    if data is None or isinstance(data, str | bytes):
        raise TypeError(f"{what}: expected host data (array, scalar), got {describe(data)}")
    if type(data).__module__.startswith("torch"):
        data = data.detach().cpu().numpy()
    try:
        arr = np.asarray(data)
    except ValueError as e:  # ragged nested lists
        raise ValueError(f"{what}: cannot convert {describe(data)} to an array: {e}") from None
    if arr.dtype == np.dtype(object) or arr.dtype.kind in "USVOM":
        raise TypeError(f"{what}: cannot convert {describe(data)} to a tensor")
    if dtype_ is not None:
        arr = arr.astype(dtype_.as_numpy(), copy=False)
        return np.require(arr, requirements="C")
    if downcast:
        arr = arr.astype(dtypes._downcast_np(arr.dtype), copy=False)
    try:
        dtype.as_dtype(arr.dtype)
    except ValueError:
        raise TypeError(f"{what}: data of NumPy dtype {arr.dtype} has no popxl dtype") from None
    return np.require(arr, requirements="C")


# ---------------------------------------------------------------------------------------
# Creation functions
# ---------------------------------------------------------------------------------------


def variable(
    data: HostTensor,
    dtype: dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: Any = None,
    retrieval_mode: str | None = None,
    log2_scale: Any = None,
    nan_on_overflow: Any = None,
) -> Variable:
    """A variable of the main graph initialised with `data` (stored as its `init` value).

    float64 data becomes float32 and int64 int32 unless `dtype` is given or `downcast=False`.
    """
    from xl.dialects.graph import VariableOp
    from xl.dialects.utils import dense_attr, tensor_type

    g = gcg()
    if not g._is_main:
        raise ValueError(
            "You cannot initialise a variable tensor within a graph. Create it in the main "
            f"graph (`with ir.main_graph:`) and pass it to graph {g.name!r} as an input."
        )
    what = "popxl.variable" + (f" {name!r}" if isinstance(name, str) else "")
    name = check_name(name, what)
    if retrieval_mode not in (None, "one_per_group", "all_replicas"):
        raise ValueError(f"{what}: invalid retrieval_mode {retrieval_mode!r}")
    from popxl.utils import host_data

    arr = host_data(data, dtype, log2_scale, nan_on_overflow)  # float8 data, else None
    if arr is None:
        arr = _to_numpy(data, check_dtype(dtype, what) if dtype is not None else None, downcast, what)
    grouping_attr = None
    num_groups = 1
    if replica_grouping is not None:
        from popxl.replica_grouping import ReplicaGrouping

        if not isinstance(replica_grouping, ReplicaGrouping):
            raise TypeError(
                f"{what}: replica_grouping must be a popxl.ReplicaGrouping (from "
                f"ir.replica_grouping), got {describe(replica_grouping)}"
            )
        replica_grouping._check_ir(g._ir, what)
        grouping_attr = replica_grouping._to_attr()
        num_groups = replica_grouping.num_groups
    if num_groups > 1:
        if arr.ndim == 0 or arr.shape[0] != num_groups:
            raise ValueError(
                f"{what}: with {replica_grouping!r} the data must have shape "
                f"(num_groups={num_groups}, *shape), got {arr.shape}"
            )
        shape = arr.shape[1:]
    else:
        shape = arr.shape
    name = g._unique_name(name if name is not None else "t", scoped=True)
    init = dense_attr(arr)
    vtype = tensor_type(shape, arr.dtype)
    op = VariableOp(
        name, vtype, init, grouping=grouping_attr,
        retrieval_mode=retrieval_mode if grouping_attr is not None else None,
    )  # fmt: skip
    g._insert(op)
    t = g._tensor(op.result, name)
    assert isinstance(t, Variable)
    t._replica_grouping = replica_grouping
    t._retrieval_mode = retrieval_mode or "one_per_group"
    if num_groups > 1:
        t._host_init = arr
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
    from xl.dialects.graph import ConstantOp
    from xl.dialects.utils import dense_attr

    what = "popxl.constant" + (f" {name!r}" if isinstance(name, str) else "")
    name = check_name(name, what)
    g = gcg()
    from popxl.utils import host_data

    arr = host_data(data, dtype, log2_scale, nan_on_overflow)  # float8 data, else None
    if arr is None:
        arr = _to_numpy(data, check_dtype(dtype, what) if dtype is not None else None, downcast, what)
    op = ConstantOp(dense_attr(arr))
    g._insert(op)
    t = g._tensor(op.result, g._unique_name(name, scoped=True) if name is not None else None)
    assert isinstance(t, Constant)
    return t


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


def _not_supported(what: str) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"popxl.{what} is not supported by xl yet")

    f.__name__ = what
    return f


# Remote and replica-sharded variables live in popxl/remote_buffer.py (it imports this module).
from popxl.remote_buffer import (  # noqa: E402
    remote_replica_sharded_variable,
    remote_variable,
    replica_sharded_buffer,
    replica_sharded_variable,
)
