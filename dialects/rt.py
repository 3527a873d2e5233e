"""The `rt` dialect: the flat, explicit program that the NumPy runtime compiles.

Buffers are memrefs. Every compute op is one NumPy kernel named after the
high-level op it implements, reading `ins` and writing its explicit destinations
`outs`; the high-level op's properties ride along as attributes. State lives in
named slots; host streams are read and written one transfer at a time; loops and
branches are explicit. Nothing here needs a symbol lookup at run time.

```mlir
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "weight" : memref<4x3xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %y = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.matmul"(%x, %w) -> (%y) : (memref<2x4xf32>, memref<4x3xf32>) -> memref<2x3xf32>
  rt.d2h "y", %y : memref<2x3xf32>
}
```

Each executed `rt.h2d` consumes the next transfer of its stream: the host array is
laid out `[num_host_transfers, replication_factor, *shape]` with size-1 leading dims
dropped, and each replica reads its own slice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

from xdsl.dialects.builtin import (
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
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
    EffectInstance,
    HasParent,
    IsolatedFromAbove,
    MemoryAllocEffect,
    MemoryEffect,
    MemoryEffectKind,
    MemoryReadEffect,
    MemoryWriteEffect,
    NoTerminator,
    SymbolOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from xl.dialects.attrs import from_attr
from xl.dialects.dominance import verify_dominance
from xl.dialects.graph import (
    parse_body_region,
    parse_named_slot,
    print_body_region,
    print_named_slot,
)
from xl.dialects.replica import ReplicaGroupingAttr
from xl.dialects.replica_layout import ReplicaLayout
from xl.dialects.utils import fmt_type


def is_buffer_written(value: SSAValue) -> bool:
    """Whether some op may write `value` (a kernel out, a copy dest, an h2d buffer, ...)."""
    for use in value.uses:
        user = use.operation
        if isinstance(user, KernelOp) and use.index < len(user.ins):
            continue
        if isinstance(user, CopyOp) and use.index == 0:
            continue
        if isinstance(user, D2HOp | IfOp):
            continue
        if isinstance(user, CallOp) and not user.may_write(use.index):
            continue
        return True
    return False


class _ConstEffect(MemoryEffect):
    """No effect (CSE may merge equal constants) unless the buffer is written."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        return None if any(is_buffer_written(r) for r in op.results) else set()


