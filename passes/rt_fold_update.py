"""`rt-fold-update`: folds updates and bias adds into accumulating gemms (`xl.gemm_acc`).

1. An SGD step `W = a*W + b*(P @ Q)` (`popxl.scaled_add_`) whose update is a matmul
   used nowhere else becomes one `xl.gemm_acc` kernel (BLAS `gemm` with `beta = a`,
   `alpha = b`), so the weight gradient is never materialised. Transposed operands
   produced by `popxl.transpose` become gemm flags. The fused kernel runs where the
   update ran; `P` and `Q` must not change in between. A running mean of gradients
   `popxl.accumulate_mean_(acc, P @ Q, n)` folds the same way, with `alpha = 1/(n+1)`
   and `beta = n/(n+1)`: constants for a constant step, else taken from the counter `n`
   (a fourth input of `xl.gemm_acc`) when the gemm runs; the runtime then rounds as the
   two kernels did (the product scaled by `alpha`, added to `acc * beta`), so the result
   is the unfused one bit for bit. float16 (no BLAS gemm) is left alone.
2. A bias add `Z = (P @ Q) + c` whose matmul result is used nowhere else becomes
   `Z = broadcast(c)` (`popxl.expand`) followed by `Z += P @ Q` (`xl.gemm_acc`,
   `beta = 1`): no intermediate, and no broadcasting ufunc (which allocates an
   internal buffer on every call).

```mlir
// before
rt.kernel "popxl.transpose"(%x) -> (%xt) {perm = array<i64: 1, 0>} : (memref<8x784xf32>) -> memref<784x8xf32>
rt.kernel "popxl.matmul"(%xt, %dy) -> (%dw) : (memref<784x8xf32>, memref<8x512xf32>) -> memref<784x512xf32>
rt.kernel "popxl.scaled_add_"(%w, %dw) -> (%w) {a = 1.0 : f64, b = -0.05 : f64}
    : (memref<784x512xf32>, memref<784x512xf32>) -> memref<784x512xf32>
// after `xl-opt -p rt-fold-update`
rt.kernel "xl.gemm_acc"(%x, %dy, %w) -> (%w) {alpha = -0.05 : f64, beta = 1.0 : f64, trans_a = true, trans_b = false}
    : (memref<8x784xf32>, memref<8x512xf32>, memref<784x512xf32>) -> memref<784x512xf32>
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    f64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.popxl import (
    AccumulateMeanOp,
    AddOp,
    ExpandOp,
    MatmulOp,
    ScaledAddInplaceOp,
    TransposeOp,
    from_attr,
)
from xl.dialects.rt_kernels import GemmAccOp, fused_source_attrs
from xl.dialects.utils import dtype_of, shape_of
from xl.passes.rt_analysis import (
    Memory,
    kernel_class_of,
    kernel_io,
    parent_positions,
    programs,
    walk_ops,
    written_between,
)

GEMM_ACC = GemmAccOp.name


_TYPE_INFO: dict[int, tuple[Attribute, bool, object]] = {}


def _type_info(t: Attribute) -> tuple[Attribute, bool, object]:
    """(type, is a 2-D f32/f64 memref, dtype), memoised by identity (hashing a type
    attribute walks its parameters; lowering shares type objects)."""
    info = _TYPE_INFO.get(id(t))
    if info is None or info[0] is not t:
        ok = (
            isinstance(t, MemRefType)
            and len(shape_of(t)) == 2
            and dtype_of(t).kind == "f"
            and dtype_of(t).itemsize in (4, 8)
        )
        info = _TYPE_INFO[id(t)] = (t, ok, dtype_of(t) if isinstance(t, MemRefType) else None)
    return info


def _float2d(v: SSAValue) -> bool:
    return _type_info(v.type)[1]


def _dtype(v: SSAValue) -> object:
    return _type_info(v.type)[2]


_F64_ATTRS: dict[float, FloatAttr] = {}
_I1_ATTRS: dict[bool, IntegerAttr] = {}


def _f64(x: float) -> FloatAttr:
    """A (memoised: xDSL attributes cost ~20 us to build) f64 attribute."""
    a = _F64_ATTRS.get(x)
    if a is None:
        a = _F64_ATTRS[x] = FloatAttr(x, f64)
    return a


def _bool(x: bool) -> IntegerAttr:
    a = _I1_ATTRS.get(x)
    if a is None:
        a = _I1_ATTRS[x] = IntegerAttr(int(x), IntegerType(1))
    return a


def _single_writer(mem: Memory, v: SSAValue) -> Operation | None:
    ws = mem.writers.get(v, [])
    return ws[0] if len(ws) == 1 else None


def _users(v: SSAValue) -> set[Operation]:
    return {u.operation for u in v.uses}


def _sole_matmul(mem: Memory, v: SSAValue, user: Operation) -> tuple[rt.KernelOp, tuple[SSAValue, ...]] | None:
    """If alloc `v` is written only by a `popxl.matmul` in `user`'s block and read only by
    `user`, that matmul and its two inputs."""
    mm = _single_writer(mem, v)
    if not isinstance(mm, rt.KernelOp) or kernel_class_of(mm) is not MatmulOp:
        return None
    mm_ins, mm_outs = kernel_io(mm)
    if (
        len(mm_ins) == 2
        and list(mm_outs) == [v]
        and mm.parent is user.parent
        and isinstance(v.owner, rt.AllocOp)
        and _users(v) == {mm, user}
    ):
        return mm, mm_ins
    return None


def _transpose_src(mem: Memory, v: SSAValue) -> tuple[SSAValue, Operation] | None:
    """If `v` is (only) written by a 2-D `popxl.transpose`, its source and that kernel."""
    w = _single_writer(mem, v)
    if not isinstance(w, rt.KernelOp) or kernel_class_of(w) is not TransposeOp:
        return None
    ins, outs = kernel_io(w)
    if len(ins) == 1 and len(outs) == 1 and outs[0] is v and ins[0] is not v and len(shape_of(ins[0].type)) == 2:
        perm = w.attributes.get("perm")
        if perm is None or tuple(from_attr(perm)) == (1, 0):
            return ins[0], w
    return None


def foldable_gemm(g: SSAValue, w: SSAValue, mm_ins: tuple[SSAValue, ...]) -> bool:
    """Whether the product `g` of `mm_ins` can be accumulated into `w` by one BLAS gemm: the same
    type as `w`, 2-D float operands of `w`'s dtype."""
    return g.type == w.type and all(_float2d(v) for v in (w, *mm_ins)) and all(_dtype(v) == _dtype(w) for v in mm_ins)


