"""Graphs (popxl/graph.py): views over a `graph.graph` op or the `graph.main` op."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from popxl import context
from popxl._checks import check_int, check_name, check_shape
from popxl.dtypes import checked_dtype
from popxl.dtypes import dtype as _dtype
from popxl.tensor import Constant, Tensor, Variable
from xl.dialects.call import called_graph_names
from xl.dialects.effects import InPlaceInterface, WritesOperands
from xl.dialects.graph import (
    BY_REF_ATTR,
    ConstantOp,
    GraphOp,
    HostLoadOp,
    MainGraphOp,
    OutputOp,
    VariableOp,
)
from xl.dialects.ipu import IPU_ATTR, TILE_SET_ATTR, RemoteVariableOp, ReplicaShardedVariableOp
from xl.dialects.traits import is_popart_internal, popart_type
from xl.dialects.utils import tensor_type

if TYPE_CHECKING:
    from popxl.ir import Ir

__all__ = ["Graph"]

_VALID_HINT = re.compile(r"[A-Za-z_$.\-][\w$.\-]*")


class Graph:
    """A PopXL graph. Obtain one from `ir.main_graph`, `ir.create_graph` or
    `ir.create_empty_graph`; not constructible directly."""

    # set by `_from_op` (the only constructor)
    _ir: Ir
    _op: GraphOp | MainGraphOp
    _values: dict[SSAValue, Tensor]
    _updated: dict[Operation, Tensor]
    _used_names: set[str]
    _uniq: itertools.count[int]
    _auto: itertools.count[int]
    _pending_outputs: list[Tensor] | None
    _hooks: dict[int, Callable[[Operation], None]]
    _hook_ids: itertools.count[int]

    def __init__(self) -> None:
        raise TypeError(
            "Graph cannot be constructed directly; use ir.main_graph, ir.create_graph or ir.create_empty_graph"
        )

    @classmethod
    def _from_op(cls, ir: Ir, op: GraphOp | MainGraphOp) -> Graph:
        """The (cached) Graph viewing `op`, e.g. a graph created by a pass."""
        g = ir._graphs.get(op)
        if g is not None:
            return g
        g = cls.__new__(cls)
        g._ir = ir
        g._op = op
        g._values = {}
        g._updated = {}
        g._used_names = set()
        g._uniq = itertools.count()
        g._auto = itertools.count()
        g._pending_outputs = None
        g._hooks = {}
        g._hook_ids = itertools.count()
        ir._graphs[op] = g
        return g

    # -- basic properties -------------------------------------------------------------------
    @property
    def _is_main(self) -> bool:
        return isinstance(self._op, MainGraphOp)

    @property
    def _block(self) -> Block:
        return self._op.body.block

    @property
    def name(self) -> str:
        """The graph's name (`"main_graph"` for the main graph), as the IR's `graph.graph @name`."""
        op = self._op
        if isinstance(op, MainGraphOp):
            return "main_graph"
        return op.sym_name.data

    @property
    def id(self) -> str:
        """The graph's id: its name (unique within its Ir)."""
        return self.name

    @property
    def ir(self) -> Ir:
        """The Ir this graph belongs to."""
        return self._ir

    @property
    def main_graph(self) -> Graph:
        """The main graph of this graph's Ir."""
        return self._ir.main_graph

    @property
    def _output_op(self) -> OutputOp | None:
        last = self._block.last_op
        return last if isinstance(last, OutputOp) else None

    @property
    def _is_built(self) -> bool:
        return self._is_main or self._output_op is not None

    # -- tensors --------------------------------------------------------------------------------
    def _tensor(self, value: SSAValue, name: str | None = None) -> Tensor:
        """The Tensor for `value` (always the same object for the same value)."""
        t = self._values.get(value)
        if t is not None:
            return t
        hint = True
        if name is None:
            name, hint = self._derive_name(value)
        owner = value.owner
        cls: type[Tensor] = Tensor
        if isinstance(owner, VariableOp) or (
            isinstance(owner, RemoteVariableOp | ReplicaShardedVariableOp) and value is owner.results[0]
        ):
            cls = Variable
        elif isinstance(owner, ConstantOp):
            cls = Constant
        t = cls._create(value, self, name)
        self._values[value] = t
        if hint and value.name_hint is None and _VALID_HINT.fullmatch(name):
            try:
                value.name_hint = name
            except ValueError:
                pass
        return t

    def _derive_name(self, value: SSAValue) -> tuple[str, bool]:
        """A name for a value not created through the frontend (and whether to use it as
        the SSA name hint)."""
        owner = value.owner
        if isinstance(owner, VariableOp):
            return self._unique_name(owner.var_name.data), True
        if isinstance(value, BlockArgument) and isinstance(self._op, GraphOp):
            return self._unique_name(self._op.input_name(value.index)), True
        if value.name_hint is not None:
            return self._unique_name(value.name_hint), True
        return self._auto_name(), False

    def _auto_name(self) -> str:
        while True:
            n = f"t{next(self._auto)}"
            if n not in self._used_names:
                self._used_names.add(n)
                return n

    def _unique_name(self, name: str | None, scoped: bool = False) -> str:
        """Register `name` in this graph; a used name gets `__t<k>` appended."""
        if name is None:
            return self._auto_name()
        if scoped:
            name = context._scoped(name)
        if name not in self._used_names:
            self._used_names.add(name)
            return name
        while True:
            cand = f"{name}__t{next(self._uniq)}"
            if cand not in self._used_names:
                self._used_names.add(cand)
                return cand

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The graph's inputs in order (`popxl.graph_input` / `create_graph` arguments); none for the main graph."""
        if self._is_main:
            return ()
        return tuple(self._tensor(a) for a in self._block.args)

    @property
    def inputs_by_name(self) -> dict[str, Tensor]:
        """The inputs keyed by tensor name."""
        return {t.name: t for t in self.inputs}

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The graph's outputs in order (`popxl.graph_output` / the function's return values)."""
        out = self._output_op
        if out is not None:
            return tuple(self._tensor(v) for v in out.outs)
        return tuple(self._pending_outputs or ())

    def _updated_tensor(self, op: Operation, scoped: bool = False) -> Tensor | None:
        """The tensor an in-place op returns (`ops.add_`, `ops.var_updates.accumulate_`, ...):
        a new tensor of its own name that stands for the operand `op` updates, as it is after
        `op`, as PopXL's in-place ops return a new tensor aliasing their input. It views the
        operand's value (program order is execution order, so later ops that read it see the
        update). None for an op that returns no updated operand (`_updated_operand`).
        Named `<popart type>_out` when first asked for, in the current name scope if `scoped`
        (an op just built by a public call)."""
        k = _updated_operand(op)
        if k is None:
            return None
        t = self._updated.get(op)
        if t is None:
            value = op.operands[k]
            name = self._unique_name(f"{snake_case(popart_type(op))}_out", scoped=scoped)
            t = Tensor._create(value, self, name)
            t._meta_shape = self._tensor(value)._meta_shape
            self._updated[op] = t
        return t

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor of the graph: the inputs, then the tensors of its ops in program order
        (their results; for an in-place op, the tensor it returns (`_updated_tensor`): the updated
        operand under a new name, as in PopXL). The steps inside a public op that xl builds
        from several ops where PopART has one (`ops.isinf`'s `abs`) are not listed
        (`xl.dialects.traits.POPART_INTERNAL_ATTR`)."""
        ts = list(self.inputs)
        for op in self._block.ops:
            if is_popart_internal(op):
                continue
            ts.extend(self._tensor(r) for r in op.results)
            upd = self._updated_tensor(op)
            if upd is not None:
                ts.append(upd)
        return tuple(ts)

    @property
    def variables(self) -> tuple[Variable, ...]:
        """The variables among `tensors` (only the main graph has any)."""
        return tuple(t for t in self.tensors if isinstance(t, Variable))

    @property
    def constants(self) -> tuple[Constant, ...]:
        """The constants among `tensors`."""
        return tuple(t for t in self.tensors if isinstance(t, Constant))

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        """The graphs this graph's ops call (`ops.call`, `repeat`, `conditional`), once each, in order of first call."""
        names = [n for op in self._block.ops for n in called_graph_names(op)]
        seen: dict[str, Graph] = {}
        for n in names:
            if n not in seen:
                seen[n] = self._ir._graph_by_name(n)
        return tuple(seen.values())

    def get_tensor(self, tensor_id: str) -> Tensor:
        """The tensor of this graph whose id or name is `tensor_id`; ValueError naming both otherwise."""
        for t in self.tensors:
            if t.id == tensor_id or t.name == tensor_id:
                return t
        raise ValueError(f"Graph {self.name!r} has no tensor {tensor_id!r}")

    def get_input_tensors(self) -> tuple[Tensor, ...]:
        """The same as `inputs`."""
        return self.inputs

    def get_output_tensors(self) -> tuple[Tensor, ...]:
        """The same as `outputs`."""
        return self.outputs

    @property
    def _pb_graph(self) -> Any:
        """PopART's graph as PopXL programs reach it: `popart._internal.ir.Graph`, whose
        `getOps()` gives the PopART op each op of this graph is (for counting by type), and
        which custom ops' `createOpInGraph` takes (`popxl.custom_ops`)."""
        from popart._internal.ir import Graph as PbGraph

        return PbGraph(self)

    def _create_tensor_id(self, name: str) -> str:
        """A tensor id for a result named `name` (what PopART bindings' `createOpInGraph`
        takes for outputs); the name scope and uniqueness are applied when the op's result
        is named."""
        checked = check_name(name, "Graph._create_tensor_id")
        if checked is None:
            raise TypeError("Graph._create_tensor_id: name must be a str, got None")
        return checked

    # -- building ----------------------------------------------------------------------------
    def _insert(self, op: Operation, verify_as: str | None = None) -> None:
        """Append `op` to the block (before the terminator, if any), with the
        placement of the current context, then number it and tell the hooks.

        `verify_as`: verify the op where it stands (for an op whose verifier looks a
        symbol up in the module); on failure it is removed again and a `ValueError`
        starting with `verify_as` raised."""
        ipu = context._current_ipu()
        if ipu is not None and IPU_ATTR not in op.attributes:
            op.attributes[IPU_ATTR] = IntegerAttr(ipu, i64)
        tiles = context._current_tile_set()
        if tiles is not None and TILE_SET_ATTR not in op.attributes:
            op.attributes[TILE_SET_ATTR] = StringAttr(tiles)
        block = self._block
        last = block.last_op
        if isinstance(last, OutputOp):
            block.insert_op_before(op, last)
        else:
            block.add_op(op)
        if verify_as is not None:
            try:
                op.verify_()  # the op's own checks (the block may still lack its terminator)
            except VerifyException as e:
                op.detach()
                op.erase()
                raise ValueError(f"{verify_as}: " + str(e).split("\n\n")[0]) from None
        if not isinstance(op, VariableOp | ConstantOp):  # tensors, not ops, in PopART: no op id
            self._ir._number_op(op)
        for hook in tuple(self._hooks.values()):
            hook(op)

    def _add_input(
        self,
        shape: Iterable[int],
        dtype: _dtype,
        name: str | None,
        by_ref: bool,
        meta_shape: Iterable[int] | None,
    ) -> Tensor:
        if self._is_main:
            raise ValueError("popxl.graph_input cannot be used in the main graph")
        op = self._op
        assert isinstance(op, GraphOp)
        what = f"popxl.graph_input of graph {self.name!r}"
        name = check_name(name, what)
        if name is not None:
            what += f" ({name!r})"
        shape = check_shape(shape, what)
        dt = checked_dtype(dtype, what)
        meta_shape = check_shape(meta_shape, what + " meta_shape") if meta_shape else None
        ttype = tensor_type(shape, dt._compute_np())
        name = self._unique_name(name if name is not None else "input", scoped=True)
        ipu = context._current_ipu()
        placement = {IPU_ATTR: IntegerAttr(ipu, i64)} if ipu is not None else None
        arg = op.add_input(ttype, name, by_ref, attrs=placement)
        self._sync_function_type()
        t = self._tensor(arg, name)
        if meta_shape:
            t._meta_shape = tuple(int(d) for d in meta_shape)
        return t

    def _add_output(self, t: Tensor) -> None:
        if self._is_main:
            raise ValueError("popxl.graph_output cannot be used in the main graph")
        if not isinstance(t, Tensor):
            raise TypeError(f"popxl.graph_output expects a Tensor, got {type(t).__name__}")
        if t._graph is not self:
            raise ValueError(f"Tensor {t.id} is not in graph {self.name!r}; a graph can only output its own tensors")
        out = self._output_op
        if out is not None:
            out.operands = (*out.operands, t._value)
        else:
            if self._pending_outputs is None:
                self._pending_outputs = []
            self._pending_outputs.append(t)
        self._sync_function_type()

    def _finalize(self) -> None:
        """Append the `graph.output` terminator (end of `create_graph`)."""
        if self._output_op is None:
            outs = [t._value for t in self._pending_outputs or ()]
            self._block.add_op(OutputOp(outs))
            self._pending_outputs = None
        self._sync_function_type()

    def _sync_function_type(self) -> None:
        op = self._op
        if not isinstance(op, GraphOp):
            return
        out = self._output_op
        outs = [v.type for v in out.outs] if out is not None else [t._value.type for t in self._pending_outputs or ()]
        op.function_type = FunctionType.from_lists([a.type for a in self._block.args], outs)

    @property
    def _by_ref_inputs(self) -> set[Tensor]:
        """The inputs passed by reference (`TensorByRef`, `set_parent_input_modified`), the
        set PopXL's graphs keep under this name."""
        return {t for i, t in enumerate(self.inputs) if self._input_by_ref(i)}

    def _input_by_ref(self, index: int) -> bool:
        op = self._op
        return isinstance(op, GraphOp) and op.input_is_by_ref(index)

    def _set_input_by_ref(self, index: int) -> None:
        op = self._op
        assert isinstance(op, GraphOp) and op.arg_attrs is not None, "an input of a subgraph"
        attrs = list(op.arg_attrs.data)
        d = dict(attrs[index].data)
        d[BY_REF_ATTR] = UnitAttr()
        attrs[index] = DictionaryAttr(d)
        op.arg_attrs = ArrayAttr(attrs)

    # -- hooks ------------------------------------------------------------------------------
    def register_op_created_hook(self, fn: Callable[[Operation], None]) -> int:
        """Call `fn(op)` for every op added to this graph from now on; returns a handle."""
        h = next(self._hook_ids)
        self._hooks[h] = fn
        return h

    def remove_op_created_hook(self, handle: int) -> None:
        """Stop calling the hook `register_op_created_hook` returned `handle` for; an unknown handle is ignored."""
        self._hooks.pop(check_int(handle, "Graph.remove_op_created_hook", "handle"), None)

    # -- context ----------------------------------------------------------------------------
    def __enter__(self) -> Graph:
        context._push_graph(self)
        return self

    def __exit__(self, *exc: object) -> None:
        context._pop_graph(self)

    # -- dunder ------------------------------------------------------------------------------
    def __contains__(self, t: Any) -> bool:
        if not isinstance(t, Tensor):
            raise TypeError(f"Graph.__contains__ expects a Tensor, got {type(t).__name__}")
        return t._graph is self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self._op is other._op

    def __hash__(self) -> int:
        return id(self._op)

    def __repr__(self) -> str:
        return f"Graph[id={self.id} name={self.name}]"

    # -- helpers used by ops -------------------------------------------------------------------
    def _host_loads(self) -> list[HostLoadOp]:
        return [op for op in self._block.ops if isinstance(op, HostLoadOp)]


def _updated_operand(op: Operation) -> int | None:
    """The operand whose updated value an in-place op returns: the first operand written by an
    op that declares `WritesOperands` and has no results of its own (`popxl.add_`,
    `popxl.accumulate_`, `ipu.remote_load_`, `replica.all_reduce_`, ...). Ops whose writes
    depend on the instance (calls' by-reference inputs, an updater's time step) return
    their own results instead: None."""
    if op.results:
        return None
    trait = type(op).get_trait(InPlaceInterface)
    if not isinstance(trait, WritesOperands) or not trait.indices:
        return None
    return trait.indices[0]


def snake_case(camel: str) -> str:
    """`AddLhsInplace` -> `add_lhs_inplace`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()
