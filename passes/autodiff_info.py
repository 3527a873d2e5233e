"""The gradient-graph connection format of `autodiff`, as stored in the IR.

A gradient graph records how to connect it to its forward graph in three attributes:

```mlir
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

- `autodiff.forward = @fwd`
- `autodiff.expected_inputs = [[kind, index], ...]`, one per input, where kind is
  `"fwd_grad"` (the gradient of forward output `index`), `"fwd_input"` (forward
  input `index`) or `"fwd_output"` (forward output `index`);
- `autodiff.expected_outputs = array<i64: ...>`: the forward input of each output.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import Attribute, Operation

from xl.dialects.graph import GraphOp

FORWARD_ATTR = "autodiff.forward"
EXPECTED_INPUTS_ATTR = "autodiff.expected_inputs"
EXPECTED_OUTPUTS_ATTR = "autodiff.expected_outputs"

FWD_GRAD = "fwd_grad"
FWD_INPUT = "fwd_input"
FWD_OUTPUT = "fwd_output"
KINDS = (FWD_GRAD, FWD_INPUT, FWD_OUTPUT)


class AutodiffError(ValueError):
    """A graph cannot be differentiated as asked."""


@dataclass(frozen=True)
class GradInfo:
    """The expected connections of a gradient graph (read from / written to its attributes)."""

    forward: str
    expected_inputs: tuple[tuple[str, int], ...]
    expected_outputs: tuple[int, ...]

    def to_attributes(self) -> dict[str, Attribute]:
        return {
            FORWARD_ATTR: SymbolRefAttr(self.forward),
            EXPECTED_INPUTS_ATTR: ArrayAttr(
                [ArrayAttr([StringAttr(k), IntegerAttr(i, i64)]) for k, i in self.expected_inputs]
            ),
            EXPECTED_OUTPUTS_ATTR: DenseArrayBase.from_list(i64, list(self.expected_outputs)),
        }

    @staticmethod
    def from_graph(grad: GraphOp) -> GradInfo:
        attrs = grad.attributes
        fwd = attrs.get(FORWARD_ATTR)
        ins = attrs.get(EXPECTED_INPUTS_ATTR)
        outs = attrs.get(EXPECTED_OUTPUTS_ATTR)
        if not isinstance(fwd, SymbolRefAttr) or ins is None or outs is None:
            raise AutodiffError(
                f"graph @{grad.graph_name} is not a gradient graph (it lacks the "
                f"'{FORWARD_ATTR}', '{EXPECTED_INPUTS_ATTR}' and '{EXPECTED_OUTPUTS_ATTR}' attributes)"
            )
        expected_inputs: list[tuple[str, int]] = []
        assert isinstance(ins, ArrayAttr)
        for e in ins.data:
            assert isinstance(e, ArrayAttr) and len(e.data) == 2, e
            k, i = e.data
            assert isinstance(k, StringAttr) and isinstance(i, IntegerAttr), e
            if k.data not in KINDS:
                raise AutodiffError(f"@{grad.graph_name}: unknown connection kind '{k.data}'")
            expected_inputs.append((k.data, i.value.data))
        if isinstance(outs, DenseArrayBase):
            expected_outputs = tuple(int(v) for v in outs.get_values())
        else:
            assert isinstance(outs, ArrayAttr)
            expected_outputs = tuple(int(v.value.data) for v in outs.data)
        return GradInfo(fwd.root_reference.data, tuple(expected_inputs), expected_outputs)


def is_grad_graph(op: Operation) -> bool:
    return isinstance(op, GraphOp) and FORWARD_ATTR in op.attributes
