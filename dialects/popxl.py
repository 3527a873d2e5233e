"""The `popxl` dialect: tensor ops mirroring `popxl.ops` one to one.

Every op infers its result types from its operand types and properties (NumPy
broadcasting rules for elementwise ops) and its verifier checks the declared result
types against that inference, naming the op and the offending shapes and dtypes.
Ops whose result shape is not a function of the operands (`reshape`, `cast`,
`expand`, `reduce_to_shape`, `init`, `gather_grad`, `slice_grad`) take the result
type as given and verify it.

All ops share one textual form:

```mlir
%y = popxl.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
%s = popxl.softmax %y {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
popxl.scaled_add_ %w, %g {a = 1.0 : f64, b = -0.05 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
```

Properties are printed in the attribute dictionary. Scalar factors that PopXL accepts
as a float *or* a tensor (`f`, `step`, `weight_decay`, `beta1`, ...) are an optional
f64 property `<name>` or an optional scalar tensor operand `<name>_tensor` (at most one
of the two). When an op has several optional operands, the present ones are matched to
the operand definitions greedily in order; an `operandSegmentSizes` entry is printed
only when that would be ambiguous (e.g. `time_step` given without `weight`):

```mlir
%u = popxl.adam_updater %m, %v, %w, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64}
    : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
```

Memory effects (`xl.dialects.effects`): ops read their operands; in-place ops (names
ending in `_`, plus `adam_var_update`, and the `*_updater` ops for their `time_step`)
also write the operands their `InPlaceInterface` trait names (`written_operands(op)`;
it may depend on which optional operands are present). Pure in-place ops have no results; the updaters have both. A
tensor that is later updated in place is stateful, so the op producing it reports
unknown effects and `cse` leaves it alone. `popxl.init` allocates (`AllocEffect`).

Python API: `Op.make(operands, result_types=None, **props)` builds an op, inferring
result types. For ops with optional operands `operands` is either one entry per
leading operand definition (`None` when absent, missing trailing ones absent) or,
without any `None`, the present operands in order (matched greedily); scalar-tensor
factors may also be passed by keyword (`f=tensor`, `time_step=tensor`). `op_props(op)` gives
the properties as Python values, plus `operand_segments` (operands per definition) for ops with optional operands; the
NumPy kernels (`xl.runtime.kernels`) read that key.

This file holds the op definitions; the shared machinery lives next to it:
`xl.dialects.attrs` (properties <-> Python values), `xl.dialects.popxl_operands`
(optional-operand matching, `operand_positions`), `xl.dialects.popxl_syntax` (the
textual form), `xl.dialects.effects` (in-place interface, memory effects) and
`xl.dialects.traits` (elementwise, view-like, gradient and PopART facts).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.constraints import BaseAttr
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasCanonicalizationPatternsTrait, MemoryWriteEffect, OpTrait
from xdsl.utils.exceptions import VerifyException

# re-exported for the modules that import them from here (runtime, rt passes, tools)
from xl.dialects.attrs import SEGMENTS, from_attr, to_attr
from xl.dialects.effects import (
    AllocEffect,
    InPlaceInterface,
    PartialWrite,
    TensorOpEffect,
    WritesOperands,
    written_operands,
)
from xl.dialects.effects import is_written as is_written  # re-exported (passes/lower_to_rt.py)
from xl.dialects.popxl_operands import (
    greedy_segments,
    has_optional_operands,
    has_segments,
    match_operands,
    operand_names,
    operand_segments,
)
from xl.dialects.popxl_syntax import parse_popxl_op, print_popxl_op
from xl.dialects.traits import (
    AcceptsViews,
    Elementwise,
    Flops,
    Internal,
    NoGradient,
    NotDifferentiable,
    PopartType,
    ViewLike,
)
from xl.dialects.utils import FLOAT8_DTYPES, dtype_of, fmt_type, shape_of, tensor_type

# ------------------------------------------------------------------------------------
# Properties: Python values <-> attributes
# ------------------------------------------------------------------------------------

# `SEGMENTS`, `to_attr`, `from_attr`: `xl.dialects.attrs` (imported above).


def op_props(op: Operation) -> dict[str, Any]:
    """The properties of an op as plain Python values.

    For popxl ops with optional operands, `operandSegmentSizes` is replaced by
    `operand_segments`: the number of operands given for each operand definition
    (always present for such ops, even without the segment-sizes property).
    """
    props = {k: from_attr(v) for k, v in op.properties.items()}
    if isinstance(op, PopxlOp) and op.has_optional_operands():
        props.pop(SEGMENTS, None)
        props["operand_segments"] = op.operand_segments()
    return props


IntProp = IntegerAttr
FloatProp = FloatAttr
ArrayProp = DenseArrayBase

# ------------------------------------------------------------------------------------
# Memory effects
# ------------------------------------------------------------------------------------


# `written_operands`, `is_written`, `AllocEffect`, `TensorOpEffect` live in
# `xl.dialects.effects` (shared with `graph` and `call`); imported above.


# ------------------------------------------------------------------------------------
# Base class
# ------------------------------------------------------------------------------------


def _err(op: str, msg: str) -> VerifyException:
    return VerifyException(f"{op}: {msg}")


class DtypeMismatch(VerifyException):
    """Operands whose dtypes must agree do not (the frontend raises it as a TypeError, as
    PopXL does for a dtype mismatch)."""


def _types_str(types: Sequence[Attribute | None]) -> str:
    return ", ".join(fmt_type(t) for t in types if t is not None)


class PopxlOp(IRDLOperation):
    """Base of the tensor ops: type inference, verification, uniform syntax.

    Subclasses implement `infer(types, props) -> result types` (raise `VerifyException`
    through `cls.fail(...)` on bad input). `types` is the list of operand types; for
    ops with optional operands it has one entry per operand definition, `None` for an
    absent operand. Ops updating operands in place declare it with a trait
    implementing `InPlaceInterface` (`WritesOperands((0,))`).
    """

    traits = traits_def(TensorOpEffect())

    # ---- operand definitions (xl.dialects.popxl_operands) ---------------------------

    @classmethod
    def has_optional_operands(cls) -> bool:
        return has_optional_operands(cls)

    @classmethod
    def has_segments(cls) -> bool:
        return has_segments(cls)

    @classmethod
    def operand_names(cls) -> tuple[str, ...]:
        return operand_names(cls)

    @classmethod
    def greedy_segments(cls, n: int) -> tuple[int, ...] | None:
        """Operands per definition when `n` operands are matched greedily in order."""
        return greedy_segments(cls, n)

    def operand_segments(self) -> tuple[int, ...]:
        """Number of operands given for each operand definition."""
        return operand_segments(self)

    def infer_operand_types(self) -> list[Attribute | None]:
        """Operand types as `infer` takes them (per definition when some are optional)."""
        if not self.has_optional_operands():
            return [o.type for o in self.operands]
        return [None if (v := getattr(self, n)) is None else v.type for n in self.operand_names()]

    # ---- syntax (xl.dialects.popxl_syntax) ------------------------------------------

    @classmethod
    def parse(cls, parser: Parser) -> PopxlOp:
        return parse_popxl_op(cls, parser)

    def print(self, printer: Printer) -> None:
        print_popxl_op(self, printer)

    # ---- inference -----------------------------------------------------------------

    @classmethod
    def fail(cls, msg: str) -> VerifyException:
        return _err(cls.name, msg)

    @classmethod
    def infer(cls, types: Sequence[Any], props: dict[str, Any]) -> list[TensorType]:
        raise NotImplementedError(cls.name)

    @classmethod
    def check_results(
        cls, types: Sequence[Any], props: dict[str, Any], results: Sequence[Attribute]
    ) -> list[Attribute]:
        """The result types the op must have; by default `infer(types, props)`."""
        return list(cls.infer(types, props))

    @classmethod
    def _coerce(cls, name: str, value: Any) -> Attribute:
        pdef = cls.get_irdl_definition().properties.get(name)
        if (
            pdef is not None
            and isinstance(pdef.constr, BaseAttr)
            and pdef.constr.attr is FloatAttr
            and isinstance(value, int | np.integer)
            and not isinstance(value, bool | np.bool_)
        ):
            value = float(value)
        return to_attr(value)

    @classmethod
    def make(
        cls,
        operands: Sequence[SSAValue | Operation | None],
        result_types: Sequence[Attribute] | None = None,
        **props: Any,
    ) -> Self:
        """Build the op, inferring result types unless they are given.

        Keyword arguments are properties (Python values or attributes; `None` is
        dropped). For ops with optional operands, an SSA value passed by keyword goes
        to the operand of that name or `<name>_tensor`; `operands` with a `None` entry
        are one entry per leading operand definition (the rest absent), without `None`
        they are matched greedily; `operand_segments` may also be given.
        """
        props = dict(props)
        segs = props.pop("operand_segments", None)
        seg_attr = props.pop(SEGMENTS, None)
        if segs is None and seg_attr is not None:
            segs = from_attr(seg_attr)
        # pyright checks this file as `dialects.popxl` but popxl_operands imports `xl.dialects.popxl`
        # (see [tool.pyright] in pyproject.toml): the same class under two module names.
        flat_vals, types, seg_sizes = match_operands(cls, operands, segs, props)  # pyright: ignore[reportArgumentType]
        for k, v in props.items():
            if isinstance(v, SSAValue | Operation):
                raise cls.fail(f"property {k!r} cannot be a tensor")
        attrs = {k: cls._coerce(k, v) for k, v in props.items() if v is not None}
        if cls.has_segments():
            attrs[SEGMENTS] = DenseArrayBase.from_list(i32, seg_sizes)
        if result_types is None:
            py = {k: from_attr(a) for k, a in attrs.items() if k != SEGMENTS}
            result_types = cls.infer(types, py)
        return cls.create(operands=flat_vals, result_types=list(result_types), properties=attrs)

    def verify_(self) -> None:
        in_types = self.infer_operand_types()
        for i, t in enumerate(in_types):
            if t is not None and not isinstance(t, TensorType):
                raise _err(self.name, f"operand {i} is {t}, not a tensor")
        for w in written_operands(self):
            if not 0 <= w < len(self.operands):
                raise _err(self.name, f"writes operand {w}, but has {len(self.operands)} operands")
        actual = [r.type for r in self.results]
        expected = self.check_results(in_types, op_props(self), actual)
        if list(expected) != actual:
            raise _err(
                self.name,
                f"result types ({_types_str(actual)}) differ from the inferred "
                f"({_types_str(expected)}) for operands ({_types_str(in_types)})",
            )


class ResultTypedOp(PopxlOp):
    """An op whose result type is given (not inferable); `check` validates it."""

    @classmethod
    def infer(cls, types, props):
        raise cls.fail("the result type cannot be inferred; pass result_types")

    @classmethod
    def check(cls, types: Sequence[Any], props: dict[str, Any], result: TensorType) -> None:
        raise NotImplementedError(cls.name)

    @classmethod
    def check_results(cls, types, props, results):
        if len(results) != 1 or not isinstance(results[0], TensorType):
            raise cls.fail(f"expects one tensor result, got ({_types_str(results)})")
        cls.check(types, props, results[0])
        return list(results)


# ------------------------------------------------------------------------------------
# Inference helpers
# ------------------------------------------------------------------------------------


def broadcast(cls: type[PopxlOp], types: Sequence[TensorType]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(shape_of(t) for t in types)))
    except ValueError:
        raise cls.fail(f"cannot broadcast {' with '.join(fmt_type(t) for t in types)}") from None


def broadcasts_to(src: Sequence[int], dst: Sequence[int]) -> bool:
    """Whether a tensor of shape `src` broadcasts (NumPy rules) to exactly `dst`."""
    try:
        return tuple(np.broadcast_shapes(tuple(src), tuple(dst))) == tuple(dst)
    except ValueError:
        return False


def same_dtype(cls: type[PopxlOp], types: Sequence[TensorType]) -> np.dtype:
    dts = {dtype_of(t) for t in types}
    if len(dts) != 1:
        raise DtypeMismatch(f"{cls.name}: operand dtypes differ: {_types_str(types)}")
    return dts.pop()


_DEFERRED_DTYPE_CHECKS: ContextVar[list[VerifyException] | None] = ContextVar("deferred_dtype_checks", default=None)


@contextmanager
def deferred_dtype_checks() -> Iterator[list[VerifyException]]:
    """Within this context, an operand of a dtype the op cannot compute (`require_float`,
    `require_int`), or an update of `dynamic_update` / `sparse_accumulate_` whose shape is
    not the slice's, does not stop type inference or verification: the errors are collected
    in the list yielded, and the op is built with the types it would have. The IR stays
    invalid: `verify()` outside the context raises the same error. (PopXL builds such ops
    and refuses the program when it is compiled; its frontend does the same with this.)"""
    errors: list[VerifyException] = []
    token = _DEFERRED_DTYPE_CHECKS.set(errors)
    try:
        yield errors
    finally:
        _DEFERRED_DTYPE_CHECKS.reset(token)


def _dtype_error(cls: type[PopxlOp], msg: str) -> None:
    deferred = _DEFERRED_DTYPE_CHECKS.get()
    if deferred is None:
        raise cls.fail(msg)
    deferred.append(cls.fail(msg))


def require_float(cls: type[PopxlOp], t: TensorType, what: str = "input") -> None:
    if dtype_of(t).kind != "f":
        _dtype_error(cls, f"{what} must be a floating point tensor, got {fmt_type(t)}")


def require_int(cls: type[PopxlOp], t: TensorType, what: str = "indices") -> None:
    if dtype_of(t).kind not in "iu":
        _dtype_error(cls, f"{what} must be an integer tensor, got {fmt_type(t)}")


def require_numeric(cls: type[PopxlOp], t: TensorType, what: str = "input") -> None:
    if dtype_of(t).kind not in "fiu":
        raise cls.fail(f"{what} must be a numeric tensor, got {fmt_type(t)}")


def require_same_shape(cls: type[PopxlOp], a: TensorType, b: TensorType, what: str) -> None:
    if shape_of(a) != shape_of(b):
        raise cls.fail(f"{what}: shapes differ: {fmt_type(a)} vs {fmt_type(b)}")


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


def scalar_operand(cls: type[PopxlOp], t: TensorType | None, what: str) -> None:
    """A factor given as a tensor: numeric with exactly one element."""
    if t is None:
        return
    if dtype_of(t).kind not in "fiu" or math.prod(shape_of(t)) != 1:
        raise cls.fail(f"{what} must be a numeric tensor with one element, got {fmt_type(t)}")


def factor(
    cls: type[PopxlOp],
    t: TensorType | None,
    props: dict[str, Any],
    name: str,
    required: bool = False,
) -> None:
    """Check a scalar factor given as property `name` or tensor operand `<name>_tensor`."""
    scalar_operand(cls, t, f"{name}_tensor")
    if t is not None and name in props:
        raise cls.fail(f"{name} is given both as a property and as a tensor operand")
    if required and t is None and name not in props:
        raise cls.fail(f"{name} is required (a property or a tensor operand)")


def update_compatible(cls: type[PopxlOp], t: TensorType, x: TensorType, what: str = "X") -> None:
    """`x` can update the state `t` in place: numeric, broadcastable to t (dtype may differ)."""
    require_numeric(cls, t, "the updated tensor")
    require_numeric(cls, x, what)
    try:
        ok = tuple(np.broadcast_shapes(shape_of(t), shape_of(x))) == shape_of(t)
    except ValueError:
        ok = False
    if not ok:
        raise cls.fail(f"cannot update {fmt_type(t)} in place with {what} {fmt_type(x)}")


def slice_shape(cls: type[PopxlOp], shape: Sequence[int], props: dict[str, Any]) -> tuple[int, ...]:
    """Result shape of `popxl.slice` / operand shape of `popxl.slice_grad` (NumPy rules)."""
    start, stop, step = props.get("start"), props.get("stop"), props.get("step")
    given = [len(a) for a in (start, stop, step) if a is not None]
    axes = props.get("axes")
    n = given[0] if given else (len(axes) if axes is not None else 0)
    if any(g != n for g in given) or (axes is not None and len(axes) != n):
        raise cls.fail(f"start {start}, stop {stop}, step {step} and axes {axes} must have equal lengths")
    if axes is None:
        if n > len(shape):
            raise cls.fail(f"{n} slice entries for rank {len(shape)}")
        axes = tuple(range(n))
    nax = [norm_axis(cls, a, len(shape)) for a in axes]
    if len(set(nax)) != len(nax):
        raise cls.fail(f"repeated axis in {tuple(axes)}")
    out = list(shape)
    for i, a in enumerate(nax):
        st = 1 if step is None else step[i]
        if st == 0:
            raise cls.fail("slice step cannot be zero")
        s = slice(None if start is None else start[i], None if stop is None else stop[i], st)
        out[a] = len(range(*s.indices(shape[a])))
    return tuple(out)


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
            _dtype_error(cls, f"unsupported dtype {dt} for operands ({_types_str(types)})")
        shape = broadcast(cls, types)
        return [tensor_type(shape, np.bool_ if cls.RESULT_BOOL else dt)]


@irdl_op_definition
class AddOp(BinaryOp):
    """`lhs + rhs` (popxl.ops.add).

    ```mlir
    %z = popxl.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.add"
    traits = traits_def(AcceptsViews(), Elementwise())


@irdl_op_definition
class SubOp(BinaryOp):
    """`lhs - rhs` (popxl.ops.sub).

    ```mlir
    %z = popxl.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.sub"
    traits = traits_def(AcceptsViews(), Elementwise())


