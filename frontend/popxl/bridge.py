"""`popxl.bridge`: between popxl objects and the IR they record.

popxl records a program as IR in xl's dialects (an xDSL `builtin.module`). Libraries
built on popxl that work on that IR directly (`popxl_addons`' transforms run xl passes
and build `pipeline` ops) use these functions, never popxl's private attributes, so that
popxl's internals can change without breaking them:

```python
from popxl import bridge
from xl.passes.recompute import recompute

result = bridge.run_pass(ir, recompute, grad_graph.name)   # pass function on the module
new_graph = bridge.graph_of(ir, result.graph)              # the popxl.Graph of a graph op
x = bridge.tensor_of(new_graph_op_value)                   # the popxl.Tensor of an SSA value
op = bridge.producer_of(x)                                 # the op defining it (None: an input)
```

The types the bridge hands out are re-exported for annotations and `except` clauses:
`Operation`, `SSAValue`, `VerifyException`; and popxl's argument checks, so that a library's
errors read like popxl's: `check_int(x, "f", "count", minimum=1)` (an int, never a bool) and
`describe(x)` (a value and its type, for messages).
"""

from __future__ import annotations

from collections.abc import Callable
from types import UnionType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

from popxl._checks import check_int, describe
from popxl.graph import Graph
from popxl.tensor import Tensor
from xl.dialects import xl_context
from xl.dialects.graph import GraphOp, MainGraphOp

if TYPE_CHECKING:
    from popxl.ir import Ir

__all__ = [
    "Operation",
    "SSAValue",
    "VerifyException",
    "append_op",
    "call_op_of",
    "check_int",
    "describe",
    "forward_input_connection",
    "graph_of",
    "graph_op",
    "ipu_of",
    "module_of",
    "number_op",
    "op_id",
    "producer_of",
    "run_pass",
    "tensor_of",
    "value_of",
]

R = TypeVar("R")


def module_of(ir: Ir) -> ModuleOp:
    """The `builtin.module` holding the program of `ir` (the object itself, not a copy)."""
    _check(ir, _ir_type(), "module_of", "a popxl.Ir")
    return ir._module


def graph_op(graph: Graph) -> GraphOp | MainGraphOp:
    """The `graph.graph` (or `graph.main`) op of `graph`."""
    _check(graph, Graph, "graph_op", "a popxl.Graph")
    return graph._op


def graph_of(ir: Ir, graph: Operation | str) -> Graph:
    """The `popxl.Graph` of a graph op of `ir` (e.g. one a pass created), or of the graph
    named `graph`; always the same object for the same op. Any other op: TypeError."""
    _check(ir, _ir_type(), "graph_of", "a popxl.Ir")
    if isinstance(graph, str):
        return ir._graph_by_name(graph)
    if not isinstance(graph, GraphOp | MainGraphOp):
        raise TypeError(f"bridge.graph_of: expected a graph op or a graph name, got {type(graph).__name__}")
    if graph.parent_op() is not ir._module:
        raise ValueError(f"bridge.graph_of: the graph op {graph.name} is not in the module of {ir!r}")
    return Graph._from_op(ir, graph)


def value_of(t: Tensor) -> SSAValue:
    """The SSA value `t` views."""
    _check(t, Tensor, "value_of", "a popxl.Tensor")
    return t._value


def _owning_graph_op(value: SSAValue) -> Operation | None:
    block: Block | None
    if isinstance(value, BlockArgument):
        block = value.block
    elif isinstance(value, OpResult):
        block = value.op.parent_block()
    else:
        block = None
    return block.parent_op() if block is not None else None


def tensor_of(value: SSAValue, graph: Graph | None = None, name: str | None = None) -> Tensor:
    """The `popxl.Tensor` of an SSA value (always the same object for the same value).

    `graph` defaults to the graph whose body defines `value` (found from the IR; it must
    be given for a value that is not yet in a graph's body). A `name` for a value seen
    for the first time is made unique in the graph (`name__t<k>` when taken); without it
    the tensor is named from the value (its graph input name, name hint, or `t<k>`).
    """
    if not isinstance(value, SSAValue):
        raise TypeError(f"bridge.tensor_of: expected an SSA value, got {type(value).__name__}")
    if graph is None:
        owner = _owning_graph_op(value)
        g = None
        if isinstance(owner, GraphOp | MainGraphOp):
            module = owner.parent_op()
            ir = _ir_of_module(module)
            if ir is not None:
                g = Graph._from_op(ir, owner)
        if g is None:
            raise ValueError(
                "bridge.tensor_of: the value is not defined in the body of a graph of a popxl.Ir; pass graph="
            )
        graph = g
    _check(graph, Graph, "tensor_of", "a popxl.Graph")
    known = graph._values.get(value)
    if known is not None or name is None:
        return known if known is not None else graph._tensor(value)
    return graph._tensor(value, graph._unique_name(name))


def _ir_of_module(module: Operation | None) -> Ir | None:
    from popxl.ir import _live_irs

    for ir in _live_irs():
        if ir._module is module:
            return ir
    return None


