"""Printing a popxl program: the PopART-style op schedule of a graph.

`Ir.to_mlir()` prints the whole program as IR text; `schedule_str(graph)` prints one
graph the way PopART's `Graph::printSchedule` does (what `popxl_addons`'
`GraphWithNamedArgs.print_schedule()` shows; the slices of `ops.split` are one `Split` line,
the steps of a composed op such as `ops.isinf` one `IsInf` line):

```
Graph : Linear_subgraph(0)
  (%1, weight=%2, bias=%3) -> (%5) {
    MatMul.100 (%1 [(2, 4) float32], %2 [(4, 32) float32]) -> (%4 [(2, 32) float32])
    Add.101 (%4 [(2, 32) float32], %3 [(32,) float32]) -> (%5 [(2, 32) float32])
  }
```

The op type of each op is its PopART type name, declared on the op class
(`xl.dialects.traits.popart_type`: the `PopartType` trait, else the CamelCase of the op
name, `Inplace` for a trailing `_`). Variables, constants and the terminator are tensors
or structure in PopART, not scheduled ops, and are not listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from xdsl.ir import Block, Operation, SSAValue

from xl.dialects.call import called_graph_names
from xl.dialects.graph import ConstantOp, OutputOp, VariableOp
from xl.dialects.traits import is_popart_internal, popart_op_part, popart_type
from xl.dialects.utils import dtype_of, shape_of

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.ir import Ir
    from popxl.tensor import Tensor

__all__ = ["op_type_name", "schedule_str", "tensor_numbers"]

# Not scheduled ops in PopART: tensors (variables, constants) and the graph terminator.
_NOT_SCHEDULED = (OutputOp, VariableOp, ConstantOp)


def op_type_name(op: Operation | type[Operation]) -> str:
    """The PopART op type of an xl op or op class (`MatmulOp` -> `"MatMul"`)."""
    return popart_type(op)


def _op_id(ir: Ir, op: Operation) -> int:
    """The PopART-style op id: the creation number the frontend gave the op (from 100);
    ops built by passes are numbered from 100 in the order they are first printed."""
    oid = ir._op_id(op)
    if oid is not None:
        return oid
    table = ir._printed_op_ids
    key = id(op)
    if key not in table:
        table[key] = (len(table) + 100, op)  # keeps op alive so that its id() is not reused
    return table[key][0]


def _type_str(value: SSAValue) -> str:
    t = value.type
    try:
        return f"[{shape_of(t)} {dtype_of(t)}]"
    except (AssertionError, TypeError):
        return f"[{t}]"


def tensor_numbers(block: Block) -> dict[SSAValue, int]:
    """The `N` of `%N` that `schedule_str` shows for each tensor of a graph's block: in order
    of first appearance (the inputs, then each scheduled op's operands and results, then the
    graph's outputs)."""
    ids: dict[SSAValue, int] = {}
    for a in block.args:
        ids.setdefault(a, len(ids) + 1)
    outputs: list[SSAValue] = []
    for o in block.ops:
        if isinstance(o, OutputOp):
            outputs = list(o.operands)
        if isinstance(o, _NOT_SCHEDULED):
            continue
        for v in (*o.operands, *o.results):
            ids.setdefault(v, len(ids) + 1)
    for v in outputs:
        ids.setdefault(v, len(ids) + 1)
    return ids


def _parts_of_one_op(ops: list[Operation], i: int) -> list[Operation]:
    """`ops[i]` and the ops after it that are the other parts of the one PopART op it is part
    0 of (`POPART_OP_ATTR`: the slices of `ops.split` are one `Split`, the steps of a composed
    op such as `ops.isinf` one `IsInf`), else `[ops[i]]`. `ops` are the scheduled ops: a
    part that is a constant is not among them."""
    first = popart_op_part(ops[i])
    if first is None or first[1] != 0:
        return [ops[i]]
    kind, k, n = first
    group = [ops[i]]
    for p in ops[i + 1 :]:
        part = popart_op_part(p)
        if part is None or part[0] != kind or part[2] != n or not k < part[1] < n:
            break
        group.append(p)
        k = part[1]
    return group


def _group_io(parts: list[Operation]) -> tuple[list[SSAValue], list[SSAValue]]:
    """The operands a group of parts reads from outside it (not the results of its parts or
    of its internal constants) and the results it gives (not those of internal steps,
    `is_popart_internal`), each once, in order."""
    inside: set[SSAValue] = set()
    ins: list[SSAValue] = []
    outs: list[SSAValue] = []
    for p in parts:
        for v in p.operands:
            owner = v.owner
            internal_const = isinstance(owner, ConstantOp) and is_popart_internal(owner)
            if v not in inside and v not in ins and not internal_const:
                ins.append(v)
        inside.update(p.results)
        if not is_popart_internal(p):
            outs.extend(p.results)
    return ins, outs


def schedule_str(graph: Graph, input_names: Mapping[Tensor, str] | None = None) -> str:
    """The ops of `graph` in schedule (program) order, PopART style (see the module doc).

    Tensors are numbered `%N` in order of first appearance; an input in `input_names`
    is shown as `name=%N`.
    """
    ir = graph.ir
    names = {t._value: k for t, k in (input_names or {}).items()}
    block = graph._op.body.block
    ids = tensor_numbers(block)

    def tid(v: SSAValue) -> str:
        return f"%{ids[v]}"

    def operand(v: SSAValue) -> str:
        return f"{tid(v)} {_type_str(v)}"

    in_strs = [f"{names[a]}={tid(a)}" if a in names else tid(a) for a in block.args]
    lines = []
    outputs: list[SSAValue] = []
    scheduled = [o for o in block.ops if not isinstance(o, _NOT_SCHEDULED)]
    for o in block.ops:
        if isinstance(o, OutputOp):
            outputs = list(o.operands)
    i = 0
    while i < len(scheduled):
        o = scheduled[i]
        parts = _parts_of_one_op(scheduled, i)
        called = called_graph_names(o)
        called_str = f"({', '.join(called)})" if called else ""
        part = popart_op_part(o)
        if part is not None:  # the parts of one PopART op: its type, its inputs and outputs
            in_vals, out_vals = _group_io(parts)
            kind = part[0]
        else:
            in_vals, out_vals = list(o.operands), list(o.results)
            kind = op_type_name(o)
        ins = ", ".join(operand(v) for v in in_vals)
        outs = ", ".join(operand(v) for v in out_vals)
        lines.append(f"    {kind}.{_op_id(ir, o)}{called_str} ({ins}) -> ({outs})")
        i += len(parts)
    out_strs = [tid(v) for v in outputs]
    header = f"Graph : {graph.name}\n  ({', '.join(in_strs)}) -> ({', '.join(out_strs)}) {{"
    return "\n".join([header, *lines, "  }"])