@irdl_op_definition
class MulOp(BinaryOp):
    """`lhs * rhs` (popxl.ops.mul).

    ```mlir
    %z = popxl.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.mul"
    traits = traits_def(AcceptsViews(), Elementwise())


@irdl_op_definition
class DivOp(BinaryOp):
    """`lhs / rhs` (popxl.ops.div); integer division truncates toward zero.

    ```mlir
    %z = popxl.div %a, %b : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
    ```
    """

    name = "popxl.div"
    traits = traits_def(AcceptsViews(), Elementwise())


@irdl_op_definition
class PowOp(BinaryOp):
    """`lhs ** rhs` (popxl.ops.pow).

    ```mlir
    %z = popxl.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.pow"
    traits = traits_def(AcceptsViews(), Elementwise())
    DTYPE_KINDS: ClassVar[str] = "fiu"


@irdl_op_definition
class MaximumOp(BinaryOp):
    """Elementwise maximum of two tensors (popxl.ops.maximum).

    ```mlir
    %z = popxl.maximum %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.maximum"
    traits = traits_def(AcceptsViews(), Elementwise(), PopartType("Max"))


@irdl_op_definition
class MinimumOp(BinaryOp):
    """Elementwise minimum of two tensors.

    ```mlir
    %z = popxl.minimum %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.minimum"
    traits = traits_def(AcceptsViews(), Elementwise(), PopartType("Min"))


@irdl_op_definition
class EqualOp(BinaryOp):
    """`lhs == rhs`, bool result (popxl.ops.equal).

    ```mlir
    %z = popxl.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
    ```
    """

    name = "popxl.equal"
    traits = traits_def(AcceptsViews(), NoGradient())
    RESULT_BOOL: ClassVar[bool] = True


@irdl_op_definition
class GreaterOp(BinaryOp):
    """`lhs > rhs`, bool result (popxl.ops.greater).

    ```mlir
    %z = popxl.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
    ```
    """

    name = "popxl.greater"
    traits = traits_def(AcceptsViews(), NoGradient())
    RESULT_BOOL: ClassVar[bool] = True


@irdl_op_definition
class LogicalAndOp(BinaryOp):
    """`lhs and rhs` on bool tensors.

    ```mlir
    %z = popxl.logical_and %a, %b : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
    ```
    """

    name = "popxl.logical_and"
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("And"))
    RESULT_BOOL: ClassVar[bool] = True
    DTYPE_KINDS: ClassVar[str] = "b"


@irdl_op_definition
class LogicalOrOp(BinaryOp):
    """`lhs or rhs` on bool tensors.

    ```mlir
    %z = popxl.logical_or %a, %b : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
    ```
    """

    name = "popxl.logical_or"
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("Or"))
    RESULT_BOOL: ClassVar[bool] = True
    DTYPE_KINDS: ClassVar[str] = "b"


class UnaryOp(PopxlOp):
    """Elementwise unary op: same shape and dtype as the input."""

    traits = traits_def(AcceptsViews(), Elementwise())

    input = operand_def(TensorType)
    result = result_def(TensorType)
    DTYPE_KINDS: ClassVar[str] = "f"

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        (t,) = types
        if dtype_of(t).kind not in cls.DTYPE_KINDS:
            kind = "a floating point" if cls.DTYPE_KINDS == "f" else "a supported"
            _dtype_error(cls, f"input must be {kind} tensor, got {fmt_type(t)}")
        return [t]


_EX_DT = {"f": "f32", "fi": "f32", "b": "i1", "fiub": "f32", "iu": "i32"}


def _unary(op_name: str, doc: str, kinds: str = "f", traits: tuple[OpTrait, ...] = ()) -> type[UnaryOp]:
    cls = type(
        "".join(p.capitalize() for p in op_name.split(".")[1].split("_")) + "Op",
        (UnaryOp,),
        {
            "name": op_name,
            "__doc__": f"{doc}\n\n```mlir\n%y = {op_name} %x : (tensor<4x{_EX_DT[kinds]}>) -> "
            f"tensor<4x{_EX_DT[kinds]}>\n```\n",
            "DTYPE_KINDS": kinds,
            "__annotations__": {"DTYPE_KINDS": "ClassVar[str]"},
            "__module__": __name__,
            "traits": traits_def(*traits),
        },
    )
    return irdl_op_definition(cls)


NegOp = _unary("popxl.neg", "`-x` (popxl.ops.negate).", "fi")
AbsOp = _unary("popxl.abs", "`|x|` (popxl.ops.abs).", "fi")
SignOp = _unary("popxl.sign", "sign of x: -1, 0 or 1 (popxl.ops.sign).", "fi", (NoGradient(),))
ReluOp = _unary("popxl.relu", "`max(x, 0)` (popxl.ops.relu).")
GeluOp = _unary(
    "popxl.gelu",
    "tanh-approximated GELU, as PopXL: `0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`.",
)
TanhOp = _unary("popxl.tanh", "`tanh(x)` (popxl.ops.tanh).")
SigmoidOp = _unary("popxl.sigmoid", "`1 / (1 + exp(-x))` (popxl.ops.sigmoid).")
SwishOp = _unary("popxl.swish", "`x * sigmoid(x)` (popxl.ops.swish).")
ExpOp = _unary("popxl.exp", "`exp(x)` (popxl.ops.exp).")
LogOp = _unary("popxl.log", "natural logarithm (popxl.ops.log).")
SqrtOp = _unary("popxl.sqrt", "square root (popxl.ops.sqrt).")
CosOp = _unary("popxl.cos", "`cos(x)` (popxl.ops.cos).")
SinOp = _unary("popxl.sin", "`sin(x)` (popxl.ops.sin).")
LogicalNotOp = _unary("popxl.logical_not", "`not x` on bool tensors.", "b", (NoGradient(), PopartType("Not")))
IdentityOp = _unary("popxl.identity", "A copy of the input (popxl.ops.identity).", "fiub")
DetachOp = _unary(
    "popxl.detach",
    "A copy of the input that autodiff treats as a constant: no gradient flows through it (popxl.ops.detach).",
    "fiub",
    (NoGradient(),),
)
CeilOp = _unary(
    "popxl.ceil",
    "The smallest integer not less than x, NaN propagated (popxl.ops.ceil). Its "
    "derivative is zero almost everywhere: no gradient flows through it.",
    "f",
    (NoGradient(),),
)
FloorOp = _unary(
    "popxl.floor",
    "The largest integer not greater than x, NaN propagated (popxl.ops.floor). Its "
    "derivative is zero almost everywhere: no gradient flows through it.",
    "f",
    (NoGradient(),),
)
ErfOp = _unary("popxl.erf", "The error function `erf(x)` (ONNX Erf; popxl.ops.erf).")
BitwiseNotOp = _unary(
    "popxl.bitwise_not",
    "`~x` on integer tensors (PopART BitwiseNot; popxl.ops.bitwise_not).",
    "iu",
    (NoGradient(),),
)


@irdl_op_definition
class GeluErfOp(UnaryOp):
    """Exact GELU `0.5 x (1 + erf(x / sqrt(2)))` (popxl.ops.geluerf).

    ```mlir
    %y = popxl.geluerf %x : (tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.geluerf"
    traits = traits_def(AcceptsViews(), PopartType("GeluErf"))


@irdl_op_definition
class FmodOp(BinaryOp):
    """`lhs - trunc(lhs / rhs) * rhs`: the remainder with the sign of `lhs`, as C `fmod`
    (popxl.ops.fmod). Integer division by zero gives 0.

    ```mlir
    %z = popxl.fmod %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.fmod"
    traits = traits_def(AcceptsViews(), Elementwise())
    DTYPE_KINDS: ClassVar[str] = "fiu"


class _BitwiseBinaryOp(BinaryOp):
    traits = traits_def(Elementwise(), NoGradient())
    DTYPE_KINDS: ClassVar[str] = "iu"


@irdl_op_definition
class BitwiseAndOp(_BitwiseBinaryOp):
    """`lhs & rhs` on integer tensors (PopART BitwiseAnd; popxl.ops.bitwise_and).

    ```mlir
    %z = popxl.bitwise_and %a, %b : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
    ```
    """

    name = "popxl.bitwise_and"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class BitwiseOrOp(_BitwiseBinaryOp):
    """`lhs | rhs` on integer tensors (PopART BitwiseOr; popxl.ops.bitwise_or).

    ```mlir
    %z = popxl.bitwise_or %a, %b : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
    ```
    """

    name = "popxl.bitwise_or"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class BitwiseXorOp(_BitwiseBinaryOp):
    """`lhs ^ rhs` on integer tensors (PopART BitwiseXor; popxl.ops.bitwise_xor).

    ```mlir
    %z = popxl.bitwise_xor %a, %b : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
    ```
    """

    name = "popxl.bitwise_xor"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class BitwiseXnorOp(_BitwiseBinaryOp):
    """`~(lhs ^ rhs)` on integer tensors (PopART BitwiseXnor; popxl.ops.bitwise_xnor).

    ```mlir
    %z = popxl.bitwise_xnor %a, %b : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
    ```
    """

    name = "popxl.bitwise_xnor"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class LogicalXorOp(BinaryOp):
    """`lhs != rhs` on bool tensors (ONNX Xor; popxl.ops.logical_xor).

    ```mlir
    %z = popxl.logical_xor %a, %b : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
    ```
    """

    name = "popxl.logical_xor"
    traits = traits_def(AcceptsViews(), Elementwise(), NoGradient(), PopartType("Xor"))
    RESULT_BOOL: ClassVar[bool] = True
    DTYPE_KINDS: ClassVar[str] = "b"


