"""`clamp-log2-scale`: clamps every float8 scale to the range the float8 ops take.

The float8 ops (`popxl.pow2scale_cast_to_fp8`, `popxl.pow2scale_cast_from_fp8`,
`popxl.matmul_pow2scaled`) scale by `2 ** log2_scale`, a scalar int32 that must lie in
[-32, 32): when it does not, the op fails when it runs. PopART's session option
`throwIfLog2ScaleTensorNotInRange = False` turns that check off; on an IPU the result is
then undefined. With this pass (`popxl.Session` adds it for that option) the scale is
clamped to [-32, 31] first, xl's documented value: a scale below the range acts as -32,
one above as 31.

```mlir
// before
%y = popxl.pow2scale_cast_to_fp8 %x, %s : (tensor<4xf16>, tensor<i32>) -> tensor<4xf8E4M3FNUZ>
// after `xl-opt -p clamp-log2-scale`
%c = popxl.clip %s {min = -32.0 : f64, max = 31.0 : f64} : (tensor<i32>) -> tensor<i32>
%y = popxl.pow2scale_cast_to_fp8 %x, %c : (tensor<4xf16>, tensor<i32>) -> tensor<4xf8E4M3FNUZ>
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from xl.dialects.popxl import ClipOp, PopxlOp

SCALE_OPERAND = "log2_scale"
"""The operand name of a float8 op's scale (every op class with an operand of that name)."""
LOW, HIGH = -32, 31


def _scale_index(op: Operation) -> int | None:
    """The index of `op`'s `log2_scale` operand, None when it has none."""
    if not isinstance(op, PopxlOp):
        return None
    names = [name for name, _ in type(op).get_irdl_definition().operands]
    return names.index(SCALE_OPERAND) if SCALE_OPERAND in names else None


def clamp_log2_scales(module: ModuleOp) -> int:
    """Insert a clip to [-32, 31] before every scale operand of `module`; returns how many."""
    n = 0
    for op in list(module.walk()):
        i = _scale_index(op)
        if i is None:
            continue
        clip = ClipOp.make([op.operands[i]], min=float(LOW), max=float(HIGH))
        block = op.parent_block()
        assert block is not None
        block.insert_op_before(clip, op)
        op.operands[i] = clip.results[0]
        n += 1
    return n


@dataclass(frozen=True)
class ClampLog2ScalePass(ModulePass):
    """Clamp the scale of every float8 op to [-32, 31] (see the module docstring)."""

    name = "clamp-log2-scale"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        clamp_log2_scales(op)
