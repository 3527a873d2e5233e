"""`addons.transforms.recompute_graph` (popxl_addons/transforms/recompute_graph.py upstream).

Runs the `recompute` pass (`xl.passes.recompute`): the returned gradient graph calls the
forward graph to recompute the activations, then the original gradient graph. It only
expects forward inputs (and gradients), so a call site of the forward graph still supplies
everything through `grad_graph_info.inputs_dict(fwd_call_info)`.

```python
bwd = addons.transforms.recompute_graph(bwd)
dx, = bwd.bind(accum).call(dx, args=bwd.grad_graph_info.inputs_dict(fwd_info))
```
"""

from __future__ import annotations

from popxl import bridge
from popxl.transforms.autodiff import GradGraphInfo
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.named_tensors import NamedTensors
from xl.passes.recompute import recompute

__all__ = ["recompute_graph"]


def recompute_graph(grad_graph: GraphWithNamedArgs) -> GraphWithNamedArgs:
    """A new gradient graph `<name>_recomp` that recomputes the forward activations.

    Its inputs: the gradient graph's `FwdGrad` inputs, its forward-input connections, the
    remaining forward inputs (sorted by name), then its other inputs (e.g. the accumulators
    of `autodiff_with_accumulation`, still by reference). Its `GradGraphInfo` expects no
    forward activations, only forward inputs. Named args are remapped to the new inputs.
    """
    if not isinstance(grad_graph, GraphWithNamedArgs):
        raise TypeError(f"recompute_graph: expected a GraphWithNamedArgs, got {type(grad_graph).__name__}")
    if not grad_graph.is_grad_graph:
        raise ValueError(
            f"recompute_graph: graph '{grad_graph.graph.name}' is not a gradient graph (it has no "
            "grad_graph_info); pass the result of addons.autodiff"
        )
    info = grad_graph.grad_graph_info
    old = info.graph
    ir = old.ir
    result = bridge.run_pass(ir, recompute, old.name)
    new = bridge.graph_of(ir, result.graph)
    old_inputs = old.inputs
    new_inputs = new.inputs
    mapping = {old_inputs[p]: new_inputs[q] for p, q in result.input_map.items()}
    missing = [k for k, t in grad_graph.args.to_dict().items() if t not in mapping]
    if missing:
        raise ValueError(
            f"recompute_graph: named args {missing} of {old.name!r} are forward activations, "
            "which the recomputed graph does not take"
        )
    args = NamedTensors.from_dict({k: mapping[t] for k, t in grad_graph.args.to_dict().items()})
    out = GraphWithNamedArgs.from_grad_graph(GradGraphInfo.from_graph(new), args)
    out.called_graphs_grad_info = dict(grad_graph.called_graphs_grad_info)
    return out