class _AllocEffect(MemoryEffect):
    """A fresh buffer: removable when unused, never merged with another."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        return {EffectInstance(MemoryEffectKind.ALLOC, r) for r in op.results}


# The program attributes, named once (`graph.main` carries the same two).
NUM_HOST_TRANSFERS = "num_host_transfers"
REPLICATION_FACTOR = "replication_factor"
# The replica grouping of a grouped `rt.state` (printed in its attribute dictionary).
GROUPING = "grouping"

# The discardable `rt.*` attributes, each named once here. `KernelOp.params` leaves them out
# (they describe the kernel, they are not its parameters).
VIEW_ATTR = "rt.view"
"""On an `rt.kernel` of a view-like op: its output is a NumPy view of its input (`rt-views`)."""
REMOTE_ATTR = "rt.remote"
"""On an `rt.state`: a remote buffer, in host memory apart from the IPUs (`lower-to-rt`)."""
REPLICA_INVARIANT_ATTR = "rt.replica_invariant"
"""On an `rt.state`: the same value on every replica, one buffer per process (`rt-fold-all-reduce`)."""
SOURCE_ATTR = "rt.source"
"""The frontend op a kernel comes from, `MatMul.101` (set by `popxl.Session`, kept by lowering)."""
GRAPH_ATTR = "rt.graph"
"""The graph the op was written in (set and kept as `rt.source`)."""


@irdl_op_definition
class ProgramOp(IRDLOperation):
    """The whole lowered program; attributes carry `num_host_transfers`, `replication_factor`.

    ```mlir
    rt.program attributes {num_host_transfers = 4 : i64} {
      %x = rt.alloc : memref<2xf32>
      rt.h2d "x", %x : memref<2xf32>
    }
    ```
    """

    name = "rt.program"
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), IsolatedFromAbove())

    def __init__(self, region: Region | None = None, attributes: dict[str, Attribute] | None = None):
        super().__init__(
            regions=[region if region is not None else Region(Block())],
            attributes=attributes or {},
        )

    def int_attr(self, key: str, default: int) -> int:
        a = self.attributes.get(key)
        return a.value.data if isinstance(a, IntegerAttr) else default

    @property
    def num_host_transfers(self) -> int:
        """Host transfers per stream per run (`num_host_transfers`, default 1)."""
        return self.int_attr(NUM_HOST_TRANSFERS, 1)

    @property
    def replication_factor(self) -> int:
        """Replicas the program runs on (`replication_factor`, default 1)."""
        return self.int_attr(REPLICATION_FACTOR, 1)

    @staticmethod
    def program_attributes(num_host_transfers: int, replication_factor: int) -> dict[str, Attribute]:
        """The attributes of a program with these counts (as `lower-to-rt` sets them)."""
        return {
            NUM_HOST_TRANSFERS: IntegerAttr(num_host_transfers, i64),
            REPLICATION_FACTOR: IntegerAttr(replication_factor, i64),
        }

    def verify_(self) -> None:
        verify_dominance(self)

    @classmethod
    def parse(cls, parser: Parser) -> ProgramOp:
        attrs = parser.parse_optional_attr_dict_with_keyword()
        return cls(parse_body_region(parser), dict(attrs.data) if attrs is not None else None)

    def print(self, printer: Printer) -> None:
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        print_body_region(printer, self.body)


@irdl_op_definition
class StateOp(IRDLOperation):
    """A named persistent slot (a variable), optionally with an initial value.

    Each replica has its own buffer. With a `grouping` (a replica grouping attribute,
    `#replica.grouping<...>`) of more than one group, `init` holds one value per group,
    `[num_groups, *shape]`, and replica r starts from `init[assignment[r]]`.

    ```mlir
    %w = rt.state "fc1.weight" : memref<784x512xf32>
    %c = rt.state "counter" = dense<0.0> : tensor<f32> : memref<f32>
    ```
    """

    name = "rt.state"
    slot = prop_def(StringAttr)
    init = opt_prop_def(DenseIntOrFPElementsAttr)
    grouping = opt_prop_def(Attribute)
    result = result_def(MemRefType)
    # Never dead: the host reads and writes state slots by name.
    traits = traits_def(MemoryAllocEffect(), MemoryWriteEffect(), HasParent(ProgramOp))

    def __init__(
        self,
        slot: str,
        type: MemRefType,
        init: DenseIntOrFPElementsAttr | None = None,
        grouping: Attribute | None = None,
    ):
        # Operation.__init__ directly (the generic IRDL argument processing costs ~6x; one
        # state per variable); absent optional properties are left out, as IRDL does
        props: dict[str, Attribute] = {"slot": StringAttr(slot)}
        if init is not None:
            props["init"] = init
        if grouping is not None:
            props["grouping"] = grouping
        Operation.__init__(self, properties=props, result_types=[type])

    @classmethod
    def parse(cls, parser: Parser) -> StateOp:
        pos = parser.pos
        name, init, _, attrs = parse_named_slot(parser)
        if init is not None:
            parser.parse_punctuation(":")
        type = parser.parse_type() if init is not None else _
        if not isinstance(type, MemRefType):
            parser.raise_error(f"rt.state: expected a memref type, got {type}", pos)
        attrs = {**attrs, **parser.parse_optional_attr_dict()}
        grouping = attrs.pop(GROUPING, None)
        op = cls(name, type, init, grouping)
        op.attributes |= attrs
        return op

    def num_groups(self) -> int:
        """Groups of the grouping (1 without one), for this program's replication factor."""
        return 1 if self.grouping is None else self.layout(self._replication_factor()).num_groups

    def _replication_factor(self) -> int:
        program = self.parent_op()
        return program.replication_factor if isinstance(program, ProgramOp) else 1

    def layout(self, replication_factor: int) -> ReplicaLayout:
        """Which replica starts from which value of `init` (a slot is never sharded: a
        sharded variable's slot holds the shard)."""
        grouping = None if self.grouping is None else self.replica_grouping()
        return ReplicaLayout(self.result.type.get_shape(), replication_factor, grouping)

    def replica_grouping(self) -> ReplicaGroupingAttr:
        """The `grouping` property as a replica grouping (the verifier checks its kind)."""
        assert isinstance(self.grouping, ReplicaGroupingAttr), self.grouping
        return self.grouping

    def replica_init(self, replica: int, replication_factor: int) -> Any:
        """The initial value of `replica` as an array (None without `init`)."""
        if self.init is None:
            return None
        from xl.dialects.utils import dense_to_numpy

        value = dense_to_numpy(self.init, copy=False)  # read-only: a replica copies its part
        return self.layout(replication_factor).group_value(value, replica)

    def verify_(self) -> None:
        r = self.result.type
        assert isinstance(r, MemRefType)
        if self.grouping is not None and not isinstance(self.grouping, ReplicaGroupingAttr):
            raise VerifyException(
                f'rt.state "{self.slot.data}": grouping must be a replica grouping, got {self.grouping}'
            )
        try:
            layout = self.layout(self._replication_factor())
        except (ValueError, VerifyException) as e:
            raise VerifyException(f'rt.state "{self.slot.data}": {e}') from None
        if self.init is None:
            return
        t = self.init.get_type()
        assert isinstance(t, TensorType)
        groups = layout.num_groups
        if tuple(t.get_shape()) != layout.host_shape or t.get_element_type() != r.get_element_type():
            per = "" if groups == 1 else f" ({groups} groups: one value per group)"
            raise VerifyException(f'rt.state "{self.slot.data}": initial value {t} does not fit buffer {r}{per}')

    def print(self, printer: Printer) -> None:
        print_named_slot(printer, self.slot.data, self.init, self.result.type, {})
        if self.init is not None:
            printer.print_string(" : ")
            printer.print_attribute(self.result.type)
        attrs = dict(self.attributes)
        if self.grouping is not None:
            attrs[GROUPING] = self.grouping
        printer.print_op_attributes(attrs)


