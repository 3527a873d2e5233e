"""`recompute`: a gradient graph that recomputes the forward activations (addons.recompute_graph).

```mlir
// xl-opt -p 'recompute{graph=linear_grad}'
graph.graph @linear_grad(%dz: tensor<2x3xf32> {graph.name = "Gradient___z"},
                         %y: tensor<2x3xf32> {graph.name = "y"},      // an activation
                         %w: tensor<4x3xf32> {graph.name = "w"},
                         %x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32>, tensor<4x3xf32>)
    attributes {autodiff.forward = @linear, autodiff.expected_inputs = [["fwd_grad", 0 : i64],
      ["fwd_output", 1 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]],
      autodiff.expected_outputs = array<i64: 0, 1>} {
  %dy = popxl.gelu_grad %dz, %y : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %wt = popxl.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %dx = popxl.matmul %dy, %wt : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %xt = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = popxl.matmul %xt, %dy : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  graph.output %dx, %dw : tensor<2x4xf32>, tensor<4x3xf32>
}
// after: a new graph (@linear(x, w, b) returns z and the activation y)
graph.graph @linear_grad_recomp(%dz: tensor<2x3xf32> {graph.name = "Gradient___z"},
                                %w: tensor<4x3xf32> {graph.name = "w"},
                                %x: tensor<2x4xf32> {graph.name = "x"},
                                %b: tensor<3xf32> {graph.name = "b"}) -> (tensor<2x4xf32>, tensor<4x3xf32>)
    attributes {autodiff.forward = @linear, autodiff.expected_inputs = [["fwd_grad", 0 : i64],
      ["fwd_input", 1 : i64], ["fwd_input", 0 : i64], ["fwd_input", 2 : i64]],
      autodiff.expected_outputs = array<i64: 0, 1>} {
  %z, %y = call.call @linear(%x, %w, %b)
      : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
  %dx, %dw = call.call @linear_grad(%dz, %y, %w, %x)
      : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<4x3xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x3xf32>)
  graph.output %dx, %dw : tensor<2x4xf32>, tensor<4x3xf32>
}
```

The new graph `@<graph>_recomp` (option `new_graph`) takes, in order: the gradient graph's
`fwd_grad` inputs; its `fwd_input` inputs; the other forward inputs (sorted by name) needed to
call the forward graph; then the gradient graph's own inputs after its expected connections
(accumulators, counters; `graph.by_ref` kept). It calls the forward graph, then the gradient
graph with the recomputed activations, and returns the gradient graph's outputs. Its
`autodiff.*` attributes name the same forward graph and expected outputs, but it expects only
forward inputs and gradients: no `fwd_output` (activation) connections. The original gradient
graph is left unchanged (the new graph calls it).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp
from xl.dialects.graph import BY_REF_ATTR, NAME_ATTR, GraphOp, OutputOp, unique_graph_name
from xl.dialects.ipu import IPU_ATTR
from xl.passes.autodiff_info import FWD_GRAD, FWD_INPUT, GradInfo
from xl.passes.graph_utils import grad_and_forward, graph_placement, set_name_hint


class RecomputeError(ValueError):
    """A gradient graph cannot be recomputed as asked."""


@dataclass
class Recomputed:
    """What `recompute` created."""

    graph: GraphOp
    """The new gradient graph `@<graph>_recomp`."""
    input_map: dict[int, int]
    """Input index in the old gradient graph -> input index in the new one (every input
    except the activations, which the new graph recomputes)."""


def recompute(module: ModuleOp, graph: str, name: str | None = None) -> Recomputed:
    """Creates `@<graph>_recomp`, the recomputing version of gradient graph `@graph`."""
    graphs, grad, info, fwd = grad_and_forward(module, graph, "recompute", RecomputeError)
    gblock = grad.body.block
    fblock = fwd.body.block
    n_conn = len(info.expected_inputs)
    if n_conn > len(gblock.args):
        raise RecomputeError(f"recompute: @{graph} has {len(gblock.args)} inputs but {n_conn} expected connections")
    n_fwd_out = len(fwd.output_op.outs)
    for kind, idx in info.expected_inputs:
        bound = n_fwd_out if kind != FWD_INPUT else len(fblock.args)
        if not 0 <= idx < bound:
            raise RecomputeError(
                f"recompute: @{graph} expects {kind} {idx}, which the forward graph @{fwd.graph_name} does not have"
            )

    block = Block()
    attrs: list[DictionaryAttr] = []
    conns: list[tuple[str, int]] = []

    def arg_attr(g: GraphOp, i: int, by_ref: bool) -> DictionaryAttr:
        """Input i's attributes in graph g (name, placement), by-ref as asked."""
        d = dict(g.arg_attrs.data[i].data) if g.arg_attrs is not None else {}
        d[NAME_ATTR] = StringAttr(g.input_name(i))
        d.pop(BY_REF_ATTR, None)
        if by_ref:
            d[BY_REF_ATTR] = UnitAttr()
        return DictionaryAttr(dict(sorted(d.items())))

    def add(type: Attribute, attr: DictionaryAttr, conn: tuple[str, int] | None) -> SSAValue:
        arg = block.insert_arg(type, len(block.args))
        name = attr.data[NAME_ATTR]
        assert isinstance(name, StringAttr)
        set_name_hint(arg, name.data)
        attrs.append(attr)
        if conn is not None:
            conns.append(conn)
        return arg

    grad_arg: dict[int, SSAValue] = {}  # gradient graph input index -> new input
    fwd_in: dict[int, SSAValue] = {}  # forward input index -> new input
    for p, (kind, idx) in enumerate(info.expected_inputs):
        if kind == FWD_GRAD:
            attr = arg_attr(grad, p, grad.input_is_by_ref(p))
            grad_arg[p] = add(gblock.args[p].type, attr, (kind, idx))
    for p, (kind, idx) in enumerate(info.expected_inputs):
        if kind == FWD_INPUT and idx not in fwd_in:
            fwd_in[idx] = add(fblock.args[idx].type, arg_attr(grad, p, False), (FWD_INPUT, idx))
    rest = sorted((i for i in range(len(fblock.args)) if i not in fwd_in), key=lambda i: (fwd.input_name(i), i))
    for i in rest:
        fwd_in[i] = add(fblock.args[i].type, arg_attr(fwd, i, False), (FWD_INPUT, i))
    for p in range(n_conn, len(gblock.args)):
        attr = arg_attr(grad, p, grad.input_is_by_ref(p))
        grad_arg[p] = add(gblock.args[p].type, attr, None)

    ipu = graph_placement(grad) or graph_placement(fwd)
    fwd_call = CallOp(
        fwd.graph_name,
        [fwd_in[i] for i in range(len(fblock.args))],
        fwd.function_type.outputs.data,
    )
    block.add_op(fwd_call)
    operands: list[SSAValue] = []
    for p in range(len(gblock.args)):
        if p < n_conn:
            kind, idx = info.expected_inputs[p]
            if kind == FWD_GRAD:
                operands.append(grad_arg[p])
            elif kind == FWD_INPUT:
                operands.append(fwd_in[idx])
            else:
                operands.append(fwd_call.res[idx])
        else:
            operands.append(grad_arg[p])
    grad_call = CallOp(grad.graph_name, operands, grad.function_type.outputs.data)
    block.add_op(grad_call)
    for op in (fwd_call, grad_call):
        if ipu is not None:
            op.attributes[IPU_ATTR] = ipu
    for r, v in zip(fwd_call.res, fwd.output_op.outs):
        if v.name_hint:
            set_name_hint(r, v.name_hint)
    for r, v in zip(grad_call.res, grad.output_op.outs):
        if v.name_hint:
            set_name_hint(r, v.name_hint)
    block.add_op(OutputOp(list(grad_call.res)))

    new_name = name if name is not None else unique_graph_name(module, f"{graph}_recomp")
    if new_name in graphs:
        raise RecomputeError(f"recompute: a graph named @{new_name} already exists")
    new = GraphOp(
        new_name,
        [a.type for a in block.args],
        list(grad.function_type.outputs.data),
        Region(block),
    )
    new.arg_attrs = ArrayAttr(attrs)
    new.attributes.update(GradInfo(info.forward, tuple(conns), info.expected_outputs).to_attributes())
    Rewriter.insert_op(new, InsertPoint.after(grad))
    index: dict[SSAValue, int] = {a: j for j, a in enumerate(block.args)}
    input_map = {p: index[v] for p, v in enumerate(operands) if v in index}
    return Recomputed(new, input_map)


@dataclass(frozen=True)
class RecomputePass(ModulePass):
    """`recompute{graph=NAME new_graph=NEW}`."""

    name = "recompute"

    graph: str | None = None
    new_graph: str | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.graph is None:
            raise RecomputeError("recompute: the 'graph' option (the gradient graph to recompute) is required")
        recompute(op, self.graph.lstrip("@"), self.new_graph)
