"""`autodiff`: builds the gradient graph of a `graph.graph` (popxl.transforms.autodiff).

```mlir
// xl-opt -p 'autodiff{graph=linear}'
graph.graph @linear(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> (tensor<2x3xf32>) {
  %y = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  graph.output %y : tensor<2x3xf32>
}
// after: a new graph `@linear_grad`
graph.graph @linear_grad(%dy: tensor<2x3xf32> {graph.name = "Gradient___y"},
                         %w: tensor<4x3xf32> {graph.name = "w"},
                         %x: tensor<2x4xf32> {graph.name = "x"})
    -> (tensor<2x4xf32>, tensor<4x3xf32>) attributes {
      autodiff.forward = @linear,
      autodiff.expected_inputs = [["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]],
      autodiff.expected_outputs = array<i64: 0, 1>} {
  %wt = popxl.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %dx = popxl.matmul %dy, %wt : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %xt = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = popxl.matmul %xt, %dy : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  graph.output %dx, %dw : tensor<2x4xf32>, tensor<4x3xf32>
}
```

Options: `graph` (the forward graph), `grads_provided` (forward output indices
whose gradients are the first inputs of the gradient graph, in that order; default:
all floating point outputs), `grads_required` (forward input indices whose
gradients are the outputs, in that order; default: all floating point inputs),
`grad_graph` (name of the new graph; default `<graph>_grad`, made unique) and
`called_grad_graphs` (`fwd:grad` pairs: gradient graphs to use for called
subgraphs instead of differentiating them).

The gradient graph's inputs are the provided gradients followed by the forward
tensors it needs; the expected connections are stored as attributes on it (format:
`xl.passes.autodiff_info`).

Forward intermediates that the gradient needs become extra outputs of the forward
graph (which is mutated, as in PopXL): its type and every `call.call` of it get the
new results (in place: existing results and ops stay valid). Calls into subgraphs
are differentiated recursively, each subgraph getting its own gradient graph
(`autodiff.forward` names it). Inputs that do not influence the provided outputs get
zero gradients; gradients of tensors used several times are summed; non-float
tensors get none. A forward graph that modifies one of its inputs in place is
refused, as PopXL does. In-place ops on the graph's own intermediates are first
rewritten into their out-of-place forms (`xl.passes.functionalize`).

The pieces: `autodiff_info` (the attribute format), `functionalize` (the in-place
rewrite, also a pass of its own), `autodiff_builder` (one gradient graph), this module
(the driver: options, recursion into called graphs, the pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import (
    CallOp,
    ConditionalOp,
    add_graph_outputs,
    append_results,
    call_sites,
)
from xl.dialects.effects import written_operands
from xl.dialects.graph import GraphOp, OutputOp, graphs_by_name, unique_graph_name
from xl.dialects.popxl import AddOp, InitOp
from xl.dialects.utils import fmt_type
from xl.passes.autodiff_builder import GradGraphBuilder, is_float
from xl.passes.autodiff_info import (
    EXPECTED_INPUTS_ATTR,
    EXPECTED_OUTPUTS_ATTR,
    FORWARD_ATTR,
    FWD_GRAD,
    FWD_INPUT,
    FWD_OUTPUT,
    KINDS,
    AutodiffError,
    GradInfo,
    is_grad_graph,
)
from xl.passes.functionalize import functionalize
from xl.passes.grad_rules import GradBuilder, Grads, grad_rule

__all__ = [
    "EXPECTED_INPUTS_ATTR",
    "EXPECTED_OUTPUTS_ATTR",
    "FORWARD_ATTR",
    "FWD_GRAD",
    "FWD_INPUT",
    "FWD_OUTPUT",
    "KINDS",
    "Autodiff",
    "AutodiffError",
    "AutodiffPass",
    "GradGraphBuilder",
    "GradInfo",
    "add_graph_outputs",
    "append_results",
    "autodiff",
    "call_sites",
    "check_not_modifying",
    "functionalize",
    "graphs_by_name",
    "is_grad_graph",
    "unique_graph_name",
]


def check_not_modifying(graph: GraphOp) -> None:
    """Raises unless no op of `graph` updates one of the graph's inputs in place."""
    args = set(graph.body.block.args)
    for op in graph.body.walk():
        for i in written_operands(op):
            v = op.operands[i]
            if v in args:
                idx = graph.body.block.args.index(v)
                raise AutodiffError(
                    f"The graph {graph.graph_name} contains a modifying op: {op.name} modifies "
                    f"its input '{graph.input_name(idx)}' (input {idx}); autodiff needs a "
                    "forward graph that does not modify its inputs"
                )


