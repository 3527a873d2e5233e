"""`popxl.Ir` (popxl/ir.py): one program, held as a `builtin.module`.

The module contains the host stream declarations, the subgraphs (`graph.graph`) and
one `graph.main` whose attributes `num_host_transfers` and `replication_factor`
mirror the Python properties.
"""

from __future__ import annotations

import inspect
import itertools
import os
import typing
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64

from popxl import context
from popxl._checks import check_int
from popxl.fp8_utils import float8_view
from popxl.graph import Graph
from popxl.tensor import Tensor, TensorByRef, TensorSpec
from xl.dialects.graph import (
    D2HStreamOp,
    GraphOp,
    H2DStreamOp,
    HostLoadOp,
    HostStoreOp,
    MainGraphOp,
    VariableOp,
    graphs_by_name,
)

if TYPE_CHECKING:
    from popxl.replica_grouping import ReplicaGrouping

__all__ = ["Ir"]

_ir_ids = itertools.count()
_irs: weakref.WeakSet[Ir] = weakref.WeakSet()


def _live_irs() -> list[Ir]:
    """Every Ir not yet garbage-collected (`popxl.bridge.tensor_of` finds a value's Ir)."""
    return list(_irs)


def _check_replication(value: Any, what: str) -> int:
    """A replica count: a positive int (not a bool), at most the replicas one process
    simulates (`xl.runtime.MAX_REPLICAS`)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    from xl.runtime.executable import MAX_REPLICAS, too_many_replicas

    if value > MAX_REPLICAS:
        raise ValueError(f"{what}={value} is {too_many_replicas()}")
    return value


class Ir:
    """A PopXL program: a main graph, subgraphs and host streams."""

    def __init__(self, replication: int | str = 1):
        # 'popdist': the replicas of the launch (`popdist`), split over its instances
        self._popdist = isinstance(replication, str) and replication == "popdist"
        if self._popdist:
            import popdist

            popdist.init()
            replication = popdist.getNumTotalReplicas()
        if not self._popdist:  # a launch's replicas are checked per instance when compiled
            replication = _check_replication(replication, "Ir: replication")
        elif not isinstance(replication, int) or isinstance(replication, bool) or replication < 1:
            raise ValueError(f"Ir: replication must be a positive int, got {replication!r}")
        self._id = next(_ir_ids)
        _irs.add(self)
        self._module = ModuleOp([])
        main = MainGraphOp()
        self._module.body.block.add_op(main)
        self._graphs: dict[Any, Graph] = {}
        self._subgraph_count = itertools.count()
        self._h2d: dict[str, Any] = {}
        self._d2h: dict[str, Any] = {}
        self._stream_uniq = itertools.count()
        self._sessions: list[Any] = []
        # a variable keeps a read-only np.memmap as its host value: sessions cannot copy the
        # device values back (weights_to_host refuses, and is not done on exit)
        self._has_read_only_memmap = False
        # ops built by the aliasing `_` view ops (`ops.reshape_`, ...): op -> public op name
        self._views: dict[Any, str] = {}
        # PopART-style op ids: ops numbered from 100 in the order they are created
        self._next_op_id = 100
        self._op_ids: dict[Any, int] = {}
        # ids `popxl.printing` gives ops built by passes (numbered when first printed)
        self._printed_op_ids: dict[int, tuple[int, Any]] = {}
        self._set_main_attr("num_host_transfers", 1)
        self._set_main_attr("replication_factor", replication)

    def _op_id(self, op: Any) -> int | None:
        """The creation-order id of an op built through the frontend (None otherwise)."""
        return self._op_ids.get(op)

    def _number_op(self, op: Any) -> None:
        """Give `op` the next creation-order id (unless it has one)."""
        if op not in self._op_ids:
            self._op_ids[op] = self._next_op_id
            self._next_op_id += 1

    def _number_as_one(self, parts: Sequence[Any]) -> None:
        """Number the ops `parts` (in order) as the one PopART op they make up (`ops.split`'s
        slices: PopART's one SplitOp): each takes the first part's id, and the ops numbered
        after the first part, the other parts aside, move down to follow it, so the ops
        built next get PopART's ids."""
        ids = self._op_ids
        parts = [op for op in parts if op in ids]
        if len(parts) < 2:
            return
        first = ids[parts[0]]
        if [ids[op] for op in parts] == list(range(first, first + len(parts))) and (
            self._next_op_id == first + len(parts)
        ):  # the parts were the last ops numbered
            for op in parts:
                ids[op] = first
            self._next_op_id = first + 1
            return
        own = set(parts)
        later = sorted({i for op, i in ids.items() if i > first and op not in own})
        new = {old: k for k, old in enumerate(later, start=first + 1)}  # merged ops keep sharing
        for op, i in ids.items():
            ids[op] = first if op in own else new.get(i, i)
        self._next_op_id = first + 1 + len(later)

    # -- main graph -------------------------------------------------------------------------
    @property
    def _main_op(self) -> MainGraphOp:
        for op in reversed(self._module.body.block.ops):
            if isinstance(op, MainGraphOp):
                return op
        raise RuntimeError("Ir module has no graph.main")

    @property
    def main_graph(self) -> Graph:
        """The main graph: `with ir.main_graph:` adds ops to it; a Session runs it."""
        return Graph._from_op(self, self._main_op)

    def _set_main_attr(self, key: str, value: int) -> None:
        self._main_op.attributes[key] = IntegerAttr(int(value), i64)

    @property
    def id(self) -> int:
        """A number unique to this Ir within the process."""
        return self._id

    @property
    def _pb_ir(self) -> Any:
        """PopART's Ir as PopXL programs reach it, for `ir._pb_ir.getSessionOptions()` (one
        `popart.SessionOptions` per Ir): xl's stand-in `popart.handles.PbIr`."""
        from popart.handles import PbIr

        return PbIr(self)

    @property
    def num_host_transfers(self) -> int:
        """The host transfers of each stream in one `Session.run` (default 1; a positive int)."""
        return self._main_op.num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"num_host_transfers must be a positive int, got {value!r}")
        self._set_main_attr("num_host_transfers", value)

    @property
    def replication_factor(self) -> int:
        """The number of replicas (`Ir(replication=R)`); settable until a Session is created."""
        return self._main_op.replication_factor

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        _check_replication(value, "replication_factor")
        if self._sessions:
            raise RuntimeError("replication_factor cannot be changed after a Session was created")
        self._set_main_attr("replication_factor", value)

    @property
    def instance_replication_factor(self) -> int:
        """The replicas this process runs: all of them, or for `Ir(replication="popdist")`
        its share of the launch's instances (`ValueError` if they do not divide evenly)."""
        if self._popdist:
            import popdist
            from xl.runtime.comm import split_replicas

            rf, n, i = self.replication_factor, popdist.getNumInstances(), popdist.getInstanceIndex()
            return len(split_replicas(rf, n, i))
        return self.replication_factor

    # -- graphs ---------------------------------------------------------------------------
    def _create_name(self, name: str) -> str:
        name = name.replace(".<locals>", "")
        return f"{name}_subgraph({next(self._subgraph_count)})"

    def _new_graph_op(self, name: str) -> GraphOp:
        op = GraphOp(name, [], [], input_names=[])
        main = self._main_op
        self._module.body.block.insert_op_before(op, main)
        return op

    def _graph_by_name(self, name: str) -> Graph:
        op = graphs_by_name(self._module).get(name)
        if op is None:
            raise ValueError(f"Ir has no graph named {name!r}")
        return Graph._from_op(self, op)

    def create_empty_graph(self, name: str | None = None) -> Graph:
        """An empty subgraph; add inputs and outputs with `popxl.graph_input/graph_output`
        inside `with graph:`."""
        if name is not None and not isinstance(name, str):
            raise TypeError(f"Ir.create_empty_graph: name must be a str, got {type(name).__name__}")
        g = Graph._from_op(self, self._new_graph_op(self._create_name(name or "graph")))
        g._finalize()
        return g

    def create_graph(self, fn: Any, *args: Any, **kwargs: Any) -> Graph:
        """Build a subgraph by calling `fn` (or `Module.build`) on graph inputs made from
        the Tensor/TensorSpec arguments (see POPXL_API §1.2)."""
        from popxl.module import Module

        if isinstance(fn, Module):
            qualname = type(fn).__qualname__
            build = fn.build
        elif callable(fn):
            qualname = _qualname(fn)
            build = fn
        else:
            raise TypeError(f"create_graph expects a callable or popxl.Module, got {type(fn).__name__}")

        try:
            sig = inspect.signature(build)
        except (TypeError, ValueError):
            sig = None
        bound: inspect.BoundArguments | None = None
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise ValueError(
                    f"create_graph: the arguments do not match the signature of {qualname}{sig}: {e}"
                ) from None
            bound.apply_defaults()
        hints = _type_hints(build)

        g = Graph._from_op(self, self._new_graph_op(self._create_name(qualname)))
        try:
            self._build_graph(g, build, qualname, sig, bound, hints, args, kwargs)
        except BaseException:
            # Drop the half-built graph so that the module stays valid.
            self._module.body.block.detach_op(g._op)
            self._graphs.pop(g._op, None)
            raise
        g._finalize()
        return g

    def _build_graph(
        self,
        g: Graph,
        build: Callable[..., Any],
        qualname: str,
        sig: Any,
        bound: Any,
        hints: dict[str, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        with g:
            if sig is None:
                call_args = [_make_input(a, f"arg{i}", False) for i, a in enumerate(args)]
                call_kwargs = {k: _make_input(v, k, False) for k, v in kwargs.items()}
            else:
                call_args, call_kwargs = [], {}
                for pname, value in bound.arguments.items():
                    param = sig.parameters[pname]
                    by_ref = _is_by_ref(hints.get(pname, param.annotation))
                    elem_by_ref = _is_by_ref(_elem_annotation(hints.get(pname, param.annotation)))
                    if param.kind == param.VAR_POSITIONAL:
                        call_args.extend(_make_sequence_input(value, pname, by_ref or elem_by_ref))
                    elif param.kind == param.VAR_KEYWORD:
                        for k, v in value.items():
                            call_kwargs[k] = _make_input(v, k, by_ref or elem_by_ref)
                    else:
                        if isinstance(value, list | tuple):
                            v = _make_sequence_input(value, pname, elem_by_ref or by_ref)
                            v = type(value)(v) if isinstance(value, list | tuple) else v
                        elif isinstance(value, dict):
                            v = {k: _make_input(x, f"{pname}_{k}", elem_by_ref or by_ref) for k, x in value.items()}
                        else:
                            v = _make_input(value, pname, by_ref)
                        if param.kind == param.KEYWORD_ONLY:
                            call_kwargs[pname] = v
                        else:
                            call_args.append(v)
            outputs = build(*call_args, **call_kwargs)
            if outputs is None:
                outs: tuple[Any, ...] = ()
            elif isinstance(outputs, Tensor):
                outs = (outputs,)
            elif isinstance(outputs, Iterable) and not isinstance(outputs, str | Mapping):
                outs = tuple(outputs)
            else:
                raise ValueError(
                    f"create_graph: {qualname} must return None, a Tensor or an iterable of "
                    f"Tensors, got {type(outputs).__name__}"
                )
            for o in outs:
                if not isinstance(o, Tensor):
                    raise ValueError(
                        f"create_graph: {qualname} returned a {type(o).__name__}; graph outputs must be Tensors"
                    )
                g._add_output(o)

    # -- streams ----------------------------------------------------------------------------
    def _add_stream_decl(self, op: H2DStreamOp | D2HStreamOp) -> None:
        block = self._module.body.block
        first = next((o for o in block.ops if not isinstance(o, H2DStreamOp | D2HStreamOp)), None)
        if first is None:
            block.add_op(op)
        else:
            block.insert_op_before(op, first)

    def _unique_stream_name(self, name: str) -> str:
        if name not in self._h2d and name not in self._d2h:
            return name
        while True:
            cand = f"{name}__t{next(self._stream_uniq)}"
            if cand not in self._h2d and cand not in self._d2h:
                return cand

    def _used_streams(self, kind: type[HostLoadOp] | type[HostStoreOp]) -> set[str]:
        names: set[str] = set()
        for op in self._module.walk():
            if isinstance(op, kind):
                names.add(op.stream.root_reference.data)
        return names

    def get_all_h2d_streams(self) -> set[Any]:
        """The host-to-device streams read by some `host_load`."""
        used = self._used_streams(HostLoadOp)
        return {s for n, s in self._h2d.items() if n in used}

    def get_all_d2h_streams(self) -> set[Any]:
        """The device-to-host streams written by some `host_store`."""
        used = self._used_streams(HostStoreOp)
        return {s for n, s in self._d2h.items() if n in used}

    def _ordered_h2d_streams(self) -> list[Any]:
        used = self._used_streams(HostLoadOp)
        return [s for n, s in self._h2d.items() if n in used]

    def _ordered_d2h_streams(self) -> list[Any]:
        used = self._used_streams(HostStoreOp)
        return [s for n, s in self._d2h.items() if n in used]

    # -- replica groupings ------------------------------------------------------------------
    def replica_grouping(self, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        """A `popxl.ReplicaGrouping` of this Ir's replicas: groups of `group_size` replicas
        (default: `replication_factor // stride`) `stride` apart. Collectives and grouped
        variables use it (`ops.collectives.*(group=...)`, `popxl.variable(replica_grouping=...)`)."""
        from popxl.replica_grouping import ReplicaGrouping

        return ReplicaGrouping._from_params(self, stride, group_size)

    def replica_grouping_from_assignments(self, assignment: Iterable[int]) -> ReplicaGrouping:
        """A `popxl.ReplicaGrouping` from the group of each replica (equal-sized groups;
        labels renumbered in order of first appearance); a constant-stride assignment gives
        the same grouping as `replica_grouping(stride, group_size)`."""
        from popxl.replica_grouping import ReplicaGrouping

        return ReplicaGrouping._from_assignments(self, list(assignment))

    # -- text -------------------------------------------------------------------------------
    def to_mlir(
        self,
        values: str = "current",
        *,
        elide_larger_than: int | None = None,
        weights: str | os.PathLike[str] | None = None,
    ) -> str:
        """The program as MLIR text (custom format); `xl-opt`/`xl-run` read it back.

        Each `graph.variable` carries a value, so the text is a self-contained program:

        - `values="current"` (default): the values the variables hold now. When a
          `popxl.Session` of this Ir exists, that is the most recently created session's
          value of each variable (after `write_variables_data` and runs, fetched from
          the device when needed); with no session, the initial values.
        - `values="initial"`: the values given to `popxl.variable` when the program
          was built, whatever any session did since (for a variable created from an
          `np.memmap`, what its file holds now).

        The text always parses back to the same program; only the variable values differ.

        - `weights="prog.npz"`: the variable values go to that `.npz` (keyed by variable
          name) instead of the text, which marks each such variable
          `{graph.external = "prog.npz"}`; `xl-run prog.mlir --vars prog.npz` runs it.
        - `elide_larger_than=N`: dense values with more than N elements print as
          `dense_resource<__elided__>` (as `xl-opt --elide-elementsattrs-if-larger=N`);
          such text is for reading and does not parse back.
        """
        if values not in ("current", "initial"):
            raise ValueError(f"Ir.to_mlir: values must be 'current' or 'initial', got {values!r}")
        if elide_larger_than is not None:
            elide_larger_than = check_int(elide_larger_than, "Ir.to_mlir", "elide_larger_than", minimum=0)
        from popxl._views import check_views

        check_views(self, "Ir.to_mlir")
        module = self._module
        if values == "current" and self._sessions:
            module = self._module_with_values(self._session_values(self._sessions[-1]))
        else:  # variables kept in an np.memmap hold their value in the file, not in the IR
            mapped = {v._var_name: v._memmap_arr for v in self.main_graph.variables if v._memmap_arr is not None}
            if mapped:
                module = self._module_with_values(mapped)
        from xl.compiler.elide import print_op
        from xl.compiler.weights import externalize_variables

        if weights is not None:
            module = externalize_variables(module, weights)
        return print_op(module, elide_larger_than=elide_larger_than) + "\n"

    def _module_with_values(self, current: Mapping[str, Any]) -> ModuleOp:
        """A copy of the module whose `graph.variable` values are `current[name]`; a grouped
        variable takes the values of all its groups (`[num_groups, *shape]`)."""
        from xl.dialects.ipu import RemoteVariableOp, ReplicaShardedVariableOp
        from xl.dialects.utils import dense_attr

        module = self._module.clone()
        for op in module.walk():
            if isinstance(op, VariableOp | RemoteVariableOp | ReplicaShardedVariableOp) and op.var_name.data in current:
                op.init = dense_attr(np.asarray(current[op.var_name.data]))
        return module

    def _session_values(self, session: Any) -> dict[str, Any]:
        """The current value of every variable in `session`, by variable name; grouped
        variables as `[num_groups, *shape]` (one value per group, whatever their
        retrieval mode)."""
        current = dict(session._current_values())
        rf = self.replication_factor
        for v in self.main_graph.variables:
            name = v._var_name
            groups = v._num_groups
            if (
                name not in current
                or v.retrieval_mode != "all_replicas"
                and (groups == 1 or np.shape(current[name]) == v.shape_on_host)
            ):
                continue
            data = np.asarray(session.get_tensor_data(v))
            f8 = float8_view(data)  # float8: as the IR holds it (ml_dtypes)
            data = data if f8 is None else f8
            if v.retrieval_mode == "all_replicas" and rf > 1 and data.shape == (rf, *v.shape):
                firsts = [members[0] for members in v.replica_grouping.groups]
                data = data[firsts] if groups > 1 else data[0]
            current[name] = data
        return current

    def dot_checkpoint(self, check: str, save_dir: Any = None) -> None:
        """Writes a Graphviz picture of every graph: `{save_dir}/{check}_{graph}.dot` (`main`
        for the main graph), and `.svg` beside it when Graphviz `dot` is installed. Ops are
        nodes named as in `print_schedule`, tensors are edges, each virtual IPU a cluster,
        calls link to the callee's file (`xl.compiler.dot`).

        As PopART: `save_dir` (created if needed) becomes the session option `logDir`, the
        directory of later checkpoints (default: the current directory). The checkpoints
        written are those named by the option `dotChecks` and `POPART_DOT_CHECKS=A:B`
        (case-insensitive; `ALL`: every one); when neither names any, this sets `dotChecks`
        to `ALL`. A `popxl.Session` of the Ir writes the checkpoint `FINAL` when selected."""
        from popxl.printing import _op_id
        from xl.compiler.dot import dot_checkpoint

        opts = self._pb_ir.getSessionOptions()
        if save_dir is not None:
            opts.logDir = str(save_dir)
        if "POPART_DOT_CHECKS" not in os.environ and not opts.dotChecks:
            opts.dotChecks = {"ALL"}
        dot_checkpoint(
            self._module,
            check,
            opts.logDir or os.getcwd(),
            op_ids=lambda op: _op_id(self, op),
            checks=self._dot_checks(),
        )

    def _dot_checks(self) -> set[str]:
        """The dot checkpoints selected: the option `dotChecks` and `POPART_DOT_CHECKS`."""
        env = os.environ.get("POPART_DOT_CHECKS", "")
        return set(self._pb_ir.getSessionOptions().dotChecks) | {s for s in env.split(":") if s.strip()}

    def _dot_final(self) -> None:
        """The checkpoint `FINAL` (the program a Session runs), when selected."""
        checks = {c.upper() for c in self._dot_checks()}
        if "FINAL" in checks or "ALL" in checks:
            self.dot_checkpoint("FINAL")

    def __repr__(self) -> str:
        return f"Ir[id={self._id}]"


# ---------------------------------------------------------------------------------------
# create_graph helpers
# ---------------------------------------------------------------------------------------


def _qualname(fn: Callable[..., Any]) -> str:
    f: Any = fn  # walked through `.func` of partial-like wrappers
    while hasattr(f, "func") and not hasattr(f, "__qualname__"):  # functools.partial
        f = f.func
    q = getattr(f, "__qualname__", None)
    if q is None:
        q = type(f).__qualname__
    return q


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001  (unresolvable annotations)
        try:
            return dict(getattr(fn, "__annotations__", {}))
        except Exception:  # noqa: BLE001
            return {}


def _is_by_ref(ann: Any) -> bool:
    if ann is TensorByRef:
        return True
    if isinstance(ann, str):
        return ann.split(".")[-1] == "TensorByRef"
    return False


def _elem_annotation(ann: Any) -> Any:
    """`T` of `List[T]`, `Tuple[T, ...]`, `Sequence[T]` (else None)."""
    if isinstance(ann, str):
        for prefix in ("List[", "Tuple[", "list[", "tuple[", "Sequence[", "Iterable["):
            if prefix in ann:
                return ann.split("[", 1)[1].split(",")[0].rstrip("]").strip()
        return None
    args = typing.get_args(ann)
    return args[0] if args else None


def _is_tensor_like(x: Any) -> bool:
    return isinstance(x, Tensor | TensorSpec)


def _make_input(value: Any, name: str, by_ref: bool) -> Any:
    if isinstance(value, Tensor | TensorSpec):
        spec = value.spec if isinstance(value, Tensor) else value
        return context.gcg()._add_input(spec.shape, spec.dtype, name, by_ref, spec.meta_shape or None)
    return value


def _make_sequence_input(values: Any, name: str, by_ref: bool) -> list[Any]:
    values = list(values)
    kinds = {_is_tensor_like(v) for v in values}
    if len(kinds) > 1:
        raise TypeError(
            f"create_graph: argument {name!r} mixes tensors and non-tensors; a list argument "
            "must be all Tensors/TensorSpecs or none"
        )
    if kinds == {True}:
        return [_make_input(v, f"{name}_{i}", by_ref) for i, v in enumerate(values)]
    return values
