"""SSA dominance for xl's single-block regions: every value is defined before it is used.

The parser accepts forward references (`%y = popxl.add %x, %z` before `%z = ...`), and
xDSL 0.74 does not check dominance, so such a program would verify and then be executed or
differentiated in program order with a value that does not exist yet. `verify_dominance`
is called by the verifiers of the ops that own a graph body (`graph.graph`, `graph.main`),
so `module.verify()`, `xl-opt` and `xl-run` all reject it:

```mlir
graph.main {
  %x = graph.host_load @x : tensor<2xf32>
  %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>   // error
  %z = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
}
```

Rule (MLIR's, for regions whose blocks have no successors): a use in op `U` of a value `v`
is valid when `v` is an argument of a block that contains `U` (directly or through nested
regions), or the result of an op that comes before the op in that block which contains
`U`. Nested regions (`call.repeat`, `call.conditional`) see the values defined before their
op; an op's own results are not visible inside its regions. Values defined outside the
checked op are left to `IsolatedFromAbove`. The check is one walk, linear in the IR size.
"""

from __future__ import annotations

from xdsl.dialects.builtin import FileLineColLoc
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.utils.exceptions import VerifyException

__all__ = ["DominanceError", "verify_dominance"]


class DominanceError(VerifyException):
    """A use of a value that is not defined before it; `op` is the using op."""

    def __init__(self, message: str, op: Operation, operand_index: int) -> None:
        super().__init__(message)
        self.op = op
        self.operand_index = operand_index


def verify_dominance(op: Operation) -> None:
    """Raises `DominanceError` for the first use in `op`'s regions of a value not yet defined."""
    visible: set[SSAValue] = set()
    for region in op.regions:
        for block in region.blocks:
            _check_block(op, block, visible)


def _check_block(root: Operation, block: Block, visible: set[SSAValue]) -> None:
    added: list[SSAValue] = list(block.args)
    visible.update(block.args)
    try:
        for op in block.ops:
            for i, operand in enumerate(op.operands):
                if operand not in visible and _defined_inside(operand, root):
                    raise DominanceError(_message(op, i, operand), op, i)
            for region in op.regions:
                for inner in region.blocks:
                    _check_block(root, inner, visible)
            visible.update(op.results)
            added.extend(op.results)
    finally:
        visible.difference_update(added)


def _defining_block(value: SSAValue) -> Block | None:
    if isinstance(value, BlockArgument):
        return value.block
    if isinstance(value, OpResult):
        return value.op.parent
    return None


def _defined_inside(value: SSAValue, root: Operation) -> bool:
    """Whether `value` is defined in one of `root`'s regions (only asked on the error path)."""
    block = _defining_block(value)
    while block is not None:
        parent = block.parent_op()
        if parent is root:
            return True
        if parent is None:
            return False
        block = parent.parent
    return False


def _value_name(value: SSAValue) -> str:
    if value.name_hint:
        return f"%{value.name_hint}"
    if isinstance(value, OpResult):
        return f"result #{value.index} of {value.op.name}"
    if isinstance(value, BlockArgument):
        return f"block argument #{value.index}"
    return "a value"


def _where(op: Operation) -> str:
    loc = op.location
    if isinstance(loc, FileLineColLoc):
        return f" at line {loc.line.data}"
    return ""


def _message(user: Operation, index: int, value: SSAValue) -> str:
    name = _value_name(value)
    if isinstance(value, OpResult):
        definer = value.op
        later = _follows_in_same_block(user, definer)
        how = "defined later" if later else "defined in a region that does not enclose this use"
        return (
            f"{user.name}: operand #{index} ({name}) is used before its definition: "
            f"{how}, by {definer.name}{_where(definer)}"
        )
    return f"{user.name}: operand #{index} ({name}) is an argument of a block that does not enclose this use"


def _follows_in_same_block(user: Operation, definer: Operation) -> bool:
    """Whether `definer`'s block contains `user` (possibly nested) at or before `definer`."""
    block = definer.parent
    op: Operation | None = user
    while op is not None and op.parent is not block:
        op = op.parent_op()
    return op is not None