def _check_index(arg: str, index: int, kind: str, n: int, graph: str) -> None:
    """Raise unless `index` (from argument `arg`) names one of the `n` `kind`s of `@graph`."""
    if not 0 <= index < n:
        raise AutodiffError(f"autodiff: {arg} index {index} is not an {kind} of graph @{graph} ({n} {kind}s)")


# ------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------


@grad_rule(CallOp)
def _call_grad(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """`call.call`: the gradient graph of the callee (made once per connection pattern),
    called from the gradient graph."""
    assert isinstance(b, GradGraphBuilder) and isinstance(op, CallOp)
    return b.driver.call_grad(b, op, dys)


@grad_rule(ConditionalOp)
def _conditional_grad(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """`call.conditional`: a conditional on the same condition of the two branches'
    gradients (`Autodiff.conditional_grad`)."""
    assert isinstance(b, GradGraphBuilder) and isinstance(op, ConditionalOp)
    return b.driver.conditional_grad(b, op, dys)


class Autodiff:
    """Differentiates a graph and, recursively, the subgraphs it calls."""

    def __init__(self, module: ModuleOp, called_grad_graphs: dict[str, str] | None = None):
        self.module = module
        self.graphs = graphs_by_name(module)
        self.called: dict[str, GraphOp] = {}
        for f, g in (called_grad_graphs or {}).items():
            if f not in self.graphs:
                raise AutodiffError(f"autodiff: no graph @{f} (in called_grad_graphs)")
            if g not in self.graphs:
                raise AutodiffError(f"autodiff: no graph @{g} (in called_grad_graphs)")
            self.called[f] = self.graphs[g]
        self.cache: dict[tuple[str, tuple[int, ...], tuple[int, ...]], GraphOp] = {}
        self.created: dict[str, GraphOp] = {}
        """forward graph name -> the gradient graph created for it (all of them)."""
        self._active: set[str] = set()
        self._sites: dict[str, list[Operation]] | None = None

    def sites_of(self, graph: GraphOp) -> list[Operation]:
        """The ops calling `graph` (computed once; autodiff adds no calls to forward graphs)."""
        if self._sites is None:
            self._sites = call_sites(self.module)
        return self._sites.get(graph.graph_name, [])

    def graph(self, name: str) -> GraphOp:
        g = self.graphs.get(name)
        if g is None:
            g = graphs_by_name(self.module).get(name)
        if g is None:
            raise AutodiffError(f"autodiff: no graph @{name} in the module")
        return g

    def differentiate(
        self,
        fwd: GraphOp,
        grads_provided: Sequence[int] | None = None,
        grads_required: Sequence[int] | None = None,
        grad_name: str | None = None,
    ) -> GraphOp:
        name = fwd.graph_name
        if name in self._active:
            raise AutodiffError(f"autodiff: graph @{name} calls itself recursively")
        fblock = fwd.body.block
        n_out = len(fwd.output_op.outs)
        n_in = len(fblock.args)
        if grads_provided is None:
            provided = [j for j, v in enumerate(fwd.output_op.outs) if is_float(v)]
        else:
            provided = [int(j) for j in grads_provided]
            for j in provided:
                _check_index("grads_provided", j, "output", n_out, name)
        if grads_required is None:
            required = [i for i, a in enumerate(fblock.args) if is_float(a)]
        else:
            required = [int(i) for i in grads_required]
            for i in required:
                _check_index("grads_required", i, "input", n_in, name)
                if not is_float(fblock.args[i]):
                    raise AutodiffError(
                        f"autodiff: grads_required: input {i} ('{fwd.input_name(i)}') of graph "
                        f"@{name} is {fmt_type(fblock.args[i].type)}; only floating point "
                        "tensors have gradients"
                    )
        check_not_modifying(fwd)
        functionalize(fwd)
        gname = grad_name if grad_name is not None else unique_graph_name(self.module, f"{name}_grad")
        if gname in graphs_by_name(self.module):
            raise AutodiffError(f"autodiff: a graph named @{gname} already exists")
        self._active.add(name)
        try:
            # the same class under two module names for pyright (passes.autodiff here, xl.passes.autodiff
            # in the builder; see [tool.pyright] in pyproject.toml)
            grad = GradGraphBuilder(self, fwd).build(provided, required, gname)  # pyright: ignore[reportArgumentType]
        finally:
            self._active.discard(name)
        Rewriter.insert_op(grad, InsertPoint.after(fwd))
        self.graphs[gname] = grad
        self.created[name] = grad
        return grad

    # -- call.call --------------------------------------------------------------------
    def call_grad(self, b: GradGraphBuilder, call: CallOp, dys: list[SSAValue | None]) -> list[SSAValue | None]:
        callee_name = call.callee.root_reference.data
        callee = self.graph(callee_name)
        n_args = len(call.args)
        needed = [i for i, a in enumerate(call.args) if b.needs(a)]
        if callee_name in self.called:
            grad = self.called[callee_name]
        else:
            provided = tuple(j for j, d in enumerate(dys) if d is not None)
            key = (callee_name, provided, tuple(needed))
            grad = self.cache.get(key)
            if grad is None:
                grad = self.differentiate(callee, provided, needed)
                self.cache[key] = grad
        info = GradInfo.from_graph(grad)
        if info.forward != callee_name:
            raise AutodiffError(
                f"autodiff: @{grad.graph_name} is the gradient graph of @{info.forward}, not of @{callee_name}"
            )
        n_grad_inputs = len(grad.body.block.args)
        if len(info.expected_inputs) != n_grad_inputs:
            extra = [grad.input_name(i) for i in range(len(info.expected_inputs), n_grad_inputs)]
            raise AutodiffError(
                f"autodiff: gradient graph @{grad.graph_name} of @{callee_name} has inputs that "
                f"are not forward connections ({', '.join(extra)}, e.g. gradient accumulators); "
                "it cannot be called from another gradient graph"
            )
        inputs: list[SSAValue] = []
        callee_outs = callee.function_type.outputs.data
        for kind, idx in info.expected_inputs:
            if kind == FWD_GRAD:
                d = dys[idx] if idx < len(dys) else None
                inputs.append(d if d is not None else b.zeros(callee_outs[idx]))
            elif kind == FWD_INPUT:
                inputs.append(b.fwd(call.args[idx]))
            else:
                inputs.append(b.fwd(call.res[idx]))
        new = CallOp(grad.graph_name, inputs, grad.function_type.outputs.data)
        b.block.add_op(new)
        dxs: list[SSAValue | None] = [None] * n_args
        for r, i in zip(new.res, info.expected_outputs):
            if dxs[i] is None:
                dxs[i] = r
            else:
                dxs[i] = b.v(AddOp, dxs[i], r)  # pyright: ignore[reportArgumentType]
        for i in needed:
            if dxs[i] is None:
                raise AutodiffError(
                    f"autodiff: gradient graph @{grad.graph_name} of @{callee_name} does not "
                    f"compute the gradient of input {i} ('{callee.input_name(i)}'), which is needed"
                )
        return dxs

    # -- call.conditional --------------------------------------------------------------
    def conditional_grad(
        self, b: GradGraphBuilder, cond: ConditionalOp, dys: list[SSAValue | None]
    ) -> list[SSAValue | None]:
        """The gradient of `call.conditional %c then @A(xs) else @B(zs)`, schematically:

        ```text
        %dxs, %dzs = call.conditional %c then @A_cond_grad(xs, dys) else @B_cond_grad(zs, dys)
        ```

        Each `@<branch>_cond_grad` recomputes its branch (a copy of it, so that the values
        its gradient needs can become outputs: a branch's own outputs are tied to the
        other branch's) and calls the copy's gradient graph; both return the gradients of
        the needed inputs of both branches, zeros for the other branch's, so the two have
        one signature. PopART's If op differentiates the same way (the gradient of the
        branch taken, selected by the same condition)."""
        then_args, else_args = list(cond.then_args), list(cond.else_args)
        need_then = [i for i, a in enumerate(then_args) if b.needs(a)]
        need_else = [i for i, a in enumerate(else_args) if b.needs(a)]
        provided = [j for j, d in enumerate(dys) if d is not None]
        out_types = [a.type for a in (*(then_args[i] for i in need_then), *(else_args[i] for i in need_else))]
        dy_types = [cond.res[j].type for j in provided]
        then_g = self._branch_grad(cond.then_branch.root_reference.data, provided, need_then, dy_types, out_types, 0)
        else_g = self._branch_grad(
            cond.else_branch.root_reference.data, provided, need_else, dy_types, out_types, len(need_then)
        )
        dy_vals = [dys[j] for j in provided]
        new = ConditionalOp(
            b.fwd(cond.condition),
            then_g.graph_name,
            [*(b.fwd(a) for a in then_args), *dy_vals],  # pyright: ignore[reportArgumentType]
            else_g.graph_name,
            [*(b.fwd(a) for a in else_args), *dy_vals],  # pyright: ignore[reportArgumentType]
            out_types,
        )
        b.block.add_op(new)
        dxs: list[SSAValue | None] = [None] * len(cond.operands)
        base_then, base_else = 1, 1 + len(then_args)
        for k, i in enumerate(need_then):
            dxs[base_then + i] = new.res[k]
        for k, i in enumerate(need_else):
            dxs[base_else + i] = new.res[len(need_then) + k]
        return dxs

    def _branch_grad(
        self,
        branch_name: str,
        provided: list[int],
        needed: list[int],
        dy_types: Sequence[Attribute],
        out_types: Sequence[Attribute],
        first_out: int,
    ) -> GraphOp:
        """`@<branch>_cond_grad(branch inputs..., dys...)`: recomputes a copy of the branch,
        calls the copy's gradient graph and returns the gradients of `needed` inputs at
        `out_types[first_out:]`, zeros at the other positions."""
        branch = self.graph(branch_name)
        copy = branch.clone()
        copy.sym_name = StringAttr(unique_graph_name(self.module, f"{branch_name}_cond_fwd"))
        Rewriter.insert_op(copy, InsertPoint.after(branch))
        self.graphs[copy.graph_name] = copy
        grad = self.differentiate(copy, provided, needed)
        info = GradInfo.from_graph(grad)
        in_types = [a.type for a in branch.body.block.args]
        block = Block(arg_types=[*in_types, *dy_types])
        args, dy_args = list(block.args[: len(in_types)]), list(block.args[len(in_types) :])
        fwd_call = CallOp(copy.graph_name, args, copy.function_type.outputs.data)
        block.add_op(fwd_call)
        inputs: list[SSAValue] = []
        for kind, idx in info.expected_inputs:
            if kind == FWD_GRAD:
                inputs.append(dy_args[provided.index(idx)])
            elif kind == FWD_INPUT:
                inputs.append(args[idx])
            else:
                inputs.append(fwd_call.res[idx])
        grad_call = CallOp(grad.graph_name, inputs, grad.function_type.outputs.data)
        block.add_op(grad_call)
        outs: list[SSAValue] = []
        for k, t in enumerate(out_types):
            if first_out <= k < first_out + len(needed):
                outs.append(grad_call.res[k - first_out])
            else:
                zero = InitOp.make([], [t], init_type="zero")
                block.add_op(zero)
                outs.append(zero.results[0])
        block.add_op(OutputOp(outs))
        names = [branch.input_name(i) for i in range(len(in_types))] + [f"Gradient___{j}" for j in provided]
        g = GraphOp(
            unique_graph_name(self.module, f"{branch_name}_cond_grad"),
            [*in_types, *dy_types],
            out_types,
            Region(block),
            input_names=names,
        )
        Rewriter.insert_op(g, InsertPoint.after(grad))
        self.graphs[g.graph_name] = g
        return g


def autodiff(
    module: ModuleOp,
    graph: str,
    grads_provided: Sequence[int] | None = None,
    grads_required: Sequence[int] | None = None,
    grad_graph: str | None = None,
    called_grad_graphs: dict[str, str] | None = None,
) -> tuple[GraphOp, dict[str, GraphOp]]:
    """Differentiates `@graph` in `module`.

    Returns the new gradient graph and every gradient graph created (forward graph
    name -> gradient graph, the requested one included).
    """
    d = Autodiff(module, called_grad_graphs)
    fwd = d.graph(graph)
    grad = d.differentiate(fwd, grads_provided, grads_required, grad_graph)
    return grad, dict(d.created)


@dataclass(frozen=True)
class AutodiffPass(ModulePass):
    """`autodiff{graph=NAME grads_provided=0,1 grads_required=0 grad_graph=NAME called_grad_graphs=f:g}`."""

    name = "autodiff"

    graph: str | None = None
    grads_provided: tuple[int, ...] | None = None
    grads_required: tuple[int, ...] | None = None
    grad_graph: str | None = None
    called_grad_graphs: tuple[str, ...] = field(default=())

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.graph is None:
            raise AutodiffError("autodiff: the 'graph' option (the graph to differentiate) is required")
        called: dict[str, str] = {}
        for pair in self.called_grad_graphs:
            f, sep, g = pair.partition(":")
            if not sep:
                raise AutodiffError(f"autodiff: called_grad_graphs entries are 'fwd:grad' pairs, got '{pair}'")
            called[f.strip().lstrip("@")] = g.strip().lstrip("@")
        autodiff(
            op,
            self.graph,
            self.grads_provided,
            self.grads_required,
            self.grad_graph,
            called,
        )
