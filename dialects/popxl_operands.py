"""Optional-operand matching of `popxl` ops (which present operand fills which definition).

A `popxl` op may have optional operands (`weight?`, `time_step?`, `f_tensor?`, ...).
Given the operands present, they are matched to the definitions greedily in order:
required ones take one operand each, optional ones one while operands are left, a
single variadic definition the rest.

```python
greedy_segments(AdamUpdaterOp, 3)            # (1, 1, 1, 0, 0, 0, 0, 0): m, v, weight
operand_positions(AdamUpdaterOp, segments)   # {"m": 0, "v": 1, "weight": 2, "time_step": -1, ...}
```

`operand_positions` is what a kernel needs to find its inputs (`-1`: absent); the
runtime re-implements this today with name lists (`runtime/kernels/core.py`
`_positions` / `_greedy` / `_UPDATER_OPERANDS`); issue 10 phase 2 moves it here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import AttrSizedOperandSegments, IRDLOperation, OptOperandDef, VarOperandDef

if TYPE_CHECKING:
    from xl.dialects.popxl import PopxlOp


def operand_names(cls: type[IRDLOperation]) -> tuple[str, ...]:
    """The operand definitions' names, in order."""
    return tuple(n for n, _ in cls.get_irdl_definition().operands)


def has_optional_operands(cls: type[IRDLOperation]) -> bool:
    return any(isinstance(d, OptOperandDef) for _, d in cls.get_irdl_definition().operands)


def has_segments(cls: type[IRDLOperation]) -> bool:
    """Whether the op stores `operandSegmentSizes`."""
    return any(isinstance(o, AttrSizedOperandSegments) for o in cls.get_irdl_definition().options)


def greedy_segments(cls: type[IRDLOperation], n: int) -> tuple[int, ...] | None:
    """Operands per definition when `n` operands are matched greedily in order.

    Required operands take one each; optional ones take one in definition order
    while operands are left; a single variadic definition takes the rest.
    None if `n` operands cannot be matched.
    """
    defs = [d for _, d in cls.get_irdl_definition().operands]
    n_req = sum(not isinstance(d, VarOperandDef) for d in defs)
    extra = n - n_req
    if extra < 0:
        return None
    n_var = sum(isinstance(d, VarOperandDef) and not isinstance(d, OptOperandDef) for d in defs)
    out: list[int] = []
    for d in defs:
        if isinstance(d, OptOperandDef):
            take = 1 if extra > 0 else 0
        elif isinstance(d, VarOperandDef):
            take = extra if n_var == 1 else 0
        else:
            out.append(1)
            continue
        extra -= take
        out.append(take)
    return tuple(out) if extra == 0 else None


def operand_segments(op: IRDLOperation) -> tuple[int, ...]:
    """Number of operands given for each operand definition of `op`."""
    out: list[int] = []
    for name, d in op.get_irdl_definition().operands:
        v = getattr(op, name)
        if isinstance(d, OptOperandDef):
            out.append(0 if v is None else 1)
        elif isinstance(d, VarOperandDef):
            out.append(len(v))
        else:
            out.append(1)
    return tuple(out)


def operand_positions(cls: type[IRDLOperation], segments: Sequence[int]) -> dict[str, int]:
    """Index among the present operands of each single-operand definition (-1: absent)."""
    names = operand_names(cls)
    if len(segments) != len(names):
        raise ValueError(f"{cls.name}: operand_segments {tuple(segments)} do not match operands {names}")
    out: dict[str, int] = {}
    i = 0
    for n, k in zip(names, segments, strict=True):
        out[n] = i if k else -1
        i += k
    return out


def match_operands(
    cls: type[PopxlOp],
    operands: Sequence[SSAValue | Operation | None],
    segs: Sequence[int] | None,
    props: dict[str, Any],
) -> tuple[list[SSAValue], list[Attribute | None], list[int]]:
    """The operands of a new `cls` op as `PopxlOp.make` takes them, matched to definitions.

    For ops with optional operands `operands` is either one entry per leading definition
    (`None`: absent) or, without `None`, the present operands (matched greedily), or
    follows `segs`; SSA values in `props` go to the operand of that name or
    `<name>_tensor` (and are removed from `props`). Returns the present operands, the
    operand types per definition (`None` when absent; per operand without optional
    operands) and the segment sizes (empty without optional operands).
    """
    names = operand_names(cls)
    if not has_optional_operands(cls):
        flat_vals = [SSAValue.get(o) for o in operands if o is not None]
        return flat_vals, [o.type for o in flat_vals], []
    ops_ = list(operands)
    if segs is not None:
        flat = [o for o in ops_ if o is not None]
        if sum(segs) != len(flat) or len(segs) != len(names):
            raise cls.fail(f"operand_segments {tuple(segs)} do not match {len(flat)} operands")
        it = iter(flat)
        slots: list[Any] = [next(it) if s else None for s in segs]
    elif any(o is None for o in ops_) or len(ops_) == len(names):
        if len(ops_) > len(names):
            raise cls.fail(f"{len(ops_)} operands for ({', '.join(names)})")
        slots = ops_ + [None] * (len(names) - len(ops_))
    else:
        g = greedy_segments(cls, len(ops_))
        if g is None:
            raise cls.fail(f"cannot match {len(ops_)} operands to ({', '.join(names)})")
        it = iter(ops_)
        slots = [next(it) if s else None for s in g]
    for k in list(props):
        v = props[k]
        if not isinstance(v, SSAValue | Operation):
            continue
        idx = next((names.index(c) for c in (k, f"{k}_tensor") if c in names), None)
        if idx is None:
            raise cls.fail(f"has no operand named {k!r}")
        if slots[idx] is not None:
            raise cls.fail(f"operand {names[idx]!r} given twice")
        slots[idx] = v
        del props[k]
    slot_vals = [None if s is None else SSAValue.get(s) for s in slots]
    flat_vals = [s for s in slot_vals if s is not None]
    types: list[Attribute | None] = [None if s is None else s.type for s in slot_vals]
    return flat_vals, types, [0 if s is None else 1 for s in slot_vals]
