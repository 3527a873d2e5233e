"""The `popxl` dialect: tensor ops mirroring `popxl.ops` one to one.

Every op infers its result types from its operand types and properties (NumPy
broadcasting rules for elementwise ops) and its verifier checks the declared result
types against that inference, naming the op and the offending shapes and dtypes.

All ops share one textual form:

```mlir
%y = popxl.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
%s = popxl.softmax %y {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
popxl.scaled_add_ %w, %g {a = 1.0 : f64, b = -0.05 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
```

Memory effects: ops read their operands; in-place ops (names ending in `_`, listed in
`writes`) also write the operands they update and have no results. A tensor that is
later updated in place is stateful, so the op producing it reports unknown effects
and `cse` leaves it alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import EffectInstance, MemoryEffect, MemoryEffectKind
from xdsl.utils.exceptions import VerifyException

from xl.dialects.utils import dtype_of, fmt_type, shape_of, tensor_type

# ------------------------------------------------------------------------------------
# Properties: Python values <-> attributes
# ------------------------------------------------------------------------------------


def to_attr(value: Any) -> Attribute:
    """Python value -> property attribute (int: i64, float: f64, bool: i1, tuple: array<i64>)."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, bool | np.bool_):
        return IntegerAttr(int(value), IntegerType(1))
    if isinstance(value, int | np.integer):
        return IntegerAttr(int(value), i64)
    if isinstance(value, float | np.floating):
        return FloatAttr(float(value), f64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, tuple | list):
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    raise TypeError(f"cannot store {value!r} as an op property")


def from_attr(attr: Attribute) -> Any:
    """Property attribute -> Python value (inverse of `to_attr`)."""
    if isinstance(attr, IntegerAttr):
        if attr.type == IntegerType(1):
            return bool(attr.value.data)
        return int(attr.value.data)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    return attr


def op_props(op: Operation) -> dict[str, Any]:
    """The properties of an op as plain Python values."""
    return {k: from_attr(v) for k, v in op.properties.items()}


IntProp = IntegerAttr
FloatProp = FloatAttr
ArrayProp = DenseArrayBase

# ------------------------------------------------------------------------------------
# Memory effects
# ------------------------------------------------------------------------------------


def is_written(value: SSAValue) -> bool:
    """Whether some op updates `value` in place (an in-place op or a by-ref call input)."""
    for use in value.uses:
        user = use.operation
        writes = getattr(user, "WRITES", None)
        if writes is not None and use.index in writes:
            return True
        by_ref = getattr(user, "operand_is_by_ref", None)
        if by_ref is not None and by_ref(use.index):
            return True
    return False


class TensorOpEffect(MemoryEffect):
    """Reads the operands; writes the operands listed in `writes`.

    An op whose result is later updated in place reports unknown effects, so that
    CSE never merges a tensor that is mutated afterwards.
    """

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        if any(is_written(r) for r in op.results):
            return None
        effects: set[EffectInstance] = set()
        if op.operands:
            effects.add(EffectInstance(MemoryEffectKind.READ))
        if getattr(op, "WRITES", ()):
            effects.add(EffectInstance(MemoryEffectKind.WRITE))
        return effects


