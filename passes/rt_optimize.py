"""`rt-optimize`: the runtime's optimisation pipeline on a lowered `rt.program`.

Runs, in order: `rt-trivial-collectives` (replica collectives that are the identity
removed), `rt-fold-all-reduce` (an SGD update of a replica-averaged gradient as one
collective), `rt-fold-all-reduce-gemm` (the weight-gradient matmul moved into that
collective: the replicas sum their products into one buffer), `rt-fold-update` (SGD update
folded into the weight-gradient gemm), `rt-broadcast-operands` (elementwise kernels read
broadcast operands, not expanded copies), `rt-fuse-elementwise` (single-use elementwise
chains become one kernel), `rt-fuse-softmax` (a softmax with the chain computing its input,
its gradient with the kernel scaling it), `rt-keep-gelu-factor` (a gelu keeps the factor
its gradient needs: tanh or erf), `rt-views` (reshape/transpose as views) and
`rt-reuse-buffers` (liveness-based storage sharing and in-place elementwise kernels).
Each step is also a pass of its own.

```
xl-opt prog.mlir -p lower-to-rt,rt-optimize
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.passes.rt_analysis import programs
from xl.passes.rt_broadcast_operands import broadcast_operands
from xl.passes.rt_fold_all_reduce import fold_all_reduce_updates
from xl.passes.rt_fold_all_reduce_gemm import fold_all_reduce_gemms
from xl.passes.rt_fold_update import fold_bias_adds, fold_updates
from xl.passes.rt_fuse_elementwise import fuse_elementwise
from xl.passes.rt_fuse_softmax import fuse_softmax
from xl.passes.rt_keep_gelu_factor import keep_gelu_factors
from xl.passes.rt_reuse_buffers import reuse_buffers
from xl.passes.rt_trivial_collectives import drop_trivial_collectives
from xl.passes.rt_views import mark_views


def optimize_program(program: rt.ProgramOp) -> None:
    """Every `rt` optimisation on `program`, in place (the steps listed above)."""
    drop_trivial_collectives(program)
    fold_all_reduce_updates(program)
    fold_all_reduce_gemms(program)
    fold_updates(program)
    fold_bias_adds(program)
    broadcast_operands(program)
    fuse_elementwise(program)
    fuse_softmax(program)
    keep_gelu_factors(program)
    mark_views(program)
    reuse_buffers(program)


@dataclass(frozen=True)
class RtOptimizePass(ModulePass):
    """All `rt` optimisations, in the order the runtime uses them."""

    name = "rt-optimize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            optimize_program(program)
