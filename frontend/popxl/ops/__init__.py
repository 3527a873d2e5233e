"""`popxl.ops`: one function per op of the `popxl` dialect, plus calls and host IO.

Every function builds its op in the current graph (`popxl.gcg()`); a shape/dtype
error found by the op's type inference is raised as `ValueError` naming the op and
the shapes. In-place ops (`*_`) return the tensor they update.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from xl.dialects.utils import tensor_type

from popxl import dtypes
from popxl._checks import describe
from popxl.context import gcg
from popxl.dtypes import dtype
from popxl.ops import collectives, var_updates
from popxl.ops._utils import (
    axes_tuple,
    check_in_graph,
    emit,
    emit1,
    emit_inplace,
    as_dtype,
    as_float,
    as_int,
    as_shape,
    current_op,
    insert,
    not_implemented,
    to_tensor,
    wrap_public_ops,
)
from popxl.ops.call import (
    CallSiteInfo,
    ConditionalSiteInfo,
    call,
    call_with_info,
    conditional,
    conditional_with_info,
    repeat,
    repeat_with_info,
)
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Tensor, constant

__all__ = [
    # elementwise unary
    "abs", "ceil", "floor", "cos", "sin", "tanh", "exp", "exp_", "log", "log2", "sqrt",
    "sign", "negate", "neg", "relu", "relu_", "gelu", "gelu_", "geluerf", "geluerf_",
    "swish", "swish_", "sigmoid", "isnan", "isinf", "isfinite", "logical_not", "clip",
    "clamp",
    # binary
    "add", "add_", "sub", "mul", "div", "fmod", "pow", "equal", "greater", "logical_and",
    "logical_or", "maximum", "where",
    # reductions
    "sum", "mean", "max", "min", "prod", "sumsquare", "logsum", "logsumexp", "l1", "l2",
    "argmax", "argmin", "cumsum", "topk",
    # shape
    "reshape", "reshape_", "flatten", "flatten_", "transpose", "transpose_", "squeeze",
    "concat", "concat_", "split", "slice", "slice_", "subsample", "expand",
    # indexing
    "gather", "scatter", "dynamic_slice", "dynamic_update", "dynamic_update_", "onehot",
    # nn
    "matmul", "softmax", "layer_norm", "group_norm", "batch_norm_inference", "lamb_square",
    "tied_gather", "io_tile_copy",
    # not implemented yet (raise NotImplementedError)
    "groupedgather", "scatter_reduce", "matmul_pow2scaled", "conv", "conv_transpose",
    "conv_pow2scaled", "conv_transpose_pow2scaled", "average_pool", "max_pool", "interpolate",
    "roi_align", "histogram", "shaped_dropout", "pow2scale_cast_to_fp8",
    "pow2scale_cast_from_fp8", "median", "remote_load", "remote_load_", "remote_store",
    "remote_code_load",
    # loss
    "nll_loss", "nll_loss_with_softmax_grad",
    # random
    "dropout", "random_uniform", "random_normal", "split_random_seed",
    # misc
    "cast", "detach", "detach_", "identity", "rename", "init", "increment_mod",
    "increment_mod_", "scaled_add", "scaled_add_", "print_tensor",
    # control / IO
    "call", "call_with_info", "CallSiteInfo", "repeat", "repeat_with_info", "conditional",
    "conditional_with_info", "ConditionalSiteInfo", "host_load", "host_store", "ipu_copy",
    # submodules
    "var_updates", "collectives",
]


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
    """`lhs + rhs` with NumPy broadcasting."""
    return emit1("popxl.add", _pair(lhs, rhs))


def sub(lhs: Tensor, rhs: Tensor) -> Tensor:
    return emit1("popxl.sub", _pair(lhs, rhs))


def mul(lhs: Tensor, rhs: Tensor) -> Tensor:
    return emit1("popxl.mul", _pair(lhs, rhs))


def div(lhs: Tensor, rhs: Tensor) -> Tensor:
    return emit1("popxl.div", _pair(lhs, rhs))


def fmod(lhs: Tensor, rhs: Tensor) -> Tensor:
    return emit1("popxl.fmod", _pair(lhs, rhs))


def pow(t: Tensor, e: Any) -> Tensor:
    return emit1("popxl.pow", _pair(t, e))


def equal(input: Tensor, other: Any) -> Tensor:
    return emit1("popxl.equal", _pair(input, other))


def greater(input: Tensor, other: Any) -> Tensor:
    return emit1("popxl.greater", _pair(input, other))


def logical_and(lhs: Tensor, rhs: Any) -> Tensor:
    return emit1("popxl.logical_and", _pair(lhs, rhs))


def logical_or(lhs: Tensor, rhs: Any) -> Tensor:
    return emit1("popxl.logical_or", _pair(lhs, rhs))


def maximum(*ts: Tensor) -> Tensor:
    """Elementwise maximum of one or more tensors."""
    if not ts:
        raise ValueError("ops.maximum needs at least one tensor")
    out = ts[0]
    for t in ts[1:]:
        out = emit1("popxl.maximum", _pair(out, t))
    return out


def add_(lhs: Tensor, rhs: Any) -> Tensor:
    """`lhs += rhs` in place."""
    return scaled_add_(lhs, rhs, 1.0, 1.0)


def _unary(op_name: str, doc: str) -> Any:
    def f(t: Tensor) -> Tensor:
        return emit1(op_name, [t])

    f.__name__ = op_name.split(".")[1]
    f.__doc__ = doc
    return f


negate = _unary("popxl.neg", "`-t`.")
neg = negate
abs = _unary("popxl.abs", "`|t|`.")
sign = _unary("popxl.sign", "sign of t.")
relu = _unary("popxl.relu", "`max(t, 0)`.")
gelu = _unary("popxl.gelu", "tanh-approximated GELU.")
tanh = _unary("popxl.tanh", "`tanh(t)`.")
sigmoid = _unary("popxl.sigmoid", "`1 / (1 + exp(-t))`.")
exp = _unary("popxl.exp", "`exp(t)`.")
log = _unary("popxl.log", "natural log.")
sqrt = _unary("popxl.sqrt", "square root.")
cos = _unary("popxl.cos", "`cos(t)`.")
sin = _unary("popxl.sin", "`sin(t)`.")
logical_not = _unary("popxl.logical_not", "`not t` (bool).")
ceil = _unary("popxl.ceil", "`ceil(t)`.")
floor = _unary("popxl.floor", "`floor(t)`.")
geluerf = _unary("popxl.geluerf", "exact (erf) GELU.")


def swish(t: Tensor) -> Tensor:
    """`t * sigmoid(t)`."""
    return emit1("popxl.swish", [t])


def log2(t: Tensor) -> Tensor:
    """Base-2 logarithm."""
    return div(log(t), constant(float(np.log(2.0)), t.dtype))


def isnan(t: Tensor) -> Tensor:
    """`t != t` (bool)."""
    return logical_not(equal(t, t))


def isinf(t: Tensor) -> Tensor:
    """`|t| == inf` (bool)."""
    return equal(abs(t), constant(np.inf, t.dtype))


def isfinite(t: Tensor) -> Tensor:
    return logical_not(logical_or(isnan(t), isinf(t)))


def _inplace_unary(name: str, fallback: Any) -> Any:
    def f(t: Tensor) -> Tensor:
        """In place; xl computes a new value and copies it into `t`."""
        return _assign_(t, fallback(t))

    f.__name__ = f"{name}_"
    return f


def _assign_(t: Tensor, value: Tensor) -> Tensor:
    """`t[...] = value` in place."""
    return emit_inplace("popxl.copy_var_update_", [t, value])


exp_ = _inplace_unary("exp", exp)
relu_ = _inplace_unary("relu", relu)
gelu_ = _inplace_unary("gelu", gelu)
geluerf_ = _inplace_unary("geluerf", geluerf)
swish_ = _inplace_unary("swish", swish)


def clip(t: Tensor, min: float = float("-inf"), max: float = float("inf")) -> Tensor:
    """Clamp `t` to `[min, max]`."""
    out = t
    if max != float("inf"):
        out = negate(maximum(negate(out), constant(-max, t.dtype)))
    if min != float("-inf"):
        out = maximum(out, constant(min, t.dtype))
    return out


clamp = clip


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
    return emit1("popxl.where", [condition, lhs, rhs])


# ---------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------


def _reduce(op_name: str, t: Tensor, axis: Any, keepdims: bool) -> Tensor:
    return emit1(op_name, [t], axis=axes_tuple(axis, t.rank), keepdims=bool(keepdims) or None)


def sum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (all axes when None)."""
    return _reduce("popxl.reduce_sum", t, axis, keepdims)


