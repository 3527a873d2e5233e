"""`accumulate`: gradient accumulation on a gradient graph (addons.autodiff_with_accumulation).

```mlir
// xl-opt -p 'accumulate{graph=linear_grad inputs=1}'
graph.graph @linear_grad(%dy: tensor<2x3xf32> {graph.name = "Gradient___y"},
                         %w: tensor<4x3xf32> {graph.name = "w"},
                         %x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32>, tensor<4x3xf32>)
    attributes {autodiff.forward = @linear,
                autodiff.expected_inputs = [["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]],
                autodiff.expected_outputs = array<i64: 0, 1>} {
  %wt = popxl.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %dx = popxl.matmul %dy, %wt : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %xt = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = popxl.matmul %xt, %dy : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  graph.output %dx, %dw : tensor<2x4xf32>, tensor<4x3xf32>
}
// after: two by-reference inputs, the weight gradient no longer an output
graph.graph @linear_grad(%dy: tensor<2x3xf32> {graph.name = "Gradient___y"},
                         %w: tensor<4x3xf32> {graph.name = "w"},
                         %x: tensor<2x4xf32> {graph.name = "x"},
                         %mean_accum_counter: tensor<f32> {graph.by_ref, graph.name = "mean_accum_counter"},
                         %accum.w: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.w"}) -> tensor<2x4xf32>
    attributes {autodiff.forward = @linear,
                autodiff.expected_inputs = [["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]],
                autodiff.expected_outputs = array<i64: 0>} {
  %wt = popxl.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %dx = popxl.matmul %dy, %wt : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %xt = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = popxl.matmul %xt, %dy : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  popxl.accumulate_mean_ %accum.w, %dw, %mean_accum_counter : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
  %one = graph.constant dense<1.0> : tensor<f32>
  popxl.accumulate_ %mean_accum_counter, %one : (tensor<f32>, tensor<f32>) -> ()
  graph.output %dx : tensor<2x4xf32>
}
```

For every accumulated forward input `i` (option `inputs`: forward input indices; default:
every input whose gradient the graph outputs) the gradient graph gets a by-reference input
`accum.<name>` (the forward input's type; `<name>` from option `names`, default the forward
graph's input name) and one by-reference float32 scalar `mean_accum_counter` is added before
them. At the end of the graph each accumulator takes the running mean of its gradient
(`popxl.accumulate_mean_ %accum, %grad, %counter`), then the counter is incremented by one.
After N calls (counter starting at 0) an accumulator holds the mean of the N gradients.

The gradient outputs of the accumulated inputs are removed, except those of the forward
inputs listed in `keep` (their gradient is still returned). The `autodiff.expected_outputs`
attribute follows the remaining outputs. The new inputs are not connections to the forward
graph: `autodiff.expected_inputs` keeps describing the leading inputs, and inputs after its
last entry are the gradient graph's own (accumulators, counter). The graph must not be
called yet (its call sites would miss the new inputs). Option `counter` renames the counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import call_sites
from xl.dialects.graph import ConstantOp, GraphOp
from xl.dialects.ipu import IPU_ATTR
from xl.dialects.popxl import AccumulateMeanOp, AccumulateOp
from xl.dialects.utils import fmt_type, tensor_type
from xl.passes.autodiff_info import GradInfo
from xl.passes.graph_utils import grad_and_forward, graph_placement, set_name_hint

ACCUM_PREFIX = "accum."
COUNTER_NAME = "mean_accum_counter"


class AccumulateError(ValueError):
    """A gradient graph cannot be turned into an accumulating one as asked."""


@dataclass
class Accumulated:
    """What `accumulate` added to a gradient graph."""

    graph: GraphOp
    counter: SSAValue
    """The `mean_accum_counter` input."""
    accumulators: dict[int, SSAValue]
    """forward input index -> its `accum.<name>` input (in `inputs` order)."""
    names: dict[int, str]
    """forward input index -> accumulator input name (`accum.<name>`)."""


def accumulate(
    module: ModuleOp,
    graph: str,
    inputs: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    keep: Sequence[int] = (),
    counter: str = COUNTER_NAME,
) -> Accumulated:
    """Makes gradient graph `@graph` accumulate the gradients of forward inputs `inputs`."""
    _, grad, info, fwd = grad_and_forward(module, graph, "accumulate", AccumulateError)
    if call_sites(module).get(graph):
        raise AccumulateError(
            f"accumulate: graph @{graph} is already called; accumulate it before calling it "
            "(the call sites would miss the new inputs)"
        )
    outs = list(grad.output_op.outs)
    exp_out = list(info.expected_outputs)
    if inputs is None:
        inputs = list(dict.fromkeys(exp_out))
    inputs = [int(i) for i in inputs]
    n_fwd_in = len(fwd.body.block.args)
    if len(set(inputs)) != len(inputs):
        raise AccumulateError(f"accumulate: repeated forward input in inputs={tuple(inputs)}")
    if names is not None and len(names) != len(inputs):
        raise AccumulateError(f"accumulate: {len(names)} names for {len(inputs)} accumulated inputs")
    keep_set = {int(k) for k in keep}
    for k in keep_set:
        if k not in inputs:
            raise AccumulateError(f"accumulate: keep: forward input {k} is not accumulated")

    grads: dict[int, SSAValue] = {}
    for i in inputs:
        if not 0 <= i < n_fwd_in:
            raise AccumulateError(
                f"accumulate: {i} is not an input of the forward graph @{fwd.graph_name} ({n_fwd_in} inputs)"
            )
        if i not in exp_out:
            raise AccumulateError(
                f"accumulate: gradient graph @{graph} does not output the gradient of forward "
                f"input {i} ('{fwd.input_name(i)}'); it outputs those of {tuple(exp_out)}"
            )
        grads[i] = outs[exp_out.index(i)]

    acc_names: dict[int, str] = {}
    for k, i in enumerate(inputs):
        base = names[k] if names is not None else fwd.input_name(i)
        acc_names[i] = f"{ACCUM_PREFIX}{base}"
    block = grad.body.block
    n_in = len(block.args)
    existing = {grad.input_name(j) for j in range(n_in)}
    for nm in [counter, *acc_names.values()]:
        if nm in existing:
            raise AccumulateError(f"accumulate: graph @{graph} already has an input named '{nm}'")
    if len(set(acc_names.values())) != len(acc_names):
        raise AccumulateError(f"accumulate: accumulator names collide: {sorted(acc_names.values())}")

    # -- new by-reference inputs: the counter, then one accumulator per input -------------
    f32_scalar = tensor_type((), "float32")
    ipu = graph_placement(grad) or graph_placement(fwd)
    placed: dict[str, Attribute] | None = {IPU_ATTR: ipu} if ipu is not None else None
    fblock = fwd.body.block
    for i in inputs:
        t = fblock.args[i].type
        if grads[i].type != t:
            raise AccumulateError(
                f"accumulate: the gradient of forward input {i} is {fmt_type(grads[i].type)}, "
                f"the input is {fmt_type(t)}"
            )
    cnt = grad.add_input(f32_scalar, counter, by_ref=True, attrs=placed)
    set_name_hint(cnt, counter)
    accs: dict[int, SSAValue] = {}
    for i in inputs:
        accs[i] = grad.add_input(fblock.args[i].type, acc_names[i], by_ref=True, attrs=placed)
        set_name_hint(accs[i], acc_names[i])

    # -- the running means, then the counter increment (program order = execution order) ----
    out_op = grad.output_op
    new_ops: list[Operation] = []
    for i in inputs:
        new_ops.append(AccumulateMeanOp.make([accs[i], grads[i], cnt]))
    one = ConstantOp(DenseIntOrFPElementsAttr.from_list(f32_scalar, [1.0]))
    new_ops += [one, AccumulateOp.make([cnt, one.results[0]])]
    for op in new_ops:
        if ipu is not None:
            op.attributes[IPU_ATTR] = ipu
        Rewriter.insert_op(op, InsertPoint.before(out_op))

    # -- remove the accumulated gradients from the outputs ------------------------------------
    removed = {i for i in inputs if i not in keep_set}
    kept = [(v, e) for v, e in zip(outs, exp_out) if e not in removed]
    out_op.operands = [v for v, _ in kept]
    grad.update_function_type()
    new_info = GradInfo(info.forward, info.expected_inputs, tuple(e for _, e in kept))
    grad.attributes.update(new_info.to_attributes())
    return Accumulated(grad, cnt, accs, acc_names)


@dataclass(frozen=True)
class AccumulatePass(ModulePass):
    """`accumulate{graph=NAME inputs=1,2 names=w,b keep=1 counter=NAME}`."""

    name = "accumulate"

    graph: str | None = None
    inputs: tuple[int, ...] | None = None
    names: tuple[str, ...] | None = None
    keep: tuple[int, ...] = ()
    counter: str = COUNTER_NAME

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.graph is None:
            raise AccumulateError("accumulate: the 'graph' option (the gradient graph to accumulate) is required")
        accumulate(
            op,
            self.graph.lstrip("@"),
            self.inputs,
            self.names,
            self.keep,
            self.counter,
        )
