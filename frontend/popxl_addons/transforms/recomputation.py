"""`popxl_addons.transforms.recomputation` (upstream's module path): `recompute_graph`
(implemented in `popxl_addons.transforms.recompute`) and `add_recompute_inputs`, the inputs
a hand-written recomputation graph needs.

```python
with ir.create_empty_graph("my_recomp"):
    fwd_inputs, grad_inputs, expected = add_recompute_inputs(bwd.grad_graph_info)
    info = BoundGraph(bwd.grad_graph_info.forward_graph, fwd_inputs).call_with_info()
    grad_inputs.update(bwd.grad_graph_info.inputs_dict(info))    # the recomputed activations
    ...
```
"""

from __future__ import annotations

import popxl
from popxl import bridge
from popxl.transforms.autodiff import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from popxl_addons.transforms.recompute import recompute_graph

__all__ = ["add_recompute_inputs", "recompute_graph"]


def add_recompute_inputs(
    grad_info: GradGraphInfo,
) -> tuple[dict[popxl.Tensor, popxl.Tensor], dict[popxl.Tensor, popxl.Tensor], list[ExpectedConnection]]:
    """Add to the current graph the inputs a graph recomputing `grad_info`'s forward graph
    and then calling its gradient graph needs, in this order:

    1. for each expected input of the gradient graph, in order: a new input for a gradient
       (`FwdGrad`) connection, or for a `Fwd` connection to a forward graph input;
    2. the forward graph's other inputs, sorted by name.

    Returns `(forward input -> new input, gradient graph input -> new input, expected
    connections of the new inputs in the order they were added)`. Forward activations
    (connections to forward outputs) get no input: calling the forward graph recomputes
    them.
    """
    if not isinstance(grad_info, GradGraphInfo):
        raise TypeError(f"add_recompute_inputs: expected a GradGraphInfo, got {type(grad_info).__name__}")
    fwd_inputs = list(grad_info.forward_graph.inputs)
    grad_inputs = grad_info.graph.inputs
    fwd_map: dict[popxl.Tensor, popxl.Tensor] = {}
    grad_map: dict[popxl.Tensor, popxl.Tensor] = {}
    expected: list[ExpectedConnection] = []
    for idx, ec in enumerate(grad_info.expected_inputs):
        if ec.connection_type == ExpectedConnectionType.FwdGrad:
            t = grad_inputs[idx]
            grad_map[t] = popxl.graph_input(t.shape, t.dtype, t.name)
            expected.append(ec)
        elif ec.fwd_tensor in fwd_inputs and ec.fwd_tensor not in fwd_map:
            t = ec.fwd_tensor
            fwd_map[t] = popxl.graph_input(t.shape, t.dtype, t.name)
            expected.append(ec)
    for t in sorted((t for t in fwd_inputs if t not in fwd_map), key=lambda t: t.name):
        fwd_map[t] = popxl.graph_input(t.shape, t.dtype, t.name)
        expected.append(bridge.forward_input_connection(grad_info.forward_graph, fwd_inputs.index(t)))
    return fwd_map, grad_map, expected
