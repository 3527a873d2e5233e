"""NumPy kernels of the popxl tensor ops (elementwise maths, matmul, shapes, reductions, losses,
optimiser updates), registered by the op class they implement (the contract: `xl.runtime.kernels`)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from xdsl.irdl import IRDLOperation

from xl.dialects.popxl import (
    AbsOp,
    AccumulateMeanOp,
    AccumulateMovingAverageOp,
    AccumulateMovingAverageSquareOp,
    AccumulateOp,
    AccumulateSquareOp,
    AccumulatorScaleOp,
    AccumulatorZeroOp,
    AdamaxUpdaterOp,
    AdamUpdaterOp,
    AdamVarUpdateOp,
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
    DynamicSliceOp,
    DynamicUpdateInplaceOp,
    DynamicUpdateOp,
    EqualOp,
    ErfOp,
    ExpandOp,
    ExpOp,
    FloorOp,
    FmodOp,
    GatherGradOp,
    GatherOp,
    GeluErfGradOp,
    GeluErfOp,
    GreaterOp,
    IdentityOp,
    IncrementModInplaceOp,
    IncrementModOp,
    InitOp,
    LambUpdaterOp,
    LogicalAndOp,
    LogicalNotOp,
    LogicalOrOp,
    LogicalXorOp,
    LogOp,
    MatmulOp,
    MatmulPow2ScaledOp,
    MaximumOp,
    MinimumOp,
    MulOp,
    NegOp,
    NllLossGradOp,
    NllLossOp,
    NllLossWithSoftmaxGradOp,
    OnehotOp,
    Pow2ScaleCastFromFp8Op,
    Pow2ScaleCastToFp8Op,
    PowOp,
    PrintTensorOp,
    ReduceMaxGradOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceMinOp,
    ReduceSumOp,
    ReduceToShapeOp,
    ReluGradOp,
    ReluOp,
    ReshapeOp,
    ScaledAddInplaceOp,
    ScaledAddOp,
    SigmoidOp,
    SignOp,
    SinOp,
    SliceGradOp,
    SliceOp,
    SparseAccumulateOp,
    SqrtOp,
    SqueezeOp,
    SubOp,
    SwishOp,
    TanhOp,
    TransposeOp,
    WhereOp,
)
from xl.dialects.popxl_operands import greedy_segments, operand_names, operand_positions
from xl.dialects.rt_kernels import GeluErfGradKeptOp, GeluErfKeepOp, KernelClass
from xl.runtime.codegen import Gen, K, as_view, template
from xl.runtime.float8 import to_float8
from xl.runtime.float16 import HalfInPlace
from xl.runtime.kernels.buffers import const, scratch
from xl.runtime.kernels.registry import (
    DataRangeError,
    Kernel,
    KernelFactory,
    check_range,
    kernel,
    op_label,
    operand,
)

# ------------------------------------------------------------------------------------
# Helpers (compile time)
# ------------------------------------------------------------------------------------


def _axes(p: dict[str, Any], key: str = "axis") -> tuple[int, ...] | None:
    v = p.get(key)
    return None if v is None else tuple(int(a) for a in v)


def _optional_kernel(
    p: dict[str, Any],
    cls: type[IRDLOperation],
    n_outs: Callable[[dict[str, int]], int],
    build: Callable[[dict[str, int]], Kernel],
) -> Kernel:
    """A kernel for an op class with optional operands.

    Which operands are present comes from `operand_segments` (or
    `operandSegmentSizes`) in `props`; without it, from the number of arguments of
    the first call (greedy matching, `n_outs(positions)` outputs), then fixed.
    """
    segs = p.get("operand_segments")
    if segs is None:
        segs = p.get("operandSegmentSizes")
    if segs is not None:
        return build(operand_positions(cls, segs))
    inner: Kernel | None = None

    def resolve(n_args: int) -> Kernel:
        for n_in in range(n_args, -1, -1):
            g = greedy_segments(cls, n_in)
            if g is not None and n_in + n_outs(operand_positions(cls, g)) == n_args:
                return build(operand_positions(cls, g))
        raise ValueError(f"{cls.name}: cannot match {n_args} kernel arguments to operands {operand_names(cls)}")

    def k(*a: np.ndarray) -> None:
        nonlocal inner
        if inner is None:
            inner = resolve(len(a))
        inner(*a)

    return k


def _one(pos: dict[str, int]) -> int:
    return 1


def _factor(p: dict[str, Any], pos: dict[str, int], name: str, default: float | None):
    """(constant, input index) of a scalar factor given as a property or a tensor."""
    idx = pos.get(f"{name}_tensor", -1)
    const = p.get(name, default)
    if idx < 0 and const is None:
        raise ValueError(f"scalar factor {name!r} is missing")
    return (0.0 if const is None else float(const)), idx


def _add_at(out: np.ndarray, index: tuple[slice | np.ndarray, ...], values: np.ndarray) -> None:
    """`np.add.at(out, index, values)` for an index of leading full slices then an array."""
    # numpy's stub types `indices` as integer array-likes only, not a tuple with slices
    np.add.at(out, index, values)  # pyright: ignore[reportArgumentType]


def _slices(p: dict[str, Any], ndim: int) -> tuple[slice, ...]:
    """The index tuple of `popxl.slice` props for a rank-`ndim` tensor."""
    start, stop, step, axes = p.get("start"), p.get("stop"), p.get("step"), p.get("axes")
    n = next((len(a) for a in (start, stop, step, axes) if a is not None), 0)
    if axes is None:
        axes = tuple(range(n))
    idx = [slice(None)] * ndim
    for i, a in enumerate(axes):
        idx[a % ndim] = slice(
            None if start is None else int(start[i]),
            None if stop is None else int(stop[i]),
            1 if step is None else int(step[i]),
        )
    return tuple(idx)


# ------------------------------------------------------------------------------------
# Elementwise
# ------------------------------------------------------------------------------------


def _binary(cls: KernelClass, ufunc: np.ufunc) -> None:
    def factory(p: dict[str, Any]) -> Kernel:
        def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
            ufunc(a, b, out=out)

        return k

    kernel(cls)(factory)


def _unary(cls: KernelClass, ufunc: np.ufunc) -> None:
    def factory(p: dict[str, Any]) -> Kernel:
        def k(x: np.ndarray, out: np.ndarray) -> None:
            ufunc(x, out=out)

        return k

    kernel(cls)(factory)


BINARY_UFUNCS: dict[KernelClass, np.ufunc] = {
    AddOp: np.add,
    SubOp: np.subtract,
    MulOp: np.multiply,
    PowOp: np.power,
    MaximumOp: np.maximum,
    MinimumOp: np.minimum,
    EqualOp: np.equal,
    GreaterOp: np.greater,
    LogicalAndOp: np.logical_and,
    LogicalOrOp: np.logical_or,
}
"""The binary ops that are one NumPy ufunc; the plan templates read this table too."""

UNARY_UFUNCS: dict[KernelClass, np.ufunc] = {
    NegOp: np.negative,
    AbsOp: np.abs,
    SignOp: np.sign,
    TanhOp: np.tanh,
    ExpOp: np.exp,
    LogOp: np.log,
    SqrtOp: np.sqrt,
    CosOp: np.cos,
    SinOp: np.sin,
    LogicalNotOp: np.logical_not,
    CeilOp: np.ceil,
    FloorOp: np.floor,
    BitwiseNotOp: np.invert,
}
"""The unary ops that are one NumPy ufunc; the plan templates read this table too."""

for _n, _u in BINARY_UFUNCS.items():
    _binary(_n, _u)

for _n, _u in UNARY_UFUNCS.items():
    _unary(_n, _u)


@kernel(DivOp)
def _div(p: dict[str, Any]) -> Kernel:
    """Float: true division. Integer: truncation toward zero (C semantics)."""

    def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        if out.dtype.kind == "f":
            np.divide(a, b, out=out)
        else:
            # (a - fmod(a, b)) is an exact multiple of b, so floor division is exact.
            q = np.subtract(a, np.fmod(a, b))
            np.floor_divide(q, b, out=out)

    return k


def relu_(x: np.ndarray, zero: np.ndarray, out: np.ndarray) -> None:
    """out = max(x, 0); `zero` a 0-d 0 of out's dtype."""
    np.maximum(x, zero, out=out)


@kernel(ReluOp)
def _relu(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, out: np.ndarray) -> None:
        relu_(x, const(0, out.dtype), out)

    return k