@irdl_op_definition
class ConstOp(IRDLOperation):
    """A constant buffer.

    ```mlir
    %c = rt.const dense<1.0> : tensor<f32> : memref<f32>
    ```
    """

    name = "rt.const"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(MemRefType)
    traits = traits_def(_ConstEffect(), AlwaysSpeculatable())
    assembly_format = "$value attr-dict `:` type($result)"

    def __init__(self, value: DenseIntOrFPElementsAttr, type: MemRefType):
        super().__init__(properties={"value": value}, result_types=[type])

    def verify_(self) -> None:
        t = self.value.get_type()
        r = self.result.type
        assert isinstance(r, MemRefType) and isinstance(t, TensorType)
        if tuple(t.get_shape()) != tuple(r.get_shape()) or t.get_element_type() != r.get_element_type():
            raise VerifyException(f"rt.const: value {t} does not fit buffer {r}")


@irdl_op_definition
class AllocOp(IRDLOperation):
    """A temporary buffer.

    ```mlir
    %b = rt.alloc : memref<8x512xf32>
    ```
    """

    name = "rt.alloc"
    result = result_def(MemRefType)
    traits = traits_def(_AllocEffect())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, type: MemRefType):
        # Operation.__init__ directly: the generic IRDL argument processing costs ~2x.
        Operation.__init__(self, result_types=[type])


_SEGMENTS: dict[tuple[int, int], DenseArrayBase] = {}


_NAMES: dict[str, StringAttr] = {}
# raw operandSegmentSizes bytes -> number of ins
_IN_COUNTS: dict[bytes, int] = {}


def _kernel_name(name: str) -> StringAttr:
    attr = _NAMES.get(name)
    if attr is None:
        attr = _NAMES[name] = StringAttr(name)
    return attr


def nested_ops(block: Block) -> list[Operation]:
    """Every op nested in `block`, each before the ops of its regions (the order of
    `walk`), as a list built without a generator per op (several times faster)."""
    out: list[Operation] = []
    append = out.append

    def visit(b: Block) -> None:
        op = b.first_op
        while op is not None:
            append(op)
            if op.regions:
                for region in op.regions:
                    for inner in region.blocks:
                        visit(inner)
            op = op.next_op

    visit(block)
    return out


def _n_ins(op: Operation) -> int:
    """The number of `ins` of an op with `ins` and `outs` operand segments (`rt.kernel`,
    `rt.call`), read from the raw segment sizes (memoised by their bytes)."""
    key = cast("DenseArrayBase[IntegerType]", op.properties["operandSegmentSizes"]).data.data
    n = _IN_COUNTS.get(key)
    if n is None:
        seg = cast("DenseArrayBase[IntegerType]", op.properties["operandSegmentSizes"])
        n = _IN_COUNTS[key] = int(seg.get_values()[0])
    return n


