"""Calling graphs: `call`, `call_with_info`, `repeat`, `repeat_with_info`, `conditional`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from xdsl.dialects.builtin import StringAttr, SymbolRefAttr
from xdsl.ir import Attribute, Operation

from popxl._checks import check_int
from popxl.context import gcg
from popxl.errors import GraphBuildError
from popxl.graph import Graph
from popxl.ops._utils import check_graph_in_ir, check_in_graph, insert, to_tensor, wrap_public_ops
from popxl.tensor import Tensor
from xl.dialects.call import CallOp, ConditionalOp, RepeatOp
from xl.dialects.graph import GraphOp

__all__ = [
    "CallSiteInfo",
    "ConditionalSiteInfo",
    "call",
    "call_with_info",
    "conditional",
    "conditional_with_info",
    "repeat",
    "repeat_with_info",
]


class CallSiteInfo:
    """Information about one call of a graph (`call.call` or `call.repeat` op)."""

    __module__ = "popxl.ops"

    def __init__(self, op: Operation, parent: Graph, called: Graph):
        self._op = op
        self._parent = parent
        self._called = called

    @property
    def called_graph(self) -> Graph:
        """The graph called."""
        return self._called

    @property
    def parent_graph(self) -> Graph:
        """The graph holding the call."""
        return self._parent

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The tensors of the parent graph passed to the called graph's inputs, in order."""
        return tuple(self._parent._tensor(v) for v in self._op.operands)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The tensors of the parent graph the called graph's outputs become, in order."""
        return tuple(self._parent._tensor(r) for r in self._op.results)

    def parent_input(self, idx: int) -> Tensor:
        """The parent tensor passed to input `idx` of the called graph."""
        return self.inputs[check_int(idx, "CallSiteInfo.parent_input", "idx")]

    def parent_output(self, idx: int) -> Tensor:
        """The parent tensor output `idx` of the called graph becomes."""
        return self.outputs[check_int(idx, "CallSiteInfo.parent_output", "idx")]

    def graph_to_parent_input_index(self, idx: int) -> int:
        """The call's input index of called-graph input `idx` (the same index in xl)."""
        return check_int(idx, "CallSiteInfo.graph_to_parent_input_index", "idx")

    def parent_to_graph_input_index(self, idx: int) -> int:
        """The called-graph input index of the call's input `idx` (the same index in xl)."""
        return check_int(idx, "CallSiteInfo.parent_to_graph_input_index", "idx")

    def graph_to_parent_output_index(self, idx: int) -> int:
        """The call's output index of called-graph output `idx` (the same index in xl)."""
        return check_int(idx, "CallSiteInfo.graph_to_parent_output_index", "idx")

    def parent_to_graph_output_index(self, idx: int) -> int:
        """The called-graph output index of the call's output `idx` (the same index in xl)."""
        return check_int(idx, "CallSiteInfo.parent_to_graph_output_index", "idx")

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor connected to a called-graph input or output."""
        g = self._called
        for i, t in enumerate(g.inputs):
            if t is graph_tensor:
                return self.parent_input(i)
        for i, t in enumerate(g.outputs):
            if t is graph_tensor:
                return self.parent_output(i)
        raise ValueError(f"{graph_tensor!r} is neither an input nor an output of graph {g.name!r}")

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The called-graph input (or output) connected to a parent tensor."""
        for i, t in enumerate(self.inputs):
            if t is parent_tensor:
                return self._called.inputs[i]
        for i, t in enumerate(self.outputs):
            if t is parent_tensor:
                return self._called.outputs[i]
        raise ValueError(f"{parent_tensor!r} is not an input or output of this call site")

    def set_parent_input_modified(self, parent_tensor: Tensor, infer_modified_regions: bool = False) -> None:
        """At this call site, the updates the called graph makes to the input fed by
        `parent_tensor` reach `parent_tensor` (as a by-reference input), as upstream; other
        call sites of the graph are not affected.

        xl passes an input by reference when the graph marks it so (`graph.by_ref`): unless
        the input is by reference already, this call site calls a copy of the graph with
        the input marked (`called_graph` is then that copy)."""
        for i, t in enumerate(self.inputs):
            if t is parent_tensor:
                k = i - self._input_offset
                if not self._called._input_by_ref(k):
                    self._called = _private_copy(self._called, self._op)
                    self._called._set_input_by_ref(k)
                return
        raise ValueError(f"{parent_tensor!r} is not an input of this call site")

    @property
    def _input_offset(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"CallSiteInfo[{self._parent.name} -> {self._called.name}]"


def _private_copy(graph: Graph, call: Operation) -> Graph:
    """A copy of `graph` (a new `graph.graph` next to it, named `<name>_site<n>`) that only
    `call` calls from now on."""
    ir = graph.ir
    op = graph._op
    assert isinstance(op, GraphOp) and isinstance(call, CallOp | RepeatOp), "a call of a subgraph"
    copy = op.clone()
    copy.sym_name = StringAttr(ir._create_name(f"{graph.name}_site"))
    block = op.parent_block()
    assert block is not None
    block.insert_op_after(copy, op)
    call.callee = SymbolRefAttr(copy.sym_name.data)
    return Graph._from_op(ir, copy)


def _check_graph(graph: Any, what: str) -> Graph:
    if not isinstance(graph, Graph):
        raise TypeError(f"ops.{what}: expected a popxl.Graph, got {type(graph).__name__}")
    check_graph_in_ir(gcg(), graph, f"ops.{what}")
    if graph._is_main:
        raise ValueError(f"ops.{what}: the main graph cannot be called")
    if not graph._is_built:
        raise ValueError(f"ops.{what}: graph {graph.name!r} is still being built")
    return graph


def _output_types(graph: Graph) -> list[Attribute]:
    """The result types of a call of `graph` (a subgraph: `_check_graph` refuses the main graph)."""
    op = graph._op
    assert isinstance(op, GraphOp), f"{graph.name} is not a subgraph"
    return list(op.function_type.outputs.data)


def _bind_inputs(
    graph: Graph,
    inputs: Iterable[Any],
    inputs_dict: Mapping[Tensor, Any] | None,
    what: str,
    check_inputs: bool = True,
) -> list[Tensor]:
    parent = gcg()
    if parent is graph:
        raise ValueError(f"ops.{what}: graph {graph.name!r} cannot call itself")
    g_inputs = graph.inputs
    n = len(g_inputs)
    if isinstance(inputs, Tensor) or not isinstance(inputs, Iterable):
        raise TypeError(
            f"ops.{what}: the inputs of graph {graph.name!r} must be a sequence of tensors, got {type(inputs).__name__}"
        )
    # a list or tuple among the inputs stands for its tensors, in order (as upstream)
    inputs = [y for x in inputs for y in (x if isinstance(x, list | tuple) else (x,))]
    if len(inputs) > n:
        raise ValueError(
            f"Too many inputs have been provided. ops.{what}: too many inputs for graph {graph.name!r}: "
            f"{len(inputs)} given, it takes {n} ({', '.join(t.name for t in g_inputs)})"
        )
    args: list[Tensor | None] = [None] * n
    for i, x in enumerate(inputs):
        args[i] = to_tensor(x, g_inputs[i].dtype)
    if inputs_dict is not None and not isinstance(inputs_dict, Mapping):
        raise TypeError(
            f"ops.{what}: inputs_dict must map inputs of graph {graph.name!r} to tensors, got "
            f"{type(inputs_dict).__name__}"
        )
    for gt, pt in (inputs_dict or {}).items():
        idx = next((i for i, t in enumerate(g_inputs) if t is gt), None)
        if idx is None:
            raise ValueError(
                f"ops.{what}: {gt!r} in inputs_dict is not an input of graph {graph.name!r} (not in the called graph)"
            )
        if args[idx] is not None:
            raise ValueError(
                f"Graph input tensor is specified twice. ops.{what}: input {gt.name!r} of graph "
                f"{graph.name!r} is specified twice (positionally and/or in inputs_dict)"
            )
        args[idx] = to_tensor(pt, gt.dtype)
    missing = [g_inputs[i].name for i, a in enumerate(args) if a is None]
    if missing:
        raise ValueError(
            f"Not enough inputs have been provided. ops.{what}: graph {graph.name!r} is missing inputs: "
            f"{', '.join(missing)}"
        )
    full = [a for a in args if a is not None]  # none missing (checked above)
    check_in_graph(parent, full, f"ops.{what}({graph.name})")
    if check_inputs:
        for gt, pt in zip(g_inputs, full):
            if gt.shape != pt.shape or gt.dtype != pt.dtype:
                raise GraphBuildError(  # PopART's call op setup refuses it (popart_exception)
                    f"ops.{what}: input {gt.name!r} of graph {graph.name!r} expects "
                    f"{gt.shape} {gt.dtype.name}, got {pt.id} {pt.shape} {pt.dtype.name}"
                )
    return full


def _name_outputs(parent: Graph, op: Operation, graph: Graph) -> None:
    for r, gt in zip(op.results, graph.outputs):
        if gt._value.name_hint is not None:  # user-named output: reuse its name
            t = parent._tensor(r, parent._unique_name(gt.name))
        else:
            t = parent._tensor(r)
        if gt.meta_shape:  # a replica-sharded output stays sharded in the caller
            t._meta_shape = gt.meta_shape


def call_with_info(
    graph: Graph,
    *inputs: Any,
    inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> CallSiteInfo:
    """Call `graph` (a `call.call` op) on `inputs` (positional, for its first inputs; a list
    or tuple stands for its tensors in order, as upstream) and `inputs_dict` (graph input ->
    parent tensor, for the others); returns the call site.

    Each input must match the graph input's shape and dtype (unless `check_inputs` is
    False); numbers become constants. By-reference inputs are updated in the parent.
    """
    graph = _check_graph(graph, "call")
    args = _bind_inputs(graph, inputs, inputs_dict, "call", check_inputs)
    parent = gcg()
    op = CallOp(graph.name, [a._value for a in args], _output_types(graph))
    insert(parent, op, verify=False)
    _name_outputs(parent, op, graph)
    return CallSiteInfo(op, parent, graph)


def call(
    graph: Graph,
    *inputs: Any,
    inputs_dict: Mapping[Tensor, Any] | None = None,
) -> tuple[Tensor, ...]:
    """Call `graph` (see `call_with_info`); returns its outputs as tensors of the current
    graph."""
    return call_with_info(graph, *inputs, inputs_dict=inputs_dict).outputs


def repeat_with_info(
    graph: Graph,
    repeat_count: int,
    *inputs: Any,
    inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> CallSiteInfo:
    """Run `graph` `repeat_count` times (a `call.repeat` op); its N outputs feed its first N
    inputs on the next iteration (same shapes and dtypes); returns the call site.
    Inputs as in `call_with_info`."""
    graph = _check_graph(graph, "repeat")
    if not isinstance(repeat_count, int) or isinstance(repeat_count, bool) or repeat_count < 0:
        raise ValueError(
            f"Repeat count must be >= 0. ops.repeat: repeat_count must be an int >= 0, got {repeat_count!r}"
        )
    g_in, g_out = graph.inputs, graph.outputs
    if len(g_out) > len(g_in):
        raise ValueError(
            f"To repeat the subgraph {graph.name!r} the number of inputs must be greater than or equal to "
            f"the number of outputs. ops.repeat: graph {graph.name!r} has {len(g_out)} outputs but only "
            f"{len(g_in)} inputs; each output is carried into the input at the same position"
        )
    for i, (o, x) in enumerate(zip(g_out, g_in)):
        if o.shape != x.shape or o.dtype != x.dtype:
            raise ValueError(
                f"ops.repeat: output {i} of graph {graph.name!r} ({o.shape} {o.dtype.name}) "
                f"cannot be carried into input {x.name!r} ({x.shape} {x.dtype.name})"
            )
    args = _bind_inputs(graph, inputs, inputs_dict, "repeat", check_inputs)
    parent = gcg()
    op = RepeatOp(graph.name, repeat_count, [a._value for a in args], _output_types(graph))
    insert(parent, op, verify=False)
    _name_outputs(parent, op, graph)
    return CallSiteInfo(op, parent, graph)


def repeat(
    graph: Graph,
    repeat_count: int,
    *inputs: Any,
    inputs_dict: Mapping[Tensor, Any] | None = None,
) -> tuple[Tensor, ...]:
    """Run `graph` `repeat_count` times (`repeat_with_info`); returns the outputs of the
    last iteration in the current graph."""
    return repeat_with_info(graph, repeat_count, *inputs, inputs_dict=inputs_dict).outputs


class ConditionalSiteInfo:
    """Information about one `call.conditional` op."""

    __module__ = "popxl.ops"

    def __init__(self, op: ConditionalOp, parent: Graph, then_graph: Graph, else_graph: Graph):
        self._op = op
        self._parent = parent
        self.then_branch = then_graph
        self.else_branch = else_graph

    @property
    def condition(self) -> Tensor:
        """The scalar bool tensor that selects the branch."""
        return self._parent._tensor(self._op.condition)

    @property
    def then_inputs(self) -> tuple[Tensor, ...]:
        """The parent tensors passed to `then_branch`'s inputs."""
        return tuple(self._parent._tensor(v) for v in self._op.then_args)

    @property
    def else_inputs(self) -> tuple[Tensor, ...]:
        """The parent tensors passed to `else_branch`'s inputs."""
        return tuple(self._parent._tensor(v) for v in self._op.else_args)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """`condition`, then `then_inputs`, then `else_inputs`."""
        return (self.condition, *self.then_inputs, *self.else_inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The parent tensors the outputs of the branch taken become."""
        return tuple(self._parent._tensor(r) for r in self._op.res)

    @property
    def called_graph(self) -> tuple[Graph, Graph]:
        """`(then_branch, else_branch)`."""
        return (self.then_branch, self.else_branch)

    # Parent input indices (as upstream's If op): 0 is the condition, then the inputs of
    # the then branch, then those of the else branch.
    def _branch_inputs(self, then_branch: bool) -> tuple[int, int]:
        """(first parent index, count) of the inputs of one branch."""
        n_then = len(self._op.then_args)
        return (1, n_then) if then_branch else (1 + n_then, len(self._op.else_args))

    @staticmethod
    def _index(idx: int, n: int, what: str) -> int:
        idx = check_int(idx, f"ConditionalSiteInfo.{what}", "idx")
        if not 0 <= idx < n:
            raise IndexError(f"ConditionalSiteInfo.{what}: index {idx} is out of range [0, {n})")
        return idx

    def parent_input(self, idx: int) -> Tensor:
        """The parent tensor at input `idx` of the conditional (0: the condition)."""
        ins = self.inputs
        return ins[self._index(idx, len(ins), "parent_input")]

    def parent_output(self, idx: int) -> Tensor:
        """The parent tensor output `idx` of the branch taken becomes."""
        outs = self.outputs
        return outs[self._index(idx, len(outs), "parent_output")]

    def graph_to_parent_input_index(self, idx: int, then_branch: bool = True) -> int:
        """The conditional's input index of input `idx` of the then (or else) branch."""
        first, n = self._branch_inputs(then_branch)
        return first + self._index(idx, n, "graph_to_parent_input_index")

    def parent_to_graph_input_index(self, idx: int) -> int:
        """The branch input index of the conditional's input `idx` (1 or more; 0 is the
        condition, which is no branch input)."""
        n_then, n_else = len(self._op.then_args), len(self._op.else_args)
        idx = self._index(idx, 1 + n_then + n_else, "parent_to_graph_input_index")
        if idx == 0:
            raise IndexError("ConditionalSiteInfo.parent_to_graph_input_index: input 0 is the condition")
        return idx - 1 if idx <= n_then else idx - 1 - n_then

    def is_parent_index_in_then_branch(self, idx: int) -> bool:
        """Whether the conditional's input `idx` goes to the then branch."""
        n_then, n_else = len(self._op.then_args), len(self._op.else_args)
        idx = self._index(idx, 1 + n_then + n_else, "is_parent_index_in_then_branch")
        return 1 <= idx <= n_then

    def graph_to_parent_output_index(self, idx: int, then_branch: bool = True) -> int:
        """The conditional's output index of output `idx` of a branch (the same index)."""
        return self._index(idx, len(self._op.res), "graph_to_parent_output_index")

    def parent_to_graph_output_index(self, idx: int, then_branch: bool = True) -> int:
        """The branch output index of the conditional's output `idx` (the same index)."""
        return self._index(idx, len(self._op.res), "parent_to_graph_output_index")

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The branch input connected to a parent tensor (the first use, then branch
        first), or the then branch's output a conditional output comes from."""
        for g, ins in ((self.then_branch, self.then_inputs), (self.else_branch, self.else_inputs)):
            for i, t in enumerate(ins):
                if t is parent_tensor:
                    return g.inputs[i]
        for i, t in enumerate(self.outputs):
            if t is parent_tensor:
                return self.then_branch.outputs[i]
        raise ValueError(f"{parent_tensor!r} is not an input or output of this conditional")

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor connected to an input or output of either branch."""
        for g, ins in ((self.then_branch, self.then_inputs), (self.else_branch, self.else_inputs)):
            for i, t in enumerate(g.inputs):
                if t is graph_tensor:
                    return ins[i]
            for i, t in enumerate(g.outputs):
                if t is graph_tensor:
                    return self.outputs[i]
        raise ValueError(f"{graph_tensor!r} is not an input or output of either branch")


def conditional_with_info(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Iterable[Any] | None = None,
    else_inputs: Iterable[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> ConditionalSiteInfo:
    """Run `then_branch` if the scalar bool `cond` holds, else `else_branch` (a
    `call.conditional` op); inputs of each branch as in `call_with_info`; returns the site."""
    from popxl import dtypes

    then_branch = _check_graph(then_branch, "conditional")
    else_branch = _check_graph(else_branch, "conditional")
    parent = gcg()
    cond = to_tensor(cond, dtypes.bool)
    check_in_graph(parent, [cond], "ops.conditional")
    if cond.dtype != dtypes.bool:
        from popxl.ops import cast

        cond = cast(cond, dtypes.bool)
    if cond.shape != ():
        if cond.nelms != 1:
            raise ValueError(f"ops.conditional: condition must be a scalar, got shape {cond.shape}")
        cond = cond.reshape(())
    t_out = _output_types(then_branch)
    e_out = _output_types(else_branch)
    if t_out != e_out:
        raise ValueError(
            f"ops.conditional: the outputs of {then_branch.name!r} "
            f"({[(t.shape, t.dtype.name) for t in then_branch.outputs]}) and {else_branch.name!r} "
            f"({[(t.shape, t.dtype.name) for t in else_branch.outputs]}) must match"
        )
    t_args = _bind_inputs(then_branch, then_inputs or (), then_inputs_dict, "conditional", check_inputs)
    e_args = _bind_inputs(else_branch, else_inputs or (), else_inputs_dict, "conditional", check_inputs)
    op = ConditionalOp(
        cond._value,
        then_branch.name,
        [a._value for a in t_args],
        else_branch.name,
        [a._value for a in e_args],
        list(t_out),
    )
    insert(parent, op, verify=False)
    _name_outputs(parent, op, then_branch)
    return ConditionalSiteInfo(op, parent, then_branch, else_branch)


def conditional(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Iterable[Any] | None = None,
    else_inputs: Iterable[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
) -> tuple[Tensor, ...]:
    """Run `then_branch` on `then_inputs` if the scalar bool `cond` holds, else
    `else_branch` on `else_inputs` (both branches have the same output types); returns the
    outputs of the branch taken (`conditional_with_info`)."""
    return conditional_with_info(
        cond, then_branch, else_branch, then_inputs, else_inputs, then_inputs_dict, else_inputs_dict
    ).outputs


wrap_public_ops(globals(), __all__, "popxl.ops")
