"""Variable factories: delay the creation of variables to the main graph (popxl_addons/variable_factory.py).

A module adds a *named input* to its graph with `add_variable_input(name, data_iter, dtype)`:
that creates a `popxl.graph_input` in the graph being built and a `VariableFactory`
that later makes a matching `popxl.variable` in the main graph (`factory.create_tensor()`),
so that the graph can be bound to it.

`memmap_dir` (in `init`, `init_remote`, `create_tensor`, `create_remote_tensor`) keeps a
variable's host data in a memory-mapped file `<memmap_dir>/<name>.npy`, as upstream: the raw
array (no header) of the variable's full shape (`(num_groups, *shape)` with several replica
groups), created with the initial values if it does not exist and reused as it is
otherwise (opened read-only with `read_only_if_exists`). Launched as several instances,
instance 0 creates the files and the others wait for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

import popdist
import popxl
import popxl.ops as ops
from popxl.bridge import check_int
from popxl.context import NoGraphSelectedError
from popxl.utils import downcast_np_dtypes, to_numpy
from popxl_addons.dot_tree import DotTree
from popxl_addons.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.named_tensors import NamedTensors
from xl.dialects.replica_layout import group_host_shape

__all__ = [
    "VariableFactory",
    "NamedVariableFactories",
    "NamedReplicaGrouping",
    "add_variable_input",
    "add_replica_sharded_variable_input",
]

logger = logging.getLogger("popxl_addons")


def _as_popxl_dtype(dtype: Any) -> Any:
    """A popxl dtype from a popxl dtype, NumPy dtype or Python type."""
    if isinstance(dtype, popxl.dtype):
        return dtype
    np_dtype = np.dtype(popxl.dtypes.checked_dtype(dtype, "VariableFactory").as_numpy())
    np_dtype = downcast_np_dtypes.get(np_dtype, np_dtype)  # popxl's host downcast rules
    return popxl.dtype.as_dtype(np_dtype)


def _host_value(value: Any) -> np.ndarray:
    """A value `data_iter` produced as a NumPy array (torch tensors detached, as upstream)."""
    return value if isinstance(value, np.ndarray) else to_numpy(value, downcast=False, copy=False)


def _infer_dtype(data: np.ndarray) -> Any:
    return _as_popxl_dtype(np.asarray(data).dtype)


def _num_groups(replica_grouping: Any) -> int:
    if replica_grouping is None:
        return 1
    return int(getattr(replica_grouping, "num_groups", 1))


def _current_default_grouping() -> Any:
    """All replicas of the current graph's Ir (`ir.replica_grouping()`), or None outside
    a graph context."""
    try:
        return popxl.gcg().ir.replica_grouping()
    except NoGraphSelectedError:
        return None


def _instances_barrier() -> None:
    """Wait for every instance of a multi-instance launch (nothing with one instance)."""
    if popdist.getNumInstances() > 1:
        from xl.runtime.mpi import MpiComm

        MpiComm().barrier()


class VariableFactory:
    """Makes graph inputs and main-graph variables of one shape and dtype from `data_iter`.

    Args:
        data_iter: a callable returning the initial data (called once per variable, and
            once here to check it and learn the shape), an iterable yielding it, or a
            constant array / number.
        dtype: popxl dtype of the variable (inferred from the data when None; float64
            is downcast to float32, int64 to int32).
        name: default tensor name.
        by_ref: whether the graph input is passed by reference.
        replica_grouping: `popxl.ReplicaGrouping` of the variable; with more than one
            group, `create_tensor` stacks one draw per group. Default (None): all replicas
            of the Ir of the graph being built (`ir.replica_grouping()`), as upstream;
            read outside a graph context it stays None.
        shard_over: replica-sharded factories hold `1/shard_over` of the flattened data
            per replica (`shape = (nelms // shard_over,)`, `meta_shape` = full shape).
    """

    def __init__(
        self,
        data_iter: Callable[[], Any] | Iterable[Any] | np.ndarray | float | int,
        dtype: Any = None,
        name: str | None = None,
        by_ref: bool = False,
        replica_grouping: Any = None,
        shard_over: int = 1,
    ):
        self._first: list[Any] = []
        if callable(data_iter):
            fn: Callable[[], Any] = data_iter
        elif isinstance(data_iter, np.ndarray | int | float | np.number | bool):
            const = np.asarray(data_iter)
            fn = lambda: const  # noqa: E731
        elif isinstance(data_iter, Iterable):
            it: Iterator[Any] = iter(data_iter)

            def fn() -> Any:
                if self._first:
                    return self._first.pop()
                return next(it)

        else:
            raise ValueError(
                "VariableFactory: data_iter must be a callable, an iterable or an array, "
                f"not {type(data_iter).__name__}"
            )
        self.data_iter = fn
        try:
            first = _host_value(fn())
        except StopIteration:
            raise ValueError("VariableFactory: data_iter yielded no data") from None
        except Exception as e:  # upstream: a ValueError
            raise ValueError(
                f"VariableFactory: calling data_iter failed ({type(e).__name__}: {e}). "
                "data_iter must be callable with no arguments, e.g. partial(np.zeros, shape)"
            ) from e
        if first.dtype == object:
            raise TypeError(f"VariableFactory: data_iter must produce numeric data, got {first.dtype}")
        if not callable(data_iter) and not isinstance(data_iter, np.ndarray | int | float | np.number | bool):
            self._first.append(first)  # keep the first element of an iterator
        self.name = name
        self.by_ref = by_ref
        self._replica_grouping = replica_grouping if replica_grouping is not None else _current_default_grouping()
        if isinstance(shard_over, bool) or not isinstance(shard_over, int | np.integer) or shard_over < 1:
            raise ValueError(f"VariableFactory '{name}': shard_over must be a positive int, got {shard_over!r}")
        self.shard_over = int(shard_over)
        groups = self._replica_grouping
        if self.shard_over > 1 and groups is not None and self.shard_over > groups.group_size:
            raise ValueError(
                f"VariableFactory '{name}': shard_over={self.shard_over} is larger than the replica group "
                f"size {groups.group_size}"
            )
        self.dtype = _as_popxl_dtype(dtype) if dtype is not None else _infer_dtype(first)
        full_shape = tuple(first.shape)
        if self.shard_over > 1:
            nelms = int(np.prod(full_shape))
            self.shape: tuple[int, ...] = (-(-nelms // self.shard_over),)
            self.meta_shape: tuple[int, ...] = full_shape
        else:
            self.shape = full_shape
            self.meta_shape = ()

    @property
    def replica_grouping(self) -> Any:
        """The variable's `popxl.ReplicaGrouping` (default: all replicas of the current Ir)."""
        if self._replica_grouping is None:
            return _current_default_grouping()
        return self._replica_grouping

    @replica_grouping.setter
    def replica_grouping(self, value: Any) -> None:
        self._replica_grouping = value

    @property
    def replica_sharded(self) -> bool:
        """Whether the graph input holds one replica's shard (`shard_over > 1`)."""
        return self.shard_over > 1

    # -- data ------------------------------------------------------------------------
    @property
    def full_shape(self) -> tuple[int, ...]:
        """The shape of the whole variable: `meta_shape` for a replica-sharded one, else `shape`."""
        return self.meta_shape or self.shape

    def _draw(self) -> np.ndarray:
        data = _host_value(self.data_iter())
        if tuple(data.shape) != self.full_shape:
            try:
                data = np.broadcast_to(data, self.full_shape)
            except ValueError:
                raise ValueError(
                    f"VariableFactory '{self.name}': data_iter produced shape {data.shape}, expected {self.full_shape}"
                ) from None
        return data

    def next_data(self, empty: bool = False) -> np.ndarray:
        """The next initial value, host dtype; `(num_groups, *shape)` when grouped."""
        np_dtype = self.dtype.as_numpy()
        n = _num_groups(self.replica_grouping)
        if empty:
            return np.empty(group_host_shape(self.full_shape, n), dtype=np_dtype)
        if n == 1:
            return self._host(self._draw())
        return np.stack([self._host(self._draw()) for _ in range(n)])

    def _host(self, value: Any) -> np.ndarray:
        """A drawn value as host data of the factory's dtype (float8: cast on the host from
        float values, float8 data kept, in the host format, as `popxl.utils.to_numpy`)."""
        if self.dtype in (popxl.float8_143, popxl.float8_152):
            return to_numpy(value, self.dtype)
        return np.asarray(value, dtype=self.dtype.as_numpy())

    def next_memmap(
        self, memmap_dir: str, name: str, empty: bool = False, read_only_if_exists: bool = False
    ) -> np.memmap:
        """The next initial value kept in the memory-mapped file `<memmap_dir>/<name>.npy`.

        The file holds the raw array (upstream's layout: no header) of the full shape, with
        a leading `num_groups` dim when the replica grouping has several groups. A missing
        file is created (by instance 0 of a multi-instance launch) and filled with the next
        initial value (left unfilled with `empty`); an existing one is used as it is, opened
        read-only with `read_only_if_exists`. A file whose size does not fit the variable is
        a ValueError naming it.
        """
        if not isinstance(memmap_dir, str | os.PathLike):
            raise TypeError(f"VariableFactory '{name}': memmap_dir must be a path, got {type(memmap_dir).__name__}")
        memmap_dir = os.fspath(memmap_dir)
        first = popdist.getInstanceIndex() == 0
        if first:
            os.makedirs(memmap_dir, exist_ok=True)
        path = os.path.join(memmap_dir, f"{name}.npy")
        shape = group_host_shape(self.full_shape, _num_groups(self.replica_grouping))
        np_dtype = np.dtype(self.dtype.as_numpy())
        if first and not os.path.exists(path):
            logger.debug("creating memory-mapped variable file (w+): %s", path)
            data = np.memmap(path, dtype=np_dtype, mode="w+", shape=shape)
            if not empty:
                data[...] = self.next_data()
                data.flush()
            _instances_barrier()
            return data
        _instances_barrier()
        expected = int(np.prod(shape)) * np_dtype.itemsize
        size = os.path.getsize(path)
        if size != expected:
            raise ValueError(
                f"VariableFactory '{name}': the memory-mapped file {path} has {size} bytes; the variable "
                f"({shape} {np_dtype}) needs {expected}. Remove the file or use another memmap_dir"
            )
        mode = "r" if read_only_if_exists else "r+"
        logger.debug("using the existing memory-mapped variable file (%s): %s", mode, path)
        return np.memmap(path, dtype=np_dtype, mode=mode, shape=shape)

    def _initial(self, name: str | None, empty: bool, memmap_dir: str | None, read_only_if_exists: bool) -> np.ndarray:
        if memmap_dir is not None:
            return self.next_memmap(memmap_dir, name or self.name or "variable", empty, read_only_if_exists)
        return self.next_data(empty)

    # -- tensors ---------------------------------------------------------------------
    def _graph_input(self, name: str | None) -> Any:
        kwargs: dict[str, Any] = {"by_ref": self.by_ref}
        if self.meta_shape:
            kwargs["meta_shape"] = self.meta_shape
        return popxl.graph_input(self.shape, self.dtype, name, **kwargs)

    def create_input(self, prefix: str | None = None) -> Any:
        """A `popxl.graph_input` in the current graph named `prefix.name` (or `name`)."""
        if prefix:
            name = f"{prefix}.{self.name}" if self.name else prefix
        else:
            name = self.name
        return self._graph_input(name)

    def create_tensor(
        self,
        name: str | None = None,
        empty: bool = False,
        memmap_dir: str | None = None,
        read_only_if_exists: bool = False,
    ) -> Any:
        """A `popxl.variable` in the (main) graph holding the next initial value."""
        name = name if name is not None else self.name
        data = self._initial(name, empty, memmap_dir, read_only_if_exists)
        kwargs: dict[str, Any] = {}
        if self.replica_grouping is not None:
            kwargs["replica_grouping"] = self.replica_grouping
        if self.meta_shape:
            return self._create_sharded(data, name, kwargs)
        return popxl.variable(data, self.dtype, name, **kwargs)

    def _create_sharded(self, data: np.ndarray, name: str | None, kwargs: dict) -> Any:
        full, shard = popxl.replica_sharded_variable(data, self.dtype, name, shard_over=self.shard_over, **kwargs)
        return shard

    def create_remote_tensor(
        self,
        buffer: Any,
        entry: int,
        name: str | None = None,
        empty: bool = False,
        memmap_dir: str | None = None,
        read_only_if_exists: bool = False,
    ) -> Any:
        """A remote variable in `buffer` at `entry` (replica-sharded if the buffer has a
        meta_shape), its host data memory-mapped in `memmap_dir` when given."""
        entry = check_int(entry, "VariableFactory.create_remote_tensor", "entry", minimum=0)
        name = name if name is not None else self.name
        data = self._initial(name, empty, memmap_dir, read_only_if_exists)
        kwargs: dict[str, Any] = {}
        if self.replica_grouping is not None:
            kwargs["replica_grouping"] = self.replica_grouping
        if getattr(buffer, "meta_shape", None):
            return popxl.remote_replica_sharded_variable(data, buffer, entry, self.dtype, name, **kwargs)
        return popxl.remote_variable(data, buffer, entry, self.dtype, name, **kwargs)

    def create_init(self, name: str | None = None, init_type: str = "zero") -> Any:
        """`ops.init` of this shape and dtype in the current graph."""
        name = name if name is not None else self.name
        return ops.init(self.shape, self.dtype, name, init_type)


