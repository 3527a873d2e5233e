"""FLOP estimates of a program (popxl_addons/performance_utils.py).

```python
breakdown = evaluate_FLOPs(graph)   # {'MatMul': {op id: flops, ...}, 'Add': {...}, 'TOT': n}
total_FLOPs(ir)                     # main graph (calls and repeats included) x replicas
print_FLOPs(breakdown)              # a table by op type
```

Counted, as upstream: MatMul (`2 * K * prod(output shape)`), Conv
(`2 * prod(output shape) * prod(weight.shape[1:])`) and the elementwise Add, Sub, Mul, Div
(one per output element). Other ops count 0 (layer and group norm are built from
elementwise ops, which are counted). A `call.call` adds its graph's FLOPs, a `call.repeat`
its graph's times the repeat count, a `call.conditional` the larger branch; ops are keyed
by their op id (as `print_schedule` shows it: frontend-built ops numbered from 100 in
creation order), a called graph's entry `<OpType>_<op id>(<graph name>)`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from math import floor, log10, prod
from typing import Any

import popxl
from popxl import bridge

__all__ = [
    "total_FLOPs",
    "evaluate_ir_FLOPs",
    "evaluate_FLOPs",
    "print_FLOPs",
    "format_flops_scientific",
    "flops_of_op",
]


_SUBGRAPH_SUFFIX = re.compile(r"_subgraph\(\d+\)")


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in v.type.get_shape())


def _matmul(op: Any) -> int:
    a, _b = op.operands[0], op.operands[1]
    k = _shape(a)[-1]
    return 2 * k * prod(_shape(op.results[0]))


def _elementwise(op: Any) -> int:
    return prod(_shape(op.results[0]))


def _conv(op: Any) -> int:
    w = op.operands[1]
    return 2 * prod(_shape(op.results[0])) * prod(_shape(w)[1:])


def _flop_rules() -> dict[type, Callable[[Any], int]]:
    """FLOP formulas by op class."""
    from xl.dialects import popxl as px

    rules: dict[type, Callable[[Any], int]] = {
        px.AddOp: _elementwise,
        px.SubOp: _elementwise,
        px.MulOp: _elementwise,
        px.DivOp: _elementwise,
        px.MatmulOp: _matmul,
    }
    conv = getattr(px, "ConvOp", None)
    if conv is not None:
        rules[conv] = _conv
    return rules


def flops_of_op(op: Any) -> int:
    """The FLOPs one run of the IR op `op` counts (0 for ops not counted)."""
    rule = _flop_rules().get(type(op))
    return int(rule(op)) if rule is not None else 0


def _multiply(v: Any, factor: int) -> Any:
    if isinstance(v, dict):
        return {k: _multiply(x, factor) for k, x in v.items()}
    return v * factor


def _sum(v: Any) -> int:
    if isinstance(v, dict):
        return sum(_sum(x) for x in v.values())
    return v


def _evaluate(graph: popxl.Graph, memo: dict[str, dict[str, Any]]) -> dict[str, Any]:
    from xl.dialects.call import CallOp, ConditionalOp, RepeatOp
    from xl.dialects.traits import popart_type

    if graph.name in memo:
        return memo[graph.name]
    memo[graph.name] = {"TOT": 0}  # a recursive call counts nothing more
    ir = graph.ir
    rules = _flop_rules()
    out: dict[str, Any] = {}
    total = 0
    for op in bridge.graph_op(graph).body.block.ops:
        if isinstance(op, CallOp | RepeatOp | ConditionalOp):
            if isinstance(op, ConditionalOp):
                branches = [op.then_branch, op.else_branch]
                subs = [_evaluate(bridge.graph_of(ir, b.root_reference.data), memo) for b in branches]
                callee_name = branches[0].root_reference.data
                sub = max(subs, key=lambda d: d["TOT"])
            else:
                callee_name = op.callee.root_reference.data
                sub = _evaluate(bridge.graph_of(ir, callee_name), memo)
                if isinstance(op, RepeatOp):
                    sub = _multiply(sub, int(op.repeat_count.value.data))
            total += sub["TOT"]
            short = _SUBGRAPH_SUFFIX.sub("", callee_name)
            key = f"{popart_type(op)}_{bridge.op_id(ir, op)}({short})"
            for k, v in sub.items():
                out.setdefault(k, {})[key] = v
            continue
        rule = rules.get(type(op))
        if rule is None:
            continue
        flops = int(rule(op))
        total += flops
        out.setdefault(popart_type(op), {})[bridge.op_id(ir, op)] = flops
    out["TOT"] = total
    memo[graph.name] = out
    return out


def evaluate_FLOPs(graph: popxl.Graph) -> dict[str, Any]:
    """FLOPs of one run of `graph` by op type: `{type: {op id or call key: flops}, 'TOT': total}`."""
    if not isinstance(graph, popxl.Graph):
        raise TypeError(f"evaluate_FLOPs: expected a popxl.Graph, got {type(graph).__name__}")
    return _evaluate(graph, {})


def evaluate_ir_FLOPs(ir: popxl.Ir) -> dict[str, Any]:
    """`evaluate_FLOPs(ir.main_graph)` times the replication factor."""
    if not isinstance(ir, popxl.Ir):
        raise TypeError(f"evaluate_ir_FLOPs: expected a popxl.Ir, got {type(ir).__name__}")
    return _multiply(evaluate_FLOPs(ir.main_graph), int(ir.replication_factor))


def total_FLOPs(ir: popxl.Ir) -> int:
    """Total FLOPs of one run of the program of `ir` (all replicas)."""
    return int(evaluate_ir_FLOPs(ir)["TOT"])


def format_flops_scientific(val: float, format: str = "nearest3") -> str:
    """`val` as `mantissa E±exponent` with 3 decimals: the exponent a multiple of 3
    ('nearest3', e.g. 9072 -> '9.072E+03', 900 -> '0.900E+03') or fixed ('K', 'M', 'G', 'T')."""
    exps = {"K": 3, "M": 6, "G": 9, "T": 12}
    if format != "nearest3" and format not in exps:
        raise ValueError(f"format_flops_scientific: unknown format {format!r}; use 'K', 'M', 'G', 'T' or 'nearest3'")
    if format == "nearest3":
        power = floor(log10(abs(val))) if val > 0 else 0
        exp = 3 * (power // 3 + int(power % 3 == 2))
    else:
        exp = exps[format]
    mantissa = val * 10.0 ** (-exp)
    return f"{mantissa:.3f}E{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def print_FLOPs(breakdown: dict[str, Any], mode: str = "type", numerical_format: str = "nearest3") -> str:
    """Print (and return) a table of `breakdown`: per op type with its percentage
    (`mode='type'`) or one row per op (`mode='flat'`), largest first."""
    if mode == "type":
        rows = [["Op Type", "FLOPs", "%"]]
        tot = breakdown.get("TOT", 0) or 1
        grouped = {k: _sum(v) for k, v in breakdown.items()}
        for k, v in sorted(grouped.items(), key=lambda kv: kv[1], reverse=True):
            rows.append([k, format_flops_scientific(v, numerical_format), f"{100 * v / tot:.1f}"])
    elif mode == "flat":
        flat: dict[str, int] = {}

        def walk(d: dict, prefix: str) -> None:
            for k, v in d.items():
                key = f"{prefix}.{k}" if prefix else str(k)
                if isinstance(v, dict):
                    walk(v, key)
                else:
                    flat[key] = v

        walk(breakdown, "")
        rows = [["Op Type", "FLOPs", "Op Name"]]
        for k, v in sorted(flat.items(), key=lambda kv: kv[1], reverse=True):
            if k == "TOT":
                continue
            rows.append([k.split(".")[0], format_flops_scientific(v, numerical_format), k])
        rows.append(["TOT", format_flops_scientific(flat.get("TOT", 0), numerical_format), ""])
    else:
        raise ValueError(f"print_FLOPs: unknown mode {mode!r}; use 'type' or 'flat'")
    text = _table(rows)
    print(text)
    return text
