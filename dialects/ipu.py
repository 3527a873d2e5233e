"""The `ipu` dialect: placement on virtual IPUs and copies between them.

Placement is a discardable attribute on any op, `ipu.id`, and the tile set an op
runs on is `ipu.tile_set` ("compute" or "io"):

```mlir
%y = popxl.gelu %x {ipu.id = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
%z = ipu.copy %y {source = 1 : i64, destination = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
```

On the NumPy runtime every virtual IPU shares host memory, so a copy moves no data
between devices; it keeps the program's structure (pipelining reads it).

Remote buffers (PopXL's `RemoteBuffer`, streaming memory) are named state off the IPU:
`ipu.remote_buffer` declares one in `graph.main` with its entry type and its number of
entries; `ipu.remote_load` / `ipu.remote_load_` / `ipu.remote_store` copy one entry to or
from a tensor, in any graph, at a constant offset (`[1]`) or one read at run time
(`[%i : tensor<ui32>]`). Variables stored in a buffer entry (`ipu.remote_variable`,
optionally sharded over replicas) and variables sharded over replicas but resident
(`ipu.replica_sharded_variable`) are handles the host reads and writes; their storage is
the buffer entry or the per-replica shard.

```mlir
graph.main attributes {replication_factor = 1 : i64} {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  %v = ipu.remote_variable "w" in @rb[1] = dense<1.0> : tensor<2xf32>
  %x = ipu.remote_load @rb[1] : tensor<2xf32>
  ipu.remote_store @rb[2], %x : tensor<2xf32>
}
```

On the NumPy runtime a remote buffer is an `rt.state` of shape `[entries, *shape]` per
replica, marked `rt.remote` (host memory, apart from each virtual IPU's buffers); loads and
stores are copies of one entry (`xl.runtime.kernels.remote`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Self

import numpy as np
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, SymbolTable
from xdsl.utils.exceptions import VerifyException

from xl.dialects.effects import PartialWrite, ValueEffect, WritesOperands
from xl.dialects.graph import ConstantOp, GraphOp
from xl.dialects.replica import ReplicaGroupingAttr
from xl.dialects.replica_layout import ReplicaLayout
from xl.dialects.traits import AcceptsViews, NoGradient, NotDifferentiable, PopartType
from xl.dialects.utils import dtype_of, fmt_type, shape_of

IPU_ATTR = "ipu.id"
TILE_SET_ATTR = "ipu.tile_set"


def placement(op: Operation) -> int | None:
    """The virtual IPU an op is placed on (its `ipu.id`), None when it is not placed."""
    a = op.attributes.get(IPU_ATTR)
    return a.value.data if isinstance(a, IntegerAttr) else None


def ipu_of(op: Operation) -> int:
    """The virtual IPU an op is placed on (0 when unplaced)."""
    p = placement(op)
    return 0 if p is None else p


@irdl_op_definition
class CopyOp(IRDLOperation):
    """Copies a tensor from one virtual IPU to another (popxl.ops.ipu_copy).

    ```mlir
    %z = ipu.copy %y {source = 0 : i64, destination = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "ipu.copy"
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    source = prop_def(IntegerAttr)
    destination = prop_def(IntegerAttr)
    # Reads its input; never merged by CSE when the copy is later updated in place. Its
    # gradient is a copy back (`xl.passes.grad_rules`).
    traits = traits_def(ValueEffect(), PopartType("IpuCopy"))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type($input, $result)"

    def __init__(self, value: SSAValue, source: int, destination: int):
        super().__init__(
            operands=[value],
            result_types=[value.type],
            properties={
                "source": IntegerAttr(source, i64),
                "destination": IntegerAttr(destination, i64),
            },
            attributes={IPU_ATTR: IntegerAttr(destination, i64)},
        )

    @classmethod
    def make(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[Attribute] | None = None,
        *,
        source: int,
        destination: int,
    ) -> CopyOp:
        """Builder used by passes (`GradBuilder.op`): one operand, the result type is its type."""
        (value,) = operands
        return cls(value, source, destination)

    def verify_(self) -> None:
        for key in ("source", "destination"):
            if getattr(self, key).value.data < 0:
                raise VerifyException(f"ipu.copy: {key} IPU must be >= 0")


# ---------------------------------------------------------------------------------------
# Remote buffers
# ---------------------------------------------------------------------------------------


def _main_of(op: Operation) -> Operation | None:
    """The `graph.main` of the module holding `op` (None when there is none)."""
    from xl.dialects.graph import MainGraphOp

    top: Operation = op
    while top.parent_op() is not None:
        top = top.parent_op()  # pyright: ignore[reportAssignmentType]
        if isinstance(top, MainGraphOp):
            return top
    for region in top.regions:
        for block in region.blocks:
            for child in block.ops:
                if isinstance(child, MainGraphOp):
                    return child
    return None


def remote_buffers(main: Operation) -> dict[str, RemoteBufferOp]:
    """The `ipu.remote_buffer` declarations of a `graph.main`, by name."""
    return {op.buffer_name: op for op in main.regions[0].blocks[0].ops if isinstance(op, RemoteBufferOp)}


def lookup_remote_buffer(op: Operation, ref: SymbolRefAttr) -> RemoteBufferOp:
    """The declaration `ref` names (VerifyException naming `op` when there is none)."""
    name = ref.root_reference.data
    main = _main_of(op)
    decl = None
    if main is not None:
        for d in main.regions[0].blocks[0].ops:
            if isinstance(d, RemoteBufferOp) and d.buffer_name == name:
                decl = d
                break
    if decl is None:
        where = "no graph.main" if main is None else "graph.main declares no such buffer"
        raise VerifyException(f"{op.name}: @{name} does not name an ipu.remote_buffer ({where})")
    if op.parent is decl.parent and not decl.is_before_in_block(op):
        raise VerifyException(f"{op.name}: remote buffer @{name} is used before its ipu.remote_buffer declaration")
    return decl


def _replication_factor(op: Operation) -> int:
    main = _main_of(op)
    rf = getattr(main, "replication_factor", None)
    return int(rf) if isinstance(rf, int) else 1


def _parse_entry(parser: Parser) -> tuple[SymbolRefAttr, int | None, SSAValue | None]:
    """`@name[3]` or `@name[%i : tensor<ui32>]`."""
    ref = SymbolRefAttr(parser.parse_symbol_name())
    parser.parse_punctuation("[")
    value = parser.parse_optional_integer(allow_boolean=False, allow_negative=True)
    operand = None
    if value is None:
        unresolved = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        operand = parser.resolve_operand(unresolved, parser.parse_type())
    parser.parse_punctuation("]")
    return ref, value, operand


def _print_entry(printer: Printer, ref: SymbolRefAttr, offset: IntegerAttr | None, operand: SSAValue | None) -> None:
    printer.print_string(" ")
    printer.print_symbol_name(ref.root_reference.data)
    printer.print_string("[")
    if operand is not None:
        printer.print_operand(operand)
        printer.print_string(" : ")
        printer.print_attribute(operand.type)
    else:
        printer.print_string(str(offset.value.data if offset is not None else 0))
    printer.print_string("]")


@irdl_op_definition
class RemoteBufferOp(IRDLOperation):
    """A remote buffer: `entries` tensors of one type in memory off the IPU (PopXL's
    `RemoteBuffer`). Declared in `graph.main` before any use; every replica has its own.

    ```mlir
    ipu.remote_buffer @rb : tensor<2x4xf32>, entries = 3
    ```
    """

    name = "ipu.remote_buffer"
    sym_name = prop_def(StringAttr)
    type = prop_def(TensorType)
    entries = prop_def(IntegerAttr)
    # Never dead: the host reads and writes remote variables through it.
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect(), NoGradient())

    def __init__(self, name: str, type: TensorType, entries: int):
        super().__init__(properties={"sym_name": StringAttr(name), "type": type, "entries": IntegerAttr(entries, i64)})

    @property
    def buffer_name(self) -> str:
        return self.sym_name.data

    @property
    def num_entries(self) -> int:
        return self.entries.value.data

    @classmethod
    def parse(cls, parser: Parser) -> RemoteBufferOp:
        name = parser.parse_symbol_name().data
        parser.parse_punctuation(":")
        pos = parser.pos
        type = parser.parse_type()
        if not isinstance(type, TensorType):
            parser.raise_error(f"ipu.remote_buffer: expected a tensor type, got {type}", pos)
        parser.parse_punctuation(",")
        parser.parse_keyword("entries")
        parser.parse_punctuation("=")
        entries = parser.parse_integer(allow_boolean=False, allow_negative=True)
        op = cls(name, type, entries)
        op.attributes |= parser.parse_optional_attr_dict()
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.buffer_name)
        printer.print_string(" : ")
        printer.print_attribute(self.type)
        printer.print_string(f", entries = {self.num_entries}")
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        from xl.dialects.graph import MainGraphOp

        what = f"ipu.remote_buffer @{self.buffer_name}"
        if self.num_entries < 1:
            raise VerifyException(f"{what}: entries must be >= 1, got {self.num_entries}")
        parent = self.parent_op()
        if parent is not None and not isinstance(parent, MainGraphOp):
            raise VerifyException(f"{what}: remote buffers are declared in graph.main, not in {parent.name}")
        if parent is not None:
            for other in parent.regions[0].blocks[0].ops:
                if other is self:
                    break
                if isinstance(other, RemoteBufferOp) and other.buffer_name == self.buffer_name:
                    raise VerifyException(f"{what}: a remote buffer of that name is already declared")


class _VariableHandle(IRDLOperation):
    """What the remote and sharded variable declarations share: name, initial value (one
    per group with a grouping of several groups), grouping, retrieval mode, sharding."""

    var_name = prop_def(StringAttr)
    init = opt_prop_def(DenseIntOrFPElementsAttr)
    grouping = opt_prop_def(Attribute)
    retrieval_mode = opt_prop_def(StringAttr)
    shard_over = opt_prop_def(IntegerAttr)

    _EXTRA: ClassVar[tuple[str, ...]] = ("grouping", "retrieval_mode", "shard_over")

    def _what(self) -> str:
        return f'{self.name} "{self.var_name.data}"'

    def replication_factor(self) -> int:
        return _replication_factor(self)

    def layout(self) -> ReplicaLayout:
        """Which replicas hold which value or shard of the variable, and its shapes."""
        grouping = self.grouping
        assert grouping is None or isinstance(grouping, ReplicaGroupingAttr), grouping  # verified
        return ReplicaLayout(shape_of(self.full_type()), self.replication_factor(), grouping, self.num_shards())

    def num_groups(self) -> int:
        return self.layout().num_groups

    def num_shards(self) -> int:
        """Replicas each value is sharded over (1: not sharded)."""
        return self.shard_over.value.data if self.shard_over is not None else 1

    def full_type(self) -> TensorType:
        return self.results[0].type  # pyright: ignore[reportReturnType]

    def replica_values(self, values: np.ndarray | None = None) -> list[np.ndarray]:
        """The value each replica stores (its group's value, or its shard of it), from the
        per-group `values` (default: `init`, zeros without one)."""
        from xl.dialects.utils import dense_to_numpy

        layout = self.layout()
        if values is None and self.init is not None:
            values = dense_to_numpy(self.init)
        if values is None:
            values = np.zeros(layout.host_shape, dtype_of(self.full_type()))
        return layout.replica_values(values)

    def _parse_tail(self, attrs: dict[str, Attribute]) -> None:
        for key in self._EXTRA:
            v = attrs.pop(key, None)
            if v is not None:
                self.properties[key] = v
        self.attributes |= attrs

    def _print_init(self, printer: Printer, type: Attribute) -> None:
        if self.init is not None:
            printer.print_string(" = ")
            printer.print_attribute(self.init)
            if self.init.get_type() != type:
                printer.print_string(" -> ")
                printer.print_attribute(type)
        else:
            printer.print_string(" : ")
            printer.print_attribute(type)

    def _print_tail(self, printer: Printer) -> None:
        extra = {k: self.properties[k] for k in self._EXTRA if k in self.properties}
        printer.print_op_attributes({**extra, **self.attributes})

    def _verify_handle(self) -> None:
        from xl.dialects.graph import MainGraphOp

        what = self._what()
        parent = self.parent_op()
        if parent is not None and not isinstance(parent, MainGraphOp):
            raise VerifyException(
                f"{what}: variables can only be created in the main graph (graph.main), not in {parent.name}"
            )
        full = self.results[0]
        for use in full.uses:
            raise VerifyException(
                f"{what}: the variable is a handle for the host (Session get/write); "
                f"{use.operation.name} cannot use it: load it (ipu.remote_load) or use its shard"
            )
        if self.retrieval_mode is not None and self.retrieval_mode.data not in ("one_per_group", "all_replicas"):
            raise VerifyException(
                f"{what}: retrieval_mode must be one_per_group or all_replicas, got {self.retrieval_mode.data!r}"
            )
        rf = self.replication_factor()
        if self.grouping is not None:
            if not isinstance(self.grouping, ReplicaGroupingAttr):
                raise VerifyException(f"{what}: grouping must be a replica grouping, got {self.grouping}")
            err = self.grouping.fit_error(rf)
            if err is not None:
                raise VerifyException(f"{what}: {err}")
        layout = self.layout()
        err = layout.fit_error()
        if err is not None:
            raise VerifyException(f"{what}: {err}")
        if self.init is not None:
            t = self.init.get_type()
            groups = layout.num_groups
            if shape_of(t) != layout.host_shape or dtype_of(t) != dtype_of(full.type):
                per = "" if groups == 1 else f" ({groups} groups: one value per group)"
                raise VerifyException(
                    f"{what}: initial value {fmt_type(t)} does not fit the variable {fmt_type(full.type)}{per}"
                )


@irdl_op_definition
class RemoteVariableOp(_VariableHandle):
    """A variable stored in entry `offset` of a remote buffer (PopXL's `remote_variable`);
    with `shard_over` (`remote_replica_sharded_variable`) each replica's entry holds its
    1-D shard of the value, `shard_size` elements (the value flattened and zero-padded);
    without, the entry holds the value in row-major order (its shape may differ from the
    buffer's if the element count is the same). The result is the host's handle (Session
    get/write read the buffer entry, gathering the shards); ops cannot use it: they
    `ipu.remote_load` the entry.

    ```mlir
    %w = ipu.remote_variable "w" in @rb[0] = dense<1.0> : tensor<2x4xf32>
    %s = ipu.remote_variable "s" in @shards[0] = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32> {shard_over = 2 : i64}
    ```
    """

    name = "ipu.remote_variable"
    buffer = prop_def(SymbolRefAttr)
    offset = prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect(), NoGradient())

    def __init__(
        self,
        var_name: str,
        buffer: str,
        offset: int,
        type: TensorType,
        init: DenseIntOrFPElementsAttr | None = None,
        *,
        grouping: Attribute | None = None,
        retrieval_mode: str | None = None,
        shard_over: int | None = None,
    ):
        super().__init__(
            properties={
                "var_name": StringAttr(var_name),
                "buffer": SymbolRefAttr(buffer),
                "offset": IntegerAttr(offset, i64),
                "init": init,
                "grouping": grouping,
                "retrieval_mode": None if retrieval_mode is None else StringAttr(retrieval_mode),
                "shard_over": None if shard_over is None or shard_over == 1 else IntegerAttr(shard_over, i64),
            },
            result_types=[type],
        )

    @property
    def buffer_name(self) -> str:
        return self.buffer.root_reference.data

    @property
    def entry(self) -> int:
        return self.offset.value.data

    @classmethod
    def parse(cls, parser: Parser) -> RemoteVariableOp:
        name = parser.parse_str_literal()
        parser.parse_keyword("in")
        pos = parser.pos
        ref, offset, operand = _parse_entry(parser)
        if operand is not None or offset is None:
            parser.raise_error("ipu.remote_variable: the entry must be a constant", pos)
        init, type = _parse_init(parser)
        op = cls(name, ref.root_reference.data, offset, type, init)
        op._parse_tail(dict(parser.parse_optional_attr_dict()))
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.var_name.data)
        printer.print_string(" in")
        _print_entry(printer, self.buffer, self.offset, None)
        self._print_init(printer, self.result.type)
        self._print_tail(printer)

    def verify_(self) -> None:
        self._verify_handle()
        what = self._what()
        decl = lookup_remote_buffer(self, self.buffer)
        if not 0 <= self.entry < decl.num_entries:
            raise VerifyException(
                f"{what}: entry {self.entry} of @{decl.buffer_name} is out of range [0, {decl.num_entries})"
            )
        bt = decl.type
        if dtype_of(bt) != dtype_of(self.result.type):
            raise VerifyException(
                f"{what}: dtype {dtype_of(self.result.type)} does not match remote buffer "
                f"@{decl.buffer_name} ({fmt_type(bt)})"
            )
        layout = self.layout()
        if layout.sharded:
            n = math.prod(shape_of(bt))
            if n != layout.shard_size:
                raise VerifyException(
                    f"{what}: shards of {fmt_type(self.result.type)} over {layout.shard_over} replicas "
                    f"have {layout.shard_size} elements, but entries of @{decl.buffer_name} "
                    f"{fmt_type(bt)} have {n}"
                )
        elif math.prod(shape_of(bt)) != math.prod(shape_of(self.result.type)):
            # the entry holds the value in row-major order, whatever its shape
            raise VerifyException(
                f"{what}: {fmt_type(self.result.type)} does not match remote buffer "
                f"@{decl.buffer_name} ({fmt_type(bt)}): the element counts differ"
            )
        for other in self.parent.ops if self.parent is not None else ():
            if other is self:
                break
            if (
                isinstance(other, RemoteVariableOp)
                and other.buffer_name == self.buffer_name
                and other.entry == self.entry
            ):
                raise VerifyException(
                    f"{what}: entry {self.entry} of @{self.buffer_name} already holds remote "
                    f'variable "{other.var_name.data}"'
                )


@irdl_op_definition
class ReplicaShardedVariableOp(_VariableHandle):
    """A variable sharded over replicas and resident (PopXL's `replica_sharded_variable`):
    each replica holds its 1-D shard of `shard_size` elements (the value flattened and
    zero-padded), the second result, which ops use and update in place. The first result
    is the host's handle (full shape; Session get/write gather and scatter the shards),
    which ops cannot use.

    ```mlir
    %w, %w_shard = ipu.replica_sharded_variable "w" = dense<[1.0, 2.0, 3.0, 4.0]>
        : tensor<4xf32> -> (tensor<4xf32>, tensor<2xf32>) {shard_over = 2 : i64}
    ```
    """

    name = "ipu.replica_sharded_variable"
    full = result_def(TensorType)
    shard = result_def(TensorType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect(), NoGradient())

    def __init__(
        self,
        var_name: str,
        type: TensorType,
        shard_type: TensorType,
        init: DenseIntOrFPElementsAttr | None = None,
        *,
        shard_over: int,
        grouping: Attribute | None = None,
        retrieval_mode: str | None = None,
    ):
        super().__init__(
            properties={
                "var_name": StringAttr(var_name),
                "init": init,
                "grouping": grouping,
                "retrieval_mode": None if retrieval_mode is None else StringAttr(retrieval_mode),
                "shard_over": IntegerAttr(shard_over, i64),
            },
            result_types=[type, shard_type],
        )

    @classmethod
    def parse(cls, parser: Parser) -> ReplicaShardedVariableOp:
        name = parser.parse_str_literal()
        init = None
        if parser.parse_optional_punctuation("=") is not None:
            pos = parser.pos
            init = parser.parse_attribute()
            if not isinstance(init, DenseIntOrFPElementsAttr):
                parser.raise_error("expected a dense<...> initial value", pos)
            parser.parse_punctuation("->")
        else:
            parser.parse_punctuation(":")
        parser.parse_punctuation("(")
        type = parser.parse_type()
        parser.parse_punctuation(",")
        shard_type = parser.parse_type()
        parser.parse_punctuation(")")
        attrs = dict(parser.parse_optional_attr_dict())
        shard_over = attrs.pop("shard_over", None)
        op = cls(name, type, shard_type, init, shard_over=1)  # pyright: ignore[reportArgumentType]
        if shard_over is not None:
            op.properties["shard_over"] = shard_over
        op._parse_tail(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.var_name.data)
        if self.init is not None:
            printer.print_string(" = ")
            printer.print_attribute(self.init)
            printer.print_string(" -> (")
        else:
            printer.print_string(" : (")
        printer.print_attribute(self.full.type)
        printer.print_string(", ")
        printer.print_attribute(self.shard.type)
        printer.print_string(")")
        self._print_tail(printer)

    def verify_(self) -> None:
        self._verify_handle()
        what = self._what()
        st = self.shard.type
        layout = self.layout()
        if (
            not isinstance(st, TensorType)
            or dtype_of(st) != dtype_of(self.full.type)
            or shape_of(st) != (layout.shard_size,)
        ):
            raise VerifyException(
                f"{what}: the shard of {fmt_type(self.full.type)} over {layout.shard_over} replicas "
                f"is {(layout.shard_size,)} {dtype_of(self.full.type)}, not {fmt_type(st)}"
            )


def _parse_init(parser: Parser) -> tuple[DenseIntOrFPElementsAttr | None, TensorType]:
    """`= dense<...> : T [-> T']` (the type after `->` when the value holds one per
    group) or `: T`."""
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
    if not isinstance(type, TensorType):
        parser.raise_error(f"expected a tensor type, got {type}")
    return init, type


class _RemoteAccess(IRDLOperation):
    """Shared by the loads and the store: buffer, constant or run-time offset."""

    buffer = prop_def(SymbolRefAttr)
    offset = opt_prop_def(IntegerAttr)

    @property
    def buffer_name(self) -> str:
        return self.buffer.root_reference.data

    def offset_operand(self) -> SSAValue | None:
        return getattr(self, "offset_tensor", None)

    def constant_offset(self) -> int | None:
        """The offset when it is a constant: the property, or an operand that a scalar
        `graph.constant` defines (`ops.remote_load(rb, 1)` gives the offset as a constant
        tensor, as PopXL does); None for an offset computed at run time."""
        operand = self.offset_operand()
        if operand is None:
            return self.offset.value.data if self.offset is not None else 0
        owner = operand.owner
        if isinstance(owner, ConstantOp):
            from xl.dialects.utils import dense_to_numpy

            value = dense_to_numpy(owner.value)
            if value.size == 1 and np.issubdtype(value.dtype, np.integer):
                return int(value.reshape(()))
        return None

    def data_type(self) -> Attribute:
        raise NotImplementedError

    def _verify_access(self) -> RemoteBufferOp:
        decl = lookup_remote_buffer(self, self.buffer)
        where = f"{self.name} @{decl.buffer_name}"
        dt = self.data_type()
        if dt != decl.type:
            raise VerifyException(
                f"{where}: the buffer holds {fmt_type(decl.type)} entries, but the tensor is {fmt_type(dt)}"
            )
        operand = self.offset_operand()
        if operand is not None:
            if self.offset is not None:
                raise VerifyException(f"{where}: the offset is given both as an operand and as a constant")
            t = operand.type
            if (
                not isinstance(t, TensorType)
                or shape_of(t) != ()
                or not isinstance(t.get_element_type(), IntegerType)
                or dtype_of(t) == np.bool_
            ):
                raise VerifyException(f"{where}: the offset must be a scalar integer tensor, got {fmt_type(t)}")
        k = self.constant_offset()
        if k is not None:
            if not 0 <= k < decl.num_entries:
                raise VerifyException(
                    f"{where}: offset {k} is out of range [0, {decl.num_entries}) (entries of the buffer)"
                )
        return decl


def _access_props(buffer: str, offset: int | SSAValue | None) -> dict[str, Attribute | None]:
    return {
        "buffer": SymbolRefAttr(buffer),
        "offset": IntegerAttr(offset, i64) if isinstance(offset, int) else None,
    }


@irdl_op_definition
class RemoteLoadOp(_RemoteAccess):
    """Entry `offset` of a remote buffer, loaded into a new tensor (`ops.remote_load`).

    ```mlir
    %x = ipu.remote_load @rb[1] : tensor<2x4xf32>
    %y = ipu.remote_load @rb[%i : tensor<ui32>] : tensor<2x4xf32>
    ```
    """

    name = "ipu.remote_load"
    offset_tensor = opt_operand_def(TensorType)
    result = result_def(TensorType)
    # Reads remote memory: never merged with another load (a store may come between).
    traits = traits_def(AcceptsViews(), MemoryReadEffect(), MemoryWriteEffect(), NoGradient())

    def __init__(self, buffer: str, type: TensorType, offset: int | SSAValue | None = 0):
        super().__init__(
            operands=[[offset] if isinstance(offset, SSAValue) else []],
            properties=_access_props(buffer, offset),
            result_types=[type],
        )

    def data_type(self) -> Attribute:
        return self.result.type

    @classmethod
    def parse(cls, parser: Parser) -> RemoteLoadOp:
        ref, k, operand = _parse_entry(parser)
        parser.parse_punctuation(":")
        type = parser.parse_type()
        op = cls(ref.root_reference.data, type, operand if operand is not None else k)  # pyright: ignore[reportArgumentType]
        op.attributes |= parser.parse_optional_attr_dict()
        return op

    def print(self, printer: Printer) -> None:
        _print_entry(printer, self.buffer, self.offset, self.offset_tensor)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        self._verify_access()


class _RemoteTensorAccess(_RemoteAccess):
    """Shared by `remote_load_` and `remote_store`: a tensor operand `%t` and the entry
    syntax `@rb[offset], %t : type`."""

    t = operand_def(TensorType)
    offset_tensor = opt_operand_def(TensorType)

    def __init__(self, buffer: str, t: SSAValue, offset: int | SSAValue | None = 0):
        super().__init__(
            operands=[t, [offset] if isinstance(offset, SSAValue) else []],
            properties=_access_props(buffer, offset),
        )

    def data_type(self) -> Attribute:
        return self.t.type

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        ref, k, operand = _parse_entry(parser)
        parser.parse_punctuation(",")
        unresolved = parser.parse_unresolved_operand()
        parser.parse_punctuation(":")
        t = parser.resolve_operand(unresolved, parser.parse_type())
        op = cls(ref.root_reference.data, t, operand if operand is not None else k)
        op.attributes |= parser.parse_optional_attr_dict()
        return op

    def print(self, printer: Printer) -> None:
        _print_entry(printer, self.buffer, self.offset, self.offset_tensor)
        printer.print_string(", ")
        printer.print_operand(self.t)
        printer.print_string(" : ")
        printer.print_attribute(self.t.type)
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        self._verify_access()


@irdl_op_definition
class RemoteLoadInplaceOp(_RemoteTensorAccess):
    """Entry `offset` of a remote buffer, loaded into `t` in place (`ops.remote_load_`).

    ```mlir
    ipu.remote_load_ @rb[0], %t : tensor<2x4xf32>
    ```
    """

    name = "ipu.remote_load_"
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable())


@irdl_op_definition
class RemoteStoreOp(_RemoteTensorAccess):
    """`t` stored into entry `offset` of a remote buffer (`ops.remote_store`).

    ```mlir
    ipu.remote_store @rb[2], %x : tensor<2x4xf32>
    ```
    """

    name = "ipu.remote_store"
    # its kernel writes one entry of the buffer
    traits = traits_def(AcceptsViews(), MemoryReadEffect(), MemoryWriteEffect(), NoGradient(), PartialWrite())


REMOTE_ACCESS_OPS = (RemoteLoadOp, RemoteLoadInplaceOp, RemoteStoreOp)
"""The ops that copy a remote buffer entry to or from a tensor."""


CODE_LOCATIONS = ("executable", "compute_buffer", "io_buffer")
"""Where `ipu.remote_code_load` may put a graph's code (PopXL's `CODE_LOCATION`)."""


@irdl_op_definition
class RemoteCodeLoadOp(IRDLOperation):
    """Loads the code of graph `@g` from remote memory to `destination`
    (`ops.remote_code_load`): `executable`, `compute_buffer` or `io_buffer`.

    On the NumPy runtime every graph's code is always resident, so the op keeps the
    program's structure (it is printed, verified and drawn) and lowers to nothing.

    ```mlir
    ipu.remote_code_load @g to "executable"
    ```
    """

    name = "ipu.remote_code_load"
    graph = prop_def(SymbolRefAttr)
    destination = prop_def(StringAttr)
    # Kept in order with the program's other effects (never dead-code eliminated).
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect(), NoGradient())

    def __init__(self, graph: str, destination: str):
        super().__init__(properties={"graph": SymbolRefAttr(graph), "destination": StringAttr(destination)})

    @classmethod
    def parse(cls, parser: Parser) -> RemoteCodeLoadOp:
        ref = parser.parse_attribute()
        if not isinstance(ref, SymbolRefAttr):
            parser.raise_error(f"ipu.remote_code_load: expected a graph symbol (@g), got {ref}")
        parser.parse_keyword("to")
        dest = parser.parse_str_literal()
        op = cls(ref.root_reference.data, dest)
        op.attributes |= parser.parse_optional_attr_dict()
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.graph)
        printer.print_string(f' to "{self.destination.data}"')
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        dest = self.destination.data
        if dest not in CODE_LOCATIONS:
            raise VerifyException(f"{self.name}: destination {dest!r} is not one of {', '.join(CODE_LOCATIONS)}")
        try:
            g = SymbolTable.lookup_symbol(self, self.graph)
        except ValueError:  # detached op: nothing to look up yet
            return
        if not isinstance(g, GraphOp):
            what = "no such symbol" if g is None else f"it is a {g.name}"
            raise VerifyException(
                f"{self.name}: @{self.graph.root_reference.data} does not name a graph.graph ({what})"
            )


Ipu = Dialect(
    "ipu",
    [
        CopyOp,
        RemoteBufferOp,
        RemoteVariableOp,
        ReplicaShardedVariableOp,
        RemoteLoadOp,
        RemoteLoadInplaceOp,
        RemoteStoreOp,
        RemoteCodeLoadOp,
    ],
    [],
)