class NamedVariableFactories(DotTree[VariableFactory]):
    """A DotTree of `VariableFactory`s."""

    @staticmethod
    def _prefix(prefix: str | None) -> str:
        return f"{prefix}." if prefix else ""

    def _sorted(self) -> list[tuple[str, VariableFactory]]:
        return sorted(self.to_dict().items(), key=lambda kv: kv[0])

    def init(
        self,
        prefix: str | None = None,
        empty: bool = False,
        memmap_dir: str | None = None,
        read_only_if_exists: bool = False,
    ) -> NamedTensors:
        """Create a variable for every factory (alphabetical key order) named `prefix.key`;
        host data memory-mapped in `memmap_dir` when given (see `VariableFactory.next_memmap`)."""
        p = self._prefix(prefix)
        out = {}
        for k, f in self._sorted():
            out[k] = f.create_tensor(p + k, empty, memmap_dir, read_only_if_exists)
        return NamedTensors.from_dict(out)

    def init_remote(
        self,
        buffers: DotTree,
        entry: int = 0,
        prefix: str | None = None,
        empty: bool = False,
        memmap_dir: str | None = None,
        read_only_if_exists: bool = False,
    ) -> NamedTensors:
        """Create remote variables in `buffers` (a DotTree with the same keys) at `entry`,
        named `prefix.key` (alphabetical key order); host data memory-mapped in
        `memmap_dir` when given (see `VariableFactory.next_memmap`)."""
        entry = check_int(entry, "NamedVariableFactories.init_remote", "entry", minimum=0)
        p = self._prefix(prefix)
        bufs = buffers.to_dict()
        missing = sorted(set(self.to_dict()) - set(bufs))
        if missing:
            raise KeyError(f"NamedVariableFactories.init_remote: no buffer for the factories {missing}")
        out = {}
        for k, f in self._sorted():
            out[k] = f.create_remote_tensor(bufs[k], entry, p + k, empty, memmap_dir, read_only_if_exists)
        return NamedTensors.from_dict(out)

    def init_zero(self, prefix: str | None = None) -> NamedTensors:
        """`ops.init(..., 'zero')` for every factory, in the current graph (subgraphs allowed)."""
        p = self._prefix(prefix)
        return NamedTensors.from_dict({k: f.create_init(p + k, "zero") for k, f in self._sorted()})

    def init_undef(self, prefix: str | None = None) -> NamedTensors:
        """`ops.init(..., 'undef')` for every factory, in the current graph."""
        p = self._prefix(prefix)
        return NamedTensors.from_dict({k: f.create_init(p + k, "undef") for k, f in self._sorted()})

    @property
    def replica_groupings(self) -> NamedReplicaGrouping:
        """The replica grouping of each factory, by the same dotted names."""
        return NamedReplicaGrouping.from_dict({k: f.replica_grouping for k, f in self.to_dict().items()})


def add_variable_input(
    name: str,
    data_iter: Any,
    dtype: Any = None,
    by_ref: bool = False,
    replica_grouping: Any = None,
) -> tuple[Any, VariableFactory]:
    """A graph input in the current graph and the factory for the matching variable."""
    vf = VariableFactory(data_iter, dtype, name, by_ref, replica_grouping)
    return vf.create_input(), vf


def add_replica_sharded_variable_input(
    name: str,
    data_iter: Any,
    dtype: Any = None,
    by_ref: bool = False,
    replica_grouping: Any = None,
    shard_over: int | None = None,
) -> tuple[Any, VariableFactory]:
    """Like `add_variable_input` but the input holds one replica's shard of the flattened
    data, sharded over `shard_over` replicas of `replica_grouping` (default: all replicas;
    `shard_over` default: the group size)."""
    group = replica_grouping if replica_grouping is not None else popxl.gcg().ir.replica_grouping()
    shard = int(group.group_size) if shard_over is None else shard_over
    vf = VariableFactory(data_iter, dtype, name, by_ref, group, shard)
    return vf.create_input(), vf
