"""The `call` dialect: calling subgraphs, loops over them, and conditionals.

```mlir
%y = call.call @linear(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
%r = call.repeat @step 10 (%h, %v) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
%z = call.conditional %c then @a(%h) else @b(%h) : tensor<i1>, (tensor<2xf32>), (tensor<2xf32>) -> tensor<2xf32>
```

Inputs that the callee marks `graph.by_ref` are passed by reference: in-place
updates inside the callee modify the caller's tensor. Other inputs are copied.
`call.repeat` runs its body `repeat_count` times; the N body outputs become the
first N inputs of the next iteration (loop-carried) and the final outputs are the
results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from xdsl.dialects.builtin import (
    FlatSymbolRefAttrConstr,
    IntegerAttr,
    SymbolRefAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, OpResult, SSAValue, SSAValues
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import SymbolTable, SymbolUserOpInterface
from xdsl.utils.exceptions import VerifyException

from xl.dialects.effects import InPlaceInterface
from xl.dialects.graph import GraphOp
from xl.dialects.traits import NotDifferentiable, PopartType
from xl.dialects.utils import fmt_type

# The graphs of each symbol table (a module), by name: a cache that `lookup_graph` checks
# before using (the graph found must still be in that table under that name) and rebuilds
# on a miss, so that graphs added, renamed or erased never give a stale answer.
_GRAPHS: WeakKeyDictionary[Operation, dict[str, GraphOp]] = WeakKeyDictionary()
_IS_TABLE: dict[type[Operation], bool] = {}


def _symbol_table(op: Operation) -> Operation | None:
    anchor = op.parent_op()
    while anchor is not None:
        t = type(anchor)
        is_table = _IS_TABLE.get(t)
        if is_table is None:
            is_table = _IS_TABLE[t] = anchor.has_trait(SymbolTable)
        if is_table:
            return anchor
        anchor = anchor.parent_op()
    return None


def lookup_graph(op: Operation, callee: SymbolRefAttr) -> GraphOp:
    """The `graph.graph` that `callee` names, from the symbol table around `op`; a
    VerifyException naming the op when there is none."""
    table = _symbol_table(op) if not callee.nested_references.data else None
    if table is not None:
        name = callee.root_reference.data
        graphs = _GRAPHS.get(table)
        g = graphs.get(name) if graphs is not None else None
        if g is not None and g.parent_op() is table and g.graph_name == name:
            return g
        graphs = _GRAPHS[table] = {o.graph_name: o for o in table.regions[0].block.ops if isinstance(o, GraphOp)}
        g = graphs.get(name)
        if g is not None:
            return g
    try:
        found = SymbolTable.lookup_symbol(op, callee)
    except ValueError:  # detached op: no enclosing symbol table
        found, what = None, "the op is not inside a module"
    else:
        what = "no such symbol" if found is None else f"it is a {found.name}"
    if not isinstance(found, GraphOp):
        raise VerifyException(f"{op.name}: @{callee.root_reference.data} does not name a graph.graph ({what})")
    return found


def check_signature(op: Operation, g: GraphOp, args: Sequence[SSAValue], results: Sequence[SSAValue]) -> None:
    ins = g.function_type.inputs.data
    outs = g.function_type.outputs.data
    if len(args) != len(ins):
        raise VerifyException(f"{op.name} @{g.graph_name}: {len(args)} inputs given, the graph takes {len(ins)}")
    for i, (a, t) in enumerate(zip(args, ins)):
        if a.type != t:
            raise VerifyException(
                f"{op.name} @{g.graph_name}: input {i} ('{g.input_name(i)}') is "
                f"{fmt_type(a.type)}, the graph expects {fmt_type(t)}"
            )
    if tuple(r.type for r in results) != outs:
        raise VerifyException(
            f"{op.name} @{g.graph_name}: result types "
            f"({', '.join(fmt_type(r.type) for r in results)}) differ from the graph "
            f"outputs ({', '.join(fmt_type(t) for t in outs)})"
        )


class _CallSymbolUser(SymbolUserOpInterface):
    def verify(self, op: Operation) -> None:
        assert isinstance(op, CallOp)
        check_signature(op, lookup_graph(op, op.callee), op.args, op.res)


@dataclass(frozen=True)
class WritesByRefInputs(InPlaceInterface):
    """A call writes the operands it passes to by-reference inputs of the called graph
    (each op says which in `operand_is_by_ref`)."""

    def written_operands(self, op: Operation) -> tuple[int, ...]:
        if isinstance(op, _CalleeByRef):  # one callee lookup for all operands
            return op.by_ref_operands()
        by_ref = op.operand_is_by_ref  # pyright: ignore[reportAttributeAccessIssue]
        return tuple(i for i in range(len(op.operands)) if by_ref(i))


class _CalleeByRef:
    """`operand_is_by_ref(i)`: whether operand i is a by-reference callee input."""

    def callee_graph(self) -> GraphOp:
        return lookup_graph(self, self.callee)  # pyright: ignore[reportArgumentType, reportAttributeAccessIssue]

    def arg_offset(self) -> int:
        return 0

    def operand_is_by_ref(self, index: int) -> bool:
        i = index - self.arg_offset()
        if i < 0:
            return False
        try:
            g = self.callee_graph()
        except VerifyException:
            return True  # unknown callee: assume the worst
        return i in g.by_ref_inputs()

    def by_ref_operands(self) -> tuple[int, ...]:
        """The operands i with `operand_is_by_ref(i)`, looking the callee up once."""
        off = self.arg_offset()
        n = len(self.operands)  # pyright: ignore[reportAttributeAccessIssue]
        try:
            g = self.callee_graph()
        except VerifyException:
            return tuple(range(off, n))
        return tuple(i + off for i in g.by_ref_inputs() if i + off < n)


@irdl_op_definition
class CallOp(IRDLOperation, _CalleeByRef):
    """Calls a subgraph (popxl.ops.call).

    ```mlir
    %y = call.call @g(%x) : (tensor<2xf32>) -> tensor<2xf32>
    ```
    """

    name = "call.call"
    args = var_operand_def(TensorType)
    callee = prop_def(FlatSymbolRefAttrConstr)
    res = var_result_def(TensorType)
    traits = traits_def(_CallSymbolUser(), WritesByRefInputs())
    assembly_format = "$callee `(` $args `)` attr-dict `:` functional-type($args, $res)"

    def __init__(self, callee: str, args: Sequence[SSAValue], result_types: Sequence[Attribute]):
        super().__init__(
            operands=[list(args)],
            result_types=[list(result_types)],
            properties={"callee": SymbolRefAttr(callee)},
        )


class _RepeatSymbolUser(SymbolUserOpInterface):
    def verify(self, op: Operation) -> None:
        assert isinstance(op, RepeatOp)
        g = lookup_graph(op, op.callee)
        check_signature(op, g, op.args, op.res)
        n_out = len(g.function_type.outputs.data)
        if n_out > len(op.args):
            raise VerifyException(
                f"call.repeat @{g.graph_name}: the graph has {n_out} outputs but only "
                f"{len(op.args)} inputs to carry them into"
            )
        for i in range(n_out):
            if g.function_type.outputs.data[i] != g.function_type.inputs.data[i]:
                raise VerifyException(
                    f"call.repeat @{g.graph_name}: output {i} "
                    f"({fmt_type(g.function_type.outputs.data[i])}) cannot be carried into "
                    f"input {i} ({fmt_type(g.function_type.inputs.data[i])})"
                )


@irdl_op_definition
class RepeatOp(IRDLOperation, _CalleeByRef):
    """Runs a subgraph `repeat_count` times with loop-carried values (popxl.ops.repeat).

    ```mlir
    %r = call.repeat @body 10 (%x, %w) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    ```
    """

    name = "call.repeat"
    args = var_operand_def(TensorType)
    callee = prop_def(FlatSymbolRefAttrConstr)
    repeat_count = prop_def(IntegerAttr)
    res = var_result_def(TensorType)
    traits = traits_def(_RepeatSymbolUser(), WritesByRefInputs(), NotDifferentiable(), PopartType("Loop"))

    def __init__(
        self,
        callee: str,
        repeat_count: int,
        args: Sequence[SSAValue],
        result_types: Sequence[Attribute],
    ):
        super().__init__(
            operands=[list(args)],
            result_types=[list(result_types)],
            properties={
                "callee": SymbolRefAttr(callee),
                "repeat_count": IntegerAttr(repeat_count, i64),
            },
        )

    def verify_(self) -> None:
        if self.repeat_count.value.data < 0:
            raise VerifyException(f"call.repeat: repeat_count must be >= 0, got {self.repeat_count.value.data}")

    @classmethod
    def parse(cls, parser: Parser) -> RepeatOp:
        # @callee N (args) attr-dict : functional-type(args, results)
        callee = parser.parse_symbol_name().data
        count = parser.parse_integer(allow_boolean=False)
        if parser.parse_optional_punctuation(":") is not None:  # tolerate `N : i64`
            parser.parse_type()
        pos = parser.pos
        args = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        if len(args) != len(ftype.inputs.data):
            parser.raise_error(
                f"call.repeat: {len(args)} operands but {len(ftype.inputs.data)} operand types",
                pos,
            )
        operands = [parser.resolve_operand(a, t) for a, t in zip(args, ftype.inputs.data, strict=True)]
        op = cls(callee, count, operands, ftype.outputs.data)
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.callee.root_reference.data)
        printer.print_string(f" {self.repeat_count.value.data} (")
        printer.print_list(self.args, printer.print_operand)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type([a.type for a in self.args], [r.type for r in self.res])


class _ConditionalSymbolUser(SymbolUserOpInterface):
    def verify(self, op: Operation) -> None:
        assert isinstance(op, ConditionalOp)
        check_signature(op, lookup_graph(op, op.then_branch), op.then_args, op.res)
        check_signature(op, lookup_graph(op, op.else_branch), op.else_args, op.res)


@irdl_op_definition
class ConditionalOp(IRDLOperation):
    """Runs `then_branch` when the scalar bool `condition` holds, else `else_branch`.

    ```mlir
    %z = call.conditional %c then @a(%x) else @b(%x) : tensor<i1>, (tensor<2xf32>), (tensor<2xf32>) -> tensor<2xf32>
    ```
    """

    name = "call.conditional"
    condition = operand_def(TensorType)
    then_args = var_operand_def(TensorType)
    else_args = var_operand_def(TensorType)
    then_branch = prop_def(FlatSymbolRefAttrConstr)
    else_branch = prop_def(FlatSymbolRefAttrConstr)
    res = var_result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    # differentiable: its gradient is a conditional of the branches' gradients
    # (`xl.passes.autodiff`, as PopART's If op)
    traits = traits_def(_ConditionalSymbolUser(), WritesByRefInputs(), PopartType("If"))

    def __init__(
        self,
        condition: SSAValue,
        then_branch: str,
        then_args: Sequence[SSAValue],
        else_branch: str,
        else_args: Sequence[SSAValue],
        result_types: Sequence[Attribute],
    ):
        super().__init__(
            operands=[condition, list(then_args), list(else_args)],
            result_types=[list(result_types)],
            properties={
                "then_branch": SymbolRefAttr(then_branch),
                "else_branch": SymbolRefAttr(else_branch),
            },
        )

    def verify_(self) -> None:
        t = self.condition.type
        assert isinstance(t, TensorType)
        if t.get_shape() != () or str(t.get_element_type()) != "i1":
            raise VerifyException(f"call.conditional: condition must be a scalar bool tensor, got {fmt_type(t)}")

    @classmethod
    def parse(cls, parser: Parser) -> ConditionalOp:
        # %c then @a(args) else @b(args) attr-dict
        #   : cond-type, (then-types), (else-types) -> result-types
        cond = parser.parse_unresolved_operand()
        parser.parse_keyword("then")
        then_branch = parser.parse_symbol_name().data
        then_args = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        parser.parse_keyword("else")
        else_branch = parser.parse_symbol_name().data
        else_args = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        cond_type = parser.parse_type()
        parser.parse_punctuation(",")
        pos = parser.pos
        then_types = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_type)
        if len(then_types) != len(then_args):
            parser.raise_error(
                f"call.conditional: {len(then_args)} then-operands but {len(then_types)} types",
                pos,
            )
        parser.parse_punctuation(",")
        pos = parser.pos
        else_types = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_type)
        if len(else_types) != len(else_args):
            parser.raise_error(
                f"call.conditional: {len(else_args)} else-operands but {len(else_types)} types",
                pos,
            )
        parser.parse_punctuation("->")
        if parser.parse_optional_punctuation("(") is not None:
            result_types: list[Attribute] = []
            if parser.parse_optional_punctuation(")") is None:
                result_types = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_type)
                parser.parse_punctuation(")")
        else:
            result_types = [parser.parse_type()]
        op = cls(
            parser.resolve_operand(cond, cond_type),
            then_branch,
            [parser.resolve_operand(a, t) for a, t in zip(then_args, then_types)],
            else_branch,
            [parser.resolve_operand(a, t) for a, t in zip(else_args, else_types)],
            result_types,
        )
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.condition)
        for kw, callee, args in (
            ("then", self.then_branch, self.then_args),
            ("else", self.else_branch, self.else_args),
        ):
            printer.print_string(f" {kw} ")
            printer.print_symbol_name(callee.root_reference.data)
            printer.print_string("(")
            printer.print_list(args, printer.print_operand)
            printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.condition.type)
        for args in (self.then_args, self.else_args):
            printer.print_string(", (")
            printer.print_list([a.type for a in args], printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" -> ")
        if len(self.res) == 1:
            printer.print_attribute(self.res[0].type)
        else:
            printer.print_string("(")
            printer.print_list([r.type for r in self.res], printer.print_attribute)
            printer.print_string(")")

    def operand_is_by_ref(self, index: int) -> bool:
        if index == 0:
            return False
        n_then = len(self.then_args)
        callee, i = (self.then_branch, index - 1) if index - 1 < n_then else (self.else_branch, index - 1 - n_then)
        try:
            return lookup_graph(self, callee).input_is_by_ref(i)
        except VerifyException:
            return True


Call = Dialect("call", [CallOp, RepeatOp, ConditionalOp], [])


# -- call-graph helpers (used by the passes and the frontend) ------------------------------


class CallSiteError(ValueError):
    """A graph's signature cannot change because of how it is called."""


