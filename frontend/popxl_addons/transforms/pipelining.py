"""`addons.pipelined_execution` (popxl_addons/transforms/pipelining.py upstream).

Ops created in the context are recorded in the current graph with their stage (attribute
`pipeline.stage`); on exit they are moved into a `pipeline.region` (dialect
`xl.dialects.pipeline`) and the `pipeline` pass (`xl.passes.pipeline`) lowers it, so the
graph ends with one call of `pipeline_graph`:

```python
with addons.pipelined_execution(steps=N) as p:
    with p.stage(0), popxl.ipu(0):
        x = ops.host_load(in_stream)
        x = layer0.call(x)
        x = x.copy_to_ipu(1)
    with p.stage(1), popxl.ipu(1):
        (x,) = layer1.call(x)
        ops.host_store(out_stream, x)
```

Variables and constants created in the context stay outside the region (every stage can
use them). `pipelined_execution(N, defer=True)` keeps the region in the IR (so
`ir.to_mlir()` prints it and `xl-opt -p pipeline` can lower the text); `p.apply()` runs the
pass later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import popxl
from popxl import bridge, context
from popxl.bridge import Operation, VerifyException
from popxl.graph import Graph
from popxl.tensor import Tensor
from xl.dialects.graph import ConstantOp, OutputOp, VariableOp
from xl.dialects.pipeline import RegionOp, RestoreOp, StashOp, set_stage, stage_of
from xl.passes.pipeline import Pipelined, PipelineError, lower_region

__all__ = ["pipelined_execution", "StageContext"]


class StageContext:
    """The object `pipelined_execution` yields: `stage(i)` scopes, stashes."""

    def __init__(self, graph: Graph, steps: int):
        self._graph = graph
        self.steps = steps
        self._stage: int | None = None
        self._ops: list[Operation] = []  # ops of the pipeline, in creation order
        self._op_set: set[Operation] = set()
        self._region: RegionOp | None = None
        self._result: Pipelined | None = None

    # -- recording -------------------------------------------------------------------------
    def _hook(self, op: Operation) -> None:
        if isinstance(op, VariableOp | ConstantOp):
            return  # stays outside the region: usable by every stage
        if self._stage is None:
            op.detach()
            op.erase()
            raise RuntimeError(
                f"Operation must be created in a stage context: {op.name} was created in "
                "`pipelined_execution` outside every `with pipeline.stage(i):`"
            )
        set_stage(op, self._stage)
        self._ops.append(op)
        self._op_set.add(op)

    @contextmanager
    def stage(self, i: int) -> Iterator[None]:
        """Set the pipeline stage of the ops created in this scope."""
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"pipeline.stage: the stage must be an int, got {i!r}")
        if i < 0:
            raise ValueError(f"pipeline.stage: the stage must be >= 0, got {i}")
        prev = self._stage
        self._stage = i
        try:
            yield
        finally:
            self._stage = prev

    def _stage_of(self, t: Tensor) -> int | None:
        """The stage of the op producing `t`, None when it is not an op of this pipeline."""
        owner = bridge.producer_of(t)
        if owner is not None and owner in self._op_set:
            return stage_of(owner)
        return None

    # -- stashes -----------------------------------------------------------------------------
    def stash_and_restore_tensor(self, t: Tensor, from_stage: int | None = None) -> Tensor:
        """Stash `t` in stage `from_stage` (default: the stage producing it) and restore it in
        the current stage: a FIFO of depth `current - from_stage + 1` (> 1, else TypeError)."""
        if not isinstance(t, Tensor):
            raise TypeError(f"stash_and_restore_tensor: expected a Tensor, got {type(t).__name__}")
        if from_stage is None:
            from_stage = self._stage_of(t)
            if from_stage is None:
                raise RuntimeError(
                    "If the tensor to be stash does not have a producer `from_stage` must be "
                    f"specified to `stash_and_restore_tensor` ({t.id} is not produced by an op "
                    "of a pipeline stage)"
                )
        to_stage = self._stage
        if to_stage is None:
            raise RuntimeError("`stash_and_restore_tensor` must be called in a stage context.")
        stash_size = to_stage - from_stage + 1
        if stash_size <= 1:
            raise TypeError(f"Stash must be larger than 1. size={stash_size}, t={t}")
        g = context.gcg()
        if g is not self._graph:
            raise RuntimeError(
                "stash_and_restore_tensor: must be called in the graph of the pipeline "
                f"({self._graph.name!r}), not in {g.name!r}"
            )
        if t not in g:
            raise ValueError(
                f"stash_and_restore_tensor: tensor {t.id} is in graph {t.graph.name!r}, not in "
                f"the current graph {g.name!r}"
            )
        stash = StashOp(bridge.value_of(t), stash_size)
        ipu = bridge.ipu_of(t)
        with self.stage(from_stage), popxl.ipu(ipu) if ipu is not None else contextlib.nullcontext():
            bridge.append_op(stash, g, verify=False)
        restore = RestoreOp(stash.result)
        bridge.append_op(restore, g, verify=False)
        return bridge.tensor_of(restore.result, g, f"{t.name}_restored")

    def stash_and_restore_activations(self, call_info: Any, grad_info: Any) -> dict[Tensor, Tensor]:
        """`grad_info.inputs_dict(call_info)`, with the activations produced in an earlier
        stage stashed there and restored in the current stage (external inputs and
        activations of the current stage are used directly)."""
        activations = grad_info.inputs_dict(call_info)
        from_stage = None
        op = bridge.call_op_of(call_info)
        if op is not None and op in self._op_set:
            from_stage = stage_of(op)
        to_stage = self._stage
        if from_stage is not None and to_stage != from_stage:
            for sg_tensor, act in activations.items():
                if self._stage_of(act) is not None:
                    act = self.stash_and_restore_tensor(act, from_stage=from_stage)
                activations[sg_tensor] = act
        return activations

    # -- the transform ----------------------------------------------------------------------
    def _build_region(self) -> RegionOp | None:
        block = bridge.graph_op(self._graph).body.block
        ops = [op for op in self._ops if op.parent_block() is block]
        if not ops:
            return None
        num_stages = max(stage_of(op) or 0 for op in ops) + 1
        if self.steps < 2 * num_stages:
            raise ValueError(
                "Pipelining requires the steps at least 2x the number of stages in the "
                f"pipeline. steps={self.steps} stages={num_stages}"
            )
        region = RegionOp(self.steps)
        last = block.last_op
        if isinstance(last, OutputOp):
            block.insert_op_before(region, last)
        else:
            block.add_op(region)
        body = region.body.block
        for op in ops:
            op.detach()
            body.add_op(op)
        try:
            region.verify_region()
        except VerifyException as e:
            raise ValueError(str(e).split("\n\n")[0]) from None
        return region

    @property
    def region(self) -> RegionOp | None:
        """The `pipeline.region` (until the pass runs; None for an empty pipeline)."""
        return self._region

    @property
    def pipeline_graph(self) -> Graph | None:
        """The graph the pass created (after it ran)."""
        if self._result is None:
            return None
        return bridge.graph_of(self._graph.ir, self._result.graph)

    def apply(self) -> None:
        """Run the `pipeline` pass on the region (`defer=True`); a second call is an error."""
        if self._result is not None:
            raise RuntimeError("pipelined_execution: the pipeline transform already ran")
        region = self._region
        if region is None:
            return
        ir = self._graph.ir
        try:
            result = bridge.run_pass(ir, lower_region, region)
        except PipelineError as e:
            raise ValueError(str(e)) from None
        bridge.number_op(ir, result.call)
        self._result = result
        self._region = None


@contextmanager
def pipelined_execution(steps: int, *, defer: bool = False) -> Iterator[StageContext]:
    """Pipeline the ops created in the context over `steps` micro-batches.

    Every op must be created inside `with pipeline.stage(i):` (RuntimeError); stages are
    0..S-1 and `steps >= 2 * S` (ValueError). On exit the `pipeline` pass runs (unless
    `defer=True`: then call `apply()` on the yielded context) and the current graph ends with
    one call of the pipeline graph.
    """
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise TypeError(f"pipelined_execution: steps must be an int, got {steps!r}")
    if steps < 1:
        raise ValueError(f"pipelined_execution: steps must be >= 1, got {steps}")
    graph = context.gcg()
    stages = StageContext(graph, steps)
    handle = graph.register_op_created_hook(stages._hook)
    try:
        yield stages
    finally:
        graph.remove_op_created_hook(handle)
    stages._region = stages._build_region()
    if not defer:
        stages.apply()