def forward_input_connection(forward_graph: Graph, index: int) -> Any:
    """The `ExpectedConnection` (type `Fwd`) of input `index` of `forward_graph`, as a
    gradient graph that takes that forward input lists it (e.g. the inputs
    `popxl_addons.transforms.recomputation.add_recompute_inputs` adds)."""
    from popxl.transforms.autodiff import ExpectedConnection, ExpectedConnectionType
    from xl.passes.autodiff import FWD_INPUT

    _check(forward_graph, Graph, "forward_input_connection", "forward_graph")
    inputs = forward_graph.inputs
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(inputs):
        raise ValueError(
            f"forward_input_connection: index must be an input index of graph {forward_graph.name!r} "
            f"(0..{len(inputs) - 1}), got {index!r}"
        )
    return ExpectedConnection._create(inputs[index], ExpectedConnectionType.Fwd, FWD_INPUT, index)


def producer_of(t: Tensor) -> Operation | None:
    """The op whose result `t` is (None for a graph input)."""
    v = value_of(t)
    return v.op if isinstance(v, OpResult) else None


def call_op_of(site: Any) -> Operation:
    """The `call.call` / `call.repeat` / `call.conditional` op of a call site (the
    `CallSiteInfo` or `ConditionalSiteInfo` that `ops.call_with_info` & co. return)."""
    from popxl.ops.call import CallSiteInfo, ConditionalSiteInfo

    _check(site, CallSiteInfo | ConditionalSiteInfo, "call_op_of", "a CallSiteInfo or ConditionalSiteInfo")
    return site._op


def ipu_of(t: Tensor) -> int | None:
    """The virtual IPU of `t` (of the op producing it, or of the graph input), None when
    it has none (`Tensor.ipu` is 0 then, as upstream)."""
    _check(t, Tensor, "ipu_of", "a popxl.Tensor")
    return t._ipu_or_none


def append_op(op: Operation, graph: Graph | None = None, verify: bool = True) -> tuple[Tensor, ...]:
    """Append `op` (built with operands of `graph`) to `graph` (default: the current graph,
    `popxl.gcg()`), as popxl's own ops are: placed on the current IPU / tile set, numbered
    for `print_schedule`, seen by op-created hooks; returns its result tensors.

    An operand from another graph or Ir is a `ValueError`; with `verify`, so is an op that
    does not verify (the first paragraph of the verifier's message).
    """
    from popxl.context import gcg
    from popxl.ops._utils import insert

    if not isinstance(op, Operation):
        raise TypeError(f"bridge.append_op: expected an op, got {type(op).__name__}")
    g = gcg() if graph is None else graph
    _check(g, Graph, "append_op", "a popxl.Graph")
    insert(g, op, verify=verify)
    return tuple(g._tensor(r) for r in op.results)


def number_op(ir: Ir, op: Operation) -> None:
    """Give `op` (built by a pass) the next creation number of `ir`, so `print_schedule`
    shows it in creation order like frontend-built ops."""
    _check(ir, _ir_type(), "number_op", "a popxl.Ir")
    ir._number_op(op)


def op_id(ir: Ir, op: Operation) -> int:
    """The PopART-style id of `op` in `ir`, as `print_schedule` shows it (`MatMul.100`):
    frontend-built ops are numbered from 100 in creation order (variables and constants
    are tensors, not ops, and have none), an op built by a pass when first asked for."""
    from popxl.printing import _op_id

    _check(ir, _ir_type(), "op_id", "a popxl.Ir")
    return _op_id(ir, op)


@overload
def run_pass(ir: Ir, pass_: ModulePass) -> None: ...


@overload
def run_pass(ir: Ir, pass_: Callable[..., R], *args: Any, **kwargs: Any) -> R: ...


def run_pass(ir: Ir, pass_: ModulePass | Callable[..., R], *args: Any, **kwargs: Any) -> R | None:
    """Run a pass on the module of `ir`, in place.

    `pass_` is an xDSL `ModulePass` instance (applied with every xl dialect loaded; returns
    None) or a function taking the module first (`xl.passes.accumulate.accumulate`,
    `xl.passes.recompute.recompute`, ...), called as `pass_(module, *args, **kwargs)`;
    its result is returned. Graphs the pass creates are reached with `graph_of`.
    """
    module = module_of(ir)
    if isinstance(pass_, ModulePass):
        if args or kwargs:
            raise TypeError("bridge.run_pass: a ModulePass takes its options at construction")
        pass_.apply(xl_context(), module)
        return None
    if not callable(pass_):
        raise TypeError(f"bridge.run_pass: expected a ModulePass or a function, got {type(pass_).__name__}")
    return pass_(module, *args, **kwargs)


def _ir_type() -> type:
    from popxl.ir import Ir

    return Ir


def _check(obj: Any, cls: type | UnionType, fn: str, what: str) -> None:
    if not isinstance(obj, cls):
        raise TypeError(f"bridge.{fn}: expected {what}, got {type(obj).__name__}")