@template(ReluOp)
def _t_relu(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    return [f"{g.fn(relu_)}({i[0]}, {g.view(const(0, g.arr(op.outs[0]).dtype))}, {o[0]})"]


def _sigmoid_into(x: np.ndarray, out: np.ndarray) -> None:
    """Overflow-free: e = exp(-|x|); x >= 0: 1/(1+e), else e/(1+e)."""
    e = np.exp(-np.abs(x))
    num = np.where(x >= 0, np.ones_like(e), e)
    e += 1
    np.divide(num, e, out=out)


@kernel(SigmoidOp)
def _sigmoid(p: dict[str, Any]) -> Kernel:
    return _sigmoid_into


@kernel(SwishOp)
def _swish(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, out: np.ndarray) -> None:
        s = np.empty_like(out)
        _sigmoid_into(x, s)
        np.multiply(x, s, out=out)

    return k


@kernel(IdentityOp)
@kernel(DetachOp)
def _identity(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x)

    return k


@kernel(CastOp)
def _cast(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x, casting="unsafe")

    return k


# ------------------------------------------------------------------------------------
# Linear algebra, NN
# ------------------------------------------------------------------------------------


@kernel(MatmulOp)
def _matmul(p: dict[str, Any]) -> Kernel:
    """NumPy's matmul; float16 through float32 (NumPy has no BLAS for float16: its element
    loop is ~100x slower). The float16 operands are widened exactly, multiplied by float32
    BLAS and the result rounded once to float16. Each product of two float16 is exact in
    float32; the products are summed in float32 (in BLAS's order), as an IPU sums a float16
    matmul in float32 partials unless the session option `partialsTypeMatMuls` (or the
    op's `partials_type`) asks for half partials, which xl does not model (the session
    option's warning says so). NumPy's float16 loop also sums in float32, in another
    order: a result differs from it in the rounding of a few elements, by at most 1
    float16 ulp (measured: 13 of 102400 on a [512, 300] @ [300, 200] product of normal
    values)."""

    def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        if out.dtype == np.float16 and a.dtype == b.dtype == np.float16:
            np.copyto(out, np.matmul(a.astype(np.float32), b.astype(np.float32)), casting="unsafe")
        else:
            np.matmul(a, b, out=out)

    return k


@kernel(CumsumOp)
def _cumsum(p: dict[str, Any]) -> Kernel:
    """Running sum along `dim` (from the end when `reverse`), in the output dtype."""
    dim = int(p["dim"])
    reverse = bool(p.get("reverse", False))

    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.cumsum(x, axis=dim, dtype=out.dtype, out=out)

    def k_rev(x: np.ndarray, out: np.ndarray) -> None:
        # the reversed views of x and out: a view of out is written in place
        np.cumsum(np.flip(x, dim), axis=dim, dtype=out.dtype, out=np.flip(out, dim))

    return k_rev if reverse else k


# ------------------------------------------------------------------------------------
# Shape ops
# ------------------------------------------------------------------------------------


@kernel(ReshapeOp)
def _reshape(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x.reshape(out.shape))

    return k


@kernel(SqueezeOp)
def _squeeze(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x.reshape(out.shape))

    return k


@kernel(TransposeOp)
def _transpose(p: dict[str, Any]) -> Kernel:
    perm = tuple(int(a) for a in p["perm"])

    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x.transpose(perm))

    return k


@kernel(ExpandOp)
def _expand(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x)

    return k


@kernel(ReduceToShapeOp)
def _reduce_to_shape(p: dict[str, Any]) -> Kernel:
    """The sum over the axes `out` was broadcast along (the leading axes `x` has more, and
    those where `out` has 1): one `np.add.reduce` straight into a keepdims view of `out`
    (no temporary, no copy); a copy of `np.sum` where `out` has no such view or another
    dtype."""
    plan: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def k(x: np.ndarray, out: np.ndarray) -> None:
        nonlocal plan
        if plan is None:
            lead = x.ndim - out.ndim
            axes = tuple(range(lead)) + tuple(
                lead + i for i, d in enumerate(out.shape) if d == 1 and x.shape[lead + i] != 1
            )
            plan = axes, tuple(1 if d in axes else n for d, n in enumerate(x.shape))
        axes, kept = plan
        if not axes:
            np.copyto(out, x)
            return
        if x.dtype == out.dtype:
            try:
                view = np.reshape(out, kept, copy=False)
            except ValueError:
                view = None
            if view is not None:
                np.add.reduce(x, axis=axes, out=view, keepdims=True)
                return
        np.copyto(out, np.sum(x, axis=axes, keepdims=True).reshape(out.shape))

    return k


@kernel(ConcatOp)
def _concat(p: dict[str, Any]) -> Kernel:
    axis = int(p["axis"])

    def k(*a: np.ndarray) -> None:
        np.concatenate(a[:-1], axis=axis, out=a[-1])

    return k


@kernel(SliceOp)
def _slice(p: dict[str, Any]) -> Kernel:
    idx: tuple[slice, ...] | None = None

    def k(x: np.ndarray, out: np.ndarray) -> None:
        nonlocal idx
        if idx is None:
            idx = _slices(p, x.ndim)
        np.copyto(out, x[idx])

    return k


@kernel(SliceGradOp)
def _slice_grad(p: dict[str, Any]) -> Kernel:
    idx: tuple[slice, ...] | None = None

    def k(dy: np.ndarray, out: np.ndarray) -> None:
        nonlocal idx
        if idx is None:
            idx = _slices(p, out.ndim)
        out.fill(0)
        out[idx] = dy

    return k


