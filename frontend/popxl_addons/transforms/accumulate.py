"""`addons.autodiff_with_accumulation` (popxl_addons/transforms/autodiff.py upstream).

`addons.autodiff` followed by the `accumulate` pass (`xl.passes.accumulate`): the gradients of
`tensors_to_accumulate_grads` are averaged into by-reference accumulator inputs
`accum.<name>` (with a by-reference `mean_accum_counter`) instead of being returned.

```python
bwd_facts, bwd = addons.autodiff_with_accumulation(graph, graph.args.tensors)
accum = bwd_facts.init("fc1")            # fc1.accum.weight, fc1.accum.bias, fc1.mean_accum_counter
bwd.bind(accum).call(dx, args=bwd.grad_graph_info.inputs_dict(fwd_info))   # once per micro batch
... optimizer step with accum.accum.weight ...
ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)          # restart the mean
```
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl import bridge
from popxl.transforms.autodiff import GradGraphInfo
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.transforms.autodiff import autodiff
from popxl_addons.variable_factory import NamedVariableFactories, VariableFactory
from xl.passes.accumulate import COUNTER_NAME, accumulate

__all__ = ["autodiff_with_accumulation"]


def sanitise(name: str) -> str:
    """`name` as a DotTree key: runs of invalid characters become `_`; dotted parts that
    start with a digit but are not numbers get a leading `_`."""
    parts = []
    for part in re.sub(r"[^0-9A-Za-z_.]+", "_", name).split("."):
        if not part:
            part = "_"
        elif part[0].isdigit() and not part.isdigit():
            part = "_" + part
        parts.append(part)
    return ".".join(parts)


def _index_of(t: Any, candidates: tuple, what: str, graph: Any) -> int:
    if not isinstance(t, popxl.Tensor):
        raise TypeError(f"autodiff_with_accumulation: {what} must contain Tensors, got {type(t).__name__}")
    for i, c in enumerate(candidates):
        if c is t:
            return i
    raise ValueError(f"autodiff_with_accumulation: {what}: tensor {t.id} is not an input of graph {graph.name!r}")


def autodiff_with_accumulation(
    graph: GraphWithNamedArgs | popxl.Graph,
    tensors_to_accumulate_grads: Iterable[popxl.Tensor],
    grads_provided: Iterable[popxl.Tensor] | None = None,
    grads_required: Iterable[popxl.Tensor] | None = None,
    called_graphs_grad_info: Mapping[popxl.Graph, GradGraphInfo] | None = None,
    replica_groupings: Any = None,
) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    """The gradient graph of `graph`, accumulating the gradients of `tensors_to_accumulate_grads`.

    Args:
        graph: the forward graph.
        tensors_to_accumulate_grads: forward inputs whose gradients are accumulated (running
            mean) into by-reference inputs `accum.<name>` of the gradient graph, where `<name>`
            is the input's key in `graph.args` (else its sanitised tensor name). Their
            gradients are not outputs of the gradient graph (unless also in `grads_required`).
        grads_provided: forward outputs whose gradients the gradient graph takes (default all).
        grads_required: forward inputs whose gradients the gradient graph returns (default
            none besides the accumulated ones, which are not returned).
        called_graphs_grad_info: gradient graphs of called subgraphs to reuse.
        replica_groupings: `NamedReplicaGrouping` for the accumulators, by name.

    Returns:
        The factories of the new named inputs (`accum.<name>`: zeros of the forward input's
        shape and dtype; `mean_accum_counter`: float32 scalar zero; all by reference) and the
        gradient graph with those named args. Reset the mean between steps with
        `ops.var_updates.accumulator_scale_(vars.mean_accum_counter, 0.0)`.
    """
    if isinstance(graph, popxl.Graph):
        graph = GraphWithNamedArgs(graph)
    if not isinstance(graph, GraphWithNamedArgs):
        raise TypeError(
            f"autodiff_with_accumulation: expected a GraphWithNamedArgs or popxl.Graph, got {type(graph).__name__}"
        )
    fwd = graph.graph
    fwd_inputs = fwd.inputs
    acc_idx: list[int] = []
    if isinstance(tensors_to_accumulate_grads, popxl.Tensor) or not isinstance(tensors_to_accumulate_grads, Iterable):
        raise TypeError(
            "autodiff_with_accumulation: tensors_to_accumulate_grads must be an iterable of "
            f"Tensors, got {type(tensors_to_accumulate_grads).__name__}"
        )
    for t in tensors_to_accumulate_grads:
        i = _index_of(t, fwd_inputs, "tensors_to_accumulate_grads", fwd)
        if i not in acc_idx:
            acc_idx.append(i)
    required: list[popxl.Tensor] = list(grads_required or [])
    req_idx = [_index_of(t, fwd_inputs, "grads_required", fwd) for t in required]
    required += [fwd_inputs[i] for i in acc_idx if i not in req_idx]
    keep = [i for i in acc_idx if i in req_idx]

    key_of = {t: k for k, t in graph.args.to_dict().items()}
    names = [key_of.get(fwd_inputs[i]) or sanitise(fwd_inputs[i].name) for i in acc_idx]

    bwd = autodiff(
        graph,
        grads_provided=grads_provided,
        grads_required=required,
        called_graphs_grad_info=called_graphs_grad_info,
    )
    grad_graph = bwd.graph
    ir = grad_graph.ir
    result = bridge.run_pass(ir, accumulate, grad_graph.name, acc_idx, names, keep)

    groupings: dict[str, Any] = {}
    if replica_groupings is not None:
        groupings = dict(replica_groupings.to_dict())

    factories = NamedVariableFactories()
    named: dict[str, popxl.Tensor] = {}
    counter_t = bridge.tensor_of(result.counter, grad_graph)
    factories.insert(
        COUNTER_NAME,
        VariableFactory(partial(np.zeros, ()), popxl.float32, COUNTER_NAME, by_ref=True),
    )
    named[COUNTER_NAME] = counter_t
    for i, name in zip(acc_idx, names):
        key = result.names[i]  # accum.<name>
        src = fwd_inputs[i]
        factories._place(  # accum.<name>: into the accum subtree
            key,
            VariableFactory(
                partial(np.zeros, tuple(src.shape)),
                src.dtype,
                key,
                by_ref=True,
                replica_grouping=groupings.get(name),
            ),
        )
        named[key] = bridge.tensor_of(result.accumulators[i], grad_graph)
    info = GradGraphInfo.from_graph(grad_graph)
    out = GraphWithNamedArgs.from_grad_graph(info, NamedTensors.from_dict(named))
    out.called_graphs_grad_info = dict(bwd.called_graphs_grad_info)
    return factories, out