def gemm_operands(
    mem: Memory,
    mm: Operation,
    mm_ins: tuple[SSAValue, ...],
    w: SSAValue,
    block: Block,
    pos: dict[Operation, int],
    at: int,
) -> list[tuple[SSAValue, bool, Operation]] | None:
    """The operands of the matmul `mm` as a gemm placed at position `at` of `block` reads them,
    each with its transpose flag and the op that read it: a transpose's source where that
    transpose runs before `mm` (the flag set), else the matmul's own operand; the matmul's own
    operands when a transpose's source is not left unchanged until `at`; None when neither is
    (an operand is the weight `w` or written in between)."""
    operands: list[tuple[SSAValue, bool, Operation]] = []
    for v in mm_ins:
        t = _transpose_src(mem, v)
        if t is not None and t[1].parent is block and pos[t[1]] < pos[mm]:
            operands.append((t[0], True, t[1]))
        else:
            operands.append((v, False, mm))
    for candidate in (operands, [(v, False, mm) for v in mm_ins]):
        if not any(
            mem.root(v) is mem.root(w) or written_between(mem, v, block, pos, pos[reader] + 1, at - 1)
            for v, _, reader in candidate
        ):
            return candidate
    return None


def _erase_if_dead(op: Operation) -> None:
    """Erase a kernel whose outputs are allocs read by nobody else, with those allocs."""
    if not isinstance(op, rt.KernelOp) or op.parent is None:
        return
    ins, outs = kernel_io(op)
    if any(o in ins for o in outs):
        return
    for o in outs:
        if not isinstance(o.owner, rt.AllocOp) or _users(o) != {op}:
            return
    op.detach()
    op.erase()
    for o in outs:
        if not o.uses:
            alloc = o.owner
            assert isinstance(alloc, Operation)
            alloc.detach()
            alloc.erase()


def _update_scales(upd: Operation, ins: tuple[SSAValue, ...]) -> tuple[float, float] | None:
    """`(alpha, beta)` of an update `w = beta * w + alpha * g` (pattern 1): the SGD step's
    `(b, a)`; the running mean's `(1 / (s + 1), s / (s + 1))` for a constant `step` `s`, or
    `(nan, nan)` for a step counter (its third input, read when the gemm runs). None: not
    a foldable update."""
    if kernel_class_of(upd) is ScaledAddInplaceOp:
        if len(ins) != 2:
            return None
        a = float(from_attr(upd.attributes["a"])) if "a" in upd.attributes else 1.0
        b = float(from_attr(upd.attributes["b"])) if "b" in upd.attributes else 1.0
        return b, a
    segs = upd.attributes.get("operand_segments")
    if segs is None or tuple(from_attr(segs)) not in ((1, 1, 1), (1, 1, 0)) or len(ins) != sum(from_attr(segs)):
        return None
    if len(ins) == 3:
        return (math.nan, math.nan) if math.prod(shape_of(ins[2].type)) == 1 else None
    if "step" not in upd.attributes:
        return None
    s = float(from_attr(upd.attributes["step"]))
    return 1.0 / (s + 1.0), s / (s + 1.0)