class AllocEffect(MemoryEffect):
    """A fresh tensor: removable when unused, never merged with another."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        return {EffectInstance(MemoryEffectKind.ALLOC, r) for r in op.results}


# ------------------------------------------------------------------------------------
# Base class
# ------------------------------------------------------------------------------------


def _err(op: str, msg: str) -> VerifyException:
    return VerifyException(f"{op}: {msg}")


def _types_str(types: Sequence[Attribute]) -> str:
    return ", ".join(fmt_type(t) for t in types)


class PopxlOp(IRDLOperation):
    """Base of the tensor ops: type inference, verification, uniform syntax.

    Subclasses implement `infer(types, props) -> result types` (raise `VerifyException`
    through `cls.fail(...)` on bad input). `writes` lists operands updated in place.
    """

    WRITES: ClassVar[tuple[int, ...]] = ()
    traits = traits_def(TensorOpEffect())

    @classmethod
    def parse(cls, parser: Parser) -> PopxlOp:
        pos = parser.pos
        operands = parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_operand, parser.parse_operand
        ) or []
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        if len(ftype.inputs.data) != len(operands):
            parser.raise_error(
                f"{cls.name}: {len(operands)} operands but {len(ftype.inputs.data)} operand types",
                pos,
            )
        for i, (o, t) in enumerate(zip(operands, ftype.inputs.data)):
            if o.type != t:
                parser.raise_error(f"{cls.name}: operand {i} has type {o.type}, not {t}", pos)
        prop_names = set(cls.get_irdl_definition().properties)
        props = {k: v for k, v in attrs.items() if k in prop_names}
        others = {k: v for k, v in attrs.items() if k not in prop_names}
        return cls.create(
            operands=operands,
            result_types=list(ftype.outputs.data),
            properties=props,
            attributes=others,
        )

    def print(self, printer: Printer) -> None:
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes({**self.properties, **self.attributes})
        printer.print_string(" : (")
        printer.print_list([o.type for o in self.operands], printer.print_attribute)
        printer.print_string(") -> ")
        if len(self.results) == 1:
            printer.print_attribute(self.results[0].type)
        else:
            printer.print_string("(")
            printer.print_list([r.type for r in self.results], printer.print_attribute)
            printer.print_string(")")

    @classmethod
    def fail(cls, msg: str) -> VerifyException:
        return _err(cls.name, msg)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: dict[str, Any]) -> list[TensorType]:
        raise NotImplementedError(cls.name)

    @classmethod
    def make(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[TensorType] | None = None,
        **props: Any,
    ) -> PopxlOp:
        """Build the op, inferring result types unless they are given."""
        attrs = {k: to_attr(v) for k, v in props.items() if v is not None}
        if result_types is None:
            result_types = cls.infer(
                [o.type for o in operands],  # type: ignore[misc]
                {k: from_attr(a) for k, a in attrs.items()},
            )
        op = cls.create(
            operands=list(operands), result_types=list(result_types), properties=attrs
        )
        return op

    def operand_is_by_ref(self, index: int) -> bool:
        return False

    def verify_(self) -> None:
        in_types = [o.type for o in self.operands]
        for i, t in enumerate(in_types):
            if not isinstance(t, TensorType):
                raise _err(self.name, f"operand {i} is {t}, not a tensor")
        expected = self.infer(in_types, op_props(self))  # type: ignore[arg-type]
        actual = [r.type for r in self.results]
        if list(expected) != actual:
            raise _err(
                self.name,
                f"result types ({_types_str(actual)}) differ from the inferred "
                f"({_types_str(expected)}) for operands ({_types_str(in_types)})",
            )


# ------------------------------------------------------------------------------------
# Inference helpers
# ------------------------------------------------------------------------------------


def broadcast(cls: type[PopxlOp], types: Sequence[TensorType]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(shape_of(t) for t in types)))
    except ValueError:
        raise cls.fail(f"cannot broadcast {' with '.join(fmt_type(t) for t in types)}") from None


def same_dtype(cls: type[PopxlOp], types: Sequence[TensorType]) -> np.dtype:
    dts = {dtype_of(t) for t in types}
    if len(dts) != 1:
        raise cls.fail(f"operand dtypes differ: {_types_str(types)}")
    return dts.pop()


def require_float(cls: type[PopxlOp], t: TensorType, what: str = "input") -> None:
    if dtype_of(t).kind != "f":
        raise cls.fail(f"{what} must be a floating point tensor, got {fmt_type(t)}")


def norm_axis(cls: type[PopxlOp], axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise cls.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def norm_axes(cls: type[PopxlOp], axes: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    out = tuple(sorted({norm_axis(cls, a, rank) for a in axes}))
    if len(out) != len(axes):
        raise cls.fail(f"repeated axis in {tuple(axes)}")
    return out


def arity(cls: type[PopxlOp], types: Sequence[TensorType], n: int) -> None:
    if len(types) != n:
        raise cls.fail(f"expects {n} operands, got {len(types)}")


# ------------------------------------------------------------------------------------
# Elementwise ops
# ------------------------------------------------------------------------------------


class BinaryOp(PopxlOp):
    """Elementwise binary op with NumPy broadcasting; operands share a dtype."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    RESULT_BOOL: ClassVar[bool] = False
    DTYPE_KINDS: ClassVar[str] = "fiub"

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dt = same_dtype(cls, types)
        if dt.kind not in cls.DTYPE_KINDS:
            raise cls.fail(f"unsupported dtype {dt} for operands ({_types_str(types)})")
        shape = broadcast(cls, types)
        return [tensor_type(shape, np.bool_ if cls.RESULT_BOOL else dt)]


