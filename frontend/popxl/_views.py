"""Aliasing `_` view ops (`reshape_`, `transpose_`, `slice_`, `concat_`, `flatten_`, `detach_`).

Upstream PopXL returns an alias (a view) from these ops: an in-place update of the
result changes the input, and an in-place update of the input is seen through the
result. xl builds them as ordinary value-semantics ops (the result is a copy taken
where the view op stands), so the two agree exactly when no in-place write could tell
them apart. This module records each view op (`record_view`) and `check_views(ir)`
refuses, before the program is compiled or exported, every program where they could
differ. Walking each graph in program order, with the in-place interface
(`written_operands`, which covers by-reference call inputs) telling what each op writes:

1. an op that writes an alias (a view result, or a view of a view) is refused: upstream
   the write would reach the base tensor, in xl it would not;
2. an op that reads an alias (including as a graph output) after one of its base tensors
   was written since the alias was created is refused: upstream it would see the new
   values, in xl it sees the old ones;
3. an op that writes a base tensor while reading one of its aliases is refused (upstream
   the operands overlap).

Reading an alias before any write to its base (the common use, `x.T_` as an operand),
and writing the base after the last use of its aliases, stay allowed: both semantics
give the same numbers there.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation, SSAValue

from xl.dialects.effects import written_operands
from xl.dialects.graph import GraphOp, MainGraphOp, OutputOp

if TYPE_CHECKING:
    from popxl.ir import Ir
    from popxl.tensor import Tensor

_ADVICE = (
    "xl does not implement aliasing views: use the out-of-place op ({plain}) and update "
    "the original tensor explicitly instead"
)


@dataclass
class _Alias:
    """A view result: the public op that made it and, per base tensor, the number of
    writes the base had seen when the view was created."""

    what: str
    roots: dict[SSAValue, int] = field(default_factory=dict)


def record_view(result: Tensor, what: str) -> Tensor:
    """Note that `result` (built by public op `what`, e.g. `ops.reshape_`) aliases the
    tensor operands of the op that made it."""
    op = result._value.owner
    assert isinstance(op, Operation)
    ir = result._graph._ir
    ir._views[op] = what
    return result


def _walk(ops: Iterable[Operation]) -> Iterator[Operation]:
    """Ops in program order, nested regions right after their parent op."""
    for op in ops:
        yield op
        for region in op.regions:
            for block in region.blocks:
                yield from _walk(block.ops)


def check_views(ir: Ir, what: str) -> None:
    """Raise `NotImplementedError` when a program of `ir` relies on a `_` view op aliasing
    its input (see the module docstring); `what` names the caller (`Session`, ...)."""
    if not ir._views:
        return
    from popxl.graph import Graph

    for gop in list(ir._module.body.block.ops):
        if isinstance(gop, GraphOp | MainGraphOp):
            _check_graph(ir, Graph._from_op(ir, gop), gop, what)


def _check_graph(ir: Ir, g: Any, gop: Operation, what: str) -> None:
    views = ir._views

    def name(v: SSAValue) -> str:
        t = g._values.get(v)
        return repr(t.id) if t is not None else (f"%{v.name_hint}" if v.name_hint else "a tensor")

    def opname(op: Operation) -> str:
        return f"the output of graph {g.name!r}" if isinstance(op, OutputOp) else op.name

    def plain(view: str) -> str:
        return view[:-1] if view.endswith("_") else view

    writes: dict[SSAValue, int] = {}
    aliases: dict[SSAValue, _Alias] = {}
    for op in _walk(gop.regions[0].blocks[0].ops):
        written = [op.operands[i] for i in written_operands(op)]
        for w in written:
            a = aliases.get(w)
            if a is not None:
                bases = ", ".join(name(r) for r in a.roots)
                raise NotImplementedError(
                    f"{what}: {op.name} updates {name(w)} in place, but {name(w)} was made by "
                    f"{a.what}, which upstream is an alias of {bases}: the update would change "
                    f"{bases} too. " + _ADVICE.format(plain=f"{plain(a.what)}")
                )
        for v in op.operands:
            a = aliases.get(v)
            if a is None:
                continue
            for r, n in a.roots.items():
                if writes.get(r, 0) != n:
                    raise NotImplementedError(
                        f"{what}: {opname(op)} reads {name(v)}, made by {a.what} as an alias of "
                        f"{name(r)}, after {name(r)} was updated in place: upstream it would see "
                        "the updated values, xl the values from before the update. "
                        + _ADVICE.format(plain=plain(a.what))
                        + f", or apply {a.what} after the update"
                    )
                if r in written:
                    raise NotImplementedError(
                        f"{what}: {op.name} updates {name(r)} in place while reading {name(v)}, "
                        f"made by {a.what} as an alias of {name(r)}: upstream the two overlap. "
                        + _ADVICE.format(plain=plain(a.what))
                    )
        for w in written:
            writes[w] = writes.get(w, 0) + 1
        view = views.get(op)
        if view is not None:
            roots: dict[SSAValue, int] = {}
            for s in op.operands:
                a = aliases.get(s)
                if a is not None:
                    roots.update(a.roots)
                else:
                    roots[s] = writes.get(s, 0)
            for r in op.results:
                aliases[r] = _Alias(view, roots)