def fold_updates(program: rt.ProgramOp) -> int:
    """Apply the folding to every match in `program`; returns the number of folds."""
    ops = walk_ops(program)
    candidates = [
        op for op in ops if type(op) is rt.KernelOp and kernel_class_of(op) in (ScaledAddInplaceOp, AccumulateMeanOp)
    ]
    if not candidates:
        return 0
    mem = Memory(program, ops)
    n = 0
    pos_cache: dict[Block, dict[Operation, int]] = {}
    for upd in candidates:
        upd_ins, upd_outs = kernel_io(upd)
        scales = _update_scales(upd, upd_ins)
        if scales is None or len(upd_outs) != 1 or upd_outs[0] is not upd_ins[0]:
            continue
        w, g = upd_ins[0], upd_ins[1]
        step = upd_ins[2] if len(upd_ins) == 3 else None
        if step is not None and mem.root(step) is mem.root(w):
            continue
        found = _sole_matmul(mem, g, upd)
        if found is None:
            continue
        mm, mm_ins = found
        if not foldable_gemm(g, w, mm_ins):
            continue
        block, pos = parent_positions(upd, pos_cache)
        if pos[mm] > pos[upd]:
            continue
        operands = gemm_operands(mem, mm, mm_ins, w, block, pos, pos[upd])
        if operands is None:
            continue
        (pa, ta, ra), (pb, tb, rb) = operands
        attrs: dict[str, Attribute] = {}
        if step is None:
            attrs["alpha"], attrs["beta"] = _f64(scales[0]), _f64(scales[1])
        attrs["trans_a"], attrs["trans_b"] = _bool(ta), _bool(tb)
        for k, v in upd.attributes.items():
            if k.startswith("ipu."):
                attrs[k] = v
        attrs.update(fused_source_attrs(mm, upd))  # names for profiles and errors
        fused = rt.KernelOp(GEMM_ACC, [pa, pb, w] if step is None else [pa, pb, w, step], [w], attrs)
        block.insert_op_before(fused, upd)
        # Keep the position map valid for later matches in this block.
        pos[fused] = pos[upd]
        upd.detach()
        upd.erase()
        mm.detach()
        mm.erase()
        alloc = g.owner
        assert isinstance(alloc, Operation)
        alloc.detach()
        alloc.erase()
        mem.writers[w] = [fused if x is upd else x for x in mem.writers.get(w, [])]
        for _, flag, reader in ((pa, ta, ra), (pb, tb, rb)):
            if flag:
                _erase_if_dead(reader)
        n += 1
    return n


def fold_bias_adds(program: rt.ProgramOp) -> int:
    """Pattern 2 (see the module docstring); returns the number of folds."""
    ops = walk_ops(program)
    adds = [op for op in ops if type(op) is rt.KernelOp and kernel_class_of(op) is AddOp]
    if not adds:
        return 0
    mem = Memory(program, ops)
    n = 0
    pos_cache: dict[Block, dict[Operation, int]] = {}
    for add in adds:
        ins, outs = kernel_io(add)
        if len(ins) != 2 or len(outs) != 1:
            continue
        z = outs[0]
        for k in (0, 1):
            m, c = ins[k], ins[1 - k]
            found = _sole_matmul(mem, m, add)
            if found is None:
                continue
            mm, mm_ins = found
            if not (
                isinstance(z.owner, rt.AllocOp)
                and m is not c
                and z not in ins
                and m.type == z.type
                and mem.writers.get(z) == [add]
                and all(_float2d(v) for v in (z, *mm_ins))
                and all(_dtype(v) == _dtype(z) for v in (*mm_ins, c))
                and len(shape_of(c.type)) <= 2
            ):
                continue
            block, pos = parent_positions(add, pos_cache)
            if pos[mm] > pos[add] or any(
                mem.root(v) is mem.root(z) or written_between(mem, v, block, pos, pos[mm] + 1, pos[add] - 1)
                for v in mm_ins
            ):
                continue
            attrs = {k2: v for k2, v in add.attributes.items() if k2.startswith("ipu.")}
            # names for profiles and errors: the fill is the add's, the gemm both ops'
            fill = rt.KernelOp(ExpandOp.name, [c], [z], {**attrs, **fused_source_attrs(add)})
            gemm = rt.KernelOp(
                GEMM_ACC,
                [mm_ins[0], mm_ins[1], z],
                [z],
                {
                    "alpha": _f64(1.0),
                    "beta": _f64(1.0),
                    "trans_a": _bool(False),
                    "trans_b": _bool(False),
                    **attrs,
                    **fused_source_attrs(mm, add),
                },
            )
            block.insert_op_before(fill, add)
            block.insert_op_before(gemm, add)
            pos[fill] = pos[gemm] = pos[add]
            add.detach()
            add.erase()
            mm.detach()
            mm.erase()
            alloc = m.owner
            assert isinstance(alloc, rt.AllocOp)  # checked by _sole_matmul
            alloc.detach()
            alloc.erase()
            mem.writers[z] = [fill, gemm]
            n += 1
            break
    return n


@dataclass(frozen=True)
class RtFoldUpdatePass(ModulePass):
    """Fold `scaled_add_(W, P @ Q)` / `accumulate_mean_(W, P @ Q, n)` into an accumulating
    gemm (`xl.gemm_acc`)."""

    name = "rt-fold-update"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            fold_updates(program)
            fold_bias_adds(program)
