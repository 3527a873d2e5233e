"""The functions of `popxl.ops` (re-exported by `popxl/ops/__init__.py`).

Every function builds its op in the current graph (`popxl.gcg()`) from the op's class in
`xl.dialects.popxl`; a shape/dtype error found by the op's type inference is raised as
`ValueError` naming the op and the shapes. In-place ops (`*_`) return the tensor they
update. Functions for upstream ops that xl has no op for yet are declared with
`@unimplemented`: calling them raises
`NotImplementedError("popxl.ops.<name> is not implemented in xl yet")`.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import numpy as np

from popxl import dtypes
from popxl._checks import describe
from popxl._views import record_view
from popxl.context import gcg
from popxl.dtypes import dtype
from popxl.errors import GraphBuildError
from popxl.ops._utils import (
    as_dtype,
    as_float,
    as_int,
    as_one_popart_op,
    as_shape,
    axes_tuple,
    check_in_graph,
    composed,
    current_op,
    emit,
    emit1,
    emit_inplace,
    insert,
    to_tensor,
    wrap_public_ops,
)
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Tensor, TensorLike, constant
from xl.dialects.popxl import (
    AbsOp,
    AddOp,
    ArgmaxOp,
    ArgminOp,
    BitwiseAndOp,
    BitwiseNotOp,
    BitwiseOrOp,
    BitwiseXnorOp,
    BitwiseXorOp,
    CastOp,
    CeilOp,
    ClipOp,
    ConcatOp,
    CopyVarUpdateOp,
    CosOp,
    CumsumOp,
    DetachOp,
    DivOp,
    DropoutOp,
    DynamicSliceOp,
    DynamicUpdateInplaceOp,
    DynamicUpdateOp,
    EqualOp,
    ErfOp,
    ExpandOp,
    ExpOp,
    FloorOp,
    FmodOp,
    GatherOp,
    GeluErfOp,
    GeluOp,
    GreaterOp,
    GroupNormOp,
    IdentityOp,
    IncrementModInplaceOp,
    IncrementModOp,
    InitOp,
    LogicalAndOp,
    LogicalNotOp,
    LogicalOrOp,
    LogicalXorOp,
    LogOp,
    MatmulOp,
    MatmulPow2ScaledOp,
    MaximumOp,
    ModifyRandomSeedOp,
    MulOp,
    NegOp,
    NllLossOp,
    NllLossWithSoftmaxGradOp,
    OnehotOp,
    Pow2ScaleCastFromFp8Op,
    Pow2ScaleCastToFp8Op,
    PowOp,
    PrintTensorOp,
    RandomNormalOp,
    RandomUniformOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceMinOp,
    ReduceOp,
    ReduceSumOp,
    ReluOp,
    ReshapeOp,
    ScaledAddInplaceOp,
    ScaledAddOp,
    ShapedDropoutOp,
    SigmoidOp,
    SignOp,
    SinOp,
    SliceOp,
    SoftmaxOp,
    SqrtOp,
    SqueezeOp,
    SubOp,
    SwishOp,
    TanhOp,
    TransposeOp,
    WhereOp,
)
from xl.dialects.utils import tensor_type


def _t(x: Any, like: Tensor | None = None) -> Tensor:
    return to_tensor(x, like.dtype if like is not None else None)


def _pair(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, _t(b, a)
    if isinstance(b, Tensor):
        return _t(a, b), b
    return _t(a), _t(b)


def _dtype_of(d: Any) -> dtype:
    return as_dtype(d)


# ---------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------


def add(lhs: Tensor, rhs: Tensor) -> Tensor:
    """`lhs + rhs`, elementwise with NumPy broadcasting.

    A Python number or array operand becomes a constant of the other operand's dtype;
    both operands must have the same dtype. The result has the broadcast shape.
    """
    return emit1(AddOp, _pair(lhs, rhs))


def sub(lhs: Tensor, rhs: Tensor) -> Tensor:
    """`lhs - rhs`, elementwise with NumPy broadcasting (operands as in `add`)."""
    return emit1(SubOp, _pair(lhs, rhs))


def mul(lhs: Tensor, rhs: Tensor) -> Tensor:
    """`lhs * rhs`, elementwise with NumPy broadcasting (operands as in `add`)."""
    return emit1(MulOp, _pair(lhs, rhs))


def div(lhs: Tensor, rhs: Tensor) -> Tensor:
    """`lhs / rhs`, elementwise with NumPy broadcasting (operands as in `add`).

    Integer tensors divide with truncation towards zero, as in PopART.
    """
    return emit1(DivOp, _pair(lhs, rhs))


def fmod(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    """Elementwise remainder of `lhs / rhs` with the sign of `lhs` (C `fmod`,
    `lhs - trunc(lhs / rhs) * rhs`), NumPy broadcasting, operands of one dtype (float or
    integer; a Python number becomes a constant of the other operand's dtype). A float
    remainder by 0 is NaN, an integer one 0."""
    return emit1(FmodOp, _pair(lhs, rhs))


def pow(t: Tensor, e: Any) -> Tensor:
    """`t ** e`, elementwise with NumPy broadcasting (`e` a Tensor or a number)."""
    return emit1(PowOp, _pair(t, e))


def equal(input: Tensor, other: Any) -> Tensor:
    """`input == other`, elementwise with broadcasting; a bool tensor."""
    return emit1(EqualOp, _pair(input, other))


def greater(input: Tensor, other: Any) -> Tensor:
    """`input > other`, elementwise with broadcasting; a bool tensor."""
    return emit1(GreaterOp, _pair(input, other))


def _as_bool(t: Tensor) -> Tensor:
    """`t` cast to bool unless it is bool already (the logical ops' inputs, as upstream)."""
    return t if t.dtype == dtypes.bool else cast(t, dtypes.bool)


def logical_and(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs and rhs` elementwise with broadcasting; non-bool inputs are cast to bool
    (non-zero is true), as upstream."""
    a, b = _pair(lhs, rhs)
    return emit1(LogicalAndOp, [_as_bool(a), _as_bool(b)])


def logical_or(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs or rhs` elementwise with broadcasting; non-bool inputs are cast to bool
    (non-zero is true), as upstream."""
    a, b = _pair(lhs, rhs)
    return emit1(LogicalOrOp, [_as_bool(a), _as_bool(b)])


def maximum(*ts: Tensor) -> Tensor:
    """Elementwise maximum of one or more tensors (broadcast together, same dtype)."""
    if not ts:
        raise ValueError("ops.maximum needs at least one tensor")
    out = ts[0]
    for t in ts[1:]:
        out = emit1(MaximumOp, _pair(out, t))
    return out


@composed("AddLhsInplace")
def add_(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs += rhs` in place (`rhs` broadcast to `lhs`'s shape); returns the updated `lhs`
    (a new tensor aliasing it)."""
    return scaled_add_(lhs, rhs, 1.0, 1.0)


def negate(t: Tensor) -> Tensor:
    """`-t`, elementwise."""
    return emit1(NegOp, [t])


def neg(t: Tensor) -> Tensor:
    """`-t`, elementwise (same as `negate`)."""
    return negate(t)


def abs(t: Tensor) -> Tensor:
    """`|t|`, elementwise."""
    return emit1(AbsOp, [t])


def sign(t: Tensor) -> Tensor:
    """The sign of each element: -1, 0 or 1, in `t`'s dtype."""
    return emit1(SignOp, [t])


def relu(t: Tensor) -> Tensor:
    """`max(t, 0)`, elementwise."""
    return emit1(ReluOp, [t])


def gelu(t: Tensor) -> Tensor:
    """GELU, tanh approximation as in PopART:
    `0.5 * t * (1 + tanh(sqrt(2 / pi) * (t + 0.044715 * t**3)))`, elementwise (float)."""
    return emit1(GeluOp, [t])


def tanh(t: Tensor) -> Tensor:
    """`tanh(t)`, elementwise (float)."""
    return emit1(TanhOp, [t])


def sigmoid(t: Tensor) -> Tensor:
    """`1 / (1 + exp(-t))`, elementwise (float)."""
    return emit1(SigmoidOp, [t])


def exp(t: Tensor) -> Tensor:
    """`e ** t`, elementwise (float)."""
    return emit1(ExpOp, [t])


def log(t: Tensor) -> Tensor:
    """Natural logarithm, elementwise (float)."""
    return emit1(LogOp, [t])


def sqrt(t: Tensor) -> Tensor:
    """Square root, elementwise (float)."""
    return emit1(SqrtOp, [t])


def cos(t: Tensor) -> Tensor:
    """`cos(t)`, elementwise (float, radians)."""
    return emit1(CosOp, [t])


def sin(t: Tensor) -> Tensor:
    """`sin(t)`, elementwise (float, radians)."""
    return emit1(SinOp, [t])


def logical_not(t: Tensor) -> Tensor:
    """`not t` elementwise; a non-bool input is cast to bool (non-zero is true), as upstream."""
    return emit1(LogicalNotOp, [_as_bool(_t(t))])


def ceil(t: Tensor) -> Tensor:
    """The smallest integer not less than each element (float), NaN propagated. No
    gradient flows through it (its derivative is zero almost everywhere)."""
    return emit1(CeilOp, [t])


def floor(t: Tensor) -> Tensor:
    """The largest integer not greater than each element (float), NaN propagated. No
    gradient flows through it (its derivative is zero almost everywhere)."""
    return emit1(FloorOp, [t])


def geluerf(t: Tensor) -> Tensor:
    """Exact GELU `0.5 * t * (1 + erf(t / sqrt(2)))`, elementwise (float)."""
    return emit1(GeluErfOp, [t])


def erf(t: Tensor) -> Tensor:
    """The error function `erf(t)`, elementwise (float). Not in upstream `popxl.ops`
    (ONNX Erf); differentiable (`2 / sqrt(pi) * exp(-t**2)`)."""
    return emit1(ErfOp, [t])


def bitwise_not(t: Tensor) -> Tensor:
    """`~t` of an integer tensor, elementwise. Not in upstream `popxl.ops` (PopART's
    BitwiseNot)."""
    return emit1(BitwiseNotOp, [t])


def bitwise_and(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs & rhs` of integer tensors, elementwise with broadcasting. Not in upstream
    `popxl.ops` (PopART's BitwiseAnd)."""
    return emit1(BitwiseAndOp, _pair(lhs, rhs))


def bitwise_or(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs | rhs` of integer tensors, elementwise with broadcasting. Not in upstream
    `popxl.ops` (PopART's BitwiseOr)."""
    return emit1(BitwiseOrOp, _pair(lhs, rhs))


def bitwise_xor(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs ^ rhs` of integer tensors, elementwise with broadcasting. Not in upstream
    `popxl.ops` (PopART's BitwiseXor)."""
    return emit1(BitwiseXorOp, _pair(lhs, rhs))


def bitwise_xnor(lhs: Tensor, rhs: Any) -> Tensor:
    """`~(lhs ^ rhs)` of integer tensors, elementwise with broadcasting. Not in upstream
    `popxl.ops` (PopART's BitwiseXnor)."""
    return emit1(BitwiseXnorOp, _pair(lhs, rhs))


def logical_xor(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs != rhs` of bool tensors, elementwise with broadcasting. Not in upstream
    `popxl.ops` (ONNX Xor)."""
    return emit1(LogicalXorOp, _pair(lhs, rhs))


def swish(t: Tensor) -> Tensor:
    """`t * sigmoid(t)`, elementwise (float)."""
    return emit1(SwishOp, [t])


def log2(t: Tensor) -> Tensor:
    """Base-2 logarithm, elementwise (float): `log(t) / log(2)`, both logarithms computed
    in `t`'s dtype (as PopXL builds it: a constant 2 and two `log` ops)."""
    return div(log(t), log(constant(2.0, t.dtype)))


@composed("IsNaN")
def isnan(t: Tensor) -> Tensor:
    """Whether each element is NaN (`t != t`); a bool tensor."""
    return logical_not(equal(t, t))


@composed("IsInf")
def isinf(t: Tensor) -> Tensor:
    """Whether each element is +inf or -inf; a bool tensor."""
    return equal(abs(t), constant(np.inf, t.dtype))


def isfinite(t: Tensor) -> Tensor:
    """Whether each element is neither NaN nor infinite; a bool tensor."""
    return logical_not(logical_or(isnan(t), isinf(t)))


def _assign_(t: Tensor, value: Tensor) -> Tensor:
    """`t[...] = value` in place."""
    return emit_inplace(CopyVarUpdateOp, [t, value])


@composed("ExpInplace")
def exp_(t: Tensor) -> Tensor:
    """`t = exp(t)` in place; returns the updated `t` (a new tensor aliasing it)."""
    return _assign_(t, exp(t))


@composed("ReluInplace")
def relu_(t: Tensor) -> Tensor:
    """`t = relu(t)` in place; returns the updated `t` (a new tensor aliasing it)."""
    return _assign_(t, relu(t))


@composed("GeluInplace")
def gelu_(t: Tensor) -> Tensor:
    """`t = gelu(t)` in place (tanh approximation); returns the updated `t` (a new tensor aliasing it)."""
    return _assign_(t, gelu(t))


@composed("GeluErfInplace")
def geluerf_(t: Tensor) -> Tensor:
    """`t = geluerf(t)` in place (exact GELU); returns the updated `t` (a new tensor aliasing it)."""
    return _assign_(t, geluerf(t))


@composed("SwishInplace")
def swish_(t: Tensor) -> Tensor:
    """`t = swish(t)` in place; returns the updated `t` (a new tensor aliasing it)."""
    return _assign_(t, swish(t))


def clip(t: Tensor, min: float = float("-inf"), max: float = float("inf")) -> Tensor:
    """`t` with each element clamped to `[min, max]` (numbers; an infinite bound is no
    bound), NaN propagated. The gradient passes where `min <= t <= max`. Integer tensors
    clamp to `[ceil(min), floor(max)]`. ValueError when `min > max`."""
    lo, hi = as_float(min, "min"), as_float(max, "max")
    return emit1(ClipOp, [t], min=None if lo == float("-inf") else lo, max=None if hi == float("inf") else hi)


def clamp(t: Tensor, min: float = float("-inf"), max: float = float("inf")) -> Tensor:
    """Same as `clip`: each element clamped to `[min, max]`."""
    return clip(t, min, max)


def where(condition: Tensor, lhs: Any, rhs: Any) -> Tensor:
    """`lhs` where `condition` else `rhs` (broadcasting)."""
    if isinstance(lhs, Tensor):
        rhs = _t(rhs, lhs)
    elif isinstance(rhs, Tensor):
        lhs = _t(lhs, rhs)
    else:
        lhs, rhs = _t(lhs), _t(rhs)
    condition = to_tensor(condition, dtypes.bool)
    if condition.dtype != dtypes.bool:
        condition = cast(condition, dtypes.bool)
    return emit1(WhereOp, [condition, lhs, rhs])


# ---------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------


def _reduce(cls: type[ReduceOp], t: Tensor, axis: Any, keepdims: bool) -> Tensor:
    return emit1(cls, [t], axis=axes_tuple(axis, t.rank), keepdims=bool(keepdims) or None)


def sum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum of the elements over `axis` (an int, a sequence of ints, or None for all axes).

    The reduced dims are removed, or kept with size 1 when `keepdims`.
    """
    return _reduce(ReduceSumOp, t, axis, keepdims)


def mean(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over `axis` (all axes when None); dims as in `sum`."""
    return _reduce(ReduceMeanOp, t, axis, keepdims)


def max(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Maximum over `axis` (all axes when None); dims as in `sum`."""
    return _reduce(ReduceMaxOp, t, axis, keepdims)


def min(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Minimum over `axis` (all axes when None); dims as in `sum`."""
    return _reduce(ReduceMinOp, t, axis, keepdims)


@composed("ReduceSumSquare")
def sumsquare(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum of the squares `t * t` over `axis`; dims as in `sum`."""
    return sum(mul(t, t), axis, keepdims)


@composed("ReduceL2")
def l2(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """L2 norm `sqrt(sum(t * t))` over `axis`; dims as in `sum`."""
    return sqrt(sumsquare(t, axis, keepdims))


@composed("ReduceL1")
def l1(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """L1 norm `sum(|t|)` over `axis`; dims as in `sum`."""
    return sum(abs(t), axis, keepdims)


@composed("ReduceLogSum")
def logsum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """`log(sum(t))` over `axis`; dims as in `sum`."""
    return log(sum(t, axis, keepdims))


@composed("ReduceLogSumExp")
def logsumexp(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """`log(sum(exp(t)))` over `axis`, computed stably (the maximum is subtracted first);
    dims as in `sum`."""
    m = max(t, axis, keepdims=True)
    out = add(log(sum(exp(sub(t, m)), axis, keepdims=True)), m)
    if not keepdims:
        axes = axes_tuple(axis, t.rank)
        out = squeeze(out, axes if axes is not None else tuple(range(t.rank)))
    return out


def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """Index of the (first) maximum along `dim`, int32; `dim` removed unless `keepdim`."""
    return emit1(ArgmaxOp, [t], axis=as_int(dim, "dim"), keepdims=bool(keepdim))


def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """Index of the (first) minimum along `dim`, int32; `dim` removed unless `keepdim`."""
    return emit1(ArgminOp, [t], axis=as_int(dim, "dim"), keepdims=bool(keepdim))


def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """Cumulative sum along `dim` (same shape and dtype as `t`): element `i` is the sum
    of the elements `0..i` along `dim`."""
    return emit1(CumsumOp, [t], dim=as_int(dim, "dim"))


# ---------------------------------------------------------------------------------------
# Shape
# ---------------------------------------------------------------------------------------


def _reshape_dims(shape: Any) -> tuple[int, ...]:
    """A reshape target: ints, at most one of them -1."""
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    if isinstance(shape, str) or not isinstance(shape, Iterable):
        raise TypeError(f"{current_op()}: shape must be a tuple of ints, got {describe(shape)}")
    return tuple(as_int(d, "each dim of shape") for d in shape)


def reshape(t: Tensor, shape: Iterable[int]) -> Tensor:
    """The elements of `t` (row-major order) in a new `shape`; one dim may be -1 (inferred).

    ValueError when the number of elements differs.
    """
    shape = _reshape_dims(shape)
    new = ReshapeOp.resolve_shape(t.shape, shape)
    return emit1(ReshapeOp, [t], tensor_type(new, t.dtype._compute_np()))


@composed("ReshapeInplace")
def reshape_(t: Tensor, shape: Iterable[int]) -> Tensor:
    """As `reshape`. Upstream the result is an alias (a view) of `t`; xl builds a copy and,
    when the program is compiled or exported, raises `NotImplementedError` for any program
    where that differs: an in-place update of the result, a read of the result after `t`
    was updated in place, or an op updating `t` while reading the result. Reading the
    result before any such update (e.g. as an operand) works as upstream."""
    return record_view(reshape(t, shape), "ops.reshape_")


def flatten(t: Tensor) -> Tensor:
    """`t` reshaped to 1-D, shape `(t.nelms,)`."""
    return reshape(t, (-1,))


@composed("ReshapeInplace")
def flatten_(t: Tensor) -> Tensor:
    """As `flatten`. Upstream an alias of `t`: xl refuses programs where that differs,
    see `reshape_`."""
    return record_view(flatten(t), "ops.flatten_")


def transpose(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """`t` with its dims permuted: result dim `i` is dim `permutation[i]` of `t`; the dims are
    reversed when `permutation` is None (`np.transpose` semantics)."""
    perm = tuple(range(t.rank))[::-1] if permutation is None else tuple(as_int(p, "permutation") for p in permutation)
    if any(not -t.rank <= p < t.rank for p in perm):
        raise ValueError(
            f"ops.transpose: Values in permutation must be less than the tensor's rank {t.rank} "
            f"(rank {t.rank} {t.id} {t.shape}), got {perm}"
        )
    perm = tuple(p % t.rank if t.rank else p for p in perm)
    return emit1(TransposeOp, [t], perm=perm)


@composed("TransposeInplace")
def transpose_(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """As `transpose`. Upstream an alias of `t`: xl refuses programs where that differs,
    see `reshape_`."""
    return record_view(transpose(t, permutation), "ops.transpose_")


def squeeze(t: Tensor, axes: int | Iterable[int] | None = None) -> Tensor:
    """`t` without the size-1 dims `axes` (an int or ints; all size-1 dims when None).

    ValueError when a dim of `axes` is not 1.
    """
    if axes is None:
        ax = tuple(i for i, d in enumerate(t.shape) if d == 1)
    else:
        ax = axes_tuple(axes, t.rank, "axes") or ()
    for a in ax:
        if not -t.rank <= a < t.rank:
            raise ValueError(f"ops.squeeze: axis {a} is out of range for {t.id} of rank {t.rank} {t.shape}")
    ax = tuple(a % t.rank for a in ax)
    for a in ax:
        if t.shape[a] != 1:
            raise ValueError(f"ops.squeeze: dim {a} of {t.shape} is not 1")
    return emit1(SqueezeOp, [t], axes=ax)


def expand(t: Tensor, shape: Iterable[int]) -> Tensor:
    """`t` broadcast to `shape` (NumPy rules: the result shape is the broadcast of both)."""
    shape = as_shape(shape)
    out_shape = tuple(np.broadcast_shapes(t.shape, shape)) if len(shape) >= t.rank else shape
    return emit1(ExpandOp, [t], tensor_type(out_shape, t.dtype._compute_np()))


def concat(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    """The tensors of `ts` (same dtype, same shape except along `axis`) joined along `axis`."""
    if isinstance(ts, Tensor):
        raise TypeError("ops.concat: expected a sequence of tensors, got a single Tensor")
    ts = list(ts)
    if not ts:
        raise ValueError("ops.concat needs at least one tensor")
    return emit1(ConcatOp, ts, axis=as_int(axis, "axis"))


def concat_(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    """As `concat`. Upstream the result aliases each tensor of `ts`: xl refuses programs
    where that differs, see `reshape_`."""
    return record_view(concat(ts, axis), "ops.concat_")


def split(t: Tensor, splits: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """`t` split along `axis` into `splits` equal parts (an int that divides the dim) or into
    parts of the given sizes (which must add up to the dim); a list of tensors."""
    axis = as_int(axis, "axis") % t.rank
    n = t.shape[axis]
    if not isinstance(splits, Iterable):
        parts = as_int(splits, "splits")
        if parts < 1:
            raise ValueError(f"ops.split: splits must be >= 1, got {parts}")
        if n % parts:
            raise ValueError(f"ops.split: dim {axis} of {t.shape} is not divisible by {parts}")
        sizes = [n // parts] * parts
    else:
        sizes = [as_int(s, "splits") for s in splits]
        if builtins.min(sizes, default=0) < 0:
            raise GraphBuildError(f"ops.split: sizes {sizes} of dim {axis} of {t.shape} must not be negative")
        if builtins.sum(sizes) != n:
            raise GraphBuildError(f"ops.split: sizes {sizes} do not add up to dim {axis} ({n}) of {t.shape}")
    out, start = [], 0
    for s in sizes:
        out.append(slice(t, start=start, stop=start + s, axis=axis))
        start += s
    as_one_popart_op([o for o in out if o is not t], "Split")  # one slice per part; PopART's one SplitOp
    return out


_NO_BOUND_HI = 2**63 - 1
_NO_BOUND_LO = -(2**63)


def slice(
    t: Tensor,
    start: int | Sequence[int | None] | None = None,
    stop: int | Sequence[int | None] | None = None,
    step: int | Sequence[int | None] | None = None,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """`t[start:stop:step]` along each dim of `axis` (the leading dims when None).

    `start`, `stop`, `step` are ints or sequences (one entry per axis, None for no bound);
    Python slicing semantics (negative indices count from the end, bounds are clamped).
    With none of `start`, `stop`, `step` given, `t` itself (no op), as in PopXL.
    """
    if start is None and stop is None and step is None:
        return t

    def as_list(x: Any) -> list[int | None] | None:
        if x is None:
            return None
        if isinstance(x, int | np.integer):
            return [as_int(x, "start/stop/step/axis")]
        return [None if v is None else as_int(v, "start/stop/step/axis") for v in x]

    starts, stops, steps, axes = as_list(start), as_list(stop), as_list(step), as_list(axis)
    n = next((len(x) for x in (starts, stops, steps, axes) if x is not None), 0)
    starts = starts or [None] * n
    stops = stops or [None] * n
    steps = steps or [None] * n
    if axes is None:
        axes = list(range(n))
    if not len(starts) == len(stops) == len(steps) == len(axes):
        raise ValueError(
            f"ops.slice: start {starts}, stop {stops}, step {steps} and axis {axes} must have the same length"
        )
    st = [1 if s is None else s for s in steps]
    if any(s == 0 for s in st):
        raise ValueError("ops.slice: step cannot be 0")
    b = [0 if x is None and s > 0 else _NO_BOUND_HI if x is None else x for x, s in zip(starts, st)]
    e = [(_NO_BOUND_HI if s > 0 else _NO_BOUND_LO) if x is None else x for x, s in zip(stops, st)]
    return emit1(
        SliceOp,
        [t],
        start=tuple(b),
        stop=tuple(e),
        step=None if all(s == 1 for s in st) else tuple(st),
        axes=tuple(as_int(a, "axes") for a in axes),
    )


@composed("SliceInplace")
def slice_(
    t: Tensor,
    start: int | Sequence[int | None] | None = None,
    stop: int | Sequence[int | None] | None = None,
    step: int | Sequence[int | None] | None = None,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """As `slice`. Upstream a view of `t`: xl refuses programs where that differs,
    see `reshape_`. With no `start`, `stop` or `step`, `t` itself (as upstream)."""
    if start is None and stop is None and step is None:
        return t
    return record_view(slice(t, start, stop, step, axis), "ops.slice_")


@composed("Subsample")
def subsample(t: Tensor, strides: int | Iterable[int]) -> Tensor:
    """Every `strides[i]`-th element along each dim `i` of `t`, starting at 0. An int is the
    stride of dim 0; fewer strides than dims are padded with ones (as upstream); more is a
    ValueError, and so is a stride below 1."""
    items = [strides] if isinstance(strides, int | np.integer) else list(strides)
    steps = [as_int(s, "strides") for s in items]
    if len(steps) > t.rank:
        raise ValueError(
            f"ops.subsample: The length of subsample `strides` ({len(steps)}) must not be greater "
            f"than the rank of the input tensor {t.id} {t.shape}"
        )
    if any(s < 1 for s in steps):
        raise ValueError(f"ops.subsample: strides must be positive, got {steps}")
    steps += [1] * (t.rank - len(steps))
    return slice(t, start=[0] * t.rank, stop=list(t.shape), step=steps, axis=list(range(t.rank)))


def _getitem(t: Tensor, key: Any) -> Tensor:
    """`t[key]`: ints/slices -> slice (+ squeeze), int tensor/array -> gather,
    bool tensor -> where-mask."""
    if isinstance(key, Tensor):
        if key.dtype == dtypes.bool:
            return where(key, t, constant(0, t.dtype))
        return gather(t, key)
    if isinstance(key, np.ndarray | list) and not isinstance(key, tuple):
        arr = np.asarray(key)
        if arr.dtype == np.bool_:
            return where(constant(arr, dtypes.bool), t, constant(0, t.dtype))
        return gather(t, constant(arr.astype(np.int32), dtypes.int32))
    if not isinstance(key, tuple):
        key = (key,)
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    n_explicit = builtins.sum(1 for k in key if k is not Ellipsis and k is not None)
    if n_explicit > t.rank:
        raise IndexError(f"too many indices for tensor of rank {t.rank}")
    expanded: list[Any] = []
    for k in key:
        if k is Ellipsis:
            expanded += [builtins.slice(None)] * (t.rank - n_explicit)
        else:
            expanded.append(k)
    starts, stops, steps, axes, squeeze_axes = [], [], [], [], []
    newaxis_pos: list[int] = []
    dim = 0
    out_dim = 0
    for k in expanded:
        if k is None:
            newaxis_pos.append(out_dim)
            out_dim += 1
            continue
        if isinstance(k, int | np.integer):
            k = as_int(k, "k")
            size = t.shape[dim]
            if not -size <= k < size:
                raise IndexError(f"index {k} is out of bounds for axis {dim} with size {size}")
            k %= size
            starts.append(k)
            stops.append(k + 1)
            steps.append(1)
            axes.append(dim)
            squeeze_axes.append(dim)
        elif isinstance(k, builtins.slice):
            if k == builtins.slice(None):
                out_dim += 1
                dim += 1
                continue
            starts.append(k.start)
            stops.append(k.stop)
            steps.append(k.step)
            axes.append(dim)
            out_dim += 1
        else:
            raise TypeError(f"unsupported index {k!r} for a popxl Tensor")
        dim += 1
    out = t
    if axes:
        out = slice(out, starts, stops, steps, axes)
    if squeeze_axes:
        out = squeeze(out, squeeze_axes)
    if newaxis_pos:
        shape = list(out.shape)
        for p in newaxis_pos:
            shape.insert(p, 1)
        out = reshape(out, shape)
    if out is t:
        out = identity(t)
    return out


# ---------------------------------------------------------------------------------------
# Indexing
# ---------------------------------------------------------------------------------------


def gather(
    t: Tensor,
    indices: Any,
    axis: int = 0,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """`np.take(t, indices, axis)`: the slices of `t` at integer `indices` along `axis`.

    The result shape is `t.shape[:axis] + indices.shape + t.shape[axis + 1:]`. An index out
    of range never raises and never reads another row: it gives zeros. With `zero_OOR` the
    range is `[0, n)` for an axis of size `n` (as upstream: negative indices give zeros too);
    without it `[-n, n)`, negative indices counting from the end as in ONNX Gather (upstream
    leaves the results of out-of-range indices undefined). The gradient (scatter-add into
    `t`) skips the same out-of-range indices.
    `available_memory_proportion` is accepted and ignored (an IPU tile-memory hint).
    """
    indices = to_tensor(indices, dtypes.int32)
    return emit1(GatherOp, [t, indices], axis=as_int(axis, "axis"), zero_oor=True if zero_OOR else None)


@composed("PopartTiedGather")
def tied_gather(
    t: Tensor,
    indices: Any,
    axis: int = 0,
    available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """As `gather` (upstream it shares its weight layout with a tied matmul)."""
    return gather(t, indices, axis, available_memory_proportion, zero_OOR)


def onehot(t: Tensor, num_classes: Any, values: Any, axis: int = -1) -> Tensor:
    """One-hot encoding of the integer tensor `t`: a new dim of size `num_classes` at `axis`,
    holding `values[1]` at the class of each element and `values[0]` elsewhere.

    `values` is a Tensor of shape (2,) or a pair `[off, on]` (float32); its dtype is the
    result's. `num_classes` must be known when the program is built: an int or a constant
    Tensor (ValueError otherwise).
    """
    if isinstance(num_classes, Tensor):
        from popxl.tensor import Constant

        if not isinstance(num_classes, Constant):
            raise ValueError("ops.onehot: num_classes must be an int or a constant tensor in xl")
        num_classes = int(np.asarray(num_classes._data).reshape(-1)[0])
    if not isinstance(values, Tensor):
        values = constant(np.asarray(values), dtypes.float32)
    return emit1(OnehotOp, [t, values], num_classes=as_int(num_classes, "num_classes"), axis=as_int(axis, "axis"))


class _AxesSizes(TypedDict):
    axes: tuple[int, ...]
    sizes: tuple[int, ...]


def _axes_sizes(axes: Sequence[int], sizes: Sequence[int]) -> _AxesSizes:
    return {
        "axes": tuple(as_int(a, "axes") for a in axes),
        "sizes": tuple(as_int(s, "sizes") for s in sizes),
    }


def dynamic_slice(
    t: Tensor, index: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False
) -> Tensor:
    """The slice of `t` of `sizes[i]` elements along `axes[i]`, starting at the run-time
    offsets `index` (a uint32 tensor, one entry per axis); the other dims are kept.

    `no_overlap` is accepted (an upstream scheduling hint).
    """
    return emit1(
        DynamicSliceOp,
        [t, to_tensor(index, dtypes.uint32)],
        **_axes_sizes(axes, sizes),
        no_overlap=bool(no_overlap),
    )


def dynamic_update(
    t: Tensor,
    index: Tensor,
    t_update: Tensor,
    axes: Sequence[int],
    sizes: Sequence[int],
    no_overlap: bool = False,
) -> Tensor:
    """A copy of `t` with `t_update` (`sizes` along `axes`) written at the run-time offsets
    `index` (uint32, one entry per axis)."""
    return emit1(
        DynamicUpdateOp,
        [t, to_tensor(index, dtypes.uint32), t_update],
        **_axes_sizes(axes, sizes),
        no_overlap=bool(no_overlap),
    )


def dynamic_update_(
    t: Tensor,
    index: Tensor,
    t_update: Tensor,
    axes: Sequence[int],
    sizes: Sequence[int],
    no_overlap: bool = False,
) -> Tensor:
    """`dynamic_update` in place: writes `t_update` into `t` at the run-time offsets `index`;
    returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(
        DynamicUpdateInplaceOp,
        [t, to_tensor(index, dtypes.uint32), t_update],
        **_axes_sizes(axes, sizes),
        no_overlap=bool(no_overlap),
    )


# ---------------------------------------------------------------------------------------
# Linear algebra, NN, loss
# ---------------------------------------------------------------------------------------


@composed("MatMul")
def matmul(
    lhs: Tensor,
    rhs: Tensor,
    available_memory_proportion: float | None = None,
    output_type: dtype | None = None,
    partials_type: dtype | None = None,
) -> Tensor:
    """Matrix product with NumPy `matmul` semantics (1-D operands promoted, batch dims
    broadcast); the result is cast to `output_type` when given.

    `available_memory_proportion` and `partials_type` are accepted (IPU hints).
    `partials_type` must be float16 or float32; without it, the session option
    `partialsTypeMatMuls` of the Ir must be `''`, `'float'` or `'half'`, as PopXL checks.
    """
    _check_partials_type(partials_type)
    out = emit1(MatmulOp, _pair(lhs, rhs))
    if output_type is not None and _dtype_of(output_type) != out.dtype:
        out = cast(out, output_type)
    return out


def _check_partials_type(partials_type: dtype | None) -> None:
    """ValueError for a matmul partials type an IPU has not: `partials_type` (a dtype) or,
    when None, the Ir's session option `partialsTypeMatMuls` (a string)."""
    if partials_type is None:
        option = gcg().ir._pb_ir.getSessionOptions().partialsTypeMatMuls
        if not isinstance(option, str) or option.lower() not in ("", "float", "half"):
            raise ValueError(
                f"{current_op()}: the session option partialsTypeMatMuls {option!r} is not valid, "
                "must be 'float' or 'half'"
            )
    elif _dtype_of(partials_type) not in (dtypes.float16, dtypes.float32):
        raise ValueError(f"{current_op()}: partials_type {partials_type} is not valid, must be float16 or float32")


def softmax(t: Tensor, axis: int) -> Tensor:
    """`exp(t) / sum(exp(t))` along `axis` (required), computed stably (float)."""
    return emit1(SoftmaxOp, [t], axis=as_int(axis, "axis"))


def _check_channel_params(t: Tensor, params: dict[str, Tensor]) -> None:
    """Per-channel parameters of a normalisation have shape `(C,)`, `C = t.shape[1]`."""
    for name, p in params.items():
        if not isinstance(p, Tensor) or p.shape != (t.shape[1],):
            got = p.shape if isinstance(p, Tensor) else type(p).__name__
            raise ValueError(
                f"{current_op()}: {name} must have shape ({t.shape[1]},) (the channels of input {t.shape}), got {got}"
            )


def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5) -> Tensor:
    """Group normalisation of `t` `(N, C, *spatial)`: each group of `C / num_groups`
    channels normalised to mean 0 and variance 1 (biased, plus `eps`), then
    `* weight + bias` per channel (`weight`, `bias` of shape `(C,)`)."""
    if t.rank < 2:
        raise ValueError(f"ops.group_norm: input must have rank >= 2, got {t.shape}")
    c = t.shape[1]
    num_groups = as_int(num_groups, "num_groups")
    if num_groups < 1:
        raise ValueError(f"ops.group_norm: num_groups must be >= 1, got {num_groups}")
    if c % num_groups:
        raise ValueError(f"ops.group_norm: {c} channels are not divisible by {num_groups} groups")
    _check_channel_params(t, {"weight": weight, "bias": bias})
    y, _mean, _inv_std_dev = emit(
        GroupNormOp, [t, weight, bias], None, None, num_groups=num_groups, epsilon=as_float(eps, "eps")
    )
    return y


def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """`group_norm` with one group: each row of `t` `(N, C)` normalised over its `C`
    elements, then `* weight + bias` (shape `(C,)`)."""
    return group_norm(t, weight, bias, 1, eps)


@composed("BatchNormalization")
def batch_norm_inference(
    t: Tensor,
    scale: Tensor,
    bias: Tensor,
    mean: Tensor,
    var: Tensor,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
) -> Tensor:
    """`(t - mean) / sqrt(var + epsilon) * scale + bias` per channel (dim 1 of `t`; the
    other arguments have shape `(C,)`). `momentum` is unused at inference."""
    if t.rank < 2:
        raise ValueError(f"ops.batch_norm_inference: input must be (N, C, ...), got shape {t.shape}")
    _check_channel_params(t, {"scale": scale, "bias": bias, "mean": mean, "var": var})
    bshape = (t.shape[1],) + (1,) * (t.rank - 2)

    def r(x: Tensor) -> Tensor:
        return reshape(x, bshape)

    normed = div(sub(t, r(mean)), sqrt(add(r(var), constant(as_float(epsilon, "epsilon"), t.dtype))))
    return add(mul(normed, r(scale)), r(bias))


@composed("LambSquare")
def lamb_square(t: Tensor) -> Tensor:
    """The sum of the squares of all elements of `t`, as a float32 scalar."""
    if t.dtype != dtypes.float32:
        t = cast(t, dtypes.float32)
    return sum(mul(t, t))


def io_tile_copy(t: Tensor) -> Tensor:
    """A copy of `t` placed on the IO tiles (`tile_set == "io"`)."""
    from popxl.context import io_tiles

    with io_tiles():
        return identity(t)


def matmul_pow2scaled(
    lhs: Tensor, rhs: Tensor, log2_scale: Tensor | int, available_memory_proportion: float | None = None
) -> Tensor:
    """`matmul(lhs, rhs) * 2 ** log2_scale` of float8 operands (`popxl.float8_143` or
    `float8_152`, NumPy matmul shapes), computed exactly from the float8 values and
    returned as float16, as upstream. `log2_scale`: a scalar int32 tensor in [-32, 32)
    (checked when the op runs). TypeError for other operand or scale dtypes, ValueError
    for a non-scalar scale."""
    if lhs.dtype not in (dtypes.float8_143, dtypes.float8_152) or rhs.dtype not in (
        dtypes.float8_143,
        dtypes.float8_152,
    ):
        raise TypeError("Scaled matmul operands must be of dtype popxl.float8_143 or popxl.float8_152")
    log2_scale = _log2_scale(log2_scale)
    return emit1(MatmulPow2ScaledOp, [lhs, rhs, log2_scale])


def _float8_operands(what: str, *ts: Tensor) -> None:
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError(f"{current_op()}: expected a popxl Tensor, got {describe(t)}")
        if t.dtype not in (dtypes.float8_143, dtypes.float8_152):
            raise TypeError(f"{what} operands must be of dtype popxl.float8_143 or popxl.float8_152")


def conv_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor | int,
    stride: tuple[int, ...] = (1, 1),
    padding: tuple[int, ...] = (0, 0, 0, 0),
    dilation: tuple[int, ...] = (1, 1),
    groups: int = 1,
    pad_type: Any = "not_set",
    available_memory_proportions: list[float] | None = None,
    enable_conv_dithering: list[int] | None = None,
) -> Tensor:
    """`conv(t, weight, ...) * 2 ** log2_scale` of float8 `t` and `weight`
    (`popxl.float8_143` / `float8_152`), returned as float16 as upstream; the other arguments
    as `ops.conv`. Computed exactly: the float8 values widened to float32 (the scale, a
    power of two, applied to `t`), a float32 convolution, rounded to float16.
    `log2_scale`: a scalar int32 tensor in [-32, 32) (checked when the op runs). TypeError
    for other dtypes. Float8 tensors carry no gradient (as integer tensors): autodiff
    passes none through the float8 ops."""
    from popxl.ops.conv import conv

    _float8_operands("Scaled conv", t, weight)
    log2_scale = _log2_scale(log2_scale)
    x32 = pow2scale_cast_from_fp8(t, log2_scale, dtypes.float32)
    w32 = pow2scale_cast_from_fp8(weight, constant(np.int32(0), dtypes.int32), dtypes.float32)
    y = conv(
        x32, w32, stride, padding, dilation, groups, pad_type, available_memory_proportions, None, enable_conv_dithering
    )
    return cast(y, dtypes.float16)


def conv_transpose_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor | int,
    stride: tuple[int, ...] = (1, 1),
    padding: tuple[int, ...] = (0, 0, 0, 0),
    dilation: tuple[int, ...] = (1, 1),
    groups: int = 1,
    pad_type: Any = "not_set",
    output_padding: tuple[int, ...] = (),
    output_shape: tuple[int, ...] = (),
    available_memory_proportions: list[float] | None = None,
    enable_conv_dithering: list[int] | None = None,
) -> Tensor:
    """`conv_transpose(t, weight, ...) * 2 ** log2_scale` of float8 `t` and `weight`,
    returned as float16 as upstream; the other arguments as `ops.conv_transpose`. Computed
    exactly as `conv_pow2scaled` (float32 from the float8 values, rounded to float16)."""
    from popxl.ops.conv import conv_transpose

    _float8_operands("Scaled conv_transpose", t, weight)
    log2_scale = _log2_scale(log2_scale)
    x32 = pow2scale_cast_from_fp8(t, log2_scale, dtypes.float32)
    w32 = pow2scale_cast_from_fp8(weight, constant(np.int32(0), dtypes.int32), dtypes.float32)
    y = conv_transpose(
        x32,
        w32,
        stride,
        padding,
        dilation,
        groups,
        pad_type,
        output_padding,
        output_shape,
        available_memory_proportions,
        None,
        enable_conv_dithering,
    )
    return cast(y, dtypes.float16)


def shaped_dropout(t: Tensor, seed_tensor: Tensor, shape: Iterable[int], ratio: float) -> Tensor:
    """`dropout` with a mask of `shape` broadcast over `t` (NumPy rules), so that whole
    slices are dropped together: each mask element is 0 with probability `ratio`, the kept
    elements are scaled by `1 / (1 - ratio)`. `seed_tensor`: uint32, shape (2,).
    ValueError when `shape` does not broadcast to `t.shape` or `ratio` is not in [0, 1)."""
    _check_seed(seed_tensor, "seed_tensor")
    return emit1(ShapedDropoutOp, [t, seed_tensor], shape=as_shape(shape), ratio=as_float(ratio, "ratio"))


def _log2_scale(log2_scale: Any) -> Tensor:
    """The `log2_scale` argument of the float8 ops: a scalar int32 Tensor (an int becomes
    one); ValueError / TypeError otherwise, as upstream."""
    if not isinstance(log2_scale, Tensor):
        if isinstance(log2_scale, bool) or not isinstance(log2_scale, int | np.integer):
            raise TypeError(f"{current_op()}: log2_scale must be a Tensor or an int, got {describe(log2_scale)}")
        return constant(np.int32(log2_scale), dtypes.int32)
    if log2_scale.rank > 0:
        raise ValueError("Log2 scale argument must be a scalar tensor")
    if log2_scale.dtype != dtypes.int32:
        raise TypeError("Log2 scale tensor must be of type popxl.int32")
    return log2_scale


def pow2scale_cast_to_fp8(t: Tensor, log2_scale: Tensor | int, data_type: dtype) -> Tensor:
    """`cast(t * 2 ** log2_scale, data_type)`: a float tensor to `popxl.float8_143` or
    `popxl.float8_152` (round to nearest even; values beyond the format's range become
    NaN). `log2_scale`: a scalar int32 tensor in [-32, 32) (checked when the op runs).
    TypeError when `data_type` is not a float8 dtype."""
    if data_type not in (dtypes.float8_143, dtypes.float8_152):
        raise TypeError(f"Data type {data_type} not supported for pow2scale_cast_to_fp8")
    log2_scale = _log2_scale(log2_scale)
    return emit1(
        Pow2ScaleCastToFp8Op, [t, log2_scale], tensor_type(t.shape, data_type._compute_np()), _cast_name(t, data_type)
    )


def pow2scale_cast_from_fp8(t: Tensor, log2_scale: Tensor | int, data_type: dtype) -> Tensor:
    """`cast(t, data_type) * 2 ** log2_scale`: a float8 tensor to `popxl.float16` or
    `popxl.float32` (TypeError for other dtypes). `log2_scale`: a scalar int32 tensor in
    [-32, 32) (checked when the op runs)."""
    if data_type not in (dtypes.float16, dtypes.float32):
        raise TypeError(f"Data type {data_type} not supported for pow2scale_cast_from_fp8")
    log2_scale = _log2_scale(log2_scale)
    return emit1(
        Pow2ScaleCastFromFp8Op,
        [t, log2_scale],
        tensor_type(t.shape, data_type._compute_np()),
        _cast_name(t, data_type),
    )


def nll_loss(
    probs: Tensor,
    labels: Tensor,
    ignore_index: int | None = None,
    reduction: str = "mean",
    log_prob: bool = False,
) -> Tensor:
    """Negative log likelihood of the integer `labels` `(N, ...)` under the probabilities
    `probs` `(N, ..., C)` (log-probabilities when `log_prob`): `-log(probs[i, labels[i]])`.

    Labels equal to `ignore_index` contribute 0 (and are not counted by the mean).
    `reduction` is `'mean'` or `'sum'` (a scalar) or `'none'` (one loss per label).
    """
    _check_reduction(reduction)
    return emit1(
        NllLossOp,
        [probs, labels],
        ignore_index=None if ignore_index is None else as_int(ignore_index, "ignore_index"),
        reduction=reduction,
        log_prob=True if log_prob else None,
    )


def nll_loss_with_softmax_grad(
    probs: Tensor,
    labels: Tensor,
    loss_grad: Any = 1,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[Tensor, Tensor]:
    """`(loss, dlogits)`: `nll_loss(probs, labels)` of softmax outputs `probs`, and the
    gradient of the loss with respect to the logits, `(probs - onehot(labels)) * loss_grad`
    (divided by the number of counted labels for `'mean'`).

    `loss_grad` (a number or a scalar Tensor) scales the gradient only, as in PopART.
    """
    _check_reduction(reduction)
    ignore = None if ignore_index is None else as_int(ignore_index, "ignore_index")
    if isinstance(loss_grad, Tensor):
        if loss_grad.dtype != probs.dtype:
            loss_grad = cast(loss_grad, probs.dtype)
        lg: Any = loss_grad
    else:
        lg = as_float(loss_grad, "loss_grad")
    loss, dx = emit(
        NllLossWithSoftmaxGradOp,
        [probs, labels],
        ignore_index=ignore,
        reduction=reduction,
        loss_grad=lg,
    )
    return loss, dx


def _check_reduction(reduction: str) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


# ---------------------------------------------------------------------------------------
# Random
# ---------------------------------------------------------------------------------------


def _check_seed(seed: Any, arg: str) -> None:
    if not isinstance(seed, Tensor):
        raise TypeError(f"{current_op()}: {arg} must be a Tensor, got {describe(seed)}")
    if seed.shape != (2,) or seed.dtype != dtypes.uint32:
        raise ValueError(f"{current_op()}: {arg} must be shape=(2,) dtype=uint32. Provided {seed}")


def dropout(t: Tensor, seed_tensor: Tensor, p: float) -> Tensor:
    """`t` with each element zeroed with probability `p` and the others scaled by
    `1 / (1 - p)`; `seed_tensor` is a uint32 tensor of shape (2,) (`popxl.create_seeds`,
    `ops.split_random_seed`). The mask depends only on the seed's value and `t.shape` (the
    same seed gives the same mask in any program, plan or replica); the gradient is
    `dy * mask / (1 - p)`, recomputed from the seed. ValueError unless `0 <= p < 1`."""
    _check_seed(seed_tensor, "seed_tensor")
    return emit1(DropoutOp, [t, seed_tensor], ratio=as_float(p, "p"))


def random_uniform(
    seed_tensor: Tensor,
    shape: Iterable[int],
    low: float = 0.0,
    high: float = 1.0,
    dtype: dtype = dtypes.float32,
) -> Tensor:
    """A tensor of `shape` and float `dtype` drawn uniformly from `[low, high)`, from the
    uint32 `seed_tensor` of shape (2,): the values depend only on the seed's value, `shape`,
    `dtype`, `low` and `high` (a counter-based generator, NumPy's Philox keyed by the
    seed). ValueError unless `low <= high`."""
    _check_seed(seed_tensor, "seed_tensor")
    dt = as_dtype(dtype)
    return emit1(
        RandomUniformOp,
        [seed_tensor],
        tensor_type(as_shape(shape), dt._compute_np()),
        low=as_float(low, "low"),
        high=as_float(high, "high"),
    )


def random_normal(
    seed_tensor: Tensor,
    shape: Iterable[int],
    mean: float = 0.0,
    std: float = 1.0,
    dtype: dtype = dtypes.float32,
) -> Tensor:
    """A tensor of `shape` and float `dtype` drawn from the normal distribution
    `N(mean, std**2)`, from the uint32 `seed_tensor` of shape (2,): the values depend only
    on the seed's value and the arguments (Box-Muller on a Philox stream keyed by the
    seed). ValueError when `std < 0`."""
    _check_seed(seed_tensor, "seed_tensor")
    dt = as_dtype(dtype)
    return emit1(
        RandomNormalOp,
        [seed_tensor],
        tensor_type(as_shape(shape), dt._compute_np()),
        mean=as_float(mean, "mean"),
        std=as_float(std, "std"),
    )


def split_random_seed(seed: Tensor, n: int = 2) -> tuple[Tensor, ...]:
    """`n` new seeds (uint32, shape (2,)) derived from `seed`, independent of each other
    and of `seed`'s own stream: new seed `i` is `modify_random_seed(seed, i)`. Chain it to
    give every random op of a program its own seed:

        seed, s1 = ops.split_random_seed(seed)
        y = ops.dropout(x, s1, 0.1)
    """
    _check_seed(seed, "seed")
    n = as_int(n, "n")
    if n < 1:
        raise ValueError(f"ops.split_random_seed: n must be >= 1, got {n}")
    return tuple(emit1(ModifyRandomSeedOp, [seed, constant(np.uint32(i), dtypes.uint32)]) for i in range(n))


# ---------------------------------------------------------------------------------------
# Misc
# ---------------------------------------------------------------------------------------


def cast(t: Tensor, data_type: dtype) -> Tensor:
    """`t` with its elements converted to `data_type` (NumPy `astype` semantics).

    TypeError for the float8 dtypes (use `pow2scale_cast_to_fp8` / `_from_fp8`), as upstream."""
    dt = _dtype_of(data_type)
    if dt in (dtypes.float8_143, dtypes.float8_152) or t.dtype in (dtypes.float8_143, dtypes.float8_152):
        raise TypeError(
            f"Data type {dt if dt in (dtypes.float8_143, dtypes.float8_152) else t.dtype} not "
            "supported for ops.cast, please consider pow2scale_cast_to_fp8 or pow2scale_cast_from_fp8"
        )
    return emit1(CastOp, [t], tensor_type(t.shape, dt._compute_np()), _cast_name(t, dt))


def _cast_name(t: Tensor, dt: dtype) -> str:
    """A cast's result is named `<input name>_<dtype>` (`x_float16`), as in PopXL."""
    return f"{t.name.rsplit('/', 1)[-1]}_{dt.name}"


def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of `t`, named `output_name` when given."""
    return emit1(IdentityOp, [t], name=output_name)


def rename(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of `t` named `output_name` (as `identity`)."""
    return identity(t, output_name)


def detach(t: Tensor) -> Tensor:
    """A copy of `t` that autodiff treats as a constant (no gradient flows through it)."""
    return emit1(DetachOp, [t])


@composed("DetachInplace")
def detach_(t: Tensor) -> Tensor:
    """As `detach`. Upstream an alias of `t`: xl refuses programs where that differs,
    see `reshape_`."""
    return record_view(detach(t), "ops.detach_")


def print_tensor(
    t: Tensor,
    title: str | None = None,
    print_self: bool = True,
    print_gradient: bool = False,
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    max_line_width: int = 75,
    digits: int = 8,
    float_format: str = "auto",
    separator: str = " ",
    open_bracket: str = "[",
    close_bracket: str = "]",
) -> Tensor:
    """Print `t` each time the op runs, as `<title>: <values>` on standard error (where
    Poplar prints), and return a copy of it; the op is kept even when the result is unused.

    `title` defaults to `print_<t.name>`. With `print_gradient`, autodiff prints the
    gradient of `t` too, titled `<title>_gradient` (consume the result for it to have one);
    `print_self=False` prints only the gradient. Large tensors are summarised
    (`summarise_threshold` elements, 0: never; `edge_items` at each end), lines wrapped at
    `max_line_width` (0: never), floats shown with `digits` digits in `float_format`
    ('auto', 'fixed', 'scientific' or 'none'); `separator`, `open_bracket` and
    `close_bracket` are single characters (ValueError otherwise; KeyError for an unknown
    `float_format`, as upstream).
    """
    for name, char in (("separator", separator), ("open_bracket", open_bracket), ("close_bracket", close_bracket)):
        if not isinstance(char, str) or len(char) != 1:
            raise ValueError(
                f"Parameter {name} must be 1 character exactly. Not length "
                f"{len(char) if isinstance(char, str) else describe(char)} and value {char!r}."
            )
    if float_format not in PrintTensorOp.FLOAT_FORMATS:
        raise KeyError(float_format)
    if title is None:
        title = f"print_{t.name}"
    if not isinstance(title, str):
        raise TypeError(f"ops.print_tensor: title must be a str, got {describe(title)}")
    return emit1(
        PrintTensorOp,
        [t],
        title=title,
        print_self=None if print_self else False,
        print_gradient=True if print_gradient else None,
        summarise_threshold=as_int(summarise_threshold, "summarise_threshold"),
        edge_items=as_int(edge_items, "edge_items"),
        max_line_width=as_int(max_line_width, "max_line_width"),
        digits=as_int(digits, "digits"),
        float_format=float_format,
        separator=separator,
        open_bracket=open_bracket,
        close_bracket=close_bracket,
    )


def init(
    shape: Iterable[int],
    dtype: dtype,
    name: str | None = None,
    init_type: str = "zero",
    meta_shape: Iterable[int] | None = None,
) -> Tensor:
    """A new tensor of `shape` and `dtype`, zero-filled (`init_type='zero'`) or with
    undefined contents (`'undef'`), e.g. to be filled by in-place ops."""
    if init_type not in ("zero", "undef"):
        raise ValueError(f"ops.init: init_type must be 'zero' or 'undef', got {init_type!r}")
    shape = as_shape(shape)
    t = emit1(InitOp, [], tensor_type(shape, _dtype_of(dtype)._compute_np()), name=name, init_type=init_type)
    if meta_shape:
        t._meta_shape = as_shape(meta_shape, "meta_shape")
    return t


def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`(t + increment) % modulus`, elementwise (numbers `increment`, `modulus`)."""
    return emit1(IncrementModOp, [t], increment=as_float(increment, "increment"), modulus=as_float(modulus, "modulus"))


def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`t = (t + increment) % modulus` in place; returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(
        IncrementModInplaceOp,
        [t],
        increment=as_float(increment, "increment"),
        modulus=as_float(modulus, "modulus"),
    )


def _scale_args(X: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    def norm(v: Any) -> Any:
        if isinstance(v, Tensor):
            return v
        return as_float(v, "a/b")

    return norm(a), norm(b)


def _scaled(t: Tensor, f: Any, like: Tensor) -> Tensor:
    """`f * t` (f a Tensor, cast to t's dtype)."""
    if f.dtype != like.dtype:
        f = cast(f, like.dtype)
    return mul(t, f)


@composed("ScaledAdd")
def scaled_add(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`a * X + b * Y` with broadcasting (`a`, `b` numbers or scalar Tensors)."""
    X, Y = _pair(X, Y)
    a, b = _scale_args(X, a, b)
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        ax = _scaled(X, a, X) if isinstance(a, Tensor) else X
        by = _scaled(Y, b, X) if isinstance(b, Tensor) else Y
        return emit1(
            ScaledAddOp,
            [ax, by],
            a=1.0 if isinstance(a, Tensor) else a,
            b=1.0 if isinstance(b, Tensor) else b,
        )
    return emit1(ScaledAddOp, [X, Y], a=a, b=b)


@composed("ScaledAddLhsInplace")
def scaled_add_(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`X = a * X + b * Y` in place (`Y` broadcast to `X`'s shape); returns the updated `X`
    (a new tensor aliasing it)."""
    Y = _t(Y, X)
    a, b = _scale_args(X, a, b)
    if isinstance(b, Tensor):
        # b * Y in Y's dtype: X and Y may be floats of different widths (an fp16 weight
        # updated by an fp32 optimiser term), as upstream's ScaledAddLhsInplace allows.
        Y = _scaled(Y, b, Y)
        b = 1.0
    if isinstance(a, Tensor):
        if Y.dtype != X.dtype and X.dtype.is_floating_point and Y.dtype.is_floating_point:
            Y = cast(Y, X.dtype)
        return _assign_(X, scaled_add(X, Y, a, b))
    return emit_inplace(ScaledAddInplaceOp, [X, Y], a=a, b=b)


# ---------------------------------------------------------------------------------------
# Host IO and IPU copies
# ---------------------------------------------------------------------------------------


def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """The next transfer of `h2d_stream` as a tensor of the stream's shape and dtype.

    Usable in any graph; each executed `host_load` consumes one of the
    `ir.num_host_transfers` entries of the stream's data. Named `<name>_hostload` as in
    PopXL (`name` default: the stream's name without its name scope).
    """
    from xl.dialects.graph import HostLoadOp

    if not isinstance(h2d_stream, HostToDeviceStream):
        raise TypeError(f"ops.host_load expects a HostToDeviceStream, got {type(h2d_stream).__name__}")
    g = gcg()
    if h2d_stream.ir is not g.ir:
        raise ValueError(f"ops.host_load: stream {h2d_stream.tensor_id!r} belongs to another Ir")
    op = HostLoadOp(h2d_stream.tensor_id, tensor_type(h2d_stream.shape, h2d_stream.dtype._compute_np()))
    insert(g, op, verify=False)
    base = name if name is not None else h2d_stream.tensor_id.rsplit("/", 1)[-1]
    return g._tensor(op.result, g._unique_name(f"{base}_hostload", scoped=True))


def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Send `t` (the stream's shape and dtype) to the host through `d2h_stream`; each
    executed `host_store` fills one of the `ir.num_host_transfers` entries of the output."""
    from xl.dialects.graph import HostStoreOp

    if not isinstance(d2h_stream, DeviceToHostStream):
        raise TypeError(f"ops.host_store expects a DeviceToHostStream, got {type(d2h_stream).__name__}")
    g = gcg()
    check_in_graph(g, [t], "ops.host_store")
    if d2h_stream.ir is not g.ir:
        raise ValueError(f"ops.host_store: stream {d2h_stream.tensor_id!r} belongs to another Ir")
    if t.shape != d2h_stream.shape or t.dtype != d2h_stream.dtype:
        raise ValueError(
            f"ops.host_store: stream {d2h_stream.tensor_id!r} carries {d2h_stream.shape} "
            f"{d2h_stream.dtype.name}, but tensor {t.id} is {t.shape} {t.dtype.name}"
        )
    insert(g, HostStoreOp(d2h_stream.tensor_id, t._value), verify=False)


def ipu_copy(t: Tensor, destination: int, source: int | None = None) -> Tensor:
    """A copy of `t` on virtual IPU `destination` (an `ipu.copy` op). `source` defaults to
    the IPU of the op producing `t` (ValueError if it has none)."""
    from xl.dialects.ipu import CopyOp

    g = gcg()
    check_in_graph(g, [t], "ops.ipu_copy")
    if source is None:
        source = t._ipu_or_none
        if source is None:
            raise ValueError(
                f"ops.ipu_copy: Could not infer the ipu of {t.id}: no op placed it (create it inside "
                "`with popxl.ipu(i):`). Please specify `source`"
            )
    op = CopyOp(t._value, as_int(source, "source"), as_int(destination, "destination"))
    insert(g, op)
    return g._tensor(op.result)


# Every public op reports an op xl does not implement as
# `NotImplementedError("popxl.ops.<name> is not implemented in xl yet")`.
# Computed from the module's functions, so it cannot drift from them.
__all__ = [  # pyright: ignore[reportUnsupportedDunderAll]
    name
    for name, obj in list(globals().items())
    if not name.startswith("_")
    and callable(obj)
    and getattr(obj, "__module__", None) == __name__
    and not isinstance(obj, type)
]
wrap_public_ops(globals(), __all__, "popxl.ops")