@irdl_op_definition
class AddOp(BinaryOp):
    """`lhs + rhs` (popxl.ops.add)."""

    name = "popxl.add"


@irdl_op_definition
class SubOp(BinaryOp):
    """`lhs - rhs` (popxl.ops.sub)."""

    name = "popxl.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """`lhs * rhs` (popxl.ops.mul)."""

    name = "popxl.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """`lhs / rhs` (popxl.ops.div); integer division truncates toward zero."""

    name = "popxl.div"


@irdl_op_definition
class PowOp(BinaryOp):
    """`lhs ** rhs` (popxl.ops.pow)."""

    name = "popxl.pow"
    DTYPE_KINDS: ClassVar[str] = "fiu"


@irdl_op_definition
class MaximumOp(BinaryOp):
    """Elementwise maximum of two tensors (popxl.ops.maximum)."""

    name = "popxl.maximum"


@irdl_op_definition
class EqualOp(BinaryOp):
    """`lhs == rhs`, bool result (popxl.ops.equal)."""

    name = "popxl.equal"
    RESULT_BOOL: ClassVar[bool] = True


@irdl_op_definition
class GreaterOp(BinaryOp):
    """`lhs > rhs`, bool result (popxl.ops.greater)."""

    name = "popxl.greater"
    RESULT_BOOL: ClassVar[bool] = True


@irdl_op_definition
class LogicalAndOp(BinaryOp):
    """`lhs and rhs` on bool tensors."""

    name = "popxl.logical_and"
    RESULT_BOOL: ClassVar[bool] = True
    DTYPE_KINDS: ClassVar[str] = "b"


@irdl_op_definition
class LogicalOrOp(BinaryOp):
    """`lhs or rhs` on bool tensors."""

    name = "popxl.logical_or"
    RESULT_BOOL: ClassVar[bool] = True
    DTYPE_KINDS: ClassVar[str] = "b"


class UnaryOp(PopxlOp):
    """Elementwise unary op: same shape and dtype as the input."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    DTYPE_KINDS: ClassVar[str] = "f"

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        (t,) = types
        if dtype_of(t).kind not in cls.DTYPE_KINDS:
            kind = "a floating point" if cls.DTYPE_KINDS == "f" else "a supported"
            raise cls.fail(f"input must be {kind} tensor, got {fmt_type(t)}")
        return [t]


def _unary(op_name: str, doc: str, kinds: str = "f") -> type[UnaryOp]:
    cls = type(
        "".join(p.capitalize() for p in op_name.split(".")[1].split("_")) + "Op",
        (UnaryOp,),
        {
            "name": op_name,
            "__doc__": doc,
            "DTYPE_KINDS": kinds,
            "__annotations__": {"DTYPE_KINDS": "ClassVar[str]"},
            "__module__": __name__,
        },
    )
    return irdl_op_definition(cls)


NegOp = _unary("popxl.neg", "`-x` (popxl.ops.negate).", "fi")
AbsOp = _unary("popxl.abs", "`|x|` (popxl.ops.abs).", "fi")
SignOp = _unary("popxl.sign", "sign of x: -1, 0 or 1 (popxl.ops.sign).", "fi")
ReluOp = _unary("popxl.relu", "`max(x, 0)` (popxl.ops.relu).")
GeluOp = _unary(
    "popxl.gelu",
    "tanh-approximated GELU, as PopXL: `0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`.",
)
TanhOp = _unary("popxl.tanh", "`tanh(x)` (popxl.ops.tanh).")
SigmoidOp = _unary("popxl.sigmoid", "`1 / (1 + exp(-x))` (popxl.ops.sigmoid).")
ExpOp = _unary("popxl.exp", "`exp(x)` (popxl.ops.exp).")
LogOp = _unary("popxl.log", "natural logarithm (popxl.ops.log).")
SqrtOp = _unary("popxl.sqrt", "square root (popxl.ops.sqrt).")
CosOp = _unary("popxl.cos", "`cos(x)` (popxl.ops.cos).")
SinOp = _unary("popxl.sin", "`sin(x)` (popxl.ops.sin).")
LogicalNotOp = _unary("popxl.logical_not", "`not x` on bool tensors.", "b")
IdentityOp = _unary("popxl.identity", "A copy of the input (popxl.ops.identity).", "fiub")


