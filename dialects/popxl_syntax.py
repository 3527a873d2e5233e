"""The one textual form every `popxl` op shares: operands, attribute dictionary, function type.

```mlir
%y = popxl.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
popxl.scaled_add_ %w, %g {a = 1.0 : f64, b = -0.05 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
```

Properties are printed in the attribute dictionary. For ops with optional operands,
`operandSegmentSizes` is printed only when greedy matching (`popxl_operands`) would not
recover it.
"""

from __future__ import annotations

from typing import TypeVar

from xdsl.dialects.builtin import DenseArrayBase, i32
from xdsl.irdl import IRDLOperation
from xdsl.parser import Parser
from xdsl.printer import Printer

from xl.dialects.attrs import SEGMENTS
from xl.dialects.popxl_operands import greedy_segments, has_segments, operand_names

OpT = TypeVar("OpT", bound=IRDLOperation)


def parse_popxl_op(cls: type[OpT], parser: Parser) -> OpT:
    """Parses `%a, %b {props} : (types) -> result types` into a `cls` op."""
    pos = parser.pos
    unresolved = (
        parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
        )
        or []
    )
    attrs = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    ftype = parser.parse_function_type()
    if len(ftype.inputs.data) != len(unresolved):
        parser.raise_error(
            f"{cls.name}: {len(unresolved)} operands but {len(ftype.inputs.data)} operand types",
            pos,
        )
    operands = list(parser.resolve_operands(unresolved, ftype.inputs.data, pos))
    prop_names = set(cls.get_irdl_definition().properties)
    props = {k: v for k, v in attrs.items() if k in prop_names}
    others = {k: v for k, v in attrs.items() if k not in prop_names}
    if has_segments(cls) and SEGMENTS not in props:
        segs = greedy_segments(cls, len(operands))
        if segs is None:
            parser.raise_error(
                f"{cls.name}: cannot match {len(operands)} operands to ({', '.join(operand_names(cls))})",
                pos,
            )
        props[SEGMENTS] = DenseArrayBase.from_list(i32, list(segs))
    return cls.create(
        operands=operands,
        result_types=list(ftype.outputs.data),
        properties=props,
        attributes=others,
    )


def print_popxl_op(op: IRDLOperation, printer: Printer) -> None:
    """Prints `op` in the form `parse_popxl_op` reads."""
    if op.operands:
        printer.print_string(" ")
        printer.print_list(op.operands, printer.print_operand)
    props = dict(op.properties)
    seg = props.get(SEGMENTS)
    if isinstance(seg, DenseArrayBase) and greedy_segments(type(op), len(op.operands)) == tuple(
        int(v) for v in seg.get_values()
    ):
        del props[SEGMENTS]
    printer.print_op_attributes({**props, **op.attributes})
    printer.print_string(" : (")
    printer.print_list([o.type for o in op.operands], printer.print_attribute)
    printer.print_string(") -> ")
    if len(op.results) == 1:
        printer.print_attribute(op.results[0].type)
    else:
        printer.print_string("(")
        printer.print_list([r.type for r in op.results], printer.print_attribute)
        printer.print_string(")")