def mean(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("popxl.reduce_mean", t, axis, keepdims)


def max(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("popxl.reduce_max", t, axis, keepdims)


def min(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("popxl.reduce_min", t, axis, keepdims)


def prod(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce("popxl.reduce_prod", t, axis, keepdims)


def sumsquare(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return sum(mul(t, t), axis, keepdims)


def l2(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return sqrt(sumsquare(t, axis, keepdims))


def l1(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return sum(abs(t), axis, keepdims)


def logsum(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    return log(sum(t, axis, keepdims))


def logsumexp(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False) -> Tensor:
    m = max(t, axis, keepdims=True)
    out = add(log(sum(exp(sub(t, m)), axis, keepdims=True)), m)
    if not keepdims:
        axes = axes_tuple(axis, t.rank)
        out = squeeze(out, axes if axes is not None else tuple(range(t.rank)))
    return out


def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """Index of the maximum along `dim` (int32)."""
    return emit1("popxl.argmax", [t], axis=as_int(dim, "dim"), keepdims=bool(keepdim))


def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    return emit1("popxl.argmin", [t], axis=as_int(dim, "dim"), keepdims=bool(keepdim))


def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    return emit1("popxl.cumsum", [t], axis=as_int(dim, "dim"))


def topk(
    t: Tensor, k: int, axis: int, largest: bool = True, sorted: bool = True,
    available_memory_proportion: float | None = None,
) -> tuple[Tensor, Tensor]:
    vals, idx = emit("popxl.topk", [t], k=as_int(k, "k"), axis=as_int(axis, "axis"), largest=bool(largest), sorted=bool(sorted))
    return vals, idx


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
    """Same elements, new shape; one dim may be -1."""
    from xl.dialects.popxl import ReshapeOp

    shape = _reshape_dims(shape)
    new = ReshapeOp.resolve_shape(t.shape, shape)
    return emit1("popxl.reshape", [t], tensor_type(new, t.dtype.as_numpy()))


def reshape_(t: Tensor, shape: Iterable[int]) -> Tensor:
    """As `reshape` (xl has no aliasing views: the result is a new tensor)."""
    return reshape(t, shape)


def flatten(t: Tensor) -> Tensor:
    """Reshape to 1-D."""
    return reshape(t, (-1,))


flatten_ = flatten


def transpose(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """Permute the dims (reverse them by default)."""
    perm = tuple(range(t.rank))[::-1] if permutation is None else tuple(as_int(p, "permutation") for p in permutation)
    perm = tuple(p % t.rank if t.rank else p for p in perm)
    return emit1("popxl.transpose", [t], perm=perm)


transpose_ = transpose


def squeeze(t: Tensor, axes: int | Iterable[int] | None = None) -> Tensor:
    """Remove size-1 dims (`axes`, or all of them)."""
    if axes is None:
        ax = tuple(i for i, d in enumerate(t.shape) if d == 1)
    else:
        ax = axes_tuple(axes, t.rank) or ()
    ax = tuple(a % t.rank for a in ax)
    for a in ax:
        if t.shape[a] != 1:
            raise ValueError(f"ops.squeeze: dim {a} of {t.shape} is not 1")
    return emit1("popxl.squeeze", [t], axes=ax)


def expand(t: Tensor, shape: Iterable[int]) -> Tensor:
    """Broadcast `t` to `shape`."""
    shape = as_shape(shape)
    out_shape = tuple(np.broadcast_shapes(t.shape, shape)) if len(shape) >= t.rank else shape
    return emit1("popxl.expand", [t], tensor_type(out_shape, t.dtype.as_numpy()))


def concat(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    """Concatenate along `axis`."""
    if isinstance(ts, Tensor):
        raise TypeError("ops.concat: expected a sequence of tensors, got a single Tensor")
    ts = list(ts)
    if not ts:
        raise ValueError("ops.concat needs at least one tensor")
    return emit1("popxl.concat", ts, axis=as_int(axis, "axis"))


concat_ = concat


def split(t: Tensor, splits: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split `t` into `splits` equal parts, or parts of the given sizes, along `axis`."""
    axis = axis % t.rank
    n = t.shape[axis]
    if isinstance(splits, int):
        if n % splits:
            raise ValueError(f"ops.split: dim {axis} of {t.shape} is not divisible by {splits}")
        sizes = [n // splits] * splits
    else:
        sizes = [as_int(s, "splits") for s in splits]
        if builtins.sum(sizes) != n:
            raise ValueError(f"ops.split: sizes {sizes} do not add up to dim {axis} ({n}) of {t.shape}")
    out, start = [], 0
    for s in sizes:
        out.append(slice(t, start=start, stop=start + s, axis=axis))
        start += s
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
    """`t[start:stop:step]` along `axis` (the leading dims when None), Python semantics."""

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
            f"ops.slice: start {starts}, stop {stops}, step {steps} and axis {axes} must have "
            "the same length"
        )
    st = [1 if s is None else s for s in steps]
    if any(s == 0 for s in st):
        raise ValueError("ops.slice: step cannot be 0")
    b = [0 if x is None and s > 0 else _NO_BOUND_HI if x is None else x for x, s in zip(starts, st)]
    e = [
        (_NO_BOUND_HI if s > 0 else _NO_BOUND_LO) if x is None else x for x, s in zip(stops, st)
    ]
    return emit1(
        "popxl.slice", [t],
        start=tuple(b), stop=tuple(e), step=None if all(s == 1 for s in st) else tuple(st),
        axes=tuple(as_int(a, "axes") for a in axes),  # type: ignore[arg-type]
    )


slice_ = slice


def subsample(t: Tensor, strides: Iterable[int]) -> Tensor:
    strides = [as_int(s, "strides") for s in strides]
    return slice(t, start=[0] * t.rank, stop=list(t.shape), step=strides, axis=list(range(t.rank)))


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
    t: Tensor, indices: Any, axis: int = 0, available_memory_proportion: float | None = None,
    zero_OOR: bool = False,
) -> Tensor:
    """`np.take(t, indices, axis)`."""
    indices = to_tensor(indices, dtypes.int32)
    return emit1("popxl.gather", [t, indices], axis=as_int(axis, "axis"), zero_oor=True if zero_OOR else None)


def scatter(t: Tensor, indices: Tensor, values: Tensor, axis: int = 0, available_memory_proportion: float | None = None) -> Tensor:
    return emit1("popxl.scatter", [t, to_tensor(indices, dtypes.int32), _t(values, t)], axis=as_int(axis, "axis"))


def onehot(t: Tensor, num_classes: Any, values: Any, axis: int = -1) -> Tensor:
    """One-hot encode integer `t` with `num_classes` classes; `values` is `[off, on]`
    (a Tensor of shape (2,) or a pair). `num_classes` must be known when building: an
    int or a constant Tensor."""
    if isinstance(num_classes, Tensor):
        from popxl.tensor import Constant

        if not isinstance(num_classes, Constant):
            raise ValueError("ops.onehot: num_classes must be an int or a constant tensor in xl")
        num_classes = int(np.asarray(num_classes._data).reshape(-1)[0])
    if not isinstance(values, Tensor):
        values = constant(np.asarray(values), dtypes.float32)
    return emit1("popxl.onehot", [t, values], num_classes=as_int(num_classes, "num_classes"), axis=as_int(axis, "axis"))


def dynamic_slice(t: Tensor, index: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False) -> Tensor:
    """Slice of `sizes` at runtime offsets `index` along `axes`."""
    return emit1(
        "popxl.dynamic_slice", [t, to_tensor(index, dtypes.uint32)],
        axes=tuple(as_int(a, "axes") for a in axes), sizes=tuple(as_int(s, "sizes") for s in sizes), no_overlap=bool(no_overlap),
    )


def dynamic_update(t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False) -> Tensor:
    """A copy of `t` with `t_update` written at runtime offsets `index`."""
    return emit1(
        "popxl.dynamic_update", [t, to_tensor(index, dtypes.uint32), t_update],
        axes=tuple(as_int(a, "axes") for a in axes), sizes=tuple(as_int(s, "sizes") for s in sizes), no_overlap=bool(no_overlap),
    )


def dynamic_update_(t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool = False) -> Tensor:
    """Write `t_update` into `t` in place at runtime offsets `index`."""
    return emit_inplace(
        "popxl.dynamic_update_", [t, to_tensor(index, dtypes.uint32), t_update],
        axes=tuple(as_int(a, "axes") for a in axes), sizes=tuple(as_int(s, "sizes") for s in sizes), no_overlap=bool(no_overlap),
    )


# ---------------------------------------------------------------------------------------
# Linear algebra, NN, loss
# ---------------------------------------------------------------------------------------


def matmul(
    lhs: Tensor, rhs: Tensor, available_memory_proportion: float | None = None,
    output_type: dtype | None = None, partials_type: dtype | None = None,
) -> Tensor:
    """Matrix product (NumPy `matmul` semantics)."""
    out = emit1("popxl.matmul", _pair(lhs, rhs))
    if output_type is not None and _dtype_of(output_type) != out.dtype:
        out = cast(out, output_type)
    return out


def softmax(t: Tensor, axis: int) -> Tensor:
    """Softmax along `axis` (required)."""
    return emit1("popxl.softmax", [t], axis=as_int(axis, "axis"))


def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5) -> Tensor:
    """Group normalisation of `t` `(N, C, *spatial)` over groups of `C / num_groups`
    channels, then `* weight + bias` (per channel). Built from elementary ops."""
    if t.rank < 2:
        raise ValueError(f"ops.group_norm: input must have rank >= 2, got {t.shape}")
    n, c = t.shape[0], t.shape[1]
    if c % num_groups:
        raise ValueError(f"ops.group_norm: {c} channels are not divisible by {num_groups} groups")
    g = reshape(t, (n, num_groups, -1))
    m = mean(g, axis=2, keepdims=True)
    d = sub(g, m)
    var = mean(mul(d, d), axis=2, keepdims=True)
    normed = div(d, sqrt(add(var, constant(as_float(eps, "eps"), t.dtype))))
    normed = reshape(normed, t.shape)
    bshape = (c,) + (1,) * (t.rank - 2)
    return add(mul(normed, reshape(weight, bshape)), reshape(bias, bshape))


def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """`group_norm` with one group: normalise each row of `t` `(N, C)`."""
    return group_norm(t, weight, bias, 1, eps)


def batch_norm_inference(
    t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor,
    epsilon: float = 1e-5, momentum: float = 0.9,
) -> Tensor:
    """`(t - mean) / sqrt(var + eps) * scale + bias` per channel (dim 1)."""
    bshape = (t.shape[1],) + (1,) * (t.rank - 2)
    r = lambda x: reshape(x, bshape)
    normed = div(sub(t, r(mean)), sqrt(add(r(var), constant(as_float(epsilon, "epsilon"), t.dtype))))
    return add(mul(normed, r(scale)), r(bias))


def lamb_square(t: Tensor) -> Tensor:
    """Sum of squares of `t` in float32."""
    if t.dtype != dtypes.float32:
        t = cast(t, dtypes.float32)
    return sum(mul(t, t))


def tied_gather(t: Tensor, indices: Any, axis: int = 0, available_memory_proportion: float | None = None, zero_OOR: bool = False) -> Tensor:
    return gather(t, indices, axis, available_memory_proportion, zero_OOR)


def io_tile_copy(t: Tensor) -> Tensor:
    """A copy of `t` made on the IO tiles."""
    from popxl.context import io_tiles

    with io_tiles():
        return identity(t)


def _not_implemented(name: str) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        raise not_implemented(f"popxl.ops.{name}")

    f.__name__ = name
    return f


for _name in (
    "groupedgather", "scatter_reduce", "matmul_pow2scaled", "conv", "conv_transpose",
    "conv_pow2scaled", "conv_transpose_pow2scaled", "average_pool", "max_pool", "interpolate",
    "roi_align", "histogram", "shaped_dropout", "pow2scale_cast_to_fp8",
    "pow2scale_cast_from_fp8", "median", "remote_load", "remote_load_", "remote_store",
    "remote_code_load",
):
    globals()[_name] = _not_implemented(_name)
del _name


def nll_loss(
    probs: Tensor, labels: Tensor, ignore_index: int | None = None,
    reduction: str = "mean", log_prob: bool = False,
) -> Tensor:
    """Negative log likelihood of `labels` under `probs` (or log-probs)."""
    _check_reduction(reduction)
    return emit1(
        "popxl.nll_loss", [probs, labels],
        ignore_index=None if ignore_index is None else as_int(ignore_index, "ignore_index"),
        reduction=reduction, log_prob=True if log_prob else None,
    )


def nll_loss_with_softmax_grad(
    probs: Tensor, labels: Tensor, loss_grad: Any = 1, ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[Tensor, Tensor]:
    """`(loss, dprobs_logits)`: NLL of softmax `probs` and the gradient w.r.t. the logits,
    scaled by `loss_grad` (float or tensor)."""
    _check_reduction(reduction)
    ignore = None if ignore_index is None else as_int(ignore_index, "ignore_index")
    if isinstance(loss_grad, Tensor):
        if loss_grad.dtype != probs.dtype:
            loss_grad = cast(loss_grad, probs.dtype)
        lg: Any = loss_grad
    else:
        lg = as_float(loss_grad, "loss_grad")
    loss, dx = emit(
        "popxl.nll_loss_with_softmax_grad", [probs, labels],
        ignore_index=ignore, reduction=reduction, loss_grad=lg,
    )
    return loss, dx


def _check_reduction(reduction: str) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


# ---------------------------------------------------------------------------------------
# Random
# ---------------------------------------------------------------------------------------


def dropout(t: Tensor, seed_tensor: Tensor, p: float) -> Tensor:
    return emit1("popxl.dropout", [t, seed_tensor], p=as_float(p, "p"))


def random_uniform(seed_tensor: Tensor, shape: Iterable[int], low: float = 0.0, high: float = 1.0, dtype: dtype = dtypes.float32) -> Tensor:
    shape = as_shape(shape)
    return emit1(
        "popxl.random_uniform", [seed_tensor], tensor_type(shape, _dtype_of(dtype).as_numpy()),
        low=as_float(low, "low"), high=as_float(high, "high"),
    )


def random_normal(seed_tensor: Tensor, shape: Iterable[int], mean: float = 0.0, std: float = 1.0, dtype: dtype = dtypes.float32) -> Tensor:
    shape = as_shape(shape)
    return emit1(
        "popxl.random_normal", [seed_tensor], tensor_type(shape, _dtype_of(dtype).as_numpy()),
        mean=as_float(mean, "mean"), std=as_float(std, "std"),
    )


def split_random_seed(seed: Tensor, n: int = 2) -> tuple[Tensor, ...]:
    return tuple(emit("popxl.split_random_seed", [seed], n=as_int(n, "n")))


# ---------------------------------------------------------------------------------------
# Misc
# ---------------------------------------------------------------------------------------


def cast(t: Tensor, data_type: dtype) -> Tensor:
    """Convert the elements to `data_type`."""
    dt = _dtype_of(data_type)
    return emit1("popxl.cast", [t], tensor_type(t.shape, dt.as_numpy()))


def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of `t`."""
    return emit1("popxl.identity", [t], name=output_name)


def rename(t: Tensor, output_name: str | None = None) -> Tensor:
    return identity(t, output_name)


def detach(t: Tensor) -> Tensor:
    """A copy of `t` that autodiff treats as a constant (no gradient flows through)."""
    return emit1("popxl.detach", [t])


detach_ = detach


def print_tensor(t: Tensor, title: str | None = None, print_self: bool = True, print_gradient: bool = False, **kwargs: Any) -> Tensor:
    return identity(t)


def init(
    shape: Iterable[int], dtype: dtype, name: str | None = None, init_type: str = "zero",
    meta_shape: Iterable[int] | None = None,
) -> Tensor:
    """A new tensor of `shape`/`dtype`, zero-filled (`init_type='zero'`) or undefined ('undef')."""
    if init_type not in ("zero", "undef"):
        raise ValueError(f"ops.init: init_type must be 'zero' or 'undef', got {init_type!r}")
    shape = as_shape(shape)
    t = emit1("popxl.init", [], tensor_type(shape, _dtype_of(dtype).as_numpy()), name=name, init_type=init_type)
    if meta_shape:
        t._meta_shape = as_shape(meta_shape, "meta_shape")
    return t


def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`(t + increment) % modulus`."""
    return emit1("popxl.increment_mod", [t], increment=as_float(increment, "increment"), modulus=as_float(modulus, "modulus"))


def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    return emit_inplace("popxl.increment_mod_", [t], increment=as_float(increment, "increment"), modulus=as_float(modulus, "modulus"))


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


def scaled_add(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`a * X + b * Y` (a, b floats or scalar tensors)."""
    X, Y = _pair(X, Y)
    a, b = _scale_args(X, a, b)
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        ax = _scaled(X, a, X) if isinstance(a, Tensor) else X
        by = _scaled(Y, b, X) if isinstance(b, Tensor) else Y
        return emit1(
            "popxl.scaled_add", [ax, by],
            a=1.0 if isinstance(a, Tensor) else a, b=1.0 if isinstance(b, Tensor) else b,
        )
    return emit1("popxl.scaled_add", [X, Y], a=a, b=b)


def scaled_add_(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """`X = a * X + b * Y` in place; returns X."""
    Y = _t(Y, X)
    a, b = _scale_args(X, a, b)
    if isinstance(a, Tensor):
        new = scaled_add(X, Y, a, b)
        return _assign_(X, new)
    if isinstance(b, Tensor):
        Y = _scaled(Y, b, X)
        b = 1.0
    return emit_inplace("popxl.scaled_add_", [X, Y], a=a, b=b)


# ---------------------------------------------------------------------------------------
# Host IO and IPU copies
# ---------------------------------------------------------------------------------------


def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """Load the next transfer of `h2d_stream` (any graph)."""
    from xl.dialects.graph import HostLoadOp

    if not isinstance(h2d_stream, HostToDeviceStream):
        raise TypeError(f"ops.host_load expects a HostToDeviceStream, got {type(h2d_stream).__name__}")
    g = gcg()
    if h2d_stream.ir is not g.ir:
        raise ValueError(f"ops.host_load: stream {h2d_stream.tensor_id!r} belongs to another Ir")
    op = HostLoadOp(h2d_stream.tensor_id, tensor_type(h2d_stream.shape, h2d_stream.dtype.as_numpy()))
    insert(g, op, "graph.host_load", verify=False)
    return g._tensor(op.result, g._unique_name(name if name is not None else h2d_stream.tensor_id, scoped=True))


def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Send `t` to the host through `d2h_stream`."""
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
    insert(g, HostStoreOp(d2h_stream.tensor_id, t._value), "graph.host_store", verify=False)


def ipu_copy(t: Tensor, destination: int, source: int | None = None) -> Tensor:
    """Copy `t` to virtual IPU `destination` (`ipu.copy`). `source` defaults to the IPU
    of the op producing `t` (ValueError if it has none)."""
    from xl.dialects.ipu import CopyOp

    g = gcg()
    check_in_graph(g, [t], "ops.ipu_copy")
    if source is None:
        source = t._ipu_or_none
        if source is None:
            raise ValueError(
                f"ops.ipu_copy: cannot infer the source IPU of {t.id}; create it inside "
                "`with popxl.ipu(i):` or pass `source`"
            )
    op = CopyOp(t._value, as_int(source, "source"), as_int(destination, "destination"))
    insert(g, op, "ipu.copy")
    return g._tensor(op.result)


# Every public op reports a missing dialect op as
# `NotImplementedError("popxl.ops.<name> is not implemented in xl yet")`.
wrap_public_ops(globals(), __all__, "popxl.ops")