@irdl_op_definition
class ClipOp(UnaryOp):
    """Each element clamped to `[min, max]`, NaN propagated (popxl.ops.clip / clamp).

    `min` / `max` are f64 properties; an absent (or infinite) bound is no bound. On
    integer tensors the bounds are rounded inwards (`ceil(min)`, `floor(max)`).

    ```mlir
    %y = popxl.clip %x {min = -1.0 : f64, max = 1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.clip"
    traits = traits_def(AcceptsViews())
    min = opt_prop_def(FloatAttr)
    max = opt_prop_def(FloatAttr)
    DTYPE_KINDS: ClassVar[str] = "fiu"

    @classmethod
    def infer(cls, types, props):
        out = super().infer(types, props)
        lo, hi = props.get("min", -math.inf), props.get("max", math.inf)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise cls.fail(f"min {lo} must not be greater than max {hi} (nor NaN)")
        return out


@irdl_op_definition
class PrintTensorOp(PopxlOp):
    """Prints `title` and the input each time it runs and returns a copy of the input
    (popxl.ops.print_tensor). With `print_gradient`, the gradient rule prints the
    gradient too (title `<title>_gradient`); without `print_self` only the gradient is
    printed. The printing is a side effect: the op is kept when its result is unused.

    Format properties (all optional, upstream's defaults): `summarise_threshold` (1000;
    0: never summarise), `edge_items` (3), `max_line_width` (75; 0: no wrapping), `digits`
    (8), `float_format` ("auto", "fixed", "scientific" or "none"), `separator` (" "),
    `open_bracket` ("["), `close_bracket` ("]").

    ```mlir
    %y = popxl.print_tensor %x {title = "x"} : (tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.print_tensor"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    title = prop_def(StringAttr)
    print_self = opt_prop_def(IntegerAttr)
    print_gradient = opt_prop_def(IntegerAttr)
    summarise_threshold = opt_prop_def(IntegerAttr)
    edge_items = opt_prop_def(IntegerAttr)
    max_line_width = opt_prop_def(IntegerAttr)
    digits = opt_prop_def(IntegerAttr)
    float_format = opt_prop_def(StringAttr)
    separator = opt_prop_def(StringAttr)
    open_bracket = opt_prop_def(StringAttr)
    close_bracket = opt_prop_def(StringAttr)
    traits = traits_def(AcceptsViews(), MemoryWriteEffect())

    FLOAT_FORMATS: ClassVar[tuple[str, ...]] = ("auto", "fixed", "scientific", "none")

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        for k in ("separator", "open_bracket", "close_bracket"):
            if k in props and len(props[k]) != 1:
                raise cls.fail(f"{k} must be exactly one character, got {props[k]!r}")
        if props.get("float_format", "auto") not in cls.FLOAT_FORMATS:
            raise cls.fail(f"float_format must be one of {', '.join(cls.FLOAT_FORMATS)}, got {props['float_format']!r}")
        for k in ("summarise_threshold", "edge_items", "max_line_width", "digits"):
            if props.get(k, 0) < 0:
                raise cls.fail(f"{k} must be >= 0, got {props[k]}")
        return [types[0]]


def _canonicalization(*names: str) -> HasCanonicalizationPatternsTrait:
    """A trait whose patterns are the named classes of `xl.dialects.popxl_canonicalization`
    (imported when first asked: the patterns import the op classes)."""

    class Canonicalization(HasCanonicalizationPatternsTrait):
        @classmethod
        def get_canonicalization_patterns(cls) -> tuple[Any, ...]:
            from xl.dialects import popxl_canonicalization as patterns

            return tuple(getattr(patterns, n)() for n in names)

    return Canonicalization()


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
    traits = traits_def(AcceptsViews(), TensorOpEffect(), _canonicalization("RemoveNoopShapeOp"))

    def verify_(self) -> None:
        if shape_of(self.input.type) != shape_of(self.result.type):
            raise self.fail(f"cannot cast {fmt_type(self.input.type)} to {fmt_type(self.result.type)}: shapes differ")


def require_float8(cls: type[PopxlOp], t: TensorType, what: str = "input") -> None:
    if dtype_of(t) not in FLOAT8_DTYPES:
        raise cls.fail(f"{what} must be a float8_143 or float8_152 tensor, got {fmt_type(t)}")


def log2_scale_operand(cls: type[PopxlOp], t: TensorType) -> None:
    """The `log2_scale` operand of the float8 ops: a scalar int32 tensor."""
    if shape_of(t) != () or dtype_of(t) != np.int32:
        raise cls.fail(f"log2_scale must be a scalar int32 tensor, got {fmt_type(t)}")


@irdl_op_definition
class Pow2ScaleCastToFp8Op(ResultTypedOp):
    """`cast(input * 2**log2_scale, float8)` (popxl.ops.pow2scale_cast_to_fp8): a float
    tensor to float8_143 (`f8E4M3FNUZ`) or float8_152 (`f8E5M2FNUZ`), rounding to
    nearest even; values too large for the format become NaN. `log2_scale` is a
    scalar int32 in [-32, 32) (checked at run time). Float8 tensors carry no gradient
    (as integer tensors), so none flows through the float8 ops.

    ```mlir
    %y = popxl.pow2scale_cast_to_fp8 %x, %s : (tensor<4xf32>, tensor<i32>) -> tensor<4xf8E4M3FNUZ>
    ```
    """

    name = "popxl.pow2scale_cast_to_fp8"
    input = operand_def(TensorType)
    log2_scale = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("Pow2ScaleThenCast"))

    @classmethod
    def check(cls, types, props, result):
        arity(cls, types, 2)
        require_float(cls, types[0])
        log2_scale_operand(cls, types[1])
        require_float8(cls, result, "the result")
        require_same_shape(cls, types[0], result, "input and result")


@irdl_op_definition
class Pow2ScaleCastFromFp8Op(ResultTypedOp):
    """`cast(input, float) * 2**log2_scale` (popxl.ops.pow2scale_cast_from_fp8): a
    float8 tensor to float16 or float32. `log2_scale` is a scalar int32 in [-32, 32)
    (checked at run time).

    ```mlir
    %y = popxl.pow2scale_cast_from_fp8 %x, %s : (tensor<4xf8E4M3FNUZ>, tensor<i32>) -> tensor<4xf16>
    ```
    """

    name = "popxl.pow2scale_cast_from_fp8"
    input = operand_def(TensorType)
    log2_scale = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("CastThenPow2Scale"))

    @classmethod
    def check(cls, types, props, result):
        arity(cls, types, 2)
        require_float8(cls, types[0])
        log2_scale_operand(cls, types[1])
        if dtype_of(result) not in (np.dtype(np.float16), np.dtype(np.float32)):
            raise cls.fail(f"the result must be float16 or float32, got {fmt_type(result)}")
        require_same_shape(cls, types[0], result, "input and result")


# ------------------------------------------------------------------------------------
# Linear algebra, NN
# ------------------------------------------------------------------------------------


def matmul_shape(cls: type[PopxlOp], lhs: TensorType, rhs: TensorType) -> tuple[int, ...]:
    """Result shape of NumPy `matmul` on operands of these types (batch dims broadcast)."""
    types = (lhs, rhs)
    a, b = shape_of(lhs), shape_of(rhs)
    if len(a) == 0 or len(b) == 0:
        raise cls.fail(f"operands must have rank >= 1, got {_types_str(types)}")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise cls.fail(
            f"contracting dimensions differ: {fmt_type(types[0])} @ {fmt_type(types[1])} ({a2[-1]} vs {b2[-2]})"
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
    return shape


def matmul_flops(inputs: Sequence[tuple[int, ...]], results: Sequence[tuple[int, ...]], props: Any) -> int:
    """2 M N K per matrix product: every result element is K multiply-adds (K the
    contracting dim of the first operand; batch dims broadcast)."""
    k = inputs[0][-1]
    return 2 * math.prod(results[0]) * k


@irdl_op_definition
class MatmulOp(PopxlOp):
    """Matrix product with NumPy `matmul` semantics, batch dims broadcast (popxl.ops.matmul).

    ```mlir
    %y = popxl.matmul %x, %w : (tensor<8x784xf32>, tensor<784x512xf32>) -> tensor<8x512xf32>
    ```
    """

    name = "popxl.matmul"
    traits = traits_def(AcceptsViews(), PopartType("MatMul"), Flops(matmul_flops))
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dt = dtype_of(types[0])
        if dtype_of(types[1]) != dt:  # PopXL builds it (result of lhs's dtype), refused when compiled
            _dtype_error(cls, f"operand dtypes differ: {_types_str(types)}")
        return [tensor_type(matmul_shape(cls, types[0], types[1]), dt)]


@irdl_op_definition
class MatmulPow2ScaledOp(PopxlOp):
    """`matmul(lhs, rhs) * 2**log2_scale` of float8 operands (either format), with float16
    partials and result, as PopXL's float8 matmul (popxl.ops.matmul_pow2scaled). Shapes
    follow `popxl.matmul`; `log2_scale` is a scalar int32 in [-32, 32) (checked at run
    time).

    ```mlir
    %y = popxl.matmul_pow2scaled %a, %b, %s
        : (tensor<2x4xf8E4M3FNUZ>, tensor<4x3xf8E5M2FNUZ>, tensor<i32>) -> tensor<2x3xf16>
    ```
    """

    name = "popxl.matmul_pow2scaled"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    log2_scale = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("MatMul"), Flops(matmul_flops))

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 3)
        require_float8(cls, types[0], "lhs")
        require_float8(cls, types[1], "rhs")
        log2_scale_operand(cls, types[2])
        return [tensor_type(matmul_shape(cls, types[0], types[1]), np.float16)]


@irdl_op_definition
class SoftmaxOp(PopxlOp):
    """Softmax along `axis` (popxl.ops.softmax).

    ```mlir
    %p = popxl.softmax %x {axis = 1 : i64} : (tensor<8x10xf32>) -> tensor<8x10xf32>
    ```
    """

    name = "popxl.softmax"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        require_float(cls, types[0])
        norm_axis(cls, props["axis"], len(shape_of(types[0])))
        return [types[0]]


@irdl_op_definition
class CumsumOp(PopxlOp):
    """Cumulative sum along `dim` (popxl.ops.cumsum); with `reverse = true` each element
    is the sum of itself and the elements after it (the gradient of a cumsum).

    ```mlir
    %c = popxl.cumsum %x {dim = 0 : i64} : (tensor<4x3xf32>) -> tensor<4x3xf32>
    ```
    """

    name = "popxl.cumsum"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr)
    reverse = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        require_numeric(cls, types[0])
        rank = len(shape_of(types[0]))
        if rank == 0:
            raise cls.fail(f"input must have rank >= 1, got {fmt_type(types[0])}")
        norm_axis(cls, props["dim"], rank)
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
    traits = traits_def(
        AcceptsViews(), TensorOpEffect(), _canonicalization("RemoveNoopShapeOp", "FoldReshapeChain"), ViewLike()
    )

    @staticmethod
    def resolve_shape(in_shape: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
        """Resolve one `-1` in `shape` against the input shape (ValueError if impossible)."""
        shape = tuple(int(d) for d in shape)
        n = math.prod(in_shape)
        if shape.count(-1) > 1:
            raise ValueError(f"popxl.reshape: Reshape shape can contain at most one '-1' value, got {shape}")
        if any(d < -1 or (d == 0 and n) for d in shape):
            raise ValueError(
                f"popxl.reshape: Invalid shape value in reshape: each must be > 0 or -1 (0 for an empty "
                f"tensor), got {shape} for {tuple(in_shape)}"
            )
        if -1 in shape:
            rest = math.prod(d for d in shape if d != -1)
            if rest == 0 or n % rest:
                raise ValueError(f"popxl.reshape: cannot reshape {tuple(in_shape)} to {shape}")
            shape = tuple(n // rest if d == -1 else d for d in shape)
        if any(d < 0 for d in shape) or math.prod(shape) != n:
            raise ValueError(f"popxl.reshape: cannot reshape {tuple(in_shape)} to {shape}")
        return shape

    def verify_(self) -> None:
        a, b = shape_of(self.input.type), shape_of(self.result.type)
        if math.prod(a) != math.prod(b) or dtype_of(self.input.type) != dtype_of(self.result.type):
            raise self.fail(f"cannot reshape {fmt_type(self.input.type)} to {fmt_type(self.result.type)}")


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
    traits = traits_def(AcceptsViews(), TensorOpEffect(), _canonicalization("FoldTransposeChain"), ViewLike())

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
        out = tuple((1 if i in axes else d) for i, d in enumerate(shape) if keep or i not in axes)
        return [tensor_type(out, dtype_of(types[0]))]


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """Sum over axes (popxl.ops.sum).

    ```mlir
    %s = popxl.reduce_sum %x {axis = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
    ```
    """

    name = "popxl.reduce_sum"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Mean over axes (popxl.ops.mean).

    ```mlir
    %s = popxl.reduce_mean %x {axis = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
    ```
    """

    name = "popxl.reduce_mean"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum over axes (popxl.ops.max).

    ```mlir
    %s = popxl.reduce_max %x {axis = array<i64: 1>, keepdims = true} : (tensor<2x3xf32>) -> tensor<2x1xf32>
    ```
    """

    name = "popxl.reduce_max"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    """Minimum over axes (popxl.ops.min).

    ```mlir
    %s = popxl.reduce_min %x {axis = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
    ```
    """

    name = "popxl.reduce_min"
    traits = traits_def(AcceptsViews())


# ------------------------------------------------------------------------------------
# Shape and index ops
# ------------------------------------------------------------------------------------


@irdl_op_definition
class ConcatOp(PopxlOp):
    """Joins tensors along `axis` (popxl.ops.concat); other dims must match.

    ```mlir
    %c = popxl.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
    ```
    """

    name = "popxl.concat"
    traits = traits_def(AcceptsViews())
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        if not types:
            raise cls.fail("expects at least one operand")
        if len({dtype_of(t) for t in types}) > 1:  # upstream's words
            raise DtypeMismatch(
                f"{cls.name}: All inputs to a concat operation must have the same type: operand dtypes differ: "
                f"{_types_str(types)}"
            )
        dt = same_dtype(cls, types)
        shapes = [shape_of(t) for t in types]
        rank = len(shapes[0])
        if rank == 0:
            raise cls.fail("cannot concatenate rank-0 tensors")
        axis = norm_axis(cls, props["axis"], rank)
        for s in shapes:
            if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
                raise cls.fail(f"shapes must match except on axis {axis}: {', '.join(str(x) for x in shapes)}")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [tensor_type(out, dt)]


@irdl_op_definition
class SliceOp(PopxlOp):
    """`t[start:stop:step]` on `axes` with NumPy semantics (popxl.ops.slice).

    `start`, `stop`, `step`, `axes` are optional arrays of equal length (`axes`
    defaults to the leading dims, `step` to 1). Negative values count from the end and
    out-of-range values are clamped as in Python; "no bound" is written as a huge
    value (e.g. `9223372036854775807`, or `-9223372036854775808` as a stop with a
    negative step).

    ```mlir
    %s = popxl.slice %x {start = array<i64: 1>, stop = array<i64: 3>, axes = array<i64: 1>}
        : (tensor<2x4xf32>) -> tensor<2x2xf32>
    ```
    """

    name = "popxl.slice"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    result = result_def(TensorType)
    start = opt_prop_def(DenseArrayBase)
    stop = opt_prop_def(DenseArrayBase)
    step = opt_prop_def(DenseArrayBase)
    axes = opt_prop_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        return [tensor_type(slice_shape(cls, shape_of(types[0]), props), dtype_of(types[0]))]


@irdl_op_definition
class GatherOp(PopxlOp):
    """Selects slices of `data` along `axis` at integer `indices` (popxl.ops.gather).

    Result shape `data.shape[:axis] + indices.shape + data.shape[axis+1:]`. An index
    out of range gives zeros: with `zero_oor` the range is `[0, n)` (negative indices give
    zeros, as upstream); without it `[-n, n)`, negative indices counting from the end.

    ```mlir
    %g = popxl.gather %w, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
    ```
    """

    name = "popxl.gather"
    traits = traits_def(AcceptsViews())
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    zero_oor = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        data, idx = types
        require_int(cls, idx)
        shape = shape_of(data)
        if not shape:
            raise cls.fail(f"cannot gather from a rank-0 tensor {fmt_type(data)}")
        axis = norm_axis(cls, props["axis"], len(shape))
        out = (*shape[:axis], *shape_of(idx), *shape[axis + 1 :])
        return [tensor_type(out, dtype_of(data))]


@irdl_op_definition
class WhereOp(PopxlOp):
    """`condition ? lhs : rhs` elementwise with broadcasting (popxl.ops.where).

    ```mlir
    %w = popxl.where %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.where"
    traits = traits_def(AcceptsViews())
    condition = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 3)
        c, a, b = types
        if dtype_of(c) != np.bool_:
            raise cls.fail(f"condition must be a bool tensor, got {fmt_type(c)}")
        dt = same_dtype(cls, [a, b])
        return [tensor_type(broadcast(cls, types), dt)]


@irdl_op_definition
class OnehotOp(PopxlOp):
    """One-hot encoding of integer `indices` (popxl.ops.onehot, ONNX OneHot).

    `values` holds `[off, on]`; the result has its dtype and a new dim of size
    `num_classes` inserted at `axis` (default -1: last). Negative indices count from
    `num_classes`; out-of-range ones give an all-`off` row.

    ```mlir
    %o = popxl.onehot %i, %v {num_classes = 10 : i64} : (tensor<8xi32>, tensor<2xf32>) -> tensor<8x10xf32>
    ```
    """

    name = "popxl.onehot"
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("OneHot"))
    indices = operand_def(TensorType)
    values = operand_def(TensorType)
    result = result_def(TensorType)
    num_classes = prop_def(IntegerAttr)
    axis = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        idx, vals = types
        require_int(cls, idx)
        if shape_of(vals) != (2,):
            raise cls.fail(f"values must have shape (2,) ([off, on]), got {fmt_type(vals)}")
        n = props["num_classes"]
        if n <= 0:
            raise cls.fail(f"num_classes must be positive, got {n}")
        shape = shape_of(idx)
        axis = props.get("axis", -1)
        if not -(len(shape) + 1) <= axis <= len(shape):
            raise cls.fail(f"axis {axis} is out of range for rank {len(shape) + 1}")
        axis %= len(shape) + 1
        out = (*shape[:axis], n, *shape[axis:])
        return [tensor_type(out, dtype_of(vals))]


@irdl_op_definition
class SqueezeOp(PopxlOp):
    """Removes size-1 dims at `axes` (all size-1 dims when absent) (popxl.ops.squeeze).

    ```mlir
    %s = popxl.squeeze %x {axes = array<i64: 0>} : (tensor<1x3xf32>) -> tensor<3xf32>
    ```
    """

    name = "popxl.squeeze"
    traits = traits_def(AcceptsViews(), ViewLike(), PopartType("Reshape"))  # PopXL's squeeze is a reshape
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axes = opt_prop_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        shape = shape_of(types[0])
        if props.get("axes") is None:
            axes = tuple(i for i, d in enumerate(shape) if d == 1)
        else:
            axes = norm_axes(cls, props["axes"], len(shape))
        for a in axes:
            if shape[a] != 1:
                raise cls.fail(f"cannot squeeze axis {a} of size {shape[a]} in {fmt_type(types[0])}")
        out = tuple(d for i, d in enumerate(shape) if i not in axes)
        return [tensor_type(out, dtype_of(types[0]))]


@irdl_op_definition
class ExpandOp(ResultTypedOp):
    """Broadcasts the input to the result shape (`np.broadcast_to`; popxl.ops.expand).

    ```mlir
    %e = popxl.expand %b : (tensor<3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.expand"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def check(cls, types, props, result):
        (t,) = types
        if dtype_of(t) != dtype_of(result):
            raise cls.fail(f"dtype changes: {fmt_type(t)} -> {fmt_type(result)}")
        if not broadcasts_to(shape_of(t), shape_of(result)):
            raise cls.fail(f"cannot broadcast {fmt_type(t)} to {fmt_type(result)}")


@irdl_op_definition
class ReduceToShapeOp(ResultTypedOp):
    """Sums a broadcast tensor back to the result shape (gradient of broadcasting).

    The result shape must broadcast to the input shape; leading extra dims and dims
    where the result has size 1 are summed.

    ```mlir
    %r = popxl.reduce_to_shape %g : (tensor<2x3xf32>) -> tensor<1x3xf32>
    ```
    """

    name = "popxl.reduce_to_shape"
    traits = traits_def(AcceptsViews(), Internal())
    input = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def check(cls, types, props, result):
        (t,) = types
        if dtype_of(t) != dtype_of(result):
            raise cls.fail(f"dtype changes: {fmt_type(t)} -> {fmt_type(result)}")
        if not broadcasts_to(shape_of(result), shape_of(t)):
            raise cls.fail(f"{fmt_type(result)} does not broadcast to the input {fmt_type(t)}")


@irdl_op_definition
class InitOp(ResultTypedOp):
    """A new tensor of the result type, zero-filled or undefined (popxl.ops.init).

    `init_type` is "zero" or "undef" (the kernel zero-fills an undef tensor on first
    use only).

    ```mlir
    %z = popxl.init {init_type = "zero"} : () -> tensor<4xf32>
    ```
    """

    name = "popxl.init"
    result = result_def(TensorType)
    init_type = prop_def(StringAttr)
    # `undef` mode writes its result once
    traits = traits_def(AcceptsViews(), AllocEffect(), NoGradient(), PartialWrite())

    @classmethod
    def check(cls, types, props, result):
        if props["init_type"] not in ("zero", "undef"):
            raise cls.fail(f'init_type must be "zero" or "undef", got {props["init_type"]!r}')


class ArgReduceOp(PopxlOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    keepdims = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        require_numeric(cls, types[0])
        shape = shape_of(types[0])
        if not shape:
            raise cls.fail(f"input must have rank >= 1, got {fmt_type(types[0])}")
        axis = norm_axis(cls, props["axis"], len(shape))
        keep = props.get("keepdims", False)
        out = tuple(1 if i == axis else d for i, d in enumerate(shape) if keep or i != axis)
        return [tensor_type(out, np.int32)]


@irdl_op_definition
class ArgmaxOp(ArgReduceOp):
    """Index of the maximum along `axis` (first on ties), int32 (popxl.ops.argmax).

    ```mlir
    %i = popxl.argmax %x {axis = 1 : i64} : (tensor<8x10xf32>) -> tensor<8xi32>
    ```
    """

    name = "popxl.argmax"
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("ArgMax"))


@irdl_op_definition
class ArgminOp(ArgReduceOp):
    """Index of the minimum along `axis` (first on ties), int32 (popxl.ops.argmin).

    ```mlir
    %i = popxl.argmin %x {axis = 1 : i64, keepdims = true} : (tensor<8x10xf32>) -> tensor<8x1xi32>
    ```
    """

    name = "popxl.argmin"
    traits = traits_def(AcceptsViews(), NoGradient(), PopartType("ArgMin"))


# ------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------

REDUCTIONS = ("mean", "sum", "none")


def _nll_check(cls: type[PopxlOp], probs: TensorType, labels: TensorType, props: dict[str, Any]):
    require_float(cls, probs, "probs")
    require_int(cls, labels, "labels")
    ps = shape_of(probs)
    if not ps or shape_of(labels) != ps[:-1]:
        raise cls.fail(
            f"labels {fmt_type(labels)} must have the shape of probs {fmt_type(probs)} without its last (class) dim"
        )
    if props["reduction"] not in REDUCTIONS:
        raise cls.fail(f"reduction must be one of {REDUCTIONS}, got {props['reduction']!r}")
    loss_shape = shape_of(labels) if props["reduction"] == "none" else ()
    return tensor_type(loss_shape, dtype_of(probs))


@irdl_op_definition
class NllLossOp(PopxlOp):
    """Negative log likelihood (popxl.ops.nll_loss, ONNX NegativeLogLikelihoodLoss).

    `probs` is `[..., C]` (class dim last), `labels` is `[...]`. Per row
    `loss = -log(probs[label])` (`-probs[label]` when `log_prob`); rows whose label is
    `ignore_index` give 0. `reduction` "mean" divides the sum by the number of
    non-ignored rows (by 1 if there are none), "sum" sums, "none" keeps `[...]`.

    ```mlir
    %l = popxl.nll_loss %p, %y {reduction = "mean"} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
    ```
    """

    name = "popxl.nll_loss"
    traits = traits_def(AcceptsViews(), PopartType("Nll"))
    probs = operand_def(TensorType)
    labels = operand_def(TensorType)
    result = result_def(TensorType)
    reduction = prop_def(StringAttr)
    ignore_index = opt_prop_def(IntegerAttr)
    log_prob = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        return [_nll_check(cls, types[0], types[1], props)]


@irdl_op_definition
class NllLossWithSoftmaxGradOp(PopxlOp):
    """Fused NLL loss of softmax probabilities and its gradient w.r.t. the logits.

    Results `(loss, dx)`: `loss` as `popxl.nll_loss` (unscaled), and
    `dx = (probs - onehot(labels)) * loss_grad`, divided by the number of non-ignored
    rows for "mean"; rows with `ignore_index` get 0. `loss_grad` (default 1.0) is a
    property or a scalar tensor operand `loss_grad_tensor`
    (popxl.ops.nll_loss_with_softmax_grad).

    ```mlir
    %l, %dx = popxl.nll_loss_with_softmax_grad %p, %y {loss_grad = 1.0 : f64, reduction = "mean"}
        : (tensor<8x10xf32>, tensor<8xi32>) -> (tensor<f32>, tensor<8x10xf32>)
    ```
    """

    name = "popxl.nll_loss_with_softmax_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), PopartType("NllWithSoftmaxGrad"))
    probs = operand_def(TensorType)
    labels = operand_def(TensorType)
    loss_grad_tensor = opt_operand_def(TensorType)
    loss = result_def(TensorType)
    grad = result_def(TensorType)
    loss_grad = opt_prop_def(FloatAttr)
    reduction = prop_def(StringAttr)
    ignore_index = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        probs, labels, lg = types
        factor(cls, lg, props, "loss_grad")
        return [_nll_check(cls, probs, labels, props), probs]


# ------------------------------------------------------------------------------------
# Gradient helpers (used by autodiff)
# ------------------------------------------------------------------------------------


class _DyXGrad(PopxlOp):
    dy = operand_def(TensorType)
    x = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dy, x = types
        require_float(cls, x, "x")
        if dy != x:
            raise cls.fail(f"dy {fmt_type(dy)} and x {fmt_type(x)} must have the same type")
        return [x]


@irdl_op_definition
class GeluGradOp(_DyXGrad):
    """`dy * d gelu(x)/dx` for the tanh-approximated GELU.

    ```mlir
    %dx = popxl.gelu_grad %dy, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.gelu_grad"
    traits = traits_def(AcceptsViews(), Elementwise(), NotDifferentiable(), Internal())


@irdl_op_definition
class ReluGradOp(_DyXGrad):
    """`dy * (x > 0)`.

    ```mlir
    %dx = popxl.relu_grad %dy, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.relu_grad"
    traits = traits_def(AcceptsViews(), Elementwise(), NotDifferentiable(), Internal())


@irdl_op_definition
class GeluErfGradOp(_DyXGrad):
    """`dy * d geluerf(x)/dx = dy * (0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi))`.

    ```mlir
    %dx = popxl.geluerf_grad %dy, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.geluerf_grad"
    traits = traits_def(AcceptsViews(), Elementwise(), NotDifferentiable(), Internal(), PopartType("GeluErfGrad"))


@irdl_op_definition
class SoftmaxGradOp(PopxlOp):
    """`y * (dy - sum(dy * y, axis, keepdims))` where `y = softmax(x, axis)`.

    ```mlir
    %dx = popxl.softmax_grad %dy, %y {axis = 1 : i64} : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
    ```
    """

    name = "popxl.softmax_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    y = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dy, y = types
        require_float(cls, y, "y")
        if dy != y:
            raise cls.fail(f"dy {fmt_type(dy)} and y {fmt_type(y)} must have the same type")
        norm_axis(cls, props["axis"], len(shape_of(y)))
        return [y]


@irdl_op_definition
class NllLossGradOp(PopxlOp):
    """Gradient of `popxl.nll_loss` w.r.t. `probs`, given `dloss` (shape of the loss).

    At the label of each non-ignored row: `-dloss / probs[label]` (`-dloss` when
    `log_prob`), divided by the number of non-ignored rows for "mean"; 0 elsewhere.

    ```mlir
    %dp = popxl.nll_loss_grad %p, %y, %dl {reduction = "mean"}
        : (tensor<8x10xf32>, tensor<8xi32>, tensor<f32>) -> tensor<8x10xf32>
    ```
    """

    name = "popxl.nll_loss_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    probs = operand_def(TensorType)
    labels = operand_def(TensorType)
    dloss = operand_def(TensorType)
    result = result_def(TensorType)
    reduction = prop_def(StringAttr)
    ignore_index = opt_prop_def(IntegerAttr)
    log_prob = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 3)
        probs, labels, dloss = types
        loss = _nll_check(cls, probs, labels, props)
        if dloss != loss:
            raise cls.fail(f"dloss {fmt_type(dloss)} must have the loss type {fmt_type(loss)}")
        return [probs]


@irdl_op_definition
class GatherGradOp(ResultTypedOp):
    """Scatter-add of `dy` into zeros of the result (data) type at `indices` on `axis`;
    indices out of range (as `popxl.gather` with the same `zero_oor`) add nothing.

    ```mlir
    %dw = popxl.gather_grad %dy, %i {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<10x4xf32>
    ```
    """

    name = "popxl.gather_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    zero_oor = opt_prop_def(IntegerAttr)

    @classmethod
    def check(cls, types, props, result):
        arity(cls, types, 2)
        dy, idx = types
        (expected,) = GatherOp.infer([result, idx], props)
        if dy != expected:
            raise cls.fail(
                f"dy {fmt_type(dy)} is not the gather of {fmt_type(result)} at {fmt_type(idx)} "
                f"(expected {fmt_type(expected)})"
            )


@irdl_op_definition
class SliceGradOp(ResultTypedOp):
    """Zeros of the result (original input) type with `dy` placed at the slice.

    Props as `popxl.slice`.

    ```mlir
    %dx = popxl.slice_grad %dy {start = array<i64: 1>, stop = array<i64: 3>, axes = array<i64: 1>}
        : (tensor<2x2xf32>) -> tensor<2x4xf32>
    ```
    """

    name = "popxl.slice_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    result = result_def(TensorType)
    start = opt_prop_def(DenseArrayBase)
    stop = opt_prop_def(DenseArrayBase)
    step = opt_prop_def(DenseArrayBase)
    axes = opt_prop_def(DenseArrayBase)

    @classmethod
    def check(cls, types, props, result):
        arity(cls, types, 1)
        (dy,) = types
        expected = tensor_type(slice_shape(cls, shape_of(result), props), dtype_of(result))
        if dy != expected:
            raise cls.fail(f"dy {fmt_type(dy)} is not the slice of {fmt_type(result)} (expected {fmt_type(expected)})")


@irdl_op_definition
class ReduceMaxGradOp(PopxlOp):
    """Gradient of `popxl.reduce_max`: `dy` routed to the positions of the maximum.

    `x` is the forward input, `y` the forward output and `dy` its gradient (props as
    `reduce_max`). Every position equal to the maximum gets all of `dy` (ties too), as
    PopART's ReduceMaxGrad.

    ```mlir
    %dx = popxl.reduce_max_grad %x, %y, %dy {axis = array<i64: 1>}
        : (tensor<2x3xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.reduce_max_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    x = operand_def(TensorType)
    y = operand_def(TensorType)
    dy = operand_def(TensorType)
    result = result_def(TensorType)
    axis = opt_prop_def(DenseArrayBase)
    keepdims = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 3)
        x, y, dy = types
        require_float(cls, x, "x")
        (expected,) = ReduceMaxOp.infer([x], props)
        if y != expected or dy != expected:
            raise cls.fail(
                f"y {fmt_type(y)} and dy {fmt_type(dy)} must have the reduced type "
                f"{fmt_type(expected)} of x {fmt_type(x)}"
            )
        return [x]


# ------------------------------------------------------------------------------------
# Updates
# ------------------------------------------------------------------------------------


@irdl_op_definition
class ScaledAddOp(PopxlOp):
    """`a * X + b * Y` (popxl.ops.scaled_add).

    ```mlir
    %z = popxl.scaled_add %x, %y {a = 1.0 : f64, b = 0.5 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.scaled_add"
    traits = traits_def(AcceptsViews(), Elementwise())
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

    Floating point dtypes may differ (Y is cast to X's dtype on store).

    ```mlir
    popxl.scaled_add_ %w, %g {a = 1.0 : f64, b = -0.05 : f64} : (tensor<4xf32>, tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.scaled_add_"
    x = operand_def(TensorType)
    y = operand_def(TensorType)
    a = prop_def(FloatAttr)
    b = prop_def(FloatAttr)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable(), PopartType("ScaledAddLhsInplace"))

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        x, y = types
        if dtype_of(x) != dtype_of(y) and not (dtype_of(x).kind == dtype_of(y).kind == "f"):
            raise DtypeMismatch(f"{cls.name}: operand dtypes differ: {_types_str(types)}")
        if broadcast(cls, types) != shape_of(x):
            raise cls.fail(f"cannot update {fmt_type(x)} in place with {fmt_type(y)}")
        return []


class _AccumulateBase(PopxlOp):
    """`t` updated in place from `X` with a scalar factor `f` (property or tensor)."""

    t = operand_def(TensorType)
    x = operand_def(TensorType)
    f_tensor = opt_operand_def(TensorType)
    f = opt_prop_def(FloatAttr)
    traits = traits_def(WritesOperands((0,)))
    F_REQUIRED: ClassVar[bool] = False

    @classmethod
    def infer(cls, types, props):
        t, x, f = types
        update_compatible(cls, t, x)
        factor(cls, f, props, "f", cls.F_REQUIRED)
        return []


@irdl_op_definition
class AccumulateOp(_AccumulateBase):
    """`t += f * X` in place, f defaults to 1 (popxl.ops.var_updates.accumulate_).

    `t` may have another dtype than `X` (e.g. float16 state, float32 gradient).

    ```mlir
    popxl.accumulate_ %acc, %g {f = 0.5 : f64} : (tensor<4xf32>, tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.accumulate_"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), PopartType("Accumulate"))


@irdl_op_definition
class AccumulateSquareOp(_AccumulateBase):
    """`t += f * X^2` in place, f defaults to 1 (var_updates.accumulate_square_).

    ```mlir
    popxl.accumulate_square_ %acc, %g : (tensor<4xf32>, tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.accumulate_square_"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), PopartType("Accumulate"))


@irdl_op_definition
class AccumulateMovingAverageOp(_AccumulateBase):
    """`t = f * t + (1 - f) * X` in place (var_updates.accumulate_moving_average_).

    ```mlir
    popxl.accumulate_moving_average_ %m, %g {f = 0.9 : f64} : (tensor<4xf16>, tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.accumulate_moving_average_"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), PopartType("Accumulate"))
    F_REQUIRED: ClassVar[bool] = True


@irdl_op_definition
class AccumulateMovingAverageSquareOp(_AccumulateBase):
    """`t = f * t + (1 - f) * X^2` in place (var_updates.accumulate_moving_average_square_).

    ```mlir
    popxl.accumulate_moving_average_square_ %v, %g {f = 0.999 : f64} : (tensor<4xf32>, tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.accumulate_moving_average_square_"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), PopartType("Accumulate"))
    F_REQUIRED: ClassVar[bool] = True


@irdl_op_definition
class AccumulateMeanOp(PopxlOp):
    """`t = t * step / (step + 1) + X / (step + 1)` in place (var_updates.accumulate_mean_).

    `step` (required) is a property or a scalar tensor operand `step_tensor`.

    ```mlir
    popxl.accumulate_mean_ %acc, %g, %n : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> ()
    ```
    """

    name = "popxl.accumulate_mean_"
    t = operand_def(TensorType)
    x = operand_def(TensorType)
    step_tensor = opt_operand_def(TensorType)
    step = opt_prop_def(FloatAttr)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable(), PopartType("Accumulate"))

    @classmethod
    def infer(cls, types, props):
        t, x, step = types
        update_compatible(cls, t, x)
        factor(cls, step, props, "step", True)
        return []


@irdl_op_definition
class AccumulatorScaleOp(PopxlOp):
    """`t *= f` in place (var_updates.accumulator_scale_); f is a property or tensor.

    ```mlir
    popxl.accumulator_scale_ %acc {f = 0.0 : f64} : (tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.accumulator_scale_"
    t = operand_def(TensorType)
    f_tensor = opt_operand_def(TensorType)
    f = opt_prop_def(FloatAttr)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable(), PopartType("AccumulatorScale"))

    @classmethod
    def infer(cls, types, props):
        t, f = types
        require_numeric(cls, t, "the updated tensor")
        factor(cls, f, props, "f", True)
        return []


@irdl_op_definition
class AccumulatorZeroOp(PopxlOp):
    """`t = 0` in place (var_updates.accumulator_zero_).

    ```mlir
    popxl.accumulator_zero_ %acc : (tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.accumulator_zero_"
    t = operand_def(TensorType)
    # PopXL zeroes an accumulator with AccumulatorScale by 0
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable(), PopartType("AccumulatorScale"))

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        require_numeric(cls, types[0], "the updated tensor")
        return []


@irdl_op_definition
class SparseAccumulateOp(PopxlOp):
    """`t[indices along axis] += f * X` in place, repeated indices add up.

    `X` has the shape of `gather(t, indices, axis)`; f defaults to 1
    (var_updates.sparse_accumulate_; the optional PopXL `W` hint is not modelled).

    ```mlir
    popxl.sparse_accumulate_ %acc, %g, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3x4xf32>, tensor<3xi32>) -> ()
    ```
    """

    name = "popxl.sparse_accumulate_"
    t = operand_def(TensorType)
    x = operand_def(TensorType)
    indices = operand_def(TensorType)
    f_tensor = opt_operand_def(TensorType)
    axis = prop_def(IntegerAttr)
    f = opt_prop_def(FloatAttr)
    # PopXL's sparse_accumulate_ is PopART's PopartSparseAccumulate op (class SparseAccumulateOp)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable(), PopartType("PopartSparseAccumulate"))

    @classmethod
    def infer(cls, types, props):
        t, x, idx, f = types
        require_numeric(cls, t, "the updated tensor")
        require_numeric(cls, x, "X")
        factor(cls, f, props, "f")
        # shapes as PopART: the op is built and the program refused when it compiles
        try:
            (expected,) = GatherOp.infer([t, idx], props)
        except VerifyException as e:
            _dtype_error(cls, f"X {fmt_type(x)} cannot be accumulated into {fmt_type(t)} at {fmt_type(idx)}: {e}")
            return []
        if shape_of(x) != shape_of(expected):
            _dtype_error(
                cls,
                f"X {fmt_type(x)} must have the shape {shape_of(expected)} of gathering "
                f"{fmt_type(t)} at {fmt_type(idx)}",
            )
        return []


@irdl_op_definition
class CopyVarUpdateOp(PopxlOp):
    """`t = X` in place (var_updates.copy_var_update_); X broadcasts, dtype is cast.

    ```mlir
    popxl.copy_var_update_ %w, %x : (tensor<4xf32>, tensor<4xf32>) -> ()
    ```
    """

    name = "popxl.copy_var_update_"
    t = operand_def(TensorType)
    x = operand_def(TensorType)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable(), PopartType("CopyVarUpdate"))

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        update_compatible(cls, types[0], types[1])
        return []


def _increment_mod_check(cls: type[PopxlOp], types, props) -> TensorType:
    arity(cls, types, 1)
    require_numeric(cls, types[0])
    if props["modulus"] == 0:
        raise cls.fail("modulus cannot be zero")
    return types[0]


@irdl_op_definition
class IncrementModOp(PopxlOp):
    """`fmod(t + increment, modulus)` computed in t's dtype (popxl.ops.increment_mod).

    ```mlir
    %c = popxl.increment_mod %t {increment = 1.0 : f64, modulus = 3.0 : f64} : (tensor<1xui32>) -> tensor<1xui32>
    ```
    """

    name = "popxl.increment_mod"
    traits = traits_def(AcceptsViews(), NoGradient())
    input = operand_def(TensorType)
    result = result_def(TensorType)
    increment = prop_def(FloatAttr)
    modulus = prop_def(FloatAttr)

    @classmethod
    def infer(cls, types, props):
        return [_increment_mod_check(cls, types, props)]


@irdl_op_definition
class IncrementModInplaceOp(PopxlOp):
    """`t = fmod(t + increment, modulus)` in place (popxl.ops.increment_mod_).

    ```mlir
    popxl.increment_mod_ %t {increment = 1.0 : f64, modulus = 3.0 : f64} : (tensor<1xui32>) -> ()
    ```
    """

    name = "popxl.increment_mod_"
    t = operand_def(TensorType)
    increment = prop_def(FloatAttr)
    modulus = prop_def(FloatAttr)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable())

    @classmethod
    def infer(cls, types, props):
        _increment_mod_check(cls, types, props)
        return []


def _dynamic_slice_type(cls: type[PopxlOp], t: TensorType, index: TensorType, props) -> TensorType:
    require_int(cls, index, "index")
    shape = shape_of(t)
    axes, sizes = props["axes"], props["sizes"]
    if len(axes) != len(sizes) or not axes:
        raise cls.fail(f"axes {axes} and sizes {sizes} must be non-empty and of equal length")
    if math.prod(shape_of(index)) != len(axes):
        raise cls.fail(f"index {fmt_type(index)} must have one element per axis ({len(axes)})")
    out = list(shape)
    seen: set[int] = set()
    for a, s in zip(axes, sizes):
        a = norm_axis(cls, a, len(shape))
        if a in seen:
            raise cls.fail(f"repeated axis in {tuple(axes)}")
        seen.add(a)
        if not 0 <= s <= shape[a]:
            raise cls.fail(f"size {s} is out of range for axis {a} of {fmt_type(t)}")
        out[a] = s
    return tensor_type(out, dtype_of(t))


@irdl_op_definition
class DynamicSliceOp(PopxlOp):
    """Slice of `sizes` at runtime offsets `index` on `axes` (popxl.ops.dynamic_slice).

    An offset outside `[0, dim - size]` (a slice past the end, which PopXL does not
    support) is a run-time error naming the op and the index tensor. `no_overlap` is
    accepted and ignored.

    ```mlir
    %s = popxl.dynamic_slice %t, %i {axes = array<i64: 0>, sizes = array<i64: 1>}
        : (tensor<4x3xf32>, tensor<1xui32>) -> tensor<1x3xf32>
    ```
    """

    name = "popxl.dynamic_slice"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    index = operand_def(TensorType)
    result = result_def(TensorType)
    axes = prop_def(DenseArrayBase)
    sizes = prop_def(DenseArrayBase)
    no_overlap = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        return [_dynamic_slice_type(cls, types[0], types[1], props)]


def _dynamic_update_check(cls: type[PopxlOp], types, props) -> TensorType:
    arity(cls, types, 3)
    t, index, update = types
    expected = _dynamic_slice_type(cls, t, index, props)
    if shape_of(update) != shape_of(expected):
        # PopART builds the op (its result is `t`'s type) and refuses the program when it compiles
        _dtype_error(cls, f"update {fmt_type(update)} must have the slice shape {shape_of(expected)} of {fmt_type(t)}")
    if dtype_of(update) != dtype_of(t):
        raise cls.fail(f"update {fmt_type(update)} and tensor {fmt_type(t)} dtypes differ")
    return t


@irdl_op_definition
class DynamicUpdateOp(PopxlOp):
    """A copy of `t` with `update` written at runtime offsets `index` on `axes`.

    (popxl.ops.dynamic_update; offsets checked as in `dynamic_slice`.)

    ```mlir
    %u = popxl.dynamic_update %t, %i, %x {axes = array<i64: 0>, sizes = array<i64: 1>}
        : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> tensor<4x3xf32>
    ```
    """

    name = "popxl.dynamic_update"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    index = operand_def(TensorType)
    update = operand_def(TensorType)
    result = result_def(TensorType)
    axes = prop_def(DenseArrayBase)
    sizes = prop_def(DenseArrayBase)
    no_overlap = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        return [_dynamic_update_check(cls, types, props)]


@irdl_op_definition
class DynamicUpdateInplaceOp(PopxlOp):
    """`t[index : index + sizes on axes] = update` in place (popxl.ops.dynamic_update_).

    ```mlir
    popxl.dynamic_update_ %t, %i, %x {axes = array<i64: 0>, sizes = array<i64: 1>}
        : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> ()
    ```
    """

    name = "popxl.dynamic_update_"
    t = operand_def(TensorType)
    index = operand_def(TensorType)
    update = operand_def(TensorType)
    axes = prop_def(DenseArrayBase)
    sizes = prop_def(DenseArrayBase)
    no_overlap = opt_prop_def(IntegerAttr)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable())

    @classmethod
    def infer(cls, types, props):
        _dynamic_update_check(cls, types, props)
        return []


# ------------------------------------------------------------------------------------
# Optimiser maths (popxl.ops.var_updates)
# ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WritesTimeStep(InPlaceInterface):
    """The updaters increment their optional `time_step` operand in place."""

    def written_operands(self, op: Operation) -> tuple[int, ...]:
        # the updater classes (subclasses of _UpdaterBase) define the optional operands
        if op.time_step is None:  # pyright: ignore[reportAttributeAccessIssue]
            return ()
        return (2 if op.weight is None else 3,)  # pyright: ignore[reportAttributeAccessIssue]


class _UpdaterBase(PopxlOp):
    """Shared checks of the adam/lamb/adamax updaters.

    Operands `m, v, weight?, time_step?` then optional scalar tensors for the factors.
    The result has m's shape and v's dtype. When `time_step` is given it is
    incremented in place (its in-place interface names that operand) and used for bias
    correction, and `beta1` (and `beta2` where used) are required.
    """

    FACTORS: ClassVar[tuple[str, ...]] = ()

    traits = traits_def(_WritesTimeStep())

    @classmethod
    def infer(cls, types, props):
        m, v, w, ts, *fs = types
        require_float(cls, m, "m")
        require_float(cls, v, "v")
        require_same_shape(cls, m, v, "m and v")
        if w is not None:
            require_float(cls, w, "weight")
            require_same_shape(cls, m, w, "m and weight")
        scalar_operand(cls, ts, "time_step")
        for name, f in zip(cls.FACTORS, fs, strict=True):
            factor(cls, f, props, name)

        def given(name: str) -> bool:
            return name in props or fs[cls.FACTORS.index(name)] is not None

        if given("weight_decay") and props.get("weight_decay") != 0.0 and w is None:
            raise cls.fail("weight_decay needs the weight operand")
        if ts is not None:
            for b in ("beta1", "beta2"):
                if b in cls.FACTORS and not given(b):
                    raise cls.fail(f"bias correction (time_step given) needs {b}")
        return [tensor_type(shape_of(m), dtype_of(v))]


@irdl_op_definition
class AdamUpdaterOp(_UpdaterBase):
    """Adam updater term (var_updates.adam_updater); increments `time_step` in place.

    With `time_step` (t := time_step + 1, stored back): `mc = m / (1 - beta1^t)`,
    `vc = v / (1 - beta2^t)`; without: `mc = m`, `vc = v`. Result
    `x = mc / (sqrt(vc) + epsilon) + weight_decay * weight` (weight_decay default 0,
    epsilon default 1e-7). Factors: f64 properties or `<name>_tensor` operands.

    ```mlir
    %u = popxl.adam_updater %m, %v, %w, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, weight_decay = 0.01 : f64}
        : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.adam_updater"
    traits = traits_def(AcceptsViews(), NotDifferentiable())
    m = operand_def(TensorType)
    v = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    time_step = opt_operand_def(TensorType)
    weight_decay_tensor = opt_operand_def(TensorType)
    beta1_tensor = opt_operand_def(TensorType)
    beta2_tensor = opt_operand_def(TensorType)
    epsilon_tensor = opt_operand_def(TensorType)
    weight_decay = opt_prop_def(FloatAttr)
    beta1 = opt_prop_def(FloatAttr)
    beta2 = opt_prop_def(FloatAttr)
    epsilon = opt_prop_def(FloatAttr)
    result = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    FACTORS: ClassVar[tuple[str, ...]] = ("weight_decay", "beta1", "beta2", "epsilon")


@irdl_op_definition
class LambUpdaterOp(_UpdaterBase):
    """LAMB updater term (var_updates.lamb_updater): the Adam term, same maths.

    `x = mc / (sqrt(vc) + epsilon) + weight_decay * weight` with bias correction as in
    `adam_updater`; the trust ratio is applied by `adam_var_update` (r1, r2).

    ```mlir
    %u = popxl.lamb_updater %m, %v, %w, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64}
        : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.lamb_updater"
    # one PopART op, AdamUpdater, in its Lamb / AdaMax modes
    traits = traits_def(AcceptsViews(), NotDifferentiable(), PopartType("AdamUpdater"))
    m = operand_def(TensorType)
    v = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    time_step = opt_operand_def(TensorType)
    weight_decay_tensor = opt_operand_def(TensorType)
    beta1_tensor = opt_operand_def(TensorType)
    beta2_tensor = opt_operand_def(TensorType)
    epsilon_tensor = opt_operand_def(TensorType)
    weight_decay = opt_prop_def(FloatAttr)
    beta1 = opt_prop_def(FloatAttr)
    beta2 = opt_prop_def(FloatAttr)
    epsilon = opt_prop_def(FloatAttr)
    result = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    FACTORS: ClassVar[tuple[str, ...]] = ("weight_decay", "beta1", "beta2", "epsilon")


@irdl_op_definition
class AdamaxUpdaterOp(_UpdaterBase):
    """AdaMax updater term (var_updates.adamax_updater); increments `time_step`.

    `v` is the infinity-norm accumulator `u`. With `time_step` (t := time_step + 1):
    `mc = m / (1 - beta1^t)`, else `mc = m`. Result
    `x = mc / (v + epsilon) + weight_decay * weight` (beta1 default 0.9).

    ```mlir
    %u = popxl.adamax_updater %m, %v, %w, %t {beta1 = 0.9 : f64}
        : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
    ```
    """

    name = "popxl.adamax_updater"
    # one PopART op, AdamUpdater, in its Lamb / AdaMax modes
    traits = traits_def(AcceptsViews(), NotDifferentiable(), PopartType("AdamUpdater"))
    m = operand_def(TensorType)
    v = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    time_step = opt_operand_def(TensorType)
    weight_decay_tensor = opt_operand_def(TensorType)
    beta1_tensor = opt_operand_def(TensorType)
    epsilon_tensor = opt_operand_def(TensorType)
    weight_decay = opt_prop_def(FloatAttr)
    beta1 = opt_prop_def(FloatAttr)
    epsilon = opt_prop_def(FloatAttr)
    result = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    FACTORS: ClassVar[tuple[str, ...]] = ("weight_decay", "beta1", "epsilon")


@irdl_op_definition
class AdamVarUpdateOp(PopxlOp):
    """`t -= learning_rate * ratio * x` in place (var_updates.adam_var_update).

    `r1`, `r2` are the squared norms of the weight and of the updater (lamb_square).
    `ratio = min(sqrt(r1), max_weight_norm) / sqrt(r2)`, or 1 when either norm is 0
    (max_weight_norm: no clipping when absent). `learning_rate` is required;
    both factors are f64 properties or `<name>_tensor` operands.

    ```mlir
    popxl.adam_var_update %w, %u, %r1, %r2 {learning_rate = 0.001 : f64}
        : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> ()
    ```
    """

    name = "popxl.adam_var_update"
    t = operand_def(TensorType)
    x = operand_def(TensorType)
    r1 = operand_def(TensorType)
    r2 = operand_def(TensorType)
    learning_rate_tensor = opt_operand_def(TensorType)
    max_weight_norm_tensor = opt_operand_def(TensorType)
    learning_rate = opt_prop_def(FloatAttr)
    max_weight_norm = opt_prop_def(FloatAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(AcceptsViews(), WritesOperands((0,)), NotDifferentiable())

    @classmethod
    def infer(cls, types, props):
        t, x, r1, r2, lr, mwn = types
        require_float(cls, t, "t")
        require_float(cls, x, "x")
        require_same_shape(cls, t, x, "t and x")
        scalar_operand(cls, r1, "r1")
        scalar_operand(cls, r2, "r2")
        factor(cls, lr, props, "learning_rate", True)
        factor(cls, mwn, props, "max_weight_norm")
        return []


# -- neural-network ops: convolution, pooling, normalisation, resampling -------------------


def _spatial(cls: type[PopxlOp], name: str, value: Sequence[int] | None, nd: int, default: int) -> tuple[int, ...]:
    """A per-spatial-dim property (stride, dilation, kernel): `nd` entries, each >= 1."""
    if value is None:
        return (default,) * nd
    v = tuple(int(x) for x in value)
    if len(v) != nd:
        raise cls.fail(f"{name} {v} must have {nd} entries (one per spatial dim)")
    if any(x < 1 for x in v):
        raise cls.fail(f"{name} {v} must be >= 1")
    return v


def _pads(cls: type[PopxlOp], value: Sequence[int] | None, nd: int, name: str = "pads") -> tuple[int, ...]:
    """`[begin_1 .. begin_nd, end_1 .. end_nd]` (ONNX order), each >= 0."""
    if value is None:
        return (0,) * (2 * nd)
    v = tuple(int(x) for x in value)
    if len(v) != 2 * nd:
        raise cls.fail(f"{name} {v} must have {2 * nd} entries (begins then ends of {nd} spatial dims)")
    if any(x < 0 for x in v):
        raise cls.fail(f"{name} {v} must be >= 0")
    return v


@dataclass(frozen=True)
class Window:
    """A sliding window over the spatial dims of an `(N, C, *spatial)` tensor."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def nd(self) -> int:
        return len(self.kernel)

    def extent(self, i: int) -> int:
        """Input elements one window spans along spatial dim `i`."""
        return self.dilation[i] * (self.kernel[i] - 1) + 1

    def out_shape(self, cls: type[PopxlOp], in_sp: Sequence[int], ceil_mode: bool = False) -> tuple[int, ...]:
        out = []
        for i, x in enumerate(in_sp):
            span = x + self.pads[i] + self.pads[self.nd + i] - self.extent(i)
            if span < 0:
                raise cls.fail(
                    f"the window ({self.extent(i)} elements with kernel {self.kernel[i]}, dilation "
                    f"{self.dilation[i]}) is larger than spatial dim {i} of size {x} plus padding "
                    f"{self.pads[i]}+{self.pads[self.nd + i]}"
                )
            o = (-(-span // self.stride[i]) if ceil_mode else span // self.stride[i]) + 1
            # as PyTorch: the last window must start inside the input or the begin padding
            if ceil_mode and (o - 1) * self.stride[i] >= x + self.pads[i]:
                o -= 1
            out.append(o)
        return tuple(out)


def _window(cls: type[PopxlOp], props: dict[str, Any], kernel: Sequence[int], nd: int) -> Window:
    return Window(
        _spatial(cls, "kernel", kernel, nd, 1),
        _spatial(cls, "stride", props.get("stride"), nd, 1),
        _pads(cls, props.get("pads"), nd),
        _spatial(cls, "dilation", props.get("dilation"), nd, 1),
    )


def _nc_spatial(cls: type[PopxlOp], t: TensorType, what: str = "input") -> tuple[int, ...]:
    shape = shape_of(t)
    if len(shape) < 3:
        raise cls.fail(f"{what} must be (N, C, *spatial) with at least one spatial dim, got {fmt_type(t)}")
    require_float(cls, t, what)
    return shape


def _groups(cls: type[PopxlOp], props: dict[str, Any]) -> int:
    g = int(props.get("groups", 1))
    if g < 1:
        raise cls.fail(f"groups must be >= 1, got {g}")
    return g


class _ConvBase(PopxlOp):
    """Properties shared by the convolutions: `stride`, `pads` (ONNX order: the begins of
    every spatial dim, then the ends), `dilation` (defaults 1, 0, 1) and `groups` (1)."""

    stride = opt_prop_def(DenseArrayBase)
    pads = opt_prop_def(DenseArrayBase)
    dilation = opt_prop_def(DenseArrayBase)
    groups = opt_prop_def(IntegerAttr)


def conv_flops(inputs: Sequence[tuple[int, ...]], results: Sequence[tuple[int, ...]], props: Any) -> int:
    """`popxl.conv`: each result element `(n, m, *o)` is `C / groups * prod(kernel)`
    multiply-adds, the size of one filter (`weight[m]`)."""
    return 2 * math.prod(results[0]) * math.prod(inputs[1][1:])


def conv_transpose_flops(inputs: Sequence[tuple[int, ...]], results: Sequence[tuple[int, ...]], props: Any) -> int:
    """`popxl.conv_transpose`: each input element `(n, c, *x)` is spread over
    `M / groups * prod(kernel)` results (`weight[c]`), one multiply-add each."""
    return 2 * math.prod(inputs[0]) * math.prod(inputs[1][1:])


def conv_weight_grad_flops(inputs: Sequence[tuple[int, ...]], results: Sequence[tuple[int, ...]], props: Any) -> int:
    """`popxl.conv_weight_grad`: each element of `dy` `(n, m, *o)` meets one window of the
    input, `C / groups * prod(kernel)` multiply-adds (the size of one filter of the result)."""
    return 2 * math.prod(inputs[0]) * math.prod(results[0][1:])


@irdl_op_definition
class ConvOp(_ConvBase):
    """N-d convolution (cross-correlation, as ONNX Conv and PyTorch) of `input`
    `(N, C, *spatial)` with `weight` `(M, C / groups, *kernel)` (popxl.ops.conv).

    Output spatial size `floor((x + pad_begin + pad_end - dilation * (k - 1) - 1) / stride) + 1`.

    ```mlir
    %y = popxl.conv %x, %w {stride = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>}
        : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
    ```
    """

    name = "popxl.conv"
    traits = traits_def(AcceptsViews(), Flops(conv_flops))
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        x, w = types
        xs = _nc_spatial(cls, x)
        ws = shape_of(w)
        same_dtype(cls, types)
        nd = len(xs) - 2
        if len(ws) != nd + 2:
            raise cls.fail(f"weight must be (M, C / groups, *kernel) with {nd} kernel dims, got {fmt_type(w)}")
        g = _groups(cls, props)
        if xs[1] % g or ws[0] % g:
            raise cls.fail(f"{xs[1]} input channels and {ws[0]} output channels must be divisible by groups {g}")
        if ws[1] * g != xs[1]:
            raise cls.fail(
                f"weight {fmt_type(w)} has {ws[1]} input channels per group; input {fmt_type(x)} "
                f"with groups {g} needs {xs[1] // g}"
            )
        win = _window(cls, props, ws[2:], nd)
        return [tensor_type((xs[0], ws[0], *win.out_shape(cls, xs[2:])), dtype_of(x))]


@irdl_op_definition
class ConvTransposeOp(_ConvBase):
    """N-d transposed convolution (PyTorch `conv_transposeNd`, ONNX ConvTranspose) of
    `input` `(N, C, *spatial)` with `weight` `(C, M / groups, *kernel)`; the adjoint of
    `popxl.conv` with the same weight and properties (popxl.ops.conv_transpose).

    Output spatial size `(x - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + 1 + output_padding`.

    ```mlir
    %y = popxl.conv_transpose %x, %w {stride = array<i64: 2, 2>, output_padding = array<i64: 1, 1>}
        : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x10x10xf32>
    ```
    """

    name = "popxl.conv_transpose"
    traits = traits_def(AcceptsViews(), Flops(conv_transpose_flops))
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    output_padding = opt_prop_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        x, w = types
        xs = _nc_spatial(cls, x)
        ws = shape_of(w)
        same_dtype(cls, types)
        nd = len(xs) - 2
        if len(ws) != nd + 2:
            raise cls.fail(f"weight must be (C, M / groups, *kernel) with {nd} kernel dims, got {fmt_type(w)}")
        g = _groups(cls, props)
        if ws[0] != xs[1] or xs[1] % g:
            raise cls.fail(
                f"weight {fmt_type(w)} must have the {xs[1]} input channels of {fmt_type(x)} "
                f"first, divisible by groups {g}"
            )
        win = _window(cls, props, ws[2:], nd)
        op = props.get("output_padding")
        op = (0,) * nd if op is None else tuple(op)
        if len(op) != nd:
            raise cls.fail(f"output_padding {op} must have {nd} entries")
        out = []
        for i in range(nd):
            if not 0 <= op[i] < max(win.stride[i], win.dilation[i]):
                raise cls.fail(f"output_padding {op} must be >= 0 and smaller than the stride or the dilation")
            o = (xs[2 + i] - 1) * win.stride[i] - win.pads[i] - win.pads[nd + i] + win.extent(i) + op[i]
            if o < 1:
                raise cls.fail(f"padding {win.pads} leaves no output along spatial dim {i}")
            out.append(o)
        return [tensor_type((xs[0], ws[1] * g, *out), dtype_of(x))]


@irdl_op_definition
class ConvWeightGradOp(_ConvBase):
    """Gradient of `popxl.conv` with respect to its weight: `dy` `(N, M, *out)` correlated
    with the forward input `x` `(N, C, *spatial)`; the result is the weight
    `(M, C / groups, *kernel)` (the forward props plus `kernel`).

    ```mlir
    %dw = popxl.conv_weight_grad %dy, %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>}
        : (tensor<2x4x8x8xf32>, tensor<2x3x8x8xf32>) -> tensor<4x3x3x3xf32>
    ```
    """

    name = "popxl.conv_weight_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal(), Flops(conv_weight_grad_flops))
    dy = operand_def(TensorType)
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = prop_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dy, x = types
        xs = _nc_spatial(cls, x)
        dys = _nc_spatial(cls, dy, "dy")
        same_dtype(cls, types)
        nd = len(xs) - 2
        g = _groups(cls, props)
        win = _window(cls, props, props["kernel"], nd)
        if len(dys) != nd + 2 or dys[0] != xs[0] or dys[1] % g or xs[1] % g:
            raise cls.fail(f"dy {fmt_type(dy)} does not fit input {fmt_type(x)} with groups {g}")
        expected = (xs[0], dys[1], *win.out_shape(cls, xs[2:]))
        if tuple(dys) != expected:
            raise cls.fail(f"dy {fmt_type(dy)} must have shape {expected} for input {fmt_type(x)}")
        return [tensor_type((dys[1], xs[1] // g, *win.kernel), dtype_of(x))]


class _PoolBase(PopxlOp):
    """Pooling over the spatial dims of `(N, C, *spatial)`: `kernel`, and optional
    `stride`, `pads` (ONNX order), `dilation`, `ceil_mode`."""

    kernel = prop_def(DenseArrayBase)
    stride = opt_prop_def(DenseArrayBase)
    pads = opt_prop_def(DenseArrayBase)
    dilation = opt_prop_def(DenseArrayBase)
    ceil_mode = opt_prop_def(IntegerAttr)

    @classmethod
    def pool_shape(cls, t: TensorType, props: dict[str, Any]) -> tuple[int, ...]:
        xs = _nc_spatial(cls, t)
        nd = len(xs) - 2
        win = _window(cls, props, props["kernel"], nd)
        for i in range(nd):
            if max(win.pads[i], win.pads[nd + i]) > win.extent(i) // 2:
                raise cls.fail(
                    f"pads {win.pads} must be at most half the window ({win.extent(i)}) along spatial dim {i}"
                )
        return (*xs[:2], *win.out_shape(cls, xs[2:], bool(props.get("ceil_mode", False))))


@irdl_op_definition
class MaxPoolOp(_PoolBase):
    """Maximum over each window (padding never wins) (popxl.ops.max_pool).

    ```mlir
    %y = popxl.max_pool %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>}
        : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
    ```
    """

    name = "popxl.max_pool"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        return [tensor_type(cls.pool_shape(types[0], props), dtype_of(types[0]))]


@irdl_op_definition
class AveragePoolOp(_PoolBase):
    """Mean over each window (popxl.ops.average_pool). The divisor is the number of
    input elements in the window, padding excluded, as upstream PopXL (PyTorch
    `count_include_pad=False`); with `count_include_pad = true` it also counts the
    explicit padding (never the part of a `ceil_mode` window beyond it).

    ```mlir
    %y = popxl.average_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>}
        : (tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
    ```
    """

    name = "popxl.average_pool"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    result = result_def(TensorType)
    count_include_pad = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        return [tensor_type(cls.pool_shape(types[0], props), dtype_of(types[0]))]


@irdl_op_definition
class MaxPoolGradOp(_PoolBase):
    """Gradient of `popxl.max_pool`: each `dy` element goes to the first maximum of its
    window in the forward input `x` (props as `max_pool`).

    ```mlir
    %dx = popxl.max_pool_grad %dy, %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>}
        : (tensor<1x3x4x4xf32>, tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
    ```
    """

    name = "popxl.max_pool_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    input = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        dy, x = types
        expected = tensor_type(cls.pool_shape(x, props), dtype_of(x))
        if dy != expected:
            raise cls.fail(f"dy {fmt_type(dy)} must be {fmt_type(expected)} for input {fmt_type(x)}")
        return [x]


@irdl_op_definition
class AveragePoolGradOp(_PoolBase):
    """Gradient of `popxl.average_pool`: each `dy` element spread evenly over the input
    elements of its window; the result type is the forward input's (props as `average_pool`).

    ```mlir
    %dx = popxl.average_pool_grad %dy {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>}
        : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
    ```
    """

    name = "popxl.average_pool_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    result = result_def(TensorType)
    count_include_pad = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        raise cls.fail("the result type cannot be inferred; pass result_types")

    @classmethod
    def check_results(cls, types, props, results):
        arity(cls, types, 1)
        if len(results) != 1 or not isinstance(results[0], TensorType):
            raise cls.fail(f"expects one tensor result, got ({_types_str(results)})")
        expected = tensor_type(cls.pool_shape(results[0], props), dtype_of(results[0]))
        if types[0] != expected:
            raise cls.fail(f"dy {fmt_type(types[0])} must be {fmt_type(expected)} for input {fmt_type(results[0])}")
        return list(results)


def _index_broadcast(cls: type[PopxlOp], data: Sequence[int], idx: Sequence[int], axis: int) -> None:
    """`indices` of a scatter-reduce: the shape of `data`, or 1-D along `axis` (broadcast
    over the other dims)."""
    if tuple(idx) == tuple(data):
        return
    if len(idx) == 1 and idx[0] == data[axis]:
        return
    raise cls.fail(
        f"indices {tuple(idx)} must have the shape of data {tuple(data)} or be 1-D of size "
        f"{data[axis]} (broadcast along axis {axis})"
    )


@irdl_op_definition
class TopkOp(PopxlOp):
    """The `k` largest (`largest = false`: smallest) elements along `axis` and their int32
    indices, in order (popxl.ops.topk); ties keep the lower index first.

    ```mlir
    %v, %i = popxl.topk %x {k = 2 : i64, axis = 1 : i64} : (tensor<3x5xf32>) -> (tensor<3x2xf32>, tensor<3x2xi32>)
    ```
    """

    name = "popxl.topk"
    traits = traits_def(AcceptsViews(), PopartType("TopK"))
    input = operand_def(TensorType)
    values = result_def(TensorType)
    indices = result_def(TensorType)
    k = prop_def(IntegerAttr)
    axis = prop_def(IntegerAttr)
    largest = opt_prop_def(IntegerAttr)
    sorted = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        (t,) = types
        require_numeric(cls, t)
        shape = list(shape_of(t))
        if not shape:
            raise cls.fail(f"input must have rank >= 1, got {fmt_type(t)}")
        axis = norm_axis(cls, props["axis"], len(shape))
        k = int(props["k"])
        if not 1 <= k <= shape[axis]:
            raise cls.fail(f"k = {k} must be in [1, {shape[axis]}] (the size of axis {axis} of {fmt_type(t)})")
        shape[axis] = k
        return [tensor_type(shape, dtype_of(t)), tensor_type(shape, np.int32)]


@irdl_op_definition
class ScatterOp(PopxlOp):
    """A copy of `data` with `values[i]` written at `indices[i]` along `axis`, every other
    coordinate of `i` unchanged (ONNX ScatterElements; popxl.ops.scatter). `indices`
    and `values` have one shape, of `data`'s rank and at most its size per dim;
    negative indices count from the end; with repeated indices the last write wins.

    ```mlir
    %y = popxl.scatter %x, %i, %v {axis = 0 : i64}
        : (tensor<4x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    ```
    """

    name = "popxl.scatter"
    traits = traits_def(AcceptsViews())
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    values = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 3)
        data, idx, vals = types
        require_int(cls, idx)
        same_dtype(cls, [data, vals])
        ds, is_, vs = shape_of(data), shape_of(idx), shape_of(vals)
        if not ds:
            raise cls.fail(f"data must have rank >= 1, got {fmt_type(data)}")
        norm_axis(cls, props["axis"], len(ds))
        if is_ != vs or len(is_) != len(ds) or any(i > d for i, d in zip(is_, ds)):
            raise cls.fail(
                f"indices {fmt_type(idx)} and values {fmt_type(vals)} must have one shape, of the rank "
                f"of data {fmt_type(data)} and at most its size per dim"
            )
        return [data]


@irdl_op_definition
class TakeAlongAxisOp(PopxlOp):
    """`data` read at `indices` along `axis`, every other coordinate as in `indices` (ONNX
    GatherElements, `np.take_along_axis`); the gradient of `popxl.scatter`'s values.

    ```mlir
    %g = popxl.take_along_axis %x, %i {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.take_along_axis"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        data, idx = types
        require_int(cls, idx)
        ds, is_ = shape_of(data), shape_of(idx)
        axis = norm_axis(cls, props["axis"], len(ds))
        if len(is_) != len(ds) or any(i > d for k, (i, d) in enumerate(zip(is_, ds)) if k != axis):
            raise cls.fail(
                f"indices {fmt_type(idx)} must have the rank of data {fmt_type(data)} "
                f"and at most its size off axis {axis}"
            )
        return [tensor_type(is_, dtype_of(data))]


SCATTER_REDUCTIONS = ("sum", "max", "min", "none")


@irdl_op_definition
class ScatterReduceOp(PopxlOp):
    """Reduces the slices of `data` whose `indices` along `axis` are equal into slot
    `index` of a result with `axis_size` slots there (popxl.ops.scatter_reduce).

    `reduction`: "sum", "max", "min", or "none" (the last slice written wins). `indices`
    has the shape of `data` or is 1-D along `axis` (broadcast). With `initial_values`
    (the result's shape) the reduction starts from them; without, an empty slot is 0.

    ```mlir
    %y = popxl.scatter_reduce %x, %i {axis = 0 : i64, axis_size = 3 : i64, reduction = "max"}
        : (tensor<5x2xf32>, tensor<5xi32>) -> tensor<3x2xf32>
    ```
    """

    name = "popxl.scatter_reduce"
    traits = traits_def(AcceptsViews())
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    initial_values = opt_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    axis_size = prop_def(IntegerAttr)
    reduction = prop_def(StringAttr)

    @classmethod
    def infer(cls, types, props):
        data, idx, init = types
        require_numeric(cls, data, "data")
        require_int(cls, idx)
        ds = shape_of(data)
        if not ds:
            raise cls.fail(f"data must have rank >= 1, got {fmt_type(data)}")
        axis = norm_axis(cls, props["axis"], len(ds))
        if props["reduction"] not in SCATTER_REDUCTIONS:
            raise cls.fail(f"reduction {props['reduction']!r} must be one of {', '.join(SCATTER_REDUCTIONS)}")
        _index_broadcast(cls, ds, shape_of(idx), axis)
        n = int(props["axis_size"])
        if n < 1:
            raise cls.fail(f"axis_size must be >= 1, got {n}")
        out = tensor_type((*ds[:axis], n, *ds[axis + 1 :]), dtype_of(data))
        if init is not None and init != out:
            raise cls.fail(f"initial_values {fmt_type(init)} must be {fmt_type(out)}")
        return [out]


@irdl_op_definition
class ScatterReduceGradOp(PopxlOp):
    """Gradient of `popxl.scatter_reduce` with respect to its data (`wrt = "data"`) or its
    initial values (`wrt = "initial"`): `dy` routed to the elements that made each
    result (sum: all; max/min: those equal to it, ties sharing; none: the last written,
    else the initial value). Operands: `dy`, the forward data, indices, result and
    (when the forward had them) initial values; props as `scatter_reduce`.

    ```mlir
    %dx = popxl.scatter_reduce_grad %dy, %x, %i, %y {axis = 0 : i64, axis_size = 3 : i64, reduction = "max",
        wrt = "data"}
        : (tensor<3x2xf32>, tensor<5x2xf32>, tensor<5xi32>, tensor<3x2xf32>) -> tensor<5x2xf32>
    ```
    """

    name = "popxl.scatter_reduce_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    out = operand_def(TensorType)
    initial_values = opt_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    axis_size = prop_def(IntegerAttr)
    reduction = prop_def(StringAttr)
    wrt = prop_def(StringAttr)

    @classmethod
    def infer(cls, types, props):
        dy, data, idx, out, init = types
        (expected,) = ScatterReduceOp.infer([data, idx, init], props)
        if dy != expected or out != expected:
            raise cls.fail(f"dy {fmt_type(dy)} and out {fmt_type(out)} must be {fmt_type(expected)}")
        if props["wrt"] == "data":
            return [data]
        if props["wrt"] == "initial" and init is not None:
            return [init]
        raise cls.fail(f"wrt {props['wrt']!r} must be 'data' or 'initial' (with initial values)")


@irdl_op_definition
class ReduceProdOp(ReduceOp):
    """Product over axes (popxl.ops.prod).

    ```mlir
    %p = popxl.reduce_prod %x {axis = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
    ```
    """

    name = "popxl.reduce_prod"
    traits = traits_def(AcceptsViews())


@irdl_op_definition
class ReduceProdGradOp(PopxlOp):
    """Gradient of `popxl.reduce_prod`: `dy` times the product of the other reduced
    elements (exact with zeros; no division). Props as `reduce_prod`.

    ```mlir
    %dx = popxl.reduce_prod_grad %x, %dy {axis = array<i64: 1>} : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.reduce_prod_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    x = operand_def(TensorType)
    dy = operand_def(TensorType)
    result = result_def(TensorType)
    axis = opt_prop_def(DenseArrayBase)
    keepdims = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        x, dy = types
        (expected,) = ReduceProdOp.infer([x], props)
        if dy != expected:
            raise cls.fail(f"dy {fmt_type(dy)} must have the reduced type {fmt_type(expected)} of x {fmt_type(x)}")
        return [x]


@irdl_op_definition
class LogSoftmaxOp(PopxlOp):
    """`log(softmax(x))` along `axis`, computed stably (popxl.ops.log_softmax).

    ```mlir
    %l = popxl.log_softmax %x {axis = 1 : i64} : (tensor<8x10xf32>) -> tensor<8x10xf32>
    ```
    """

    name = "popxl.log_softmax"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        require_float(cls, types[0])
        norm_axis(cls, props["axis"], len(shape_of(types[0])))
        return [types[0]]


@irdl_op_definition
class HistogramOp(PopxlOp):
    """Counts (uint32) of the elements of `input` (of `|input|` with `absolute_of_input`)
    in the bins `x < levels[0]`, `levels[i] <= x < levels[i+1]`, `x >= levels[-1]`
    (popxl.ops.histogram); `levels` ascending.

    ```mlir
    %h = popxl.histogram %x {levels = array<f64: 0.1, 3.1, 7.0>} : (tensor<10xf32>) -> tensor<4xui32>
    ```
    """

    name = "popxl.histogram"
    traits = traits_def(AcceptsViews(), NoGradient())
    input = operand_def(TensorType)
    result = result_def(TensorType)
    levels = prop_def(DenseArrayBase)
    absolute_of_input = opt_prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        require_numeric(cls, types[0])
        levels = [float(v) for v in props["levels"]]
        if not levels:
            raise cls.fail("levels must not be empty")
        if any(b < a for a, b in zip(levels, levels[1:])):
            raise cls.fail(f"levels {tuple(levels)} must be in ascending order")
        return [tensor_type((len(levels) + 1,), np.uint32)]


INTERPOLATE_MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize")


def _interpolate_props(cls: type[PopxlOp], t: TensorType, props: dict[str, Any]) -> tuple[int, ...]:
    """The output shape `floor(input * scales)`, checking the props of an interpolation."""
    shape = shape_of(t)
    require_float(cls, t)
    scales = tuple(float(s) for s in props["scales"])
    if len(scales) != len(shape):
        raise cls.fail(f"scales {scales} must have one entry per dim of {fmt_type(t)}")
    for name, allowed in (
        ("mode", INTERPOLATE_MODES),
        ("nearest_mode", NEAREST_MODES),
        ("coordinate_transformation_mode", COORDINATE_MODES),
    ):
        if name in props and props[name] not in allowed:
            raise cls.fail(f"{name} {props[name]!r} must be one of {', '.join(allowed)}")
    out = tuple(int(math.floor(d * s)) for d, s in zip(shape, scales))
    if any(s <= 0 for s in scales) or any(o < 1 for o in out):
        raise cls.fail(f"scales {scales} give an empty output for {fmt_type(t)}")
    return out


@irdl_op_definition
class InterpolateOp(PopxlOp):
    """`input` resized to `floor(shape * scales)` (ONNX Resize; popxl.ops.interpolate):
    `mode` "nearest" (`nearest_mode` rounding), "linear" or "cubic" (a = -0.75), the output
    coordinate mapped to the input by `coordinate_transformation_mode` (default
    half_pixel; tf_crop_and_resize with the whole input as region), edges replicated.

    ```mlir
    %y = popxl.interpolate %x {scales = array<f64: 1.0, 1.0, 2.0, 2.0>, mode = "linear"}
        : (tensor<1x2x3x4xf32>) -> tensor<1x2x6x8xf32>
    ```
    """

    name = "popxl.interpolate"
    traits = traits_def(AcceptsViews(), PopartType("Resize"))
    input = operand_def(TensorType)
    result = result_def(TensorType)
    scales = prop_def(DenseArrayBase)
    mode = opt_prop_def(StringAttr)
    nearest_mode = opt_prop_def(StringAttr)
    coordinate_transformation_mode = opt_prop_def(StringAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 1)
        return [tensor_type(_interpolate_props(cls, types[0], props), dtype_of(types[0]))]


@irdl_op_definition
class InterpolateGradOp(PopxlOp):
    """Gradient of `popxl.interpolate`: `dy` spread back with the transposed interpolation
    weights; the result type is the forward input's (props as `interpolate`).

    ```mlir
    %dx = popxl.interpolate_grad %dy {scales = array<f64: 1.0, 1.0, 2.0, 2.0>, mode = "linear"}
        : (tensor<1x2x6x8xf32>) -> tensor<1x2x3x4xf32>
    ```
    """

    name = "popxl.interpolate_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    result = result_def(TensorType)
    scales = prop_def(DenseArrayBase)
    mode = opt_prop_def(StringAttr)
    nearest_mode = opt_prop_def(StringAttr)
    coordinate_transformation_mode = opt_prop_def(StringAttr)

    @classmethod
    def infer(cls, types, props):
        raise cls.fail("the result type cannot be inferred; pass result_types")

    @classmethod
    def check_results(cls, types, props, results):
        arity(cls, types, 1)
        if len(results) != 1 or not isinstance(results[0], TensorType):
            raise cls.fail(f"expects one tensor result, got ({_types_str(results)})")
        expected = tensor_type(_interpolate_props(cls, results[0], props), dtype_of(results[0]))
        if types[0] != expected:
            raise cls.fail(f"dy {fmt_type(types[0])} must be {fmt_type(expected)} for input {fmt_type(results[0])}")
        return list(results)


def _roi_operands(cls: type[PopxlOp], t: TensorType, rois: TensorType, bidx: TensorType) -> int:
    if len(shape_of(t)) != 4:
        raise cls.fail(f"input must be (N, C, H, W), got {fmt_type(t)}")
    require_float(cls, t)
    rs = shape_of(rois)
    if len(rs) != 2 or rs[1] != 4 or dtype_of(rois) != dtype_of(t):
        raise cls.fail(f"rois must be (num_rois, 4) of the input's dtype, got {fmt_type(rois)}")
    require_int(cls, bidx, "batch_index")
    if shape_of(bidx) != (rs[0],):
        raise cls.fail(f"batch_index must be ({rs[0]},), one per RoI, got {fmt_type(bidx)}")
    return rs[0]


class _RoiBase(PopxlOp):
    output_size = prop_def(DenseArrayBase)
    spatial_scale = prop_def(FloatAttr)
    sampling_ratio = prop_def(IntegerAttr)
    aligned = opt_prop_def(IntegerAttr)

    @classmethod
    def roi_shape(cls, t: TensorType, rois: TensorType, bidx: TensorType, props: dict[str, Any]) -> tuple[int, ...]:
        n = _roi_operands(cls, t, rois, bidx)
        out = tuple(props["output_size"])
        if len(out) != 2 or min(out) < 1:
            raise cls.fail(f"output_size {out} must be (height, width) >= 1")
        if int(props["sampling_ratio"]) < 0:
            raise cls.fail(f"sampling_ratio must be >= 0 (0: adaptive), got {props['sampling_ratio']}")
        return (n, shape_of(t)[1], *out)


@irdl_op_definition
class RoiAlignOp(_RoiBase):
    """Average RoI Align (ONNX RoiAlign, torchvision `roi_align`; popxl.ops.roi_align): each
    RoI `[x1, y1, x2, y2]` of image `batch_index[r]` (scaled by `spatial_scale`) split in
    `output_size` bins, each the mean of `sampling_ratio`^2 bilinear samples (0: adaptive,
    `ceil(roi size / output size)` per dim); `aligned` shifts by half a pixel.

    ```mlir
    %y = popxl.roi_align %x, %r, %b {output_size = array<i64: 2, 2>, spatial_scale = 0.5 : f64,
        sampling_ratio = 2 : i64}
        : (tensor<2x3x8x8xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<4x3x2x2xf32>
    ```
    """

    name = "popxl.roi_align"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    rois = operand_def(TensorType)
    batch_index = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 3)
        t, rois, bidx = types
        return [tensor_type(cls.roi_shape(t, rois, bidx, props), dtype_of(t))]


@irdl_op_definition
class RoiAlignGradOp(_RoiBase):
    """Gradient of `popxl.roi_align` with respect to its input: `dy` spread back to the
    bilinear sample points; the result type is the forward input's.

    ```mlir
    %dx = popxl.roi_align_grad %dy, %r, %b {output_size = array<i64: 2, 2>, spatial_scale = 0.5 : f64,
        sampling_ratio = 2 : i64}
        : (tensor<4x3x2x2xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<2x3x8x8xf32>
    ```
    """

    name = "popxl.roi_align_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    dy = operand_def(TensorType)
    rois = operand_def(TensorType)
    batch_index = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, props):
        raise cls.fail("the result type cannot be inferred; pass result_types")

    @classmethod
    def check_results(cls, types, props, results):
        arity(cls, types, 3)
        if len(results) != 1 or not isinstance(results[0], TensorType):
            raise cls.fail(f"expects one tensor result, got ({_types_str(results)})")
        dy, rois, bidx = types
        expected = tensor_type(cls.roi_shape(results[0], rois, bidx, props), dtype_of(results[0]))
        if dy != expected:
            raise cls.fail(f"dy {fmt_type(dy)} must be {fmt_type(expected)}")
        return list(results)


# (op classes above this list; each new class appended to it)
# ------------------------------------------------------------------------------------
# Custom ops: a user's op run by the NumPy implementation registered under its op type
# (xl.dialects.custom_ops). The op carries the type name the program uses (`op_type`) and
# the op's attributes (`attrs`: integers, floats, booleans, strings, arrays); its result
# types are given when it is built, so IR text with custom ops parses and verifies without
# the implementation, which is needed only to run or differentiate it.
# ------------------------------------------------------------------------------------


def attributes_attr(attributes: dict[str, Any]) -> DictionaryAttr:
    """A custom op's attributes as the `attrs` property (values: int, float, bool, str, or a
    tuple / list of numbers)."""
    out: dict[str, Attribute] = {}
    for k, v in attributes.items():
        if not isinstance(k, str):
            raise TypeError(f"custom op attribute names must be strings, got {k!r}")
        try:
            out[k] = to_attr(v)
        except TypeError:
            raise TypeError(
                f"custom op attribute {k!r}: {v!r} ({type(v).__name__}) is not an int, float, bool, str "
                "or a sequence of numbers"
            ) from None
    return DictionaryAttr(out)


def attributes_of(attrs: Any) -> dict[str, Any]:
    """The `attrs` property as Python values (a dict from `op_props`, or the attribute)."""
    data = attrs.data if isinstance(attrs, DictionaryAttr) else attrs
    return {k: from_attr(v) for k, v in dict(data).items()}


@irdl_op_definition
class CustomOp(PopxlOp):
    """A user's op (`op_type`) with its attributes (`attrs`); run by the NumPy implementation
    registered under `op_type`, result types as built (popxl.custom_ops.custom_op).

    ```mlir
    %y = popxl.custom %x {op_type = "Scale", attrs = {factor = 2 : i64}} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "popxl.custom"
    traits = traits_def(AcceptsViews())
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    op_type = prop_def(StringAttr)
    attrs = prop_def(DictionaryAttr)

    @classmethod
    def infer(cls, types: Sequence[Any], props: dict[str, Any]) -> list[TensorType]:
        raise cls.fail("the result types come from the custom op's definition; pass result_types")

    @classmethod
    def check_results(
        cls, types: Sequence[Any], props: dict[str, Any], results: Sequence[Attribute]
    ) -> list[Attribute]:
        if not results or not all(isinstance(r, TensorType) for r in results):
            raise cls.fail(f"expects one or more tensor results, got ({_types_str(results)})")
        return list(results)


@irdl_op_definition
class CustomGradOp(PopxlOp):
    """The gradient of a `popxl.custom` (built by autodiff): operands the gradients of its
    `num_output_grads` outputs then its inputs, one result per input (its gradient).

    ```mlir
    %dx = popxl.custom_grad %dy, %x {op_type = "Scale", attrs = {}, num_output_grads = 1 : i64}
        : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    ```
    """

    name = "popxl.custom_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal())
    operands_ = var_operand_def(TensorType)
    grads = var_result_def(TensorType)
    op_type = prop_def(StringAttr)
    attrs = prop_def(DictionaryAttr)
    num_output_grads = prop_def(IntegerAttr)

    @classmethod
    def infer(cls, types: Sequence[Any], props: dict[str, Any]) -> list[TensorType]:
        n = int(props["num_output_grads"])
        if not 1 <= n < len(types):
            raise cls.fail(f"num_output_grads {n} leaves no forward inputs among {len(types)} operands")
        return list(types[n:])


CUSTOM_OPS: list[type[IRDLOperation]] = [CustomOp, CustomGradOp]


# ------------------------------------------------------------------------------------
# Group normalisation (ops.group_norm, ops.layer_norm): one op with the statistics as
# results, as PopART's GroupNormOp, so its gradient reads them instead of recomputing.
# ------------------------------------------------------------------------------------


@irdl_op_definition
class GroupNormOp(PopxlOp):
    """Group normalisation of `x` `(N, C, *spatial)` (popxl.ops.group_norm / layer_norm):
    each group of `C / num_groups` channels normalised to mean 0 and variance 1 (biased,
    plus `epsilon`), then `* weight + bias` per channel; also the mean and the inverse
    standard deviation of each (sample, group), shape `(N * num_groups,)`.

    ```mlir
    %y, %mean, %inv_std = popxl.group_norm %x, %w, %b {num_groups = 2 : i64, epsilon = 1.0e-05 : f64}
        : (tensor<3x4x5xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<3x4x5xf32>, tensor<6xf32>, tensor<6xf32>)
    ```
    """

    name = "popxl.group_norm"
    traits = traits_def(AcceptsViews(), PopartType("GroupNormalization"))
    x = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    y = result_def(TensorType)
    mean = result_def(TensorType)
    inv_std_dev = result_def(TensorType)
    num_groups = prop_def(IntegerAttr)
    epsilon = prop_def(FloatAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 3)
        dt = same_dtype(cls, types)
        if dt.kind != "f":
            _dtype_error(cls, f"expects floating-point tensors, got {fmt_type(types[0])}")
        x = shape_of(types[0])
        if len(x) < 2:
            raise cls.fail(f"the input must be (N, C, ...), got {fmt_type(types[0])}")
        n, c = x[0], x[1]
        for name, t in (("weight", types[1]), ("bias", types[2])):
            if shape_of(t) != (c,):
                raise cls.fail(f"{name} must have shape ({c},) (the channels of the input), got {fmt_type(t)}")
        g = int(props["num_groups"])
        if g < 1 or c % g:
            raise cls.fail(f"num_groups {g} does not divide the {c} channels")
        stats = tensor_type((n * g,), dt)
        return [types[0], stats, stats]


@irdl_op_definition
class GroupNormGradOp(PopxlOp):
    """The gradients of `popxl.group_norm` with respect to `x`, `weight` and `bias`, from
    `x`, `weight`, the forward's mean and inverse standard deviation, and the gradient of
    `y` (built by autodiff).

    ```mlir
    %dx, %dw, %db = popxl.group_norm_grad %x, %w, %mean, %inv_std, %dy {num_groups = 1 : i64, epsilon = 1.0e-05 : f64}
        : (tensor<3x4xf32>, tensor<4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3x4xf32>)
        -> (tensor<3x4xf32>, tensor<4xf32>, tensor<4xf32>)
    ```
    """

    name = "popxl.group_norm_grad"
    traits = traits_def(AcceptsViews(), NotDifferentiable(), Internal(), PopartType("GroupNormalizationGrad"))
    x = operand_def(TensorType)
    weight = operand_def(TensorType)
    mean = operand_def(TensorType)
    inv_std_dev = operand_def(TensorType)
    dy = operand_def(TensorType)
    dx = result_def(TensorType)
    dweight = result_def(TensorType)
    dbias = result_def(TensorType)
    num_groups = prop_def(IntegerAttr)
    epsilon = prop_def(FloatAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 5)
        x, w, mean, inv, dy = types
        fwd = GroupNormOp.infer([x, w, w], props)
        if [mean, inv] != fwd[1:] or dy != x:
            raise cls.fail(
                f"expects the statistics {fmt_type(fwd[1])} and a gradient like the input, got ({_types_str(types)})"
            )
        return [x, w, w]


NORM_OPS: list[type[IRDLOperation]] = [GroupNormOp, GroupNormGradOp]

NN_OPS: list[type[IRDLOperation]] = [
    ConvOp,
    ConvTransposeOp,
    ConvWeightGradOp,
    MaxPoolOp,
    AveragePoolOp,
    MaxPoolGradOp,
    AveragePoolGradOp,
    TopkOp,
    ScatterOp,
    TakeAlongAxisOp,
    ScatterReduceOp,
    ScatterReduceGradOp,
    ReduceProdOp,
    ReduceProdGradOp,
    LogSoftmaxOp,
    HistogramOp,
    InterpolateOp,
    InterpolateGradOp,
    RoiAlignOp,
    RoiAlignGradOp,
]


# -- random numbers and dropout -------------------------------------------------------------


def seed_operand(cls: type[PopxlOp], t: TensorType, what: str = "seed") -> None:
    """A random seed: a uint32 tensor of shape (2,) (`popxl.create_seeds` makes them)."""
    if shape_of(t) != (2,) or dtype_of(t) != np.uint32:
        raise cls.fail(f"{what} must be a uint32 tensor of shape (2,), got {fmt_type(t)}")


def dropout_ratio(cls: type[PopxlOp], props: dict[str, Any]) -> None:
    r = props["ratio"]
    if not 0.0 <= r < 1.0:
        raise cls.fail(f"ratio {r} must be in [0, 1)")


@irdl_op_definition
class ModifyRandomSeedOp(PopxlOp):
    """A new seed derived from `seed` and the scalar uint32 `modifier`: different
    modifiers give independent seeds (popxl.ops.split_random_seed emits one per new
    seed; PopART ModifyRandomSeed).

    ```mlir
    %s1 = popxl.modify_random_seed %seed, %m : (tensor<2xui32>, tensor<ui32>) -> tensor<2xui32>
    ```
    """

    name = "popxl.modify_random_seed"
    seed = operand_def(TensorType)
    modifier = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), NoGradient())

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        seed_operand(cls, types[0])
        if shape_of(types[1]) != () or dtype_of(types[1]) != np.uint32:
            raise cls.fail(f"modifier must be a scalar uint32 tensor, got {fmt_type(types[1])}")
        return [types[0]]


@irdl_op_definition
class RandomUniformOp(ResultTypedOp):
    """Samples of the uniform distribution on `[low, high)` (defaults 0 and 1), of the
    result's shape and float dtype (popxl.ops.random_uniform). The values depend only
    on the seed's value and the result type.

    ```mlir
    %r = popxl.random_uniform %seed {low = -1.0 : f64, high = 1.0 : f64} : (tensor<2xui32>) -> tensor<3x4xf32>
    ```
    """

    name = "popxl.random_uniform"
    seed = operand_def(TensorType)
    result = result_def(TensorType)
    low = opt_prop_def(FloatAttr)
    high = opt_prop_def(FloatAttr)
    traits = traits_def(AcceptsViews(), NoGradient())

    @classmethod
    def check(cls, types, props, result):
        arity(cls, types, 1)
        seed_operand(cls, types[0])
        require_float(cls, result, "the result")
        low, high = props.get("low", 0.0), props.get("high", 1.0)
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise cls.fail(f"low {low} and high {high} must be finite with low <= high")


@irdl_op_definition
class RandomNormalOp(ResultTypedOp):
    """Samples of the normal distribution `N(mean, std**2)` (defaults 0 and 1), of the
    result's shape and float dtype (popxl.ops.random_normal). The values depend only on
    the seed's value and the result type.

    ```mlir
    %r = popxl.random_normal %seed {mean = 0.0 : f64, std = 2.0 : f64} : (tensor<2xui32>) -> tensor<8xf32>
    ```
    """

    name = "popxl.random_normal"
    seed = operand_def(TensorType)
    result = result_def(TensorType)
    mean = opt_prop_def(FloatAttr)
    std = opt_prop_def(FloatAttr)
    traits = traits_def(AcceptsViews(), NoGradient())

    @classmethod
    def check(cls, types, props, result):
        arity(cls, types, 1)
        seed_operand(cls, types[0])
        require_float(cls, result, "the result")
        mean, std = props.get("mean", 0.0), props.get("std", 1.0)
        if not (math.isfinite(mean) and math.isfinite(std) and std >= 0):
            raise cls.fail(f"mean {mean} and std {std} must be finite with std >= 0")


@irdl_op_definition
class DropoutOp(PopxlOp):
    """`input * mask / (1 - ratio)` where each element of `mask` is 0 with probability
    `ratio`, else 1 (popxl.ops.dropout). The mask depends only on the seed's value and
    the input's shape: element `i` is dropped when `random_uniform(seed)[i] < ratio`
    (float64 samples), so the gradient (the same dropout of `dy`) recomputes it.

    ```mlir
    %y = popxl.dropout %x, %seed {ratio = 0.1 : f64} : (tensor<4x8xf32>, tensor<2xui32>) -> tensor<4x8xf32>
    ```
    """

    name = "popxl.dropout"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    seed = operand_def(TensorType)
    result = result_def(TensorType)
    ratio = prop_def(FloatAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        require_float(cls, types[0])
        seed_operand(cls, types[1])
        dropout_ratio(cls, props)
        return [types[0]]


@irdl_op_definition
class ShapedDropoutOp(PopxlOp):
    """Dropout with a mask of `shape` broadcast over the input (NumPy rules), so whole
    slices are dropped together (popxl.ops.shaped_dropout): the mask is that of
    `popxl.dropout` on a tensor of `shape`.

    ```mlir
    %y = popxl.shaped_dropout %x, %seed {shape = array<i64: 4, 1>, ratio = 0.5 : f64}
        : (tensor<4x8xf32>, tensor<2xui32>) -> tensor<4x8xf32>
    ```
    """

    name = "popxl.shaped_dropout"
    traits = traits_def(AcceptsViews())
    input = operand_def(TensorType)
    seed = operand_def(TensorType)
    result = result_def(TensorType)
    shape = prop_def(DenseArrayBase)
    ratio = prop_def(FloatAttr)

    @classmethod
    def infer(cls, types, props):
        arity(cls, types, 2)
        require_float(cls, types[0])
        seed_operand(cls, types[1])
        dropout_ratio(cls, props)
        shape = tuple(props["shape"])
        if any(d < 1 for d in shape) or not broadcasts_to(shape, shape_of(types[0])):
            raise cls.fail(f"mask shape {shape} does not broadcast to the input {fmt_type(types[0])}")
        return [types[0]]


# (op classes above this list; each new class appended to it)
RANDOM_OPS: list[type[IRDLOperation]] = [
    ModifyRandomSeedOp,
    RandomUniformOp,
    RandomNormalOp,
    DropoutOp,
    ShapedDropoutOp,
]


OPS: list[type[IRDLOperation]] = (
    [
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        PowOp,
        MaximumOp,
        MinimumOp,
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
        SwishOp,
        ExpOp,
        LogOp,
        SqrtOp,
        CosOp,
        SinOp,
        LogicalNotOp,
        IdentityOp,
        DetachOp,
        CastOp,
        MatmulOp,
        SoftmaxOp,
        CumsumOp,
        CeilOp,
        FloorOp,
        ErfOp,
        GeluErfOp,
        GeluErfGradOp,
        FmodOp,
        BitwiseNotOp,
        BitwiseAndOp,
        BitwiseOrOp,
        BitwiseXorOp,
        BitwiseXnorOp,
        LogicalXorOp,
        ClipOp,
        PrintTensorOp,
        Pow2ScaleCastToFp8Op,
        Pow2ScaleCastFromFp8Op,
        MatmulPow2ScaledOp,
        ReshapeOp,
        TransposeOp,
        ReduceSumOp,
        ReduceMeanOp,
        ReduceMaxOp,
        ReduceMinOp,
        ScaledAddOp,
        ScaledAddInplaceOp,
        # shape / index
        ConcatOp,
        SliceOp,
        GatherOp,
        WhereOp,
        OnehotOp,
        SqueezeOp,
        ExpandOp,
        ReduceToShapeOp,
        InitOp,
        ArgmaxOp,
        ArgminOp,
        # losses
        NllLossOp,
        NllLossWithSoftmaxGradOp,
        # gradient helpers
        GeluGradOp,
        ReluGradOp,
        SoftmaxGradOp,
        NllLossGradOp,
        GatherGradOp,
        SliceGradOp,
        ReduceMaxGradOp,
        # in-place updates
        AccumulateOp,
        AccumulateSquareOp,
        AccumulateMeanOp,
        AccumulateMovingAverageOp,
        AccumulateMovingAverageSquareOp,
        AccumulatorScaleOp,
        AccumulatorZeroOp,
        SparseAccumulateOp,
        CopyVarUpdateOp,
        IncrementModOp,
        IncrementModInplaceOp,
        DynamicSliceOp,
        DynamicUpdateOp,
        DynamicUpdateInplaceOp,
        # optimiser maths
        AdamUpdaterOp,
        LambUpdaterOp,
        AdamaxUpdaterOp,
        AdamVarUpdateOp,
    ]
    + NN_OPS
    + RANDOM_OPS
)

OPS += CUSTOM_OPS + NORM_OPS

Popxl = Dialect("popxl", [*OPS], [])