def _split_io(op: Operation) -> tuple[tuple[SSAValue, ...], tuple[SSAValue, ...]]:
    """(ins, outs) of an op with `ins` and `outs` operand segments (`rt.kernel`, `rt.call`);
    the IRDL accessors cost ~10x."""
    n = _n_ins(op)
    operands = tuple(op.operands)
    return operands[:n], operands[n:]


def _segments(n_in: int, n_out: int) -> DenseArrayBase:
    seg = _SEGMENTS.get((n_in, n_out))
    if seg is None:
        seg = _SEGMENTS[(n_in, n_out)] = DenseArrayBase.from_list(i32, [n_in, n_out])
    return seg


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One NumPy kernel: reads `ins`, writes `outs` (an out may also be an in).

    ```mlir
    rt.kernel "popxl.softmax" (%x) -> (%y) {axis = 1 : i64} : (memref<8x10xf32>) -> (memref<8x10xf32>)
    ```
    """

    name = "rt.kernel"
    kernel = prop_def(StringAttr)
    ins = var_operand_def(MemRefType)
    outs = var_operand_def(MemRefType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$kernel `(` $ins `)` `->` `(` $outs `)` attr-dict `:` functional-type($ins, $outs)"

    def __init__(
        self,
        kernel: str,
        ins: Sequence[SSAValue],
        outs: Sequence[SSAValue],
        attributes: dict[str, Attribute] | None = None,
    ):
        ins, outs = list(ins), list(outs)
        # Operation.__init__ directly (the generic IRDL argument processing costs ~4x;
        # lowering creates one kernel per tensor op).
        Operation.__init__(
            self,
            operands=[*ins, *outs],
            properties={"kernel": _kernel_name(kernel), "operandSegmentSizes": _segments(len(ins), len(outs))},
            attributes=attributes or {},
        )

    def io(self) -> tuple[tuple[SSAValue, ...], tuple[SSAValue, ...]]:
        """(ins, outs); much cheaper than the `ins` / `outs` accessors."""
        return _split_io(self)

    @property
    def params(self) -> dict[str, Any]:
        """The kernel's parameters (the high-level op's properties) as Python values:
        every attribute except the markers of other layers (`ipu.*`, `rt.*`)."""
        return {
            k: from_attr(v) for k, v in self.attributes.items() if not k.startswith("ipu.") and not k.startswith("rt.")
        }


@irdl_op_definition
class CopyOp(IRDLOperation):
    """Copies `source` into `dest` (same shape and dtype).

    ```mlir
    rt.copy %a, %b : memref<4xf32>, memref<4xf32>
    ```
    """

    name = "rt.copy"
    source = operand_def(MemRefType)
    dest = operand_def(MemRefType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$source `,` $dest attr-dict `:` type($source) `,` type($dest)"

    def __init__(self, source: SSAValue, dest: SSAValue):
        super().__init__(operands=[source, dest])

    def verify_(self) -> None:
        if self.source.type != self.dest.type:
            raise VerifyException(f"rt.copy: cannot copy {fmt_type(self.source.type)} into {fmt_type(self.dest.type)}")


class _StreamIO(IRDLOperation):
    stream = prop_def(StringAttr)
    buffer = operand_def(MemRefType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$stream `,` $buffer attr-dict `:` type($buffer)"

    def __init__(self, stream: str, buffer: SSAValue):
        super().__init__(properties={"stream": StringAttr(stream)}, operands=[buffer])


@irdl_op_definition
class H2DOp(_StreamIO):
    """Reads the next transfer of a host-to-device stream into `buffer`.

    ```mlir
    rt.h2d "image", %x : memref<8x28x28xf32>
    ```
    """

    name = "rt.h2d"


@irdl_op_definition
class D2HOp(_StreamIO):
    """Writes `buffer` as the next transfer of a device-to-host stream.

    ```mlir
    rt.d2h "loss", %l : memref<f32>
    ```
    """

    name = "rt.d2h"


@irdl_op_definition
class LoopOp(IRDLOperation):
    """Runs its body `count` times.

    ```mlir
    rt.loop 10 {
      rt.kernel "popxl.scaled_add_"(%w, %g) -> (%w) {a = 1.0 : f64, b = -0.1 : f64}
          : (memref<4xf32>, memref<4xf32>) -> memref<4xf32>
    }
    ```
    """

    name = "rt.loop"
    count = prop_def(IntegerAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(self, count: int, region: Region | None = None):
        super().__init__(
            properties={"count": IntegerAttr(count, i64)},
            regions=[region if region is not None else Region(Block())],
        )

    def verify_(self) -> None:
        if self.count.value.data < 0:
            raise VerifyException(f"rt.loop: count must be >= 0, got {self.count.value.data}")

    @classmethod
    def parse(cls, parser: Parser) -> LoopOp:
        count = parser.parse_integer(allow_boolean=False)
        if parser.parse_optional_punctuation(":") is not None:  # tolerate `N : i64`
            parser.parse_type()
        attrs = parser.parse_optional_attr_dict_with_keyword()
        op = cls(count, parse_body_region(parser))
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.count.value.data}")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        print_body_region(printer, self.body)


@irdl_op_definition
class IfOp(IRDLOperation):
    """Runs `then` when the scalar bool buffer `condition` is true, else `else`.

    ```mlir
    rt.if %c : memref<i1> {
      rt.copy %a, %y : memref<4xf32>, memref<4xf32>
    } else {
      rt.copy %b, %y : memref<4xf32>, memref<4xf32>
    }
    ```
    """

    name = "rt.if"
    condition = operand_def(MemRefType)
    then_region = region_def("single_block")
    else_region = region_def("single_block")
    traits = traits_def(NoTerminator())

    def __init__(
        self,
        condition: SSAValue,
        then_region: Region | None = None,
        else_region: Region | None = None,
    ):
        super().__init__(
            operands=[condition],
            regions=[
                then_region if then_region is not None else Region(Block()),
                else_region if else_region is not None else Region(Block()),
            ],
        )

    def verify_(self) -> None:
        t = self.condition.type
        assert isinstance(t, MemRefType)
        if tuple(t.get_shape()) != () or t.get_element_type() != IntegerType(1):
            raise VerifyException(f"rt.if: condition must be a scalar bool buffer (memref<i1>), got {t}")

    @classmethod
    def parse(cls, parser: Parser) -> IfOp:
        unresolved = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        cond = parser.resolve_operand(unresolved, parser.parse_type())
        then_region = parse_body_region(parser)
        parser.parse_keyword("else")
        else_region = parse_body_region(parser)
        op = cls(cond, then_region, else_region)
        op.attributes |= parser.parse_optional_attr_dict()
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.condition)
        printer.print_string(" : ")
        printer.print_attribute(self.condition.type)
        printer.print_string(" ")
        print_body_region(printer, self.then_region)
        printer.print_string(" else ")
        print_body_region(printer, self.else_region)
        printer.print_op_attributes(self.attributes)


@irdl_op_definition
class FuncOp(IRDLOperation):
    """A function of the program: a body run by every `rt.call` of it.

    Its block arguments are memrefs: first the `ins` (buffers of the caller, read, or
    written in place where the body writes them: by-reference inputs), then the `outs`
    (destinations, fresh buffers of the caller that the body fills). The body may use
    only its arguments and its own buffers (`rt.alloc`, `rt.const`; no `rt.state`, no
    host streams) and may call other functions (not itself, directly or not). Functions
    sit at the start of the `rt.program` body; `lower-to-rt{functions=true}` makes one of
    each graph called more than once.

    ```mlir
    rt.program {
      rt.func @layer(%x: memref<2x4xf32>, %w: memref<4x4xf32>) -> (%y: memref<2x4xf32>) {
        rt.kernel "popxl.matmul" (%x, %w) -> (%y) : (memref<2x4xf32>, memref<4x4xf32>) -> (memref<2x4xf32>)
      }
      %w1 = rt.state "w1" : memref<4x4xf32>
      %x = rt.alloc : memref<2x4xf32>
      %y = rt.alloc : memref<2x4xf32>
      rt.call @layer(%x, %w1) -> (%y) : (memref<2x4xf32>, memref<4x4xf32>) -> (memref<2x4xf32>)
    }
    ```
    """

    name = "rt.func"
    sym_name = prop_def(StringAttr)
    num_outs = prop_def(IntegerAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), IsolatedFromAbove(), HasParent(ProgramOp), SymbolOpInterface())

    def __init__(self, name: str, in_types: Sequence[Attribute], out_types: Sequence[Attribute]):
        super().__init__(
            properties={"sym_name": StringAttr(name), "num_outs": IntegerAttr(len(out_types), i64)},
            regions=[Region(Block(arg_types=[*in_types, *out_types]))],
        )

    @property
    def func_name(self) -> str:
        return self.sym_name.data

    @property
    def n_outs(self) -> int:
        return self.num_outs.value.data

    @property
    def ins(self) -> tuple[BlockArgument, ...]:
        args = self.body.block.args
        return tuple(args[: len(args) - self.n_outs])

    @property
    def outs(self) -> tuple[BlockArgument, ...]:
        args = self.body.block.args
        return tuple(args[len(args) - self.n_outs :])

    def written_args(self) -> frozenset[int]:
        """The indices of the arguments some op of the body (or a function it calls) may write
        (all of them for a function that calls itself, directly or not). Computed afresh;
        an analysis asking for many calls uses one `FuncSummaries` instead."""
        return FuncSummaries(enclosing_program(self)).written_args(self)

    def verify_(self) -> None:
        args = self.body.block.args
        n = self.n_outs
        if not 0 <= n <= len(args):
            raise VerifyException(
                f"rt.func @{self.func_name}: num_outs = {n} but the function has {len(args)} arguments"
            )
        for a in args:
            if not isinstance(a.type, MemRefType):
                raise VerifyException(f"rt.func @{self.func_name}: arguments must be memrefs, got {a.type}")
        for op in self.body.walk():
            if isinstance(op, H2DOp | D2HOp):
                raise VerifyException(
                    f'rt.func @{self.func_name}: {op.name} "{op.stream.data}" in a function '
                    "(host streams are read and written by the program body only)"
                )
        verify_dominance(self)

    @classmethod
    def parse(cls, parser: Parser) -> FuncOp:
        name = parser.parse_symbol_name().data
        delim = parser.Delimiter.PAREN
        ins = parser.parse_comma_separated_list(delim, lambda: parser.parse_argument())
        parser.parse_punctuation("->")
        outs = parser.parse_comma_separated_list(delim, lambda: parser.parse_argument())
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region([*ins, *outs])
        if not region.blocks:
            region.add_block(Block(arg_types=[a.type for a in [*ins, *outs]]))
        op = cls.__new__(cls)
        IRDLOperation.__init__(
            op,
            properties={"sym_name": StringAttr(name), "num_outs": IntegerAttr(len(outs), i64)},
            regions=[region],
        )
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.func_name)  # quoted unless an identifier
        for k, group in enumerate((self.ins, self.outs)):
            printer.print_string(" -> (" if k else "(")
            for j, a in enumerate(group):
                if j:
                    printer.print_string(", ")
                printer.print_block_argument(a)
            printer.print_string(")")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)


class FuncSummaries:
    """What the functions of one program write, computed once per function.

    `written_args(f)`: the indices of the arguments of `f` that some op of its body, or a
    function it calls, may write; every argument of a function on a cycle of calls (one
    that calls itself, directly or not). Each body is analysed once, on the first ask,
    using the summaries of the functions it calls, so asking for every call of a program
    costs one pass over each distinct body plus O(operands) per call.

    A snapshot of the IR when asked: the answers are not updated when a body changes, so
    an analysis builds one, asks, and drops it before it edits the program (the `rt`
    passes build one per `Memory`); `FuncOp.written_args` / `CallOp.written_operands`
    without one compute afresh.
    """

    def __init__(self, program: ProgramOp | None):
        self.program = program
        self._funcs: dict[str, FuncOp | None] = {}
        self._written: dict[FuncOp, frozenset[int]] = {}
        self._calls: dict[FuncOp, list[FuncOp]] = {}
        self._call_written: dict[CallOp, frozenset[int]] = {}
        self._written_ins: dict[tuple[FuncOp, int], tuple[int, ...]] = {}

    def func(self, name: str) -> FuncOp | None:
        """The first `rt.func @name` of the program (None if there is none)."""
        if name in self._funcs:
            return self._funcs[name]
        found: FuncOp | None = None
        if self.program is not None:
            for f in self.program.body.block.ops:
                if type(f) is FuncOp and f.func_name == name:
                    found = f
                    break
        self._funcs[name] = found
        return found

    def written_args(self, f: FuncOp) -> frozenset[int]:
        done = self._written.get(f)
        if done is None:
            self._summarise_from(f)
            done = self._written[f]
        return done

    def _callees(self, f: FuncOp) -> list[FuncOp]:
        """The functions called in `f`'s body (each once)."""
        found = self._calls.get(f)
        if found is None:
            seen: dict[FuncOp, None] = {}
            for op in nested_ops(f.body.block):
                if type(op) is CallOp:
                    g = self.func(op.callee.root_reference.data)
                    if g is not None:
                        seen[g] = None
            found = self._calls[f] = list(seen)
        return found

    def _summarise_from(self, root: FuncOp) -> None:
        """Summarise `root` and every function it reaches that has no summary yet, callees
        first: Tarjan's strongly connected components of the call graph (iterative), each
        emitted after the components it calls. A component with a cycle (several
        functions, or one calling itself) writes all its arguments."""
        index: dict[FuncOp, int] = {root: 0}
        low: dict[FuncOp, int] = {root: 0}
        stack: list[FuncOp] = [root]
        on_stack: set[FuncOp] = {root}
        work: list[tuple[FuncOp, Iterator[FuncOp]]] = [(root, iter(self._callees(root)))]
        while work:
            f, callees = work[-1]
            pushed = False
            for g in callees:
                if g in self._written:
                    continue
                if g not in index:
                    index[g] = low[g] = len(index)
                    stack.append(g)
                    on_stack.add(g)
                    work.append((g, iter(self._callees(g))))
                    pushed = True
                    break
                if g in on_stack:
                    low[f] = min(low[f], index[g])
            if pushed:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[f])
            if low[f] != index[f]:
                continue
            component: list[FuncOp] = []
            while True:
                g = stack.pop()
                on_stack.discard(g)
                component.append(g)
                if g is f:
                    break
            if len(component) > 1 or f in self._callees(f):
                for g in component:
                    self._written[g] = frozenset(range(len(g.body.block.args)))
            else:
                args = f.body.block.args
                self._written[f] = frozenset(i for i, a in enumerate(args) if self._written_in_body(a))

    def _callee_of(self, call: CallOp) -> FuncOp | None:
        """The function `call` runs; None when there is none or the call is inside it."""
        f = self.func(call.callee.root_reference.data)
        if f is None:
            return None
        top = self.program.body.block if self.program is not None else None
        # a call at the top of the program body is inside no function
        if call.parent is not top and f.is_ancestor(call):
            return None
        return f

    def call_written(self, call: CallOp) -> frozenset[int]:
        """The operands `call` may write (see `CallOp.written_operands`)."""
        done = self._call_written.get(call)
        if done is None:
            ins, outs = _split_io(call)
            n = len(ins) + len(outs)
            f = self._callee_of(call)
            if f is None:
                done = frozenset(range(n))
            else:
                done = self.written_args(f) | frozenset(range(len(ins), n))
            self._call_written[call] = done
        return done

    def call_effects(self, call: CallOp) -> tuple[tuple[SSAValue, ...], tuple[SSAValue, ...]]:
        """(buffers read, buffers written) by `call`: its inputs; the inputs its function
        writes and its destinations (every operand when the function is unknown or the
        call is inside it), in operand order."""
        ins, outs = _split_io(call)
        f = self._callee_of(call)
        if f is None:
            return ins, ins + outs
        n = len(ins)
        key = (f, n)
        written_ins = self._written_ins.get(key)
        if written_ins is None:
            written_ins = self._written_ins[key] = tuple(sorted(i for i in self.written_args(f) if i < n))
        return ins, tuple(ins[i] for i in written_ins) + outs

    def _written_in_body(self, a: SSAValue) -> bool:
        for use in a.uses:
            user = use.operation
            t = type(user)
            if t is KernelOp:
                if use.index >= _n_ins(user):
                    return True
                if VIEW_ATTR in user.attributes and any(self._written_in_body(o) for o in _split_io(user)[1]):
                    return True
                continue
            if t is CopyOp and use.index == 0 or t is D2HOp or t is IfOp:
                continue
            if t is CallOp and use.index not in self.call_written(cast(CallOp, user)):
                continue
            return True
        return False