@irdl_op_definition
class CastOp(PopxlOp):
    """Converts the elements to the result dtype (popxl.ops.cast).

    ```mlir
    %y = popxl.cast %x : (tensor<4xi32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)

    def verify_(self) -> None:
        if shape_of(self.input.type) != shape_of(self.result.type):
            raise self.fail(
                f"cannot cast {fmt_type(self.input.type)} to {fmt_type(self.result.type)}: "
                "shapes differ"
            )


# ------------------------------------------------------------------------------------
# Linear algebra, NN
# ------------------------------------------------------------------------------------


@irdl_op_definition
class MatmulOp(PopxlOp):
    """Matrix product with NumPy `matmul` semantics, batch dims broadcast (popxl.ops.matmul).

    ```mlir
    %y = popxl.matmul %x, %w : (tensor<8x784xf32>, tensor<784x512xf32>) -> tensor<8x512xf32>
    ```
    """

    name = "popxl.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dt = same_dtype(cls, types)
        a, b = (shape_of(t) for t in types)
        if len(a) == 0 or len(b) == 0:
            raise cls.fail(f"operands must have rank >= 1, got {_types_str(types)}")
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise cls.fail(
                f"contracting dimensions differ: {fmt_type(types[0])} @ {fmt_type(types[1])} "
                f"({a2[-1]} vs {b2[-2]})"
            )
        try:
            batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        except ValueError:
            raise cls.fail(f"cannot broadcast batch dimensions of {_types_str(types)}") from None
        shape = (*batch, a2[-2], b2[-1])
        if len(a) == 1:
            shape = (*shape[:-2], shape[-1])
        if len(b) == 1:
            shape = shape[:-1]
        return [tensor_type(shape, dt)]


@irdl_op_definition
class SoftmaxOp(PopxlOp):
    """Softmax along `axis` (popxl.ops.softmax).

    ```mlir
    %p = popxl.softmax %x {axis = 1 : i64} : (tensor<8x10xf32>) -> tensor<8x10xf32>
    ```
    """

    name = "popxl.softmax"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        require_float(cls, types[0])
        norm_axis(cls, props["axis"], len(shape_of(types[0])))
        return [types[0]]


# ------------------------------------------------------------------------------------
# Shape ops
# ------------------------------------------------------------------------------------


@irdl_op_definition
class ReshapeOp(PopxlOp):
    """Same elements, new shape (popxl.ops.reshape); the shape is the result type.

    ```mlir
    %y = popxl.reshape %x : (tensor<28x28xf32>) -> tensor<1x784xf32>
    ```
    """

    name = "popxl.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)

    @staticmethod
    def resolve_shape(in_shape: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
        """Resolve one `-1` in `shape` against the input shape (ValueError if impossible)."""
        shape = tuple(int(d) for d in shape)
        n = math.prod(in_shape)
        if shape.count(-1) > 1:
            raise ValueError(f"popxl.reshape: at most one -1 allowed in {shape}")
        if -1 in shape:
            rest = math.prod(d for d in shape if d != -1)
            if rest == 0 or n % rest:
                raise ValueError(
                    f"popxl.reshape: cannot reshape {tuple(in_shape)} to {shape}"
                )
            shape = tuple(n // rest if d == -1 else d for d in shape)
        if any(d < 0 for d in shape) or math.prod(shape) != n:
            raise ValueError(f"popxl.reshape: cannot reshape {tuple(in_shape)} to {shape}")
        return shape

    def verify_(self) -> None:
        a, b = shape_of(self.input.type), shape_of(self.result.type)
        if math.prod(a) != math.prod(b) or dtype_of(self.input.type) != dtype_of(
            self.result.type
        ):
            raise self.fail(
                f"cannot reshape {fmt_type(self.input.type)} to {fmt_type(self.result.type)}"
            )


@irdl_op_definition
class TransposeOp(PopxlOp):
    """Permutes the dimensions (popxl.ops.transpose); default reverses them.

    ```mlir
    %y = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    ```
    """

    name = "popxl.transpose"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    perm = prop_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        shape = shape_of(types[0])
        perm = tuple(props["perm"])
        if sorted(perm) != list(range(len(shape))):
            raise cls.fail(f"{perm} is not a permutation of the dims of {fmt_type(types[0])}")
        return [tensor_type(tuple(shape[p] for p in perm), dtype_of(types[0]))]


class ReduceOp(PopxlOp):
    """Reduction over `axis` (all dims when absent), optionally keeping reduced dims."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = opt_prop_def(DenseArrayBase)
    keepdims = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        shape = shape_of(types[0])
        axes = norm_axes(cls, props.get("axis"), len(shape))
        keep = props.get("keepdims", False)
        out = tuple(
            (1 if i in axes else d) for i, d in enumerate(shape) if keep or i not in axes
        )
        return [tensor_type(out, dtype_of(types[0]))]


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """Sum over axes (popxl.ops.sum).

    ```mlir
    %s = popxl.reduce_sum %x {axis = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
    ```
    """

    name = "popxl.reduce_sum"


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Mean over axes (popxl.ops.mean)."""

    name = "popxl.reduce_mean"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum over axes (popxl.ops.max)."""

    name = "popxl.reduce_max"


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    """Minimum over axes (popxl.ops.min)."""

    name = "popxl.reduce_min"


