"""The `graph` dialect: graphs, the main graph, variables, constants and host streams.

A program is a `builtin.module` holding stream declarations, subgraphs and one
`graph.main`:

```mlir
graph.h2d_stream @x : tensor<2x4xf32>
graph.d2h_stream @y : tensor<2x3xf32>
graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"},
                    %w: tensor<4x3xf32> {graph.name = "weight"}) -> (tensor<2x3xf32>) {
  %y = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  graph.output %y : tensor<2x3xf32>
}
graph.main attributes {num_host_transfers = 1 : i64} {
  %w = graph.variable "weight" : tensor<4x3xf32>
  %x = graph.host_load @x : tensor<2x4xf32>
  %y = call.call @linear(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %y : tensor<2x3xf32>
}
```

Graph inputs carry their PopXL name in the argument attribute `graph.name`; an
input marked `graph.by_ref` is passed by reference, so in-place updates inside the
graph modify the caller's tensor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FlatSymbolRefAttrConstr,
    FunctionType,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
)
from xdsl.dialects.utils import parse_func_op_like, print_func_op_like
from xdsl.ir import Attribute, Block, BlockArgument, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    ParamAttrConstraint,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import (
    AlwaysSpeculatable,
    CallableOpInterface,
    ConstantLike,
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    MemoryReadEffect,
    MemoryWriteEffect,
    NoMemoryEffect,
    NoTerminator,
    Pure,
    ReturnLike,
    SymbolOpInterface,
    SymbolTable,
    SymbolUserOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from xl.dialects.dominance import verify_dominance
from xl.dialects.effects import ValueEffect, is_written
from xl.dialects.replica import ReplicaGroupingAttr
from xl.dialects.replica_layout import ReplicaLayout
from xl.dialects.traits import NoGradient
from xl.dialects.utils import fmt_type

NAME_ATTR = "graph.name"
BY_REF_ATTR = "graph.by_ref"
# discardable attribute of a `graph.variable` (and the `rt.state` lowered from it) whose
# value is in an `.npz`: its file name (`xl.compiler.weights`)
EXTERNAL_ATTR = "graph.external"


class GraphCallable(CallableOpInterface):
    @classmethod
    def get_callable_region(cls, op: Operation) -> Region:
        assert isinstance(op, GraphOp)
        return op.body

    @classmethod
    def get_argument_types(cls, op: Operation) -> tuple[Attribute, ...]:
        assert isinstance(op, GraphOp)
        return op.function_type.inputs.data

    @classmethod
    def get_result_types(cls, op: Operation) -> tuple[Attribute, ...]:
        assert isinstance(op, GraphOp)
        return op.function_type.outputs.data


@irdl_op_definition
class GraphOp(IRDLOperation):
    """A subgraph: a function-like symbol whose inputs have names and may be by-reference.

    ```mlir
    graph.graph @g(%x: tensor<2xf32> {graph.name = "x"},
                   %acc: tensor<2xf32> {graph.by_ref, graph.name = "acc"}) -> () {
      popxl.accumulate_ %acc, %x {f = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
      graph.output
    }
    ```
    """

    name = "graph.graph"

    body = region_def("single_block")
    sym_name = prop_def(SymbolNameConstraint())
    function_type = prop_def(FunctionType)
    sym_visibility = opt_prop_def(StringAttr)
    arg_attrs = opt_prop_def(ArrayAttr[DictionaryAttr])
    res_attrs = opt_prop_def(ArrayAttr[DictionaryAttr])

    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface(), GraphCallable(), NoGradient())

    def __init__(
        self,
        name: str,
        input_types: Sequence[Attribute],
        output_types: Sequence[Attribute],
        region: Region | None = None,
        *,
        input_names: Sequence[str] | None = None,
        by_ref: Sequence[bool] | None = None,
    ):
        if region is None:
            region = Region(Block(arg_types=input_types))
        arg_attrs = None
        if input_names is not None:
            refs = by_ref if by_ref is not None else [False] * len(input_names)
            arg_attrs = ArrayAttr([_arg_attr(n, r) for n, r in zip(input_names, refs, strict=True)])
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "function_type": FunctionType.from_lists(input_types, output_types),
                "arg_attrs": arg_attrs,
            },
            regions=[region],
        )

    # -- accessors ---------------------------------------------------------------
    @property
    def graph_name(self) -> str:
        return self.sym_name.data

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.body.block.args)

    @property
    def output_op(self) -> OutputOp:
        last = self.body.block.last_op
        assert isinstance(last, OutputOp), f"graph @{self.graph_name} has no graph.output"
        return last

    def input_name(self, index: int) -> str:
        if self.arg_attrs is None:
            return f"arg{index}"
        attr = self.arg_attrs.data[index].data.get(NAME_ATTR)
        return attr.data if isinstance(attr, StringAttr) else f"arg{index}"

    def input_is_by_ref(self, index: int) -> bool:
        if self.arg_attrs is None:
            return False
        return BY_REF_ATTR in self.arg_attrs.data[index].data

    def by_ref_inputs(self) -> tuple[int, ...]:
        """The indices of the by-reference inputs (computed once per `arg_attrs` value:
        the attribute is immutable, so a change replaces it and the answer is recomputed)."""
        attrs = self.arg_attrs
        cached: tuple[ArrayAttr[DictionaryAttr] | None, tuple[int, ...]] | None = vars(self).get("_by_ref")
        if cached is not None and cached[0] is attrs:
            return cached[1]
        n = len(self.body.block.args)
        found = () if attrs is None else tuple(i for i in range(n) if BY_REF_ATTR in attrs.data[i].data)
        vars(self)["_by_ref"] = (attrs, found)
        return found

    def updated_by_ref(self, args: Sequence[SSAValue]) -> set[SSAValue]:
        """The values of `args` (a call's operands, in input order) that this graph updates in
        place through a by-reference input. An input not by reference given one of them is
        copied at the call, so that it keeps the caller's value from before the call."""
        block = self.body.block
        return {args[i] for i in self.by_ref_inputs() if is_written(block.args[i])}

    def set_arg_attrs(self, names: Sequence[str], by_ref: Sequence[bool]) -> None:
        self.arg_attrs = ArrayAttr([_arg_attr(n, r) for n, r in zip(names, by_ref, strict=True)])

    def add_input(
        self,
        type: Attribute,
        name: str,
        by_ref: bool = False,
        index: int | None = None,
        attrs: Mapping[str, Attribute] | None = None,
    ) -> BlockArgument:
        """Adds an input (at `index`, default last) named `name`, by reference if asked,
        with extra argument attributes `attrs` (e.g. `ipu.id`); updates `function_type`.
        The other inputs keep their attributes (unnamed ones get `arg<i>`)."""
        block = self.body.block
        n = len(block.args)
        at = n if index is None else index
        if not 0 <= at <= n:
            raise IndexError(f"graph @{self.graph_name}: input index {at} out of range 0..{n}")
        dicts = (
            list(self.arg_attrs.data)
            if self.arg_attrs is not None
            else [graph_input_attrs(f"arg{i}") for i in range(n)]
        )
        arg = block.insert_arg(type, at)
        dicts.insert(at, graph_input_attrs(name, by_ref, attrs))
        self.arg_attrs = ArrayAttr(dicts)
        self.function_type = FunctionType.from_lists([a.type for a in block.args], self.function_type.outputs.data)
        return arg

    def update_function_type(self) -> None:
        """Recompute `function_type` from the block arguments and `graph.output`."""
        self.function_type = FunctionType.from_lists(
            [a.type for a in self.body.block.args],
            [v.type for v in self.output_op.outs],
        )

    def verify_(self) -> None:
        block = self.body.block
        if tuple(block.arg_types) != self.function_type.inputs.data:
            raise VerifyException(
                f"graph @{self.graph_name}: entry block argument types "
                f"{[str(t) for t in block.arg_types]} differ from the input types "
                f"{[str(t) for t in self.function_type.inputs.data]}"
            )
        if self.arg_attrs is not None and len(self.arg_attrs.data) != len(block.args):
            raise VerifyException(
                f"graph @{self.graph_name}: {len(self.arg_attrs.data)} argument "
                f"attribute dictionaries for {len(block.args)} inputs"
            )
        last = block.last_op
        if not isinstance(last, OutputOp):
            raise VerifyException(f"graph @{self.graph_name} must end with graph.output")
        out_types = tuple(v.type for v in last.outs)
        if out_types != self.function_type.outputs.data:
            raise VerifyException(
                f"graph @{self.graph_name}: graph.output types "
                f"{[str(t) for t in out_types]} differ from the declared output types "
                f"{[str(t) for t in self.function_type.outputs.data]}"
            )
        verify_dominance(self)

    @classmethod
    def parse(cls, parser: Parser) -> GraphOp:
        visibility = parser.parse_optional_visibility_keyword()
        (name, inputs, outputs, region, extra, arg_attrs, res_attrs) = parse_func_op_like(
            parser, reserved_attr_names=("sym_name", "function_type", "sym_visibility")
        )
        op = GraphOp(name, inputs, outputs, region)
        if arg_attrs is not None:
            op.arg_attrs = arg_attrs
        if res_attrs is not None:
            op.res_attrs = res_attrs
        if visibility is not None:
            op.sym_visibility = visibility
        if extra is not None:
            op.attributes |= extra.data
        return op

    def print(self, printer: Printer) -> None:
        if self.sym_visibility is not None:
            printer.print_string(f" {self.sym_visibility.data}")
        print_func_op_like(
            printer,
            self.sym_name,
            self.function_type,
            self.body,
            self.attributes,
            arg_attrs=self.arg_attrs,
            res_attrs=self.res_attrs,
            reserved_attr_names=("sym_name", "function_type", "sym_visibility", "arg_attrs"),
        )


# -- module-level graph helpers (used by the passes and the frontend) ---------------------


def graphs_by_name(module: Operation) -> dict[str, GraphOp]:
    """The `graph.graph` ops directly in `module`, by symbol name."""
    return {op.graph_name: op for op in module.regions[0].block.ops if isinstance(op, GraphOp)}


def unique_graph_name(module: Operation, base: str) -> str:
    """`base`, or `base_1`, `base_2`, ... : the first name no symbol of `module` uses."""
    names = {
        op.properties["sym_name"].data  # pyright: ignore[reportAttributeAccessIssue]
        for op in module.regions[0].block.ops
        if "sym_name" in op.properties
    }
    if base not in names:
        return base
    i = 1
    while f"{base}_{i}" in names:
        i += 1
    return f"{base}_{i}"


def graph_input_attrs(name: str, by_ref: bool = False, attrs: Mapping[str, Attribute] | None = None) -> DictionaryAttr:
    """The argument attribute dictionary of a graph input named `name` (plus `attrs`)."""
    d: dict[str, Attribute] = dict(attrs or {})
    if by_ref:
        d[BY_REF_ATTR] = UnitAttr()
    d[NAME_ATTR] = StringAttr(name)
    # keys in sorted order, as MLIR prints dictionaries: {graph.by_ref, graph.name = ...}
    return DictionaryAttr(dict(sorted(d.items())))


def parse_named_slot(
    parser: Parser,
) -> tuple[str, DenseIntOrFPElementsAttr | None, Attribute, dict[str, Attribute]]:
    """Parses `"name" (= dense<...> : type | : type) attr-dict?`."""
    name = parser.parse_str_literal()
    init = None
    if parser.parse_optional_punctuation("=") is not None:
        pos = parser.pos
        init = parser.parse_attribute()
        if not isinstance(init, DenseIntOrFPElementsAttr):
            parser.raise_error("expected a dense<...> initial value", pos)
        type = init.get_type()
    else:
        parser.parse_punctuation(":")
        type = parser.parse_type()
    attrs = parser.parse_optional_attr_dict()
    return name, init, type, attrs


def print_named_slot(
    printer: Printer,
    name: str,
    init: DenseIntOrFPElementsAttr | None,
    type: Attribute,
    attributes: dict[str, Attribute],
) -> None:
    printer.print_string(" ")
    printer.print_string_literal(name)
    if init is not None:
        printer.print_string(" = ")
        printer.print_attribute(init)
    else:
        printer.print_string(" : ")
        printer.print_attribute(type)
    printer.print_op_attributes(attributes)


def parse_body_region(parser: Parser) -> Region:
    """A single-block region without terminator; `{}` gets an empty block (as in MLIR)."""
    region = parser.parse_region()
    if not region.blocks:
        region.add_block(Block())
    return region


def print_body_region(printer: Printer, region: Region) -> None:
    """Prints a region parsed by `parse_body_region`; an empty body prints as `{\n}`."""
    printer.print_region(region, print_entry_block_args=False, print_empty_block=False)


_arg_attr = graph_input_attrs  # the former private name (passes/accumulate.py used it)


@irdl_op_definition
class OutputOp(IRDLOperation):
    """Terminator of a `graph.graph`: its operands are the graph outputs.

    ```mlir
    graph.output %y, %z : tensor<2xf32>, tensor<f32>
    ```
    """

    name = "graph.output"
    outs = var_operand_def()
    traits = traits_def(IsTerminator(), HasParent(GraphOp), ReturnLike(), Pure(), NoGradient())
    assembly_format = "attr-dict ($outs^ `:` type($outs))?"

    def __init__(self, outs: Sequence[SSAValue] = ()):
        super().__init__(operands=[list(outs)])


@irdl_op_definition
class MainGraphOp(IRDLOperation):
    """The main graph: the program that a session runs; the only place for variables.

    ```mlir
    graph.main attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
      %w = graph.variable "w" : tensor<2xf32>
    }
    ```
    """

    name = "graph.main"
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), IsolatedFromAbove(), NoGradient())

    def __init__(self, region: Region | None = None):
        super().__init__(regions=[region if region is not None else Region(Block())])

    @classmethod
    def parse(cls, parser: Parser) -> MainGraphOp:
        attrs = parser.parse_optional_attr_dict_with_keyword()
        op = cls(parse_body_region(parser))
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        print_body_region(printer, self.body)

    def _int_attr(self, key: str, default: int) -> int:
        a = self.attributes.get(key)
        return a.value.data if isinstance(a, IntegerAttr) else default

    @property
    def num_host_transfers(self) -> int:
        return self._int_attr("num_host_transfers", 1)

    @property
    def replication_factor(self) -> int:
        return self._int_attr("replication_factor", 1)

    def verify_(self) -> None:
        for key in ("num_host_transfers", "replication_factor"):
            if key in self.attributes:
                a = self.attributes[key]
                if not isinstance(a, IntegerAttr) or a.value.data < 1:
                    raise VerifyException(f"graph.main: '{key}' must be a positive integer")
        verify_dominance(self)