@kernel(GatherOp)
def _gather(p: dict[str, Any]) -> Kernel:
    """np.take along `axis`. An index outside the valid range gives zeros (never raises,
    never another row's data). Valid: `[0, n)` with `zero_oor` (upstream: every other
    index, negative ones too, gives zeros); `[-n, n)` without it, negative indices counting
    from the end as in ONNX Gather (upstream leaves out-of-range results undefined)."""
    axis = int(p["axis"])
    zero_oor = bool(p.get("zero_oor", False))

    def k(data: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        n = data.shape[axis]
        lo = 0 if zero_oor else -n
        # the indices are in range when taken: mode "wrap" reads them as "raise" would (a
        # negative one from the end), without the copy through a temporary "raise" makes
        if idx.size == 0 or (idx.min() >= lo and idx.max() < n):
            np.take(data, idx, axis=axis, out=out, mode="wrap")
            return
        bad = (idx < lo) | (idx >= n)
        np.take(data, np.where(bad, 0, idx), axis=axis, out=out, mode="wrap")
        a = axis % data.ndim
        mask = bad.reshape((1,) * a + idx.shape + (1,) * (data.ndim - a - 1))
        np.copyto(out, 0, where=mask)

    return k


@kernel(GatherGradOp)
def _gather_grad(p: dict[str, Any]) -> Kernel:
    """Scatter-add of dy into zeros; repeated indices accumulate; an index the forward
    gather gave zeros for (outside `[0, n)` with `zero_oor`, outside `[-n, n)` without)
    contributes nothing.

    The contributions are sorted by index (stably: each row's sum in the order of the
    indices, as `np.add.at` adds them) and summed by one `np.add.reduceat`, several times
    faster than `np.add.at` (an embedding gradient)."""
    axis = int(p["axis"])
    zero_oor = bool(p.get("zero_oor", False))

    def k(dy: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        a = axis % out.ndim
        n = out.shape[a]
        lo = 0 if zero_oor else -n
        out.fill(0)
        flat = idx.reshape(-1)
        if flat.size == 0 or out.size == 0:
            return
        keep: np.ndarray | None = None
        if flat.min() < lo or flat.max() >= n:
            keep = np.flatnonzero((flat >= lo) & (flat < n))
            flat = flat[keep]
            if flat.size == 0:
                return
        if lo < 0 and flat.min() < 0:
            flat = np.where(flat < 0, flat + n, flat)
        order = np.argsort(flat, kind="stable")
        rows = flat[order]
        starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
        lead, trail = math.prod(out.shape[:a]), math.prod(out.shape[a + 1 :])
        src = dy.reshape(lead, idx.size, trail)[:, order if keep is None else keep[order], :]
        sums = np.add.reduceat(src, starts, axis=1)
        dst = out.reshape(lead, n, trail) if out.flags.c_contiguous else np.zeros((lead, n, trail), out.dtype)
        dst[:, rows[starts], :] = sums
        if not out.flags.c_contiguous:
            np.copyto(out, dst.reshape(out.shape))

    return k


@kernel(WhereOp)
def _where(p: dict[str, Any]) -> Kernel:
    def k(c: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, np.where(c, a, b))

    return k


@kernel(OnehotOp)
def _onehot(p: dict[str, Any]) -> Kernel:
    """As ONNX OneHot (which popxl.ops.onehot follows): a class in [-n, n) is hot
    (negative ones count from the end); any other class gives a row of off values."""
    n = int(p["num_classes"])
    axis = int(p.get("axis", -1))
    classes: np.ndarray | None = None
    ax = 0

    def k(idx: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
        nonlocal classes, ax
        if classes is None:
            ax = axis % out.ndim
            classes = np.arange(n).reshape((n,) + (1,) * (out.ndim - ax - 1))
        i = np.where(idx < 0, idx + n, idx)
        hot = np.expand_dims(i, ax) == classes
        np.copyto(out, values[0])
        np.copyto(out, values[1], where=hot)

    return k


@kernel(InitOp)  # `undef` mode writes once: InitOp declares PartialWrite
def _init(p: dict[str, Any]) -> Kernel:
    if p.get("init_type", "zero") == "zero":

        def k(out: np.ndarray) -> None:
            out.fill(0)

        return k
    done = False

    def k_undef(out: np.ndarray) -> None:
        nonlocal done
        if not done:  # undefined contents; zeros on first use for reproducibility
            out.fill(0)
            done = True

    return k_undef


def _arg(fn: Callable[..., np.ndarray]) -> KernelFactory:
    def factory(p: dict[str, Any]) -> Kernel:
        axis = int(p["axis"])
        keep = bool(p.get("keepdims", False))

        def k(x: np.ndarray, out: np.ndarray) -> None:
            np.copyto(out, fn(x, axis=axis, keepdims=keep), casting="unsafe")

        return k

    return factory


kernel(ArgmaxOp)(_arg(np.argmax))
kernel(ArgminOp)(_arg(np.argmin))


# ------------------------------------------------------------------------------------
# Reductions
# ------------------------------------------------------------------------------------


def _reduce(fn: Callable[..., Any]) -> KernelFactory:
    def factory(p: dict[str, Any]) -> Kernel:
        axes = _axes(p)
        keep = bool(p.get("keepdims", False))

        def k(x: np.ndarray, out: np.ndarray) -> None:
            fn(x, axis=axes, keepdims=keep, out=out)

        return k

    return factory


REDUCE_UFUNCS: dict[KernelClass, np.ufunc] = {
    ReduceSumOp: np.add,
    ReduceMaxOp: np.maximum,
    ReduceMinOp: np.minimum,
}
"""The reductions that are one ufunc's `reduce`; the plan templates read this table too."""

for _n, _u in REDUCE_UFUNCS.items():
    kernel(_n)(_reduce(_u.reduce))
kernel(ReduceMeanOp)(_reduce(np.mean))


@kernel(ReduceMaxGradOp)
def _reduce_max_grad(p: dict[str, Any]) -> Kernel:
    """dy goes to every position equal to the max (ties each get all of it, as PopART's
    ReduceMaxGrad: a mask of the positions equal to the output, times dy)."""
    axes = _axes(p)
    kshape: tuple[int, ...] | None = None

    def k(x: np.ndarray, y: np.ndarray, dy: np.ndarray, out: np.ndarray) -> None:
        nonlocal kshape
        if kshape is None:
            ax = range(x.ndim) if axes is None else {a % x.ndim for a in axes}
            kshape = tuple(1 if i in ax else d for i, d in enumerate(x.shape))
        mask = x == y.reshape(kshape)
        np.multiply(mask, dy.reshape(kshape), out=out, casting="unsafe")

    return k


# ------------------------------------------------------------------------------------
# Losses and gradient helpers
# ------------------------------------------------------------------------------------


class _Rows:
    """Row bookkeeping shared by the NLL kernels (computed on first call)."""

    __slots__ = ("rows", "c")

    def __init__(self) -> None:
        self.rows: np.ndarray | None = None
        self.c = 0

    def setup(self, probs: np.ndarray) -> None:
        self.c = probs.shape[-1]
        self.rows = np.arange(probs.size // max(self.c, 1))


def _labels(labels: np.ndarray, ignore: int | None, c: int, p: dict[str, Any], op: str):
    """Flat labels (ignored ones replaced by 0), the kept mask, the kept count; labels
    outside [0, c) that are not `ignore` raise `DataRangeError`."""
    check_range(labels, 0, c, p, 1, op, "label", f"{c} classes", allowed=ignore)
    lab = labels.reshape(-1)
    if ignore is None:
        return lab, None, lab.size
    keep = lab != ignore
    return np.where(keep, lab, 0), keep, int(np.count_nonzero(keep))


@kernel(NllLossOp)
def _nll_loss(p: dict[str, Any]) -> Kernel:
    """loss = -log(probs[label]) (or -probs[label]); mean over non-ignored rows."""
    red = p["reduction"]
    ignore = p.get("ignore_index")
    log_prob = bool(p.get("log_prob", False))
    r = _Rows()

    def k(probs: np.ndarray, labels: np.ndarray, out: np.ndarray) -> None:
        if r.rows is None:
            r.setup(probs)
        lab, keep, n = _labels(labels, ignore, r.c, p, NllLossOp.name)
        picked = probs.reshape(-1, r.c)[r.rows, lab]
        loss = -picked if log_prob else -np.log(picked)
        if keep is not None:
            loss[~keep] = 0
        if red == "none":
            np.copyto(out, loss.reshape(out.shape))
        elif red == "sum":
            np.sum(loss, out=out)
        else:
            np.copyto(out, np.sum(loss) / max(n, 1))

    return k


@kernel(NllLossGradOp)
def _nll_loss_grad(p: dict[str, Any]) -> Kernel:
    red = p["reduction"]
    ignore = p.get("ignore_index")
    log_prob = bool(p.get("log_prob", False))
    r = _Rows()

    def k(probs: np.ndarray, labels: np.ndarray, dloss: np.ndarray, out: np.ndarray) -> None:
        if r.rows is None:
            r.setup(probs)
        lab, keep, n = _labels(labels, ignore, r.c, p, NllLossGradOp.name)
        g = -dloss.reshape(-1).astype(out.dtype, copy=False)  # (rows,) or (1,)
        if red == "mean":
            g = g / max(n, 1)
        if not log_prob:
            g = g / probs.reshape(-1, r.c)[r.rows, lab]
        if keep is not None:
            g = np.where(keep, g, 0)
        out.fill(0)
        out.reshape(-1, r.c)[r.rows, lab] = g

    return k


def nll_softmax_grad_(
    probs: np.ndarray,
    labels: np.ndarray,
    rows_c: np.ndarray,
    keep: np.ndarray | None,
    loss: np.ndarray,
    dx: np.ndarray,
    idx: np.ndarray,
    pk: np.ndarray,
    red: str,
    one: np.ndarray,
    count: np.ndarray | None,
    scale: np.ndarray | None,
) -> None:
    """loss = -log(probs[label]) per row (summed for "sum", over `count` rows for "mean"), and
    dx = (probs - onehot(labels)) `scale`, of C-contiguous flat `probs` / `dx` of N rows of C
    classes; `labels` (N,) in [0, C), `rows_c` = arange(N) C; rows outside `keep` get 0;
    `idx` (N,) int64 and `pk` (N,) of probs' dtype are scratch; `one`, `count`, `scale`
    0-d arrays of that dtype (`_nll_softmax_consts`; `scale` None for 1)."""
    if labels.dtype == np.uint64:  # in [0, C): the same int64 (uint64 + int64 is float64)
        labels = labels.view(np.int64)
    np.add(rows_c, labels, idx)
    np.take(probs, idx, None, pk, mode="wrap")  # idx in range: no temporary (as "raise" makes)
    np.log(pk, pk)
    np.negative(pk, pk)
    if keep is not None:
        pk[~keep] = 0
    if red == "none":
        np.copyto(loss, pk.reshape(loss.shape))
    else:
        np.add.reduce(pk, axis=0, out=loss)
        if count is not None:
            np.divide(loss, count, loss)
    np.copyto(dx, probs)
    np.take(dx, idx, None, pk, mode="wrap")
    np.subtract(pk, one, pk)
    np.put(dx, idx, pk)
    if keep is not None:
        dx.reshape(keep.size, -1)[~keep] = 0
    if scale is not None:
        np.multiply(dx, scale, dx)


def _nll_softmax_consts(
    dtype: np.dtype, red: str, n: int, lg: float
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """`one`, `count`, `scale` of `nll_softmax_grad_` for `n` kept rows and loss_grad `lg`."""
    n = max(n, 1)
    scale = lg / n if red == "mean" else lg
    return (
        const(1, dtype),
        const(n, dtype) if red == "mean" else None,
        None if scale == 1.0 else const(scale, dtype),
    )


@kernel(NllLossWithSoftmaxGradOp)
def _nll_loss_with_softmax_grad(p: dict[str, Any]) -> Kernel:
    """(loss, dx): dx = (probs - onehot) * loss_grad [/ N for mean]; ignored rows 0."""
    red = p["reduction"]
    ignore = p.get("ignore_index")
    r = _Rows()

    def build(pos: dict[str, int]) -> Kernel:
        lg_c, lg_i = _factor(p, pos, "loss_grad", 1.0)

        def k(*a: np.ndarray) -> None:
            probs, labels, loss_out, dx = a[0], a[1], a[-2], a[-1]
            if r.rows is None:
                r.setup(probs)
            assert r.rows is not None
            lg = a[lg_i].item() if lg_i >= 0 else lg_c
            lab, keep, n = _labels(labels, ignore, r.c, p, NllLossWithSoftmaxGradOp.name)
            rows = r.rows.size
            flat = dx.flags.c_contiguous  # else through a contiguous copy
            d = dx.reshape(-1) if flat else np.empty(dx.size, dx.dtype)
            nll_softmax_grad_(
                np.ascontiguousarray(probs).reshape(-1),
                lab,
                r.rows * r.c,
                keep,
                loss_out,
                d,
                np.empty(rows, np.int64),
                np.empty(rows, probs.dtype),
                red,
                *_nll_softmax_consts(probs.dtype, red, n, lg),
            )
            if not flat:
                np.copyto(dx, d.reshape(dx.shape))

        return k

    return _optional_kernel(p, NllLossWithSoftmaxGradOp, lambda pos: 2, build)


@template(NllLossWithSoftmaxGradOp)
def _t_nll_softmax_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """Without ignore_index / loss_grad tensor, C-contiguous float arrays: the kernel's
    function with a precomputed row offset vector and scratch."""
    segs = p.get("operand_segments", p.get("operandSegmentSizes"))
    if not _arity(op, 2, 2) or p.get("ignore_index") is not None or (segs is not None and sum(segs) != 2):
        return None
    probs, labels = g.arr(op.ins[0]), g.arr(op.ins[1])
    loss, dx = g.arr(op.outs[0]), g.arr(op.outs[1])
    red = p.get("reduction", "mean")
    if (
        probs.dtype.kind != "f"
        or dx.dtype != probs.dtype
        or loss.dtype != probs.dtype
        or probs.ndim == 0
        or not (probs.flags.c_contiguous and dx.flags.c_contiguous and labels.flags.c_contiguous)
        or red not in ("mean", "sum", "none")
        or (red == "none" and loss.size != labels.size)
        or (red != "none" and loss.size != 1)
        or labels.dtype.kind not in "iu"
    ):
        return None
    c = probs.shape[-1]
    n = probs.size // max(c, 1)
    if labels.size != n or n == 0:
        return None
    pflat, dflat, lab = as_view(probs, (-1,)), as_view(dx, (-1,)), as_view(labels, (-1,))
    loss_v = as_view(loss, (n,) if red == "none" else ())
    if pflat is None or dflat is None or lab is None or loss_v is None:
        return None
    idx, _ = g.scratch((n,), np.int64)
    pk, _ = g.scratch((n,), probs.dtype)
    args = [pflat, lab, np.arange(n, dtype=np.int64) * c, None, loss_v, dflat, idx, pk, red]
    args += [*_nll_softmax_consts(probs.dtype, red, n, float(p.get("loss_grad", 1.0)))]
    # A label outside [0, C) would read another row. Seen as unsigned, a negative label
    # is huge: one max() over the labels per step, the full check only when it fails.
    uv = g.view(lab.view(np.dtype(f"u{lab.dtype.itemsize}")))
    chk = g.bind(partial(check_range, lo=0, hi=c, p=p, i=1, op=op.name, what="label", note=f"{c} classes"), "chk")
    return [
        f"if {uv}.max() >= {c}: {chk}({g.view(lab)})",
        f"{g.fn(nll_softmax_grad_)}({_names(g, args)})",
    ]


def relu_grad_(dy: np.ndarray, x: np.ndarray, zero: np.ndarray, mask: np.ndarray, out: np.ndarray) -> None:
    """out = dy where x > 0, else 0 (also where dy is infinite or NaN: a product with the step
    function would give NaN there); `zero` a 0-d 0 of x's dtype, `mask` bool scratch of x's shape."""
    np.greater(x, zero, mask)
    np.multiply(dy, mask, out)
    np.logical_not(mask, mask)
    np.copyto(out, zero, where=mask)


@kernel(ReluGradOp)
def _relu_grad(p: dict[str, Any]) -> Kernel:
    def k(dy: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        relu_grad_(dy, x, const(0, x.dtype), np.empty(x.shape, np.bool_), out)

    return k


@template(ReluGradOp)
def _t_relu_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1):
        return None
    x = g.arr(op.ins[1])
    mask, _ = g.scratch(x.shape, np.bool_)
    return [f"{g.fn(relu_grad_)}({i[0]}, {i[1]}, {_names(g, [const(0, x.dtype), mask])}, {o[0]})"]


# ------------------------------------------------------------------------------------
# Updates (in place unless noted). Scaled adds, accumulators and moving averages are one
# function each, which the kernel runs and the generated plan's template (next to it) calls
# with scratch buffers: `x * f` with `f` a Python float or a 0-d array of x's float dtype
# computes in x's dtype, as NumPy does with a Python float.
# ------------------------------------------------------------------------------------


def _k(value: float, dtype: np.dtype) -> np.ndarray | float:
    """`value` as a 0-d array of a float `dtype` (no conversion per call), else as is."""
    return const(value, dtype) if dtype.kind == "f" else float(value)


def _product(a: np.ndarray, f: np.ndarray | float) -> np.dtype:
    """The dtype of `a * f`."""
    return np.result_type(a.dtype, f)


def _arity(op: K, n_in: int, n_out: int) -> bool:
    return len(op.ins) == n_in and len(op.outs) == n_out


def scaled_add_into(
    x: np.ndarray, y: np.ndarray, out: np.ndarray, t: np.ndarray, a: np.ndarray | float, b: np.ndarray | float
) -> None:
    """out = a x + b y; `t` scratch for b y (read before `out`, which may be `y`, is written)."""
    np.multiply(y, b, t)
    np.multiply(x, a, out)
    np.add(out, t, out)


def _scaled_add_args(
    x: np.ndarray, y: np.ndarray, p: dict[str, Any], alloc: Callable[[tuple[int, ...], np.dtype], np.ndarray]
) -> tuple[np.ndarray, np.ndarray | float, np.ndarray | float] | None:
    """(t, a, b) of `scaled_add_into`, or None for a = b = 1 (one `np.add`)."""
    a, b = float(p["a"]), float(p["b"])
    if a == 1.0 and b == 1.0:
        return None
    ka, kb = _k(a, x.dtype), _k(b, y.dtype)
    return alloc(y.shape, _product(y, kb)), ka, kb


@kernel(ScaledAddOp)
def _scaled_add(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        a = _scaled_add_args(x, y, p, np.empty)
        if a is None:
            np.add(x, y, out)
        else:
            scaled_add_into(x, y, out, *a)

    return k


@template(ScaledAddOp)
def _t_scaled_add(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1):
        return None
    a = _scaled_add_args(g.arr(op.ins[0]), g.arr(op.ins[1]), p, scratch(g))
    if a is None:
        return [f"{g.fn(np.add)}({i[0]}, {i[1]}, {o[0]})"]
    return [f"{g.fn(scaled_add_into)}({i[0]}, {i[1]}, {o[0]}, {_names(g, a)})"]


def scaled_add_inplace(
    x: np.ndarray,
    y: np.ndarray,
    t: np.ndarray,
    a: np.ndarray | float,
    b: np.ndarray | float,
    scale_x: bool,
    scale_y: bool,
    copy_y: bool,
) -> None:
    """x = a x + b y in place. b y (`scale_y`), or a copy of a `y` that overlaps `x` when x is
    scaled (`copy_y`), goes to scratch `t` before x is written: `scaled_add_(y, y)` gives
    (a + b) y; else `t` is `y`."""
    if scale_y:
        np.multiply(y, b, t)
    elif copy_y:
        np.copyto(t, y)
    if scale_x:
        np.multiply(x, a, x)
    np.add(x, t, x, casting="unsafe")


def _scaled_add_inplace_args(
    x: np.ndarray, y: np.ndarray, p: dict[str, Any], alloc: Callable[[tuple[int, ...], np.dtype], np.ndarray]
) -> list[Any]:
    """The arguments of `scaled_add_inplace` after x and y."""
    a, b = float(p["a"]), float(p["b"])
    ka, kb = _k(a, x.dtype), _k(b, y.dtype)
    scale_y = b != 1.0
    copy_y = not scale_y and a != 1.0 and np.may_share_memory(x, y)
    t = alloc(y.shape, _product(y, kb)) if scale_y or copy_y else y
    return [t, ka, kb, a != 1.0, scale_y, copy_y]


@kernel(ScaledAddInplaceOp)
def _scaled_add_inplace(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, y: np.ndarray, x_out: np.ndarray) -> None:
        scaled_add_inplace(x, y, *_scaled_add_inplace_args(x, y, p, np.empty))

    return k


@template(ScaledAddInplaceOp)
def _t_scaled_add_inplace(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1) or op.outs[0] is not op.ins[0]:
        return None
    x, y = g.arr(op.ins[0]), g.arr(op.ins[1])
    t, *rest = _scaled_add_inplace_args(x, y, p, scratch(g))
    return [f"{g.fn(scaled_add_inplace)}({i[0]}, {i[1]}, {i[1] if t is y else g.view(t)}, {_names(g, rest)})"]


def _names(g: Gen, args: Sequence[Any]) -> str:
    """Arguments of a generated call: arrays bound now, other values as literals."""
    return ", ".join(g.view(a) if isinstance(a, np.ndarray) else repr(a) for a in args)


# -- accumulators: `(t, x, factor_tensor?) {factor}`, t updated in place ------------------


def accumulate_(t: np.ndarray, x: np.ndarray, tmp: np.ndarray, f: float) -> None:
    """t = t + x f (x * 1.0 is x exactly: no product)."""
    if f == 1.0:
        np.add(t, x, t, casting="unsafe")
    else:
        np.multiply(x, f, tmp)
        np.add(t, tmp, t, casting="unsafe")


def accumulate_square_(t: np.ndarray, x: np.ndarray, tmp: np.ndarray, f: float) -> None:
    """t = t + (x x) f."""
    np.multiply(x, x, tmp)
    if f != 1.0:
        np.multiply(tmp, f, tmp)
    np.add(t, tmp, t, casting="unsafe")


def running_mean_factors(s: float) -> tuple[float, float]:
    """(1 / (s + 1), s / (s + 1)): the weights of a new value and of the mean of `s` values
    in the running mean after `s` steps (`accumulate_mean_`, and the gemm it folds into)."""
    return 1.0 / (s + 1.0), s / (s + 1.0)


def accumulate_mean_(t: np.ndarray, x: np.ndarray, tmp: np.ndarray, s: float) -> None:
    """t = t (s / (s + 1)) + x (1 / (s + 1)): the running mean after s steps."""
    new, old = running_mean_factors(s)
    np.multiply(x, new, tmp)
    np.multiply(t, old, t)
    np.add(t, tmp, t, casting="unsafe")


def _moving(square: bool) -> Callable[..., None]:
    def moving_average_(
        t: np.ndarray,
        x: np.ndarray,
        tmp: np.ndarray,
        f: float,
        mul: Callable[..., Any] = np.multiply,
        add: Callable[..., Any] = np.add,
    ) -> None:
        """t = t f + y (1 - f), y = x (x x for the square); `mul` / `add` are NumPy's, or
        their float16 forms for float16 `t` (`HalfInPlace`)."""
        if square:
            np.multiply(x, x, tmp)
            np.multiply(tmp, 1.0 - f, tmp)
        else:
            np.multiply(x, 1.0 - f, tmp)
        mul(t, f, t)
        add(t, tmp, t, casting="unsafe")

    return moving_average_


moving_average_ = _moving(False)
moving_average_square_ = _moving(True)

_ACCUMULATORS: list[tuple[type[IRDLOperation], Callable[..., None], str, float | None]] = [
    (AccumulateOp, accumulate_, "f", 1.0),
    (AccumulateSquareOp, accumulate_square_, "f", 1.0),
    (AccumulateMovingAverageOp, moving_average_, "f", None),
    (AccumulateMovingAverageSquareOp, moving_average_square_, "f", None),
    (AccumulateMeanOp, accumulate_mean_, "step", None),
]


def _accumulator_kernel(cls: type[IRDLOperation], body: Callable[..., None], factor: str, default: float | None):
    def factory(p: dict[str, Any]) -> Kernel:
        def build(pos: dict[str, int]) -> Kernel:
            fc, fi = _factor(p, pos, factor, default)
            ti, xi = pos["t"], pos["x"]

            def k(*a: np.ndarray) -> None:
                t, x = a[ti], a[xi]
                f = a[fi].item() if fi >= 0 else fc
                body(t, x, np.empty(x.shape, np.result_type(x.dtype, 1.0)), f)

            return k

        return _optional_kernel(p, cls, _one, build)

    return factory


def _accumulator_template(body: Callable[..., None], factor: str, default: float | None):
    def t(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
        segs = p.get("operand_segments", p.get("operandSegmentSizes"))
        cls = op.cls
        if segs is None or len(op.outs) != 1 or op.outs[0] is not op.ins[0]:
            return None
        if not (isinstance(cls, type) and issubclass(cls, IRDLOperation)):
            return None
        pos = operand_positions(cls, segs)
        tv, xv = op.ins[pos["t"]], op.ins[pos["x"]]
        ta, xa = g.arr(tv), g.arr(xv)
        fi = pos.get(f"{factor}_tensor", -1)
        if fi >= 0:
            f = f"{g.buf(op.ins[fi])}.item()"
        else:
            const = p.get(factor, default)
            if const is None:
                return None  # the kernel says the factor is missing
            f = repr(float(const))
        tmp = g.scratch(xa.shape, np.result_type(xa.dtype, 1.0))[1]
        extra = ""
        if body in (moving_average_, moving_average_square_) and _half_state(ta, xa):
            half = HalfInPlace(ta.size, g.scratch(ta.shape, np.float32)[0])
            extra = f", {g.bind(half.multiply, 'hmul')}, {g.bind(half.add, 'hadd')}"
        return [f"{g.fn(body)}({g.buf(tv)}, {g.buf(xv)}, {tmp}, {f}{extra})"]

    return t


def _half_state(t: np.ndarray, x: np.ndarray) -> bool:
    """float16 state updated by a float32 value: NumPy's half loops, slow on the subnormals
    of small moments, are replaced by their float32 forms (`HalfInPlace`)."""
    return t.dtype == np.float16 and x.dtype == np.float32 and t.flags.c_contiguous and t.shape == x.shape


for _cls, _body, _name, _default in _ACCUMULATORS:
    kernel(_cls)(_accumulator_kernel(_cls, _body, _name, _default))
    template(_cls)(_accumulator_template(_body, _name, _default))


@kernel(AccumulatorScaleOp)
def _accumulator_scale(p: dict[str, Any]) -> Kernel:

    def build(pos: dict[str, int]) -> Kernel:
        fc, fi = _factor(p, pos, "f", None)

        def k(*a: np.ndarray) -> None:
            t = a[0]
            f = a[fi].item() if fi >= 0 else fc
            if f == 0.0:
                t.fill(0)  # no NaN/inf propagation, as PopXL's zeroing
            else:
                np.multiply(t, f, out=t, casting="unsafe")

        return k

    return _optional_kernel(p, AccumulatorScaleOp, _one, build)


@kernel(AccumulatorZeroOp)
def _accumulator_zero(p: dict[str, Any]) -> Kernel:
    def k(t: np.ndarray, t_out: np.ndarray) -> None:
        t.fill(0)

    return k


@kernel(SparseAccumulateOp)
def _sparse_accumulate(p: dict[str, Any]) -> Kernel:
    """t[..., indices, ...] += f * X on `axis`; repeated indices add up."""
    axis = int(p["axis"])

    def build(pos: dict[str, int]) -> Kernel:
        fc, fi = _factor(p, pos, "f", 1.0)
        lead: tuple[slice, ...] | None = None

        def k(*a: np.ndarray) -> None:
            nonlocal lead
            t, x, idx = a[0], a[1], a[2]
            if lead is None:
                lead = (slice(None),) * (axis % t.ndim)
            f = a[fi].item() if fi >= 0 else fc
            n = t.shape[axis]
            check_range(idx, -n, n, p, 2, SparseAccumulateOp.name, "index", f"axis {axis} has size {n}")
            upd = x if f == 1.0 else x * f
            if np.may_share_memory(upd, t):
                upd = upd.copy()  # read every input before t is written
            if np.may_share_memory(idx, t):
                idx = idx.copy()
            _add_at(t, (*lead, idx), upd.astype(t.dtype, copy=False))

        return k

    return _optional_kernel(p, SparseAccumulateOp, _one, build)


@kernel(CopyVarUpdateOp)
def _copy_var_update(p: dict[str, Any]) -> Kernel:
    def k(t: np.ndarray, x: np.ndarray, t_out: np.ndarray) -> None:
        np.copyto(t, x, casting="unsafe")

    return k


def _int_if_integral(v: float) -> float | int:
    return int(v) if float(v).is_integer() else float(v)


@kernel(IncrementModOp)
def _increment_mod(p: dict[str, Any]) -> Kernel:
    """fmod(t + increment, modulus) in t's dtype."""
    inc, mod = _int_if_integral(p["increment"]), _int_if_integral(p["modulus"])

    def k(t: np.ndarray, out: np.ndarray) -> None:
        np.add(t, inc, out=out, casting="unsafe")
        np.fmod(out, mod, out=out, casting="unsafe")

    return k


@kernel(IncrementModInplaceOp)
def _increment_mod_inplace(p: dict[str, Any]) -> Kernel:
    inc, mod = _int_if_integral(p["increment"]), _int_if_integral(p["modulus"])

    def k(t: np.ndarray, t_out: np.ndarray) -> None:
        np.add(t, inc, out=t, casting="unsafe")
        np.fmod(t, mod, out=t, casting="unsafe")

    return k


def _dyn_index(p: dict[str, Any], op: str) -> Callable[[np.ndarray, np.ndarray], tuple[slice, ...]]:
    """index tensor -> slices of `sizes` on `axes`; an offset outside [0, dim - size]
    (a slice past the end, which PopXL does not support) raises `DataRangeError`."""
    axes = tuple(int(a) for a in p["axes"])
    sizes = tuple(int(s) for s in p["sizes"])

    def build(t: np.ndarray, index: np.ndarray) -> tuple[slice, ...]:
        idx = [slice(None)] * t.ndim
        offs = index.reshape(-1).tolist()
        for a, s, o in zip(axes, sizes, offs):
            hi = t.shape[a] - s
            if not 0 <= o <= hi:
                raise DataRangeError(
                    f"{op_label(p, op)}: offset {o} on axis {a} of {operand(p, 1)} is out of "
                    f"range [0, {hi}] (a slice of size {s} of a dimension of size {t.shape[a]})"
                )
            idx[a] = slice(int(o), int(o) + s)
        return tuple(idx)

    return build


@kernel(DynamicSliceOp)
def _dynamic_slice(p: dict[str, Any]) -> Kernel:
    build = _dyn_index(p, DynamicSliceOp.name)

    def k(t: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, t[build(t, index)])

    return k


@kernel(DynamicUpdateOp)
def _dynamic_update(p: dict[str, Any]) -> Kernel:
    build = _dyn_index(p, DynamicUpdateOp.name)

    def k(t: np.ndarray, index: np.ndarray, update: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, t)
        out[build(t, index)] = update

    return k


@kernel(DynamicUpdateInplaceOp)
def _dynamic_update_inplace(p: dict[str, Any]) -> Kernel:
    build = _dyn_index(p, DynamicUpdateInplaceOp.name)

    def k(t: np.ndarray, index: np.ndarray, update: np.ndarray, t_out: np.ndarray) -> None:
        t[build(t, index)] = update

    return k


# ------------------------------------------------------------------------------------
# Optimiser maths
# ------------------------------------------------------------------------------------


def _updater(cls: type[IRDLOperation], kind: str) -> KernelFactory:
    """adam / lamb: mc/(sqrt(vc)+eps) + wd*w; adamax: mc/(v+eps) + wd*w.

    With time_step: it is incremented in place first and t = its new value gives the
    bias corrections mc = m/(1-beta1^t), vc = v/(1-beta2^t) (adamax: mc only).
    """
    factors = (
        ("weight_decay", "beta1", "epsilon") if kind == "adamax" else ("weight_decay", "beta1", "beta2", "epsilon")
    )
    defaults = {"weight_decay": 0.0, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}

    def n_outs(pos: dict[str, int]) -> int:
        return 2 if pos["time_step"] >= 0 else 1

    def factory(p: dict[str, Any]) -> Kernel:
        return _optional_kernel(p, cls, n_outs, lambda pos: build(p, pos))

    def build(p: dict[str, Any], pos: dict[str, int]) -> Kernel:
        fs = [_factor(p, pos, f, defaults[f]) for f in factors]
        wi, ti = pos["weight"], pos["time_step"]
        (wd_c, wd_i), (b1_c, b1_i) = fs[0], fs[1]
        b2_c, b2_i = fs[2] if kind != "adamax" else (0.0, -1)
        ep_c, ep_i = fs[-1]
        adamax = kind == "adamax"
        # the denominator's buffer, made at the first call (a kernel closure runs one call at a
        # time: closures never go in a lane or a row block), so a steady step allocates nothing
        dens: dict[tuple[tuple[int, ...], np.dtype], np.ndarray] = {}

        def k(*a: np.ndarray) -> None:
            m, v, out = a[0], a[1], a[-1]
            dt = out.dtype
            wd = a[wd_i].item() if wd_i >= 0 else wd_c
            eps = a[ep_i].item() if ep_i >= 0 else ep_c
            c1 = c2 = 1.0
            # every input is read before time_step is incremented (they may alias it)
            if ti >= 0:
                t = a[ti].item() + 1
                b1 = a[b1_i].item() if b1_i >= 0 else b1_c
                c1 = 1.0 / (1.0 - b1**t)
                if not adamax:
                    b2 = a[b2_i].item() if b2_i >= 0 else b2_c
                    c2 = 1.0 / (1.0 - b2**t)
            den = dens.get((v.shape, dt))
            if den is None:
                den = dens[v.shape, dt] = np.empty(v.shape, dt)  # an array also for 0-d v
            np.copyto(den, v, casting="unsafe")
            if not adamax:
                if c2 != 1.0:
                    den *= c2
                np.sqrt(den, out=den)
            den += eps
            np.multiply(m, c1, out=out, dtype=dt)
            out /= den
            if wi >= 0 and wd != 0.0:
                w = a[wi]
                if w.dtype == dt and w.shape == den.shape:
                    np.multiply(w, wd, out=den)  # den is free: the same product as w * wd
                    out += den
                else:
                    out += w * wd
            if ti >= 0:
                a[ti][...] += 1

        return k

    return factory


kernel(AdamUpdaterOp)(_updater(AdamUpdaterOp, "adam"))
kernel(LambUpdaterOp)(_updater(LambUpdaterOp, "lamb"))
kernel(AdamaxUpdaterOp)(_updater(AdamaxUpdaterOp, "adamax"))


@kernel(AdamVarUpdateOp)
def _adam_var_update(p: dict[str, Any]) -> Kernel:
    """t -= lr * ratio * x; ratio = min(sqrt(r1), mwn) / sqrt(r2), 1 if a norm is 0."""

    def build(pos: dict[str, int]) -> Kernel:
        lr_c, lr_i = _factor(p, pos, "learning_rate", None)
        mw_i = pos["max_weight_norm_tensor"]
        mw_c = p.get("max_weight_norm")

        def k(*a: np.ndarray) -> None:
            t, x, r1, r2 = a[0], a[1], a[2], a[3]
            lr = a[lr_i].item() if lr_i >= 0 else lr_c
            n1 = math.sqrt(r1.item())
            n2 = math.sqrt(r2.item())
            mwn = a[mw_i].item() if mw_i >= 0 else mw_c
            if mwn is not None:
                n1 = min(n1, mwn)
            ratio = n1 / n2 if n1 != 0.0 and n2 != 0.0 else 1.0
            np.subtract(t, x * (lr * ratio), out=t, casting="unsafe")

        return k

    return _optional_kernel(p, AdamVarUpdateOp, _one, build)


# ------------------------------------------------------------------------------------
# More elementwise ops: ceil, floor, erf, geluerf, fmod, bitwise, clip; print_tensor
# ------------------------------------------------------------------------------------

# erf in vectorised float64, W. J. Cody's rational approximations (Math. Comp. 23, 1969;
# the coefficients are his, for about 18 significant digits):
#   |x| <= 0.46875:      erf(x) = x N(x^2) / D(x^2)
#   0.46875 < |x| <= 4:  erfc(|x|) = exp(-x^2) N(|x|) / D(|x|)
#   |x| > 4:             erfc(|x|) = exp(-x^2) (1/sqrt(pi) - s N(s) / D(s)) / |x|, s = 1/x^2
# and erf(x) = sign(x) (1 - erfc(|x|)) outside the first range. Within 4 ulp of libm's erf
# in float64 (1 ulp after rounding to float32 or float16; tests/runtime/test_erf_kernels.py). The
# work goes in blocks that stay in cache; in a block the first two ranges are evaluated on
# every element (the input clipped into each range) and blended by arithmetic with 0/1
# weights, cheaper than selecting elements through masks; the third range, rare in
# practice, on the elements that fall in it.
# Each tuple: the leading numerator coefficient, then (numerator, denominator)
# coefficients from the highest remaining power down; the denominators are monic.
_ERF_SMALL = 0.46875
_ERF_SMALL_COEFS = (
    1.85777706184603153e-1,
    (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03),
    (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03),
)
_ERFC_MID_COEFS = (
    2.15311535474403846e-8,
    (
        5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
        8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
    ),
    (
        1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
        3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03,
    ),
)  # fmt: skip
_ERFC_LARGE_COEFS = (
    1.63153871373020978e-2,
    (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
     6.58749161529837803e-4),
    (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
     2.33520497626869185e-3),
)  # fmt: skip
_ERFC_ZERO = 28.0  # erfc(x) underflows to 0 in float64 from about 27.3 on
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
ERF_BLOCK = 65536  # elements per float64 block (measured: 16384 is ~17% slower, larger no faster)
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# (numerator, denominator) coefficient pairs as (2, 1) columns, for `_rational`
_Horner = tuple[np.ndarray, list[np.ndarray], np.ndarray]


def _horner_pairs(coefs: tuple[float, tuple[float, ...], tuple[float, ...]]) -> _Horner:
    lead, ns, ds = coefs
    cols = [np.array([[a], [b]]) for a, b in zip(ns, ds)]
    return np.array([[lead], [1.0]]), cols[:-1], cols[-1]


_ERF_SMALL_H = _horner_pairs(_ERF_SMALL_COEFS)
_ERFC_MID_H = _horner_pairs(_ERFC_MID_COEFS)
_ERFC_LARGE_H = _horner_pairs(_ERFC_LARGE_COEFS)


def _rational(y: np.ndarray, h: _Horner, nd: np.ndarray, out: np.ndarray) -> None:
    """out = N(y) / D(y): both polynomials by Horner's rule at once, in the two rows of
    `nd` (scratch of shape (2, y.size)): half the NumPy calls of one after the other."""
    lead, steps, last = h
    np.multiply(lead, y, out=nd)
    for c in steps:
        nd += c
        nd *= y
    nd += last
    np.divide(nd[0], nd[1], out=out)


def _exp_neg_square(y: np.ndarray, out: np.ndarray, t: np.ndarray, exact: bool) -> None:
    """out = exp(-y^2). `exact`: to a few ulp also where y^2 is large, as Cody does:
    exp(-k^2) exp(-(y - k)(y + k)) with k = y rounded down to 1/16, so k^2 is exact
    (t: scratch)."""
    if not exact:
        np.multiply(y, y, out=out)
        np.negative(out, out=out)
        np.exp(out, out=out)
        return
    np.multiply(y, 16.0, out=out)
    np.trunc(out, out=out)
    out *= 1.0 / 16.0
    np.add(y, out, out=t)
    t *= out - y  # -(y - k)(y + k)
    np.exp(t, out=t)
    np.multiply(out, out, out=out)
    np.negative(out, out=out)
    np.exp(out, out=out)
    out *= t


def _erfc_large(y: np.ndarray, exact: bool) -> np.ndarray:
    """erfc(y) for y > 4 (the third range; 0 from _ERFC_ZERO on, infinity included)."""
    y = np.minimum(y, _ERFC_ZERO)
    s = 1.0 / (y * y)
    r, e, nd = np.empty_like(y), np.empty_like(y), np.empty((2, y.size))
    _rational(s, _ERFC_LARGE_H, nd, r)
    r *= s
    np.subtract(_INV_SQRT_PI, r, out=r)
    r /= y
    _exp_neg_square(y, e, nd[0], exact)
    r *= e
    return r


def _erf_block(z: np.ndarray, out: np.ndarray, one_plus: bool, scratch: np.ndarray, exact: bool = True) -> None:
    """out = erf(z), or 1 + erf(z) when `one_plus` (accurate also where erf(z) is near -1:
    erfc(-z) itself, not 1 - erfc(-z) added to 1). z: a float64 block; scratch: (5, z.size).
    Each element is evaluated in its own range only (the elements of the first range, then
    of the others, gathered into scratch and scattered back). `exact`: exp(-z^2) of 1 + erf
    to a few float64 ulp where z^2 is large; without, its relative error is about z^2 2^-53
    (below 1e-14 where 1 + erf(z) is a normal float32), far under a float32 ulp."""
    y, a, b, nd = scratch[0], scratch[1], scratch[2], scratch[3:5]
    np.abs(z, out=y)
    first = y <= _ERF_SMALL  # NaN: the other ranges, which give NaN
    si, mi = np.flatnonzero(first), np.flatnonzero(~first)
    ns, nm = si.size, mi.size
    if ns:
        # erf(s) = s R(s^2) (odd: the sign and -0 follow s)
        sv = np.take(z, si, out=a[:ns], mode="wrap")  # si in range: no temporary
        t = np.multiply(sv, sv, out=b[:ns])
        _rational(t, _ERF_SMALL_H, nd[:, :ns], t)
        t *= sv
        if one_plus:
            t += 1.0
        out[si] = t
    if nm:
        # r = erfc(|z|): the middle range's rational function, the third range's beyond 4
        m = np.take(y, mi, out=a[:nm], mode="wrap")
        far = np.flatnonzero(m > 4.0)
        big = m[far] if far.size else None
        np.minimum(m, 4.0, out=m)
        r = y[:nm]  # |z| is in m now
        _rational(m, _ERFC_MID_H, nd[:, :nm], r)
        e = b[:nm]
        _exp_neg_square(m, e, nd[0, :nm], one_plus and exact)
        r *= e
        if big is not None:
            r[far] = _erfc_large(big, one_plus and exact)
        zm = np.take(z, mi, out=b[:nm], mode="wrap")
        if one_plus:
            # erfc(|z|) for z < 0, 2 - erfc(|z|) for z > 0
            np.subtract(2.0, r, out=r, where=zm > 0.0)
        else:
            np.subtract(1.0, r, out=r)
            np.copysign(r, zm, out=r)
        out[mi] = r


def in_blocks(
    body: Callable[..., None], out: np.ndarray, ins: tuple[np.ndarray, ...], work: np.ndarray, res: np.ndarray
) -> None:
    """out = body over the elements of `ins`, block by block in float64:
    `body(*in_blocks, result_block, scratch)` with float64 copies of the inputs' blocks and
    scratch of shape (6, block). `work` `(6 + len(ins), block)` and `res` are float64 scratch
    (`_erf_scratch`): `res` one block when each result block can go straight to `out`, else
    every element (the result goes to `out` at the end: `out` may overlap an input)."""
    flat = [np.ascontiguousarray(a).reshape(-1) for a in np.broadcast_arrays(*ins)]
    n = flat[0].size
    step = work.shape[1]
    direct = res.size < n or n == 0
    ob = out.reshape(-1) if direct else out
    for i in range(0, n, step):
        j = min(i + step, n)
        blocks = work[:, : j - i]
        for t, a in enumerate(flat):
            np.copyto(blocks[6 + t], a[i:j], casting="unsafe")
        r = res[: j - i] if direct else res[i:j]
        body(*blocks[6:], r, blocks[:6])
        if direct:
            np.copyto(ob[i:j], r, casting="unsafe")
    if not direct:
        np.copyto(out, res.reshape(out.shape), casting="unsafe")


def _erf_scratch(
    out: np.ndarray, ins: Sequence[np.ndarray], alloc: Callable[[tuple[int, ...], np.dtype], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(work, res) of `in_blocks`: `res` one block when `out` is contiguous and shares no
    memory with an input other than being that input itself."""
    n = out.size
    block = max(1, min(n, ERF_BLOCK))
    f64 = np.dtype(np.float64)
    same = [a.shape == out.shape and a.strides == out.strides and a.ctypes.data == out.ctypes.data for a in ins]
    direct = out.flags.c_contiguous and all(s or not np.may_share_memory(a, out) for a, s in zip(ins, same))
    return alloc((6 + len(ins), block), f64), alloc((block if direct and n > block else max(n, 1),), f64)


def _erf_body(x: np.ndarray, r: np.ndarray, scratch: np.ndarray) -> None:
    _erf_block(x, r, False, scratch[:5])


def _geluerf_factor(x: np.ndarray, r: np.ndarray, scratch: np.ndarray, exact: bool) -> None:
    """r = 0.5 (1 + erf(x / sqrt(2))), the factor of x in the exact GELU."""
    z = np.multiply(x, _SQRT_HALF, out=scratch[5])
    _erf_block(z, r, True, scratch[:5], exact)
    r *= 0.5


def _geluerf_grad_from(dy: np.ndarray, x: np.ndarray, r: np.ndarray, z: np.ndarray) -> None:
    """r = dy (r + x exp(-x^2 / 2) / sqrt(2 pi)) with r the GELU's factor; `z` scratch."""
    np.multiply(x, x, out=z)
    z *= -0.5
    np.exp(z, out=z)
    z *= x
    z *= _INV_SQRT_2PI
    r += z
    r *= dy


def _geluerf_body(exact: bool) -> Callable[..., None]:
    def body(x: np.ndarray, r: np.ndarray, scratch: np.ndarray) -> None:
        """r = 0.5 x (1 + erf(x / sqrt(2)))."""
        _geluerf_factor(x, r, scratch, exact)
        r *= x

    return body


def _geluerf_factor_body(exact: bool) -> Callable[..., None]:
    def body(x: np.ndarray, r: np.ndarray, scratch: np.ndarray) -> None:
        """r = 0.5 (1 + erf(x / sqrt(2))) (`xl.geluerf_keep`'s kept factor)."""
        _geluerf_factor(x, r, scratch, exact)

    return body


def _geluerf_grad_body(exact: bool) -> Callable[..., None]:
    def body(dy: np.ndarray, x: np.ndarray, r: np.ndarray, scratch: np.ndarray) -> None:
        """r = dy (0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi))."""
        _geluerf_factor(x, r, scratch, exact)
        _geluerf_grad_from(dy, x, r, scratch[5])

    return body


def _geluerf_grad_kept(dy: np.ndarray, x: np.ndarray, h: np.ndarray, r: np.ndarray, scratch: np.ndarray) -> None:
    """r = dy (h + x exp(-x^2 / 2) / sqrt(2 pi)), h the factor `xl.geluerf_keep` kept."""
    np.copyto(r, h)
    _geluerf_grad_from(dy, x, r, scratch[5])


# (the body for float32 and narrower results, the body for float64 results) per op class
_ERF_BODIES: dict[KernelClass, tuple[Callable[..., None], Callable[..., None]]] = {
    ErfOp: (_erf_body, _erf_body),
    GeluErfOp: (_geluerf_body(False), _geluerf_body(True)),
    GeluErfGradOp: (_geluerf_grad_body(False), _geluerf_grad_body(True)),
    GeluErfGradKeptOp: (_geluerf_grad_kept, _geluerf_grad_kept),
}
_GELUERF_FACTOR = (_geluerf_factor_body(False), _geluerf_factor_body(True))


def _erf_family(cls: KernelClass, doc: str) -> None:
    """The kernel and the template of an erf-based op: `in_blocks` of its body."""
    bodies = _ERF_BODIES[cls]

    def factory(p: dict[str, Any]) -> Kernel:
        def k(*a: np.ndarray) -> None:
            ins, out = a[:-1], a[-1]
            in_blocks(bodies[out.dtype == np.float64], out, ins, *_erf_scratch(out, ins, np.empty))

        return k

    def t(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
        if len(op.outs) != 1:
            return None
        out = g.arr(op.outs[0])
        work, res = _erf_scratch(out, [g.arr(v) for v in op.ins], scratch(g))
        body = g.fn(bodies[out.dtype == np.float64])
        return [f"{g.fn(in_blocks)}({body}, {o[0]}, ({', '.join(i)},), {g.view(work)}, {g.view(res)})"]

    factory.__doc__ = doc
    kernel(cls)(factory)
    template(cls)(t)


@kernel(GeluErfKeepOp)
def _geluerf_keep(p: dict[str, Any]) -> Kernel:
    """(0.5 x (1 + erf(x / sqrt(2))), 0.5 (1 + erf(x / sqrt(2))) in float64), the bits of
    `popxl.geluerf` (the product with x rounded once)."""

    def k(x: np.ndarray, y: np.ndarray, h: np.ndarray) -> None:
        geluerf_keep(x, y, h, *_erf_scratch(h, [x], np.empty))

    return k


def geluerf_keep(x: np.ndarray, y: np.ndarray, h: np.ndarray, work: np.ndarray, res: np.ndarray) -> None:
    """`xl.geluerf_keep`: the factor into `h` (float64, x's shape) block by block, then y = h x."""
    in_blocks(_GELUERF_FACTOR[y.dtype == np.float64], h, (x,), work, res)
    np.multiply(h, x, out=y, casting="unsafe")


@template(GeluErfKeepOp)
def _t_geluerf_keep(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    h = g.arr(op.outs[1])
    work, res = _erf_scratch(h, [g.arr(op.ins[0])], scratch(g))
    return [f"{g.fn(geluerf_keep)}({i[0]}, {o[0]}, {o[1]}, {g.view(work)}, {g.view(res)})"]


_erf_family(ErfOp, "erf(x), in float64.")
_erf_family(GeluErfOp, "0.5 x (1 + erf(x / sqrt(2))), in float64 (1 + erf as such, accurate for x < 0 too).")
_erf_family(GeluErfGradOp, "dy * (0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi)), in float64.")
_erf_family(GeluErfGradKeptOp, "dy * (h + x exp(-x^2 / 2) / sqrt(2 pi)), in float64, h from xl.geluerf_keep.")


@kernel(FmodOp)
def _fmod(p: dict[str, Any]) -> Kernel:
    """C fmod: the sign of the dividend; x fmod 0 is NaN for floats, 0 for integers."""

    def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        with np.errstate(divide="ignore", invalid="ignore"):
            np.fmod(a, b, out=out)

    return k


def _binary_ufunc(f: Any) -> KernelFactory:
    def factory(p: dict[str, Any]) -> Kernel:
        def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
            f(a, b, out=out)

        return k

    return factory


kernel(BitwiseAndOp)(_binary_ufunc(np.bitwise_and))
kernel(BitwiseOrOp)(_binary_ufunc(np.bitwise_or))
kernel(BitwiseXorOp)(_binary_ufunc(np.bitwise_xor))
kernel(LogicalXorOp)(_binary_ufunc(np.logical_xor))


@kernel(BitwiseXnorOp)
def _bitwise_xnor(p: dict[str, Any]) -> Kernel:
    def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.bitwise_xor(a, b, out=out)
        np.invert(out, out=out)

    return k


@kernel(ClipOp)
def _clip(p: dict[str, Any]) -> Kernel:
    """np.clip with the bounds of the op (absent or infinite: none); NaN stays NaN.
    Integer bounds are rounded inwards and limited to the dtype's range (first call)."""
    lo_f, hi_f = p.get("min", -math.inf), p.get("max", math.inf)
    bounds: list[Any] = []

    def k(x: np.ndarray, out: np.ndarray) -> None:
        if not bounds:
            if x.dtype.kind in "iu":
                info = np.iinfo(x.dtype)
                lo = info.min if lo_f == -math.inf else max(info.min, math.ceil(lo_f))
                hi = info.max if hi_f == math.inf else min(info.max, math.floor(hi_f))
                bounds.extend([x.dtype.type(lo), x.dtype.type(hi)])
            else:
                bounds.extend([x.dtype.type(lo_f), x.dtype.type(hi_f)])
        np.clip(x, bounds[0], bounds[1], out=out)

    return k


def format_tensor(x: np.ndarray, p: dict[str, Any]) -> str:
    """The text `popxl.print_tensor` prints for `x` (NumPy's array printing with the op's
    format properties: summarising, edge items, line width, digits, float format,
    separator and brackets)."""
    threshold = int(p.get("summarise_threshold", 1000))
    edge = int(p.get("edge_items", 3))
    width = int(p.get("max_line_width", 75))
    digits = int(p.get("digits", 8))
    fmt = p.get("float_format", "auto")
    sep = p.get("separator", " ")
    opening, closing = p.get("open_bracket", "["), p.get("close_bracket", "]")
    kw: dict[str, Any] = {
        "threshold": threshold if threshold > 0 else sys.maxsize,
        "edgeitems": edge,
        "max_line_width": width if width > 0 else sys.maxsize,
        "separator": sep,
    }
    if x.dtype.kind == "f" and digits > 0 and fmt != "none":
        finite = x[np.isfinite(x)].astype(np.float64)
        mags = np.abs(finite)
        big = float(mags.max()) if mags.size else 0.0
        small = float(mags[mags > 0].min()) if (mags > 0).any() else 0.0
        sci = fmt == "scientific" or (fmt == "auto" and (big >= 10.0**digits or (small and small < 1e-4)))
        if sci:

            def sci_str(v: float) -> str:
                return np.format_float_scientific(v, precision=digits - 1, unique=False)

            probes = [float(v) for v in (finite.min(), finite.max(), big, small)] if finite.size else []
            width = max([len(sci_str(v)) for v in probes] + [3 + (x < 0).any()])
            kw["formatter"] = {"float_kind": lambda v: sci_str(v).rjust(width)}
        else:
            whole = len(str(int(big))) if big >= 1 else 1
            kw["precision"] = max(digits - whole, 0)
            kw["floatmode"] = "fixed"
            kw["suppress_small"] = True
    text = np.array2string(x, **kw)
    if (opening, closing) != ("[", "]"):
        text = text.translate(str.maketrans({"[": opening, "]": closing}))
    return text


@kernel(PrintTensorOp)
def _print_tensor(p: dict[str, Any]) -> Kernel:
    """Copies the input; prints `<title>: <values>` to standard error first (as Poplar's
    PrintTensor does) unless `print_self` is false."""
    title = str(p["title"])
    print_self = bool(p.get("print_self", True))

    def k(x: np.ndarray, out: np.ndarray) -> None:
        if print_self:
            print(f"{title}: {format_tensor(x, p)}", file=sys.stderr, flush=True)
        np.copyto(out, x)

    return k


# ------------------------------------------------------------------------------------
# float8: scaled casts and the scaled matmul
# ------------------------------------------------------------------------------------


def _pow2(scale: np.ndarray, p: dict[str, Any], i: int, op: str) -> float:
    """2 ** log2_scale, after checking the scale is in [-32, 32)."""
    check_range(scale, -32, 32, p, i, op, "log2_scale")
    return float(2.0 ** int(scale))


@kernel(Pow2ScaleCastToFp8Op)
def _pow2scale_cast_to_fp8(p: dict[str, Any]) -> Kernel:
    """cast(x * 2**s): x * 2**s in float64, rounded to nearest even (`to_float8`, no
    double rounding); too large -> NaN."""

    def k(x: np.ndarray, s: np.ndarray, out: np.ndarray) -> None:
        f = _pow2(s, p, 1, Pow2ScaleCastToFp8Op.name)
        out[...] = to_float8(np.asarray(x, np.float64) * f, out.dtype)

    return k


@kernel(Pow2ScaleCastFromFp8Op)
def _pow2scale_cast_from_fp8(p: dict[str, Any]) -> Kernel:
    def k(x: np.ndarray, s: np.ndarray, out: np.ndarray) -> None:
        f = _pow2(s, p, 1, Pow2ScaleCastFromFp8Op.name)
        np.copyto(out, x.astype(np.float64) * f, casting="unsafe")

    return k


@kernel(MatmulPow2ScaledOp)
def _matmul_pow2scaled(p: dict[str, Any]) -> Kernel:
    """Float8 operands widened exactly to float32, multiplied, scaled, rounded to float16."""

    def k(a: np.ndarray, b: np.ndarray, s: np.ndarray, out: np.ndarray) -> None:
        f = _pow2(s, p, 2, MatmulPow2ScaledOp.name)
        y = np.matmul(a.astype(np.float32), b.astype(np.float32))
        y *= np.float32(f)
        np.copyto(out, y, casting="unsafe")

    return k