# ------------------------------------------------------------------------------------
# Updates
# ------------------------------------------------------------------------------------


@irdl_op_definition
class ScaledAddOp(PopxlOp):
    """`a * X + b * Y` (popxl.ops.scaled_add).

    ```mlir
    %z = popxl.scaled_add %x, %y {a = 1.0 : f64, b = 0.5 : f64} : (...) -> tensor<4xf32>
    ```
    """

    name = "popxl.scaled_add"
    x = operand_def(TensorType)
    y = operand_def(TensorType)
    result = result_def(TensorType)
    a = prop_def(FloatAttr)
    b = prop_def(FloatAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dt = same_dtype(cls, types)
        return [tensor_type(broadcast(cls, types), dt)]


@irdl_op_definition
class ScaledAddInplaceOp(PopxlOp):
    """`X = a * X + b * Y` in place (popxl.ops.scaled_add_); Y broadcasts to X.

    ```mlir
    popxl.scaled_add_ %w, %g {a = 1.0 : f64, b = -0.05 : f64} : (tensor<4xf32>, tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.scaled_add_"
    x = operand_def(TensorType)
    y = operand_def(TensorType)
    a = prop_def(FloatAttr)
    b = prop_def(FloatAttr)
    WRITES: ClassVar[tuple[int, ...]] = (0,)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        same_dtype(cls, types)
        if broadcast(cls, types) != shape_of(types[0]):
            raise cls.fail(f"cannot update {fmt_type(types[0])} in place with {fmt_type(types[1])}")
        return []


OPS: list[type[IRDLOperation]] = [
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    PowOp,
    MaximumOp,
    EqualOp,
    GreaterOp,
    LogicalAndOp,
    LogicalOrOp,
    NegOp,
    AbsOp,
    SignOp,
    ReluOp,
    GeluOp,
    TanhOp,
    SigmoidOp,
    ExpOp,
    LogOp,
    SqrtOp,
    CosOp,
    SinOp,
    LogicalNotOp,
    IdentityOp,
    CastOp,
    MatmulOp,
    SoftmaxOp,
    ReshapeOp,
    TransposeOp,
    ReduceSumOp,
    ReduceMeanOp,
    ReduceMaxOp,
    ReduceMinOp,
    ScaledAddOp,
    ScaledAddInplaceOp,
]

Popxl = Dialect("popxl", OPS, [])