RETRIEVAL_MODES = ("one_per_group", "all_replicas")
"""How the host reads a grouped variable: one value per group, or one per replica."""


@irdl_op_definition
class VariableOp(IRDLOperation):
    """A variable: persistent state of the program, created in the main graph only.

    Its value lives in the session (or comes from `init` when given) and survives
    between runs.

    ```mlir
    %w = graph.variable "fc1.weight" : tensor<784x512xf32>
    %c = graph.variable "counter" = dense<0.0> : tensor<f32>
    ```

    In a replicated program a variable may hold one value per group of a replica
    grouping (`grouping`, PopXL's `replica_grouping`): the initial value then has a
    leading dimension of `num_groups` and the variable type follows `->`; replica `r`
    starts from the value of its group, `init[assignment[r]]`. `retrieval_mode` says
    how the host reads it back (`one_per_group`, the default, or `all_replicas`):

    ```mlir
    %g = graph.variable "g" = dense<[[1.0, 2.0], [3.0, 4.0]]>
        : tensor<2x2xf32>
        -> tensor<2xf32> {grouping = #replica.grouping<stride = 2, group_size = 2>, retrieval_mode = "one_per_group"}
    ```
    """

    name = "graph.variable"
    var_name = prop_def(StringAttr)
    init = opt_prop_def(DenseIntOrFPElementsAttr)
    grouping = opt_prop_def(ReplicaGroupingAttr)
    retrieval_mode = opt_prop_def(StringAttr)
    result = result_def(TensorType)
    # Never dead: a variable is state the host can read and write even when no op uses it.
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect(), NoGradient())

    def __init__(
        self,
        var_name: str,
        type: TensorType,
        init: DenseIntOrFPElementsAttr | None = None,
        *,
        grouping: ReplicaGroupingAttr | None = None,
        retrieval_mode: str | None = None,
    ):
        super().__init__(
            properties={
                "var_name": StringAttr(var_name),
                "init": init,
                "grouping": grouping,
                "retrieval_mode": None if retrieval_mode is None else StringAttr(retrieval_mode),
            },
            result_types=[type],
        )

    @classmethod
    def parse(cls, parser: Parser) -> VariableOp:
        name = parser.parse_str_literal()
        init = None
        if parser.parse_optional_punctuation("=") is not None:
            pos = parser.pos
            init = parser.parse_attribute()
            if not isinstance(init, DenseIntOrFPElementsAttr):
                parser.raise_error("expected a dense<...> initial value", pos)
            type = init.get_type()
            if parser.parse_optional_punctuation("->") is not None:
                type = parser.parse_type()
        else:
            parser.parse_punctuation(":")
            type = parser.parse_type()
        attrs = dict(parser.parse_optional_attr_dict())
        grouping = attrs.pop("grouping", None)
        mode = attrs.pop("retrieval_mode", None)
        op = cls(name, type, init)  # pyright: ignore[reportArgumentType]
        if grouping is not None:
            op.properties["grouping"] = grouping
        if mode is not None:
            op.properties["retrieval_mode"] = mode
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.var_name.data)
        if self.init is not None:
            printer.print_string(" = ")
            printer.print_attribute(self.init)
            if self.init.get_type() != self.result.type:
                printer.print_string(" -> ")
                printer.print_attribute(self.result.type)
        else:
            printer.print_string(" : ")
            printer.print_attribute(self.result.type)
        extra: dict[str, Attribute] = {}
        if self.grouping is not None:
            extra["grouping"] = self.grouping
        if self.retrieval_mode is not None:
            extra["retrieval_mode"] = self.retrieval_mode
        printer.print_op_attributes({**extra, **self.attributes})

    def num_groups(self) -> int:
        """Groups of the variable's grouping (1 without one or outside a replicated main)."""
        if self.grouping is None:
            return 1
        parent = self.parent_op()
        rf = parent.replication_factor if isinstance(parent, MainGraphOp) else None
        if rf is None or self.grouping.fit_error(rf) is not None:
            return 1
        return self.grouping.num_groups(rf)

    def layout(self, replication_factor: int) -> ReplicaLayout:
        """Which replicas share which value of the variable (ValueError when the grouping
        does not fit `replication_factor`)."""
        t = self.result.type
        assert isinstance(t, TensorType)
        return ReplicaLayout(t.get_shape(), replication_factor, self.grouping)

    def verify_(self) -> None:
        what = f'graph.variable "{self.var_name.data}"'
        parent = self.parent_op()
        if parent is not None and not isinstance(parent, MainGraphOp):
            where = f"graph @{parent.graph_name}" if isinstance(parent, GraphOp) else parent.name
            raise VerifyException(
                f"{what}: variables can only be created in the main graph (graph.main), not in {where}"
            )
        if self.retrieval_mode is not None and self.retrieval_mode.data not in RETRIEVAL_MODES:
            raise VerifyException(
                f"{what}: retrieval_mode {self.retrieval_mode.data!r} is not one of {', '.join(RETRIEVAL_MODES)}"
            )
        groups = 1
        expected = self.result.type
        if self.grouping is not None and isinstance(parent, MainGraphOp):
            err = self.grouping.fit_error(parent.replication_factor)
            if err is not None:
                raise VerifyException(f"{what}: grouping {err}")
            layout = self.layout(parent.replication_factor)
            groups = layout.num_groups
            if groups > 1:
                assert isinstance(expected, TensorType)
                expected = TensorType(expected.get_element_type(), layout.host_shape)
        if self.init is None:
            return
        t = self.init.get_type()
        if t != expected:
            per = f" ({groups} groups of {self.result.type})" if groups > 1 else ""
            raise VerifyException(f"{what}: initial value of type {t} does not match the variable type {expected}{per}")


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A constant tensor, usable in any graph.

    ```mlir
    %c = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
    """

    name = "graph.constant"
    T: ClassVar = VarConstraint("T", base(TensorType))
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (T, AnyAttr())))
    result = result_def(T)
    # Not Pure: a constant that is later updated in place must not be merged by CSE.
    traits = traits_def(ValueEffect(), AlwaysSpeculatable(), ConstantLike(), NoGradient())
    assembly_format = "$value attr-dict"

    def __init__(self, value: DenseIntOrFPElementsAttr):
        super().__init__(properties={"value": value}, result_types=[value.get_type()])


class _StreamDecl(IRDLOperation):
    sym_name = prop_def(SymbolNameConstraint())
    type = prop_def(TensorType)
    traits = traits_def(SymbolOpInterface(), NoMemoryEffect())
    assembly_format = "$sym_name `:` $type attr-dict"

    def __init__(self, name: str, type: TensorType):
        super().__init__(properties={"sym_name": StringAttr(name), "type": type})

    @property
    def stream_name(self) -> str:
        return self.sym_name.data


@irdl_op_definition
class H2DStreamOp(_StreamDecl):
    """A host-to-device stream: per run, the host supplies one tensor per transfer.

    ```mlir
    graph.h2d_stream @image : tensor<8x28x28xf32>
    ```
    """

    name = "graph.h2d_stream"
    traits = traits_def(NoGradient())


@irdl_op_definition
class D2HStreamOp(_StreamDecl):
    """A device-to-host stream: per run, the host receives one tensor per transfer.

    ```mlir
    graph.d2h_stream @loss : tensor<f32>
    ```
    """

    name = "graph.d2h_stream"
    traits = traits_def(NoGradient())


def _lookup_stream(op: Operation, ref: SymbolRefAttr, kind: type[_StreamDecl]) -> _StreamDecl:
    try:
        decl = SymbolTable.lookup_symbol(op, ref)
    except ValueError:  # detached op: no enclosing symbol table
        decl, what = None, "the op is not inside a module"
    else:
        what = "no such symbol" if decl is None else f"it is a {decl.name}"
    if not isinstance(decl, kind):
        raise VerifyException(f"{op.name}: @{ref.root_reference.data} does not name a {kind.name} declaration ({what})")
    return decl


class _HostLoadSymbolUser(SymbolUserOpInterface):
    def verify(self, op: Operation) -> None:
        assert isinstance(op, HostLoadOp)
        decl = _lookup_stream(op, op.stream, H2DStreamOp)
        if decl.type != op.result.type:
            raise VerifyException(
                f"graph.host_load: stream @{decl.stream_name} carries "
                f"{fmt_type(decl.type)} but the load produces {fmt_type(op.result.type)}"
            )


class _HostStoreSymbolUser(SymbolUserOpInterface):
    def verify(self, op: Operation) -> None:
        assert isinstance(op, HostStoreOp)
        decl = _lookup_stream(op, op.stream, D2HStreamOp)
        if decl.type != op.value.type:
            raise VerifyException(
                f"graph.host_store: stream @{decl.stream_name} carries "
                f"{fmt_type(decl.type)} but the stored tensor is {fmt_type(op.value.type)}"
            )


@irdl_op_definition
class HostLoadOp(IRDLOperation):
    """Loads the next transfer of a host-to-device stream (any graph).

    ```mlir
    %x = graph.host_load @image : tensor<8x28x28xf32>
    ```
    """

    name = "graph.host_load"
    stream = prop_def(FlatSymbolRefAttrConstr)
    result = result_def(TensorType)
    traits = traits_def(_HostLoadSymbolUser(), MemoryReadEffect(), MemoryWriteEffect(), NoGradient())
    assembly_format = "$stream attr-dict `:` type($result)"

    def __init__(self, stream: str, type: TensorType):
        super().__init__(properties={"stream": SymbolRefAttr(stream)}, result_types=[type])


@irdl_op_definition
class HostStoreOp(IRDLOperation):
    """Sends a tensor to the host through a device-to-host stream (any graph).

    ```mlir
    graph.host_store @loss, %l : tensor<f32>
    ```
    """

    name = "graph.host_store"
    stream = prop_def(FlatSymbolRefAttrConstr)
    value = operand_def(TensorType)
    traits = traits_def(_HostStoreSymbolUser(), MemoryReadEffect(), MemoryWriteEffect(), NoGradient())
    assembly_format = "$stream `,` $value attr-dict `:` type($value)"

    def __init__(self, stream: str, value: SSAValue):
        super().__init__(properties={"stream": SymbolRefAttr(stream)}, operands=[value])


Graph = Dialect(
    "graph",
    [
        GraphOp,
        OutputOp,
        MainGraphOp,
        VariableOp,
        ConstantOp,
        H2DStreamOp,
        D2HStreamOp,
        HostLoadOp,
        HostStoreOp,
    ],
    [],
)