# Per op class: 1 calls `callee`, 2 both branches, 0 no graph (asked for every op of a
# module: one dictionary lookup instead of isinstance checks).
_CALLS: dict[type[Operation], int] = {}


def called_graph_names(op: Operation) -> list[str]:
    """The graphs `op` itself calls (`call.call`, `call.repeat`, both `call.conditional`
    branches), in order; [] for any other op."""
    t = type(op)
    kind = _CALLS.get(t)
    if kind is None:
        kind = _CALLS[t] = 1 if issubclass(t, CallOp | RepeatOp) else 2 if issubclass(t, ConditionalOp) else 0
    if kind == 1:
        return [op.callee.root_reference.data]  # pyright: ignore[reportAttributeAccessIssue]
    if kind == 2:
        return [op.then_branch.root_reference.data, op.else_branch.root_reference.data]  # pyright: ignore[reportAttributeAccessIssue]
    return []


def call_sites(module: Operation) -> dict[str, list[Operation]]:
    """Every op nested in `module` that calls a graph, by callee name."""
    sites: dict[str, list[Operation]] = {}
    for op in module.walk():
        for name in called_graph_names(op):
            sites.setdefault(name, []).append(op)
    return sites


def append_results(op: Operation, types: Sequence[Attribute]) -> list[OpResult]:
    """Appends results to `op` in place (its existing results stay valid)."""
    n = len(op.results)
    new = [OpResult(t, op, n + i) for i, t in enumerate(types)]
    op.results = SSAValues((*op.results, *new))
    return new


def add_graph_outputs(
    module: Operation,
    graph: GraphOp,
    values: Sequence[SSAValue],
    sites: Sequence[Operation] | None = None,
) -> list[int]:
    """Makes `values` (of `graph`) extra outputs of `graph`; returns their output indices.

    Every `call.call` of the graph (`sites`, default: found in `module`) gets the new
    results in place. Raises `CallSiteError` when the graph is the body of a
    `call.repeat` or a branch of a `call.conditional` (their signatures are tied).
    """
    if not values:
        return []
    name = graph.graph_name
    if sites is None:
        sites = call_sites(module).get(name, [])
    for op in sites:
        if isinstance(op, RepeatOp):
            raise CallSiteError(f"cannot add outputs to graph @{name}: it is the body of a call.repeat")
        if isinstance(op, ConditionalOp):
            raise CallSiteError(f"cannot add outputs to graph @{name}: it is a branch of a call.conditional")
    out_op = graph.output_op
    n = len(out_op.outs)
    out_op.operands = [*out_op.operands, *values]
    graph.update_function_type()
    types = [v.type for v in values]
    for site in sites:
        append_results(site, types)
    return list(range(n, n + len(values)))
