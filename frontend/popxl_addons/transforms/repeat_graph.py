"""`repeat_graph(graph, repeat_count)` (popxl_addons/transforms/repeat_graph.py).

Moves every op of `graph` (the main graph too) into a new graph `repeat_graph` and calls
it `repeat_count` times with a `call.repeat` from `graph`:

```python
with ir.main_graph:
    x = popxl.variable(0.0) + 1
    addons.host_store(x)
repeat_graph(ir.main_graph, 5)      # main: %r = call.repeat @repeat_graph 5 (%var)
ir.num_host_transfers = 5
```

Variables stay in `graph`; every value of `graph` the moved ops use (variables, inputs of
`graph`) becomes a by-reference input of the new graph, so in-place updates reach it. The
ops keep their order. `repeat_count <= 1` leaves `graph` unchanged and returns it.
"""

from __future__ import annotations

import popxl
import popxl.ops as ops
from popxl import bridge

__all__ = ["repeat_graph"]


def repeat_graph(graph: popxl.Graph, repeat_count: int) -> popxl.Graph:
    """Wrap the ops of `graph` in a loop of `repeat_count` iterations; returns the new
    graph holding them (or `graph` itself when `repeat_count <= 1`).

    ValueError if an output of `graph` is computed by its ops (it would be computed
    inside the loop)."""
    from xl.dialects.graph import OutputOp, VariableOp

    if not isinstance(graph, popxl.Graph):
        raise TypeError(f"repeat_graph: expected a popxl.Graph, got {type(graph).__name__}")
    if isinstance(repeat_count, bool) or not isinstance(repeat_count, int):
        raise TypeError(f"repeat_graph: repeat_count must be an int, got {type(repeat_count).__name__}")
    if repeat_count <= 1:
        return graph
    ir = graph.ir
    block = bridge.graph_op(graph).body.block
    moved = [op for op in block.ops if not isinstance(op, VariableOp | OutputOp)]
    moved_set = set(moved)
    out_op = next((op for op in block.ops if isinstance(op, OutputOp)), None)
    if out_op is not None:
        for v in out_op.operands:
            if v.owner in moved_set:
                raise ValueError(
                    f"repeat_graph: output {v.name_hint or '?'} of graph {graph.name!r} is computed "
                    "by its ops; repeat_graph moves every op into the loop"
                )
    body = ir.create_empty_graph("repeat_graph")
    body_block = bridge.graph_op(body).body.block
    new_inputs: dict = {}  # outside value -> body input tensor
    outside: dict = {}  # body input tensor -> outside tensor
    for op in moved:
        for v in op.operands:
            if v.owner in moved_set or v in new_inputs:
                continue
            t = bridge.tensor_of(v, graph)
            with body:
                new_t = popxl.graph_input(t.shape, t.dtype, t.name, by_ref=True)
            new_inputs[v] = bridge.value_of(new_t)
            outside[new_t] = t
    body_out = body_block.last_op
    assert body_out is not None, "create_empty_graph finalizes the graph with its graph.output"
    for op in moved:
        op.detach()
        if any(v in new_inputs for v in op.operands):
            op.operands = [new_inputs.get(v, v) for v in op.operands]
        body_block.insert_op_before(op, body_out)
    with graph:
        ops.repeat(body, repeat_count, inputs_dict=outside)
    return body
