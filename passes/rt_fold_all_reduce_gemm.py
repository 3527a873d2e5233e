"""`rt-fold-all-reduce-gemm`: the weight-gradient matmul joins its replica-averaged update.

After `rt-fold-all-reduce`, each replica writes its weight gradient into a buffer of its own
and the fused collective reads the group's buffers back, sums them, scales the sum and adds it
to the weight. When the gradient is a matmul read by nothing else, the matmul moves into the
collective:

```mlir
// before
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 4 : i64} {
  %x = rt.alloc : memref<8x4xf32>
  %dy = rt.alloc : memref<8x3xf32>
  %w = rt.state "w" : memref<4x3xf32>
  %xt = rt.alloc : memref<4x8xf32>
  %g = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.transpose"(%x) -> (%xt) {perm = array<i64: 1, 0>} : (memref<8x4xf32>) -> memref<4x8xf32>
  rt.kernel "popxl.matmul"(%xt, %dy) -> (%g) : (memref<4x8xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.kernel "xl.all_reduce_update"(%g, %w) -> (%g, %w)
      {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -0.05 : f64}
      : (memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>)
}
// after `xl-opt -p rt-fold-all-reduce-gemm`
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 4 : i64} {
  %x = rt.alloc : memref<8x4xf32>
  %dy = rt.alloc : memref<8x3xf32>
  %w = rt.state "w" : memref<4x3xf32> {rt.replica_invariant}
  rt.kernel "xl.all_reduce_gemm_update"(%x, %dy, %w) -> (%w)
      {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -0.05 : f64,
       trans_a = true, trans_b = false}
      : (memref<8x4xf32>, memref<8x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
}
```

The collective (`xl.runtime.kernels.collectives`) then sums the group's products into one
buffer per process: the first member's product written there (`matmul`), each later one
added by an accumulating BLAS gemm, in ascending replica order as before; no gradient buffer
per replica is written and read back. The sum is the unfused one bit for bit while a
product's contracting dimension fits one BLAS block (OpenBLAS adds the product to the
buffer once per block: a few hundred rows, e.g. the per-replica batch of a weight gradient);
beyond that, within the tolerance of any folded gemm (`docs/runtime.md`).

It applies when the gradient `%g` is a fresh buffer written only by a 2-D float `popxl.matmul`
and read only by the fused update, both in one block, and the matmul's operands (or the
sources of their 2-D transposes, which become `trans_a` / `trans_b`) are not the weight and
are not written between the matmul and the update. The fused kernel runs where the update
ran. A weight written only by such collectives over every replica is marked
`rt.replica_invariant` (as by `rt-fold-all-reduce`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.popxl import MatmulOp
from xl.dialects.rt_kernels import AllReduceGemmUpdateOp, AllReduceUpdateOp, fused_source_attrs
from xl.passes.rt_analysis import (
    Memory,
    kernel_class_of,
    kernel_io,
    parent_positions,
    programs,
    walk_ops,
)
from xl.passes.rt_fold_all_reduce import mark_replica_invariant
from xl.passes.rt_fold_update import _bool, _erase_if_dead, foldable_gemm, gemm_operands


def _gradient_matmul(mem: Memory, g: SSAValue, upd: Operation) -> tuple[rt.KernelOp, tuple[SSAValue, ...]] | None:
    """If alloc `g` is written by a `popxl.matmul` in `upd`'s block and otherwise used only by
    the update `upd` (which leaves a partial sum in it), that matmul and its two inputs."""
    if not isinstance(g.owner, rt.AllocOp):
        return None
    users = {u.operation for u in g.uses}
    writers = [w for w in mem.writers.get(g, []) if w is not upd]
    if len(writers) != 1 or users != {writers[0], upd}:
        return None
    mm = writers[0]
    if not isinstance(mm, rt.KernelOp) or kernel_class_of(mm) is not MatmulOp or mm.parent is not upd.parent:
        return None
    mm_ins, mm_outs = kernel_io(mm)
    if len(mm_ins) != 2 or list(mm_outs) != [g] or g in mm_ins:
        return None
    return mm, mm_ins


def fold_all_reduce_gemms(program: rt.ProgramOp) -> int:
    """Apply the fold (see the module docstring); returns the number of folds."""
    ops = walk_ops(program)
    updates = [op for op in ops if type(op) is rt.KernelOp and kernel_class_of(op) is AllReduceUpdateOp]
    if not updates:
        return 0
    mem = Memory(program, ops)
    pos_cache: dict[Block, dict[Operation, int]] = {}
    n = 0
    for upd in updates:
        ins, outs = kernel_io(upd)
        if len(ins) != 2 or len(outs) != 2 or outs[0] is not ins[0] or outs[1] is not ins[1]:
            continue
        g, w = ins
        found = _gradient_matmul(mem, g, upd)
        if found is None:
            continue
        mm, mm_ins = found
        if not foldable_gemm(g, w, mm_ins):
            continue
        block, pos = parent_positions(upd, pos_cache)
        if pos[mm] > pos[upd]:
            continue
        # the operands as the collective reads them (a transpose's source: a gemm flag)
        operands = gemm_operands(mem, mm, mm_ins, w, block, pos, pos[upd])
        if operands is None:
            continue
        (pa, ta, ra), (pb, tb, rb) = operands
        attrs: dict[str, Attribute] = {
            k: v for k, v in upd.attributes.items() if k in ("grouping", "op", "scale") or k.startswith("ipu.")
        }
        attrs["trans_a"], attrs["trans_b"] = _bool(ta), _bool(tb)
        attrs.update(fused_source_attrs(mm, upd))  # names for profiles and errors
        fused = rt.KernelOp(AllReduceGemmUpdateOp.name, [pa, pb, w], [w], attrs)
        block.insert_op_before(fused, upd)
        pos[fused] = pos[upd]
        for op in (upd, mm):
            op.detach()
            op.erase()
        alloc = g.owner
        assert isinstance(alloc, Operation)
        alloc.detach()
        alloc.erase()
        mem.writers[w] = [fused if x is upd else x for x in mem.writers.get(w, [])]
        for flag, reader in ((ta, ra), (tb, rb)):
            if flag:
                _erase_if_dead(reader)
        n += 1
    if n:
        mark_replica_invariant(program)
    return n


@dataclass(frozen=True)
class RtFoldAllReduceGemmPass(ModulePass):
    """Fold the weight-gradient matmul into its `xl.all_reduce_update`."""

    name = "rt-fold-all-reduce-gemm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            fold_all_reduce_gemms(program)