def enclosing_program(op: Operation) -> ProgramOp | None:
    cur = op.parent_op()
    while cur is not None and not isinstance(cur, ProgramOp):
        cur = cur.parent_op()
    return cur


def lookup_func(op: Operation, name: str) -> FuncOp | None:
    """The `rt.func @name` of the program containing `op`."""
    program = enclosing_program(op)
    if program is None:
        return None
    for f in program.body.block.ops:
        if isinstance(f, FuncOp) and f.sym_name.data == name:
            return f
    return None


_CALLEES: dict[str, SymbolRefAttr] = {}  # the attribute of each callee name (immutable, shared)


@irdl_op_definition
class CallOp(IRDLOperation):
    """Runs function `callee` with `ins` as its inputs and `outs` as its destinations.

    An input the function writes (a by-reference input) is updated in place: the callee
    works on the caller's buffer. The `outs` must be distinct buffers.

    ```mlir
    rt.call @layer(%x, %w1) -> (%y) : (memref<2x4xf32>, memref<4x4xf32>) -> (memref<2x4xf32>)
    ```
    """

    name = "rt.call"
    callee = prop_def(SymbolRefAttr)
    ins = var_operand_def(MemRefType)
    outs = var_operand_def(MemRefType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$callee `(` $ins `)` `->` `(` $outs `)` attr-dict `:` functional-type($ins, $outs)"

    def __init__(self, callee: str, ins: Sequence[SSAValue], outs: Sequence[SSAValue]):
        ins, outs = list(ins), list(outs)
        # Operation.__init__ directly, as rt.kernel (the generic IRDL argument processing
        # costs ~4x; lowering an outlined program creates one call per repeat)
        ref = _CALLEES.get(callee)
        if ref is None:
            ref = _CALLEES[callee] = SymbolRefAttr(callee)
        Operation.__init__(
            self,
            operands=[*ins, *outs],
            properties={"callee": ref, "operandSegmentSizes": _segments(len(ins), len(outs))},
        )

    @property
    def callee_name(self) -> str:
        return self.callee.root_reference.data

    def set_io(self, ins: Sequence[SSAValue], outs: Sequence[SSAValue]) -> None:
        """Make `ins` / `outs` the call's operands (a pass that adds arguments to its function)."""
        self.operands = [*ins, *outs]
        self.properties["operandSegmentSizes"] = _segments(len(ins), len(outs))

    def func(self) -> FuncOp:
        """The called `rt.func` (a `VerifyException` naming it if it does not exist)."""
        f = lookup_func(self, self.callee_name)
        if f is None:
            raise VerifyException(f"rt.call: no rt.func @{self.callee_name} in the program")
        return f

    def io(self) -> tuple[tuple[SSAValue, ...], tuple[SSAValue, ...]]:
        """(ins, outs); much cheaper than the `ins` / `outs` accessors."""
        return _split_io(self)

    def may_write(self, index: int, summaries: FuncSummaries | None = None) -> bool:
        """Whether the call may write operand `index` (an out, or an input the callee writes)."""
        return index in self.written_operands(summaries)

    def written_operands(self, summaries: FuncSummaries | None = None) -> frozenset[int]:
        """The operands the call may write: its destinations and the inputs its function
        writes (every operand when the function is unknown or calls itself). From
        `summaries` when given (their program's snapshot), else computed afresh."""
        if summaries is None:
            summaries = FuncSummaries(enclosing_program(self))
        return summaries.call_written(self)

    def verify_(self) -> None:
        f = self.func()
        want_in = [a.type for a in f.ins]
        want_out = [a.type for a in f.outs]
        got_in = [v.type for v in self.ins]
        got_out = [v.type for v in self.outs]
        if got_in != want_in or got_out != want_out:
            raise VerifyException(
                f"rt.call @{self.callee_name}: operand types ({', '.join(map(str, got_in))}) -> "
                f"({', '.join(map(str, got_out))}) differ from the function's "
                f"({', '.join(map(str, want_in))}) -> ({', '.join(map(str, want_out))})"
            )
        outs = list(self.outs)
        for j, v in enumerate(outs):
            if v in outs[:j] or v in list(self.ins):
                raise VerifyException(
                    f"rt.call @{self.callee_name}: destination #{j} is also another operand "
                    "(destinations must be distinct buffers)"
                )
        if f.is_ancestor(self):
            raise VerifyException(f"rt.call @{self.callee_name}: a function cannot call itself")


Rt = Dialect(
    "rt",
    [
        ProgramOp,
        StateOp,
        ConstOp,
        AllocOp,
        KernelOp,
        CopyOp,
        H2DOp,
        D2HOp,
        LoopOp,
        IfOp,
        FuncOp,
        CallOp,
    ],
    [],
)
