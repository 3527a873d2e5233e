"""NumPy kernels of the popxl neural-network ops, registered by op class (see `xl.runtime.kernels`).

Convolutions and pooling are vectorised: each kernel position reads a strided slice of
the padded input for every output position at once (one copy per kernel position into
the im2col columns, contracted with one batched `matmul`; pooling reduces the slices
with one `maximum` / `add` each); the adjoint direction (transposed convolution,
pooling gradients) adds the columns back with one strided add per kernel position
(col2im). No Python loop runs over pixels.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from xl.dialects.popxl import (
    AveragePoolGradOp,
    AveragePoolOp,
    ConvOp,
    ConvTransposeOp,
    ConvWeightGradOp,
    HistogramOp,
    InterpolateGradOp,
    InterpolateOp,
    LogSoftmaxOp,
    MaxPoolGradOp,
    MaxPoolOp,
    ReduceProdGradOp,
    ReduceProdOp,
    RoiAlignGradOp,
    RoiAlignOp,
    ScatterOp,
    ScatterReduceGradOp,
    ScatterReduceOp,
    TakeAlongAxisOp,
    TopkOp,
)
from xl.runtime.kernels.registry import Kernel, check_range, kernel

# ------------------------------------------------------------------------------------
# Windows (compile-time geometry)
# ------------------------------------------------------------------------------------


def _view(out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """`out` reshaped without a copy (a preallocated result may be a strided view), or
    None when that is impossible (the caller then computes into a new array)."""
    if not out.flags.c_contiguous:
        return None
    return out.reshape(shape)


class _Geometry:
    """Stride, pads, dilation and kernel of a windowed op over `nd` spatial dims."""

    def __init__(self, p: dict[str, Any], kernel_shape: tuple[int, ...]) -> None:
        nd = len(kernel_shape)
        self.nd = nd
        self.kernel = tuple(int(k) for k in kernel_shape)
        self.ksize = math.prod(self.kernel)
        self.stride = tuple(p.get("stride") or (1,) * nd)
        pads = tuple(p.get("pads") or (0,) * (2 * nd))
        self.begin, self.end = pads[:nd], pads[nd:]
        self.dilation = tuple(p.get("dilation") or (1,) * nd)
        self.extent = tuple(d * (k - 1) + 1 for d, k in zip(self.dilation, self.kernel))

    def padded_shape(self, x_shape: tuple[int, ...], out_sp: tuple[int, ...]) -> tuple[int, ...]:
        """`x` padded, and extended at the end so that every output window fits
        (ceil_mode windows may pass the end padding)."""
        sp = []
        for i in range(self.nd):
            need = (out_sp[i] - 1) * self.stride[i] + self.extent[i]
            sp.append(max(x_shape[2 + i] + self.begin[i] + self.end[i], need))
        return (*x_shape[:2], *sp)

    def interior(self, x_shape: tuple[int, ...]) -> tuple[slice, ...]:
        """Where `x` sits in the padded buffer."""
        return (slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(self.begin, x_shape[2:]))

    def taps(self, out_sp: tuple[int, ...]) -> list[tuple[slice, ...]]:
        """For each kernel position (row-major), the strided slice `(:, :, ...)` of the
        padded input it reads for every output position: the im2col / col2im views."""
        out = []
        for pos in itertools.product(*(range(k) for k in self.kernel)):
            out.append(
                (slice(None), slice(None))
                + tuple(
                    slice(j * d, j * d + (o - 1) * s + 1, s)
                    for j, d, o, s in zip(pos, self.dilation, out_sp, self.stride)
                )
            )
        return out


class _Padded:
    """A padded copy of the input (`fill` around it), allocated on first use; the input
    itself when no padding is needed."""

    def __init__(self, geo: _Geometry, x_shape: tuple[int, ...], out_sp: tuple[int, ...], fill: float = 0.0) -> None:
        shape = geo.padded_shape(x_shape, out_sp)
        self.direct = shape == tuple(x_shape)
        self.shape = shape
        self.fill = fill
        self.inner = geo.interior(x_shape)
        self.buf: np.ndarray | None = None

    def of(self, x: np.ndarray) -> np.ndarray:
        if self.direct:
            return x
        if self.buf is None:
            self.buf = np.full(self.shape, self.fill, x.dtype)
        self.buf[self.inner] = x
        return self.buf


class _Columns:
    """im2col: the taps of the padded input copied into `(N, C, K, *out)` (one strided copy
    per kernel position), viewed as `(N, groups, C/groups * K, prod(out))`."""

    def __init__(
        self, geo: _Geometry, x_shape: tuple[int, ...], out_sp: tuple[int, ...], groups: int, dtype: np.dtype
    ) -> None:
        n, c = x_shape[:2]
        self.pad = _Padded(geo, x_shape, out_sp)
        self.taps = geo.taps(out_sp)
        self.buf = np.empty((n, c, geo.ksize, *out_sp), dtype)
        self.mat = self.buf.reshape(n, groups, (c // groups) * geo.ksize, math.prod(out_sp))

    def of(self, x: np.ndarray) -> np.ndarray:
        xp = self.pad.of(x)
        for kidx, sl in enumerate(self.taps):
            self.buf[:, :, kidx] = xp[sl]
        return self.mat


# ------------------------------------------------------------------------------------
# Convolution
# ------------------------------------------------------------------------------------


@kernel(ConvOp)
def _conv(p: dict[str, Any]) -> Kernel:
    """im2col of the padded input, then one batched matmul `W (g, M/g, C/g*K) @ cols
    (N, g, C/g*K, O)`, which is already the NCHW result."""
    groups = int(p.get("groups", 1))
    state: dict[str, Any] = {}

    def k(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        if not state:
            geo = _Geometry(p, w.shape[2:])
            state["cols"] = _Columns(geo, x.shape, out.shape[2:], groups, out.dtype)
            state["wshape"] = (groups, w.shape[0] // groups, -1)
            state["oshape"] = (x.shape[0], groups, w.shape[0] // groups, -1)
        cols = state["cols"].of(x)
        view = _view(out, state["oshape"])
        if view is not None:
            np.matmul(w.reshape(state["wshape"]), cols, out=view)
        else:
            np.copyto(out, np.matmul(w.reshape(state["wshape"]), cols).reshape(out.shape))

    return k


def _col2im(cols: np.ndarray, taps: list[tuple[slice, ...]], full: np.ndarray) -> None:
    """`full` += the columns `(N, C, K, *out)` at their taps."""
    for kidx, sl in enumerate(taps):
        full[sl] += cols[:, :, kidx]


@kernel(ConvTransposeOp)
def _conv_transpose(p: dict[str, Any]) -> Kernel:
    """Columns `W^T @ x` (one batched matmul) scattered back to their windows (col2im),
    then cropped by the pads."""
    groups = int(p.get("groups", 1))
    state: dict[str, Any] = {}

    def k(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        if not state:
            geo = _Geometry(p, w.shape[2:])
            n, c = x.shape[:2]
            in_sp = x.shape[2:]
            mg = w.shape[1]
            # the full (uncropped) result, large enough for the output padding too
            full_sp = tuple(
                max((i - 1) * s + e, b + o)
                for i, s, e, b, o in zip(in_sp, geo.stride, geo.extent, geo.begin, out.shape[2:])
            )
            state["full"] = np.zeros(out.shape[:2] + full_sp, out.dtype)
            state["crop"] = (slice(None), slice(None)) + tuple(
                slice(b, b + o) for b, o in zip(geo.begin, out.shape[2:])
            )
            state["taps"] = geo.taps(in_sp)
            state["xshape"] = (n, groups, c // groups, -1)
            state["wshape"] = (groups, c // groups, mg * geo.ksize)
            state["cshape"] = (n, groups * mg, geo.ksize, *in_sp)
        full = state["full"]
        full.fill(0)
        wt = w.reshape(state["wshape"]).transpose(0, 2, 1)  # (g, M/g*K, C/g)
        cols = np.matmul(wt, x.reshape(state["xshape"]))  # (N, g, M/g*K, I)
        _col2im(cols.reshape(state["cshape"]), state["taps"], full)
        np.copyto(out, full[state["crop"]], casting="unsafe")

    return k


@kernel(ConvWeightGradOp)
def _conv_weight_grad(p: dict[str, Any]) -> Kernel:
    """`dw[m, c, k] = sum over n, o of dy[n, m, o] * x_padded[n, c, o * stride + k * dilation]`:
    `dy (N, g, M/g, O) @ cols^T (N, g, O, C/g*K)` summed over the batch."""
    groups = int(p.get("groups", 1))
    state: dict[str, Any] = {}

    def k(dy: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            geo = _Geometry(p, tuple(p["kernel"]))
            state["cols"] = _Columns(geo, x.shape, dy.shape[2:], groups, out.dtype)
            n, m = dy.shape[:2]
            state["dyshape"] = (n, groups, m // groups, -1)
        cols = state["cols"].of(x)
        per_image = np.matmul(dy.reshape(state["dyshape"]), cols.transpose(0, 1, 3, 2))
        np.copyto(out, np.sum(per_image, axis=0).reshape(out.shape), casting="unsafe")

    return k


# ------------------------------------------------------------------------------------
# Pooling
# ------------------------------------------------------------------------------------


def _window_counts(
    geo: _Geometry, x_shape: tuple[int, ...], out_sp: tuple[int, ...], include_pad: bool, dtype: np.dtype
) -> np.ndarray:
    """Elements each window averages over: inside the input (or inside the explicit
    padding with `include_pad`), as a `(*out)` array broadcast over N and C."""
    counts = np.ones((), dtype)
    for i in range(geo.nd):
        lo = -geo.begin[i] if include_pad else 0
        hi = x_shape[2 + i] + (geo.end[i] if include_pad else 0)
        starts = np.arange(out_sp[i]) * geo.stride[i] - geo.begin[i]
        taps = starts[:, None] + np.arange(geo.kernel[i])[None, :] * geo.dilation[i]
        c = ((taps >= lo) & (taps < hi)).sum(axis=1).astype(dtype)
        counts = np.multiply.outer(counts, c)
    return counts


class _Pool:
    """Compile-time state of a pooling kernel: geometry, padded input, taps."""

    def __init__(self, p: dict[str, Any], x_shape: tuple[int, ...], out_sp: tuple[int, ...], fill: float) -> None:
        self.geo = _Geometry(p, tuple(p["kernel"]))
        self.pad = _Padded(self.geo, x_shape, out_sp, fill)
        self.taps = self.geo.taps(out_sp)


@kernel(MaxPoolOp)
def _max_pool(p: dict[str, Any]) -> Kernel:
    """The running maximum over the kernel positions (one strided `maximum` each)."""
    state: list[_Pool] = []

    def k(x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            state.append(_Pool(p, x.shape, out.shape[2:], -np.inf))
        pool = state[0]
        xp = pool.pad.of(x)
        np.copyto(out, xp[pool.taps[0]])
        for sl in pool.taps[1:]:
            np.maximum(out, xp[sl], out=out)

    return k


@kernel(AveragePoolOp)
def _average_pool(p: dict[str, Any]) -> Kernel:
    include = bool(p.get("count_include_pad", False))
    state: dict[str, Any] = {}

    def k(x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            out_sp = out.shape[2:]
            state["pool"] = pool = _Pool(p, x.shape, out_sp, 0.0)
            state["counts"] = _window_counts(pool.geo, x.shape, out_sp, include, out.dtype)
        pool = state["pool"]
        xp = pool.pad.of(x)
        np.copyto(out, xp[pool.taps[0]])
        for sl in pool.taps[1:]:
            np.add(out, xp[sl], out=out)
        np.divide(out, state["counts"], out=out)

    return k


@kernel(AveragePoolGradOp)
def _average_pool_grad(p: dict[str, Any]) -> Kernel:
    include = bool(p.get("count_include_pad", False))
    state: dict[str, Any] = {}

    def k(dy: np.ndarray, out: np.ndarray) -> None:
        if not state:
            out_sp = dy.shape[2:]
            state["pool"] = pool = _Pool(p, out.shape, out_sp, 0.0)
            state["counts"] = _window_counts(pool.geo, out.shape, out_sp, include, out.dtype)
            state["full"] = np.zeros(pool.pad.shape, out.dtype)
        pool, full = state["pool"], state["full"]
        share = dy / state["counts"]
        full.fill(0)
        for sl in pool.taps:
            full[sl] += share
        np.copyto(out, full[pool.pad.inner])

    return k


@kernel(MaxPoolGradOp)
def _max_pool_grad(p: dict[str, Any]) -> Kernel:
    """dy to the first maximum of each window (row-major over the kernel), as PyTorch."""
    state: dict[str, Any] = {}

    def k(dy: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            state["pool"] = pool = _Pool(p, x.shape, dy.shape[2:], -np.inf)
            state["full"] = np.zeros(pool.pad.shape, out.dtype)
            state["best"] = np.empty(dy.shape, x.dtype)
            state["free"] = np.empty(dy.shape, bool)
            state["hit"] = np.empty(dy.shape, bool)
        pool, full, best, free, hit = state["pool"], state["full"], state["best"], state["free"], state["hit"]
        xp = pool.pad.of(x)
        np.copyto(best, xp[pool.taps[0]])
        for sl in pool.taps[1:]:
            np.maximum(best, xp[sl], out=best)
        full.fill(0)
        free.fill(True)
        for sl in pool.taps:
            np.equal(xp[sl], best, out=hit)
            hit &= free
            free &= ~hit
            full[sl] += np.where(hit, dy, 0)
        np.copyto(out, full[pool.pad.inner])

    return k


# ------------------------------------------------------------------------------------
# Selection, scatter, products, log-softmax, histogram
# ------------------------------------------------------------------------------------


@kernel(TopkOp)
def _topk(p: dict[str, Any]) -> Kernel:
    """A stable sort of the keys along `axis` (negated for the largest), first `k`."""
    k_ = int(p["k"])
    axis = int(p["axis"])
    largest = bool(p.get("largest", True))

    def k(x: np.ndarray, values: np.ndarray, indices: np.ndarray) -> None:
        keys = -x if largest and x.dtype.kind == "f" else x
        if largest and x.dtype.kind != "f":
            # integers: negation may overflow; sort descending by flipping a stable ascending sort
            order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
            order = x.shape[axis] - 1 - order
        else:
            order = np.argsort(keys, axis=axis, kind="stable")
        top = np.take(order, np.arange(k_), axis=axis)
        np.copyto(indices, top, casting="unsafe")
        np.copyto(values, np.take_along_axis(x, top, axis=axis))

    return k


def _norm_indices(idx: np.ndarray, n: int, p: dict[str, Any], i: int, op: str, axis: int) -> np.ndarray:
    check_range(idx, -n, n, p, i, op, "index", f"axis {axis} has size {n}")
    return np.where(idx < 0, idx + n, idx)


@kernel(ScatterOp)
def _scatter(p: dict[str, Any]) -> Kernel:
    axis = int(p["axis"])

    def k(data: np.ndarray, idx: np.ndarray, vals: np.ndarray, out: np.ndarray) -> None:
        a = axis % data.ndim
        np.copyto(out, data)
        i = _norm_indices(idx, data.shape[a], p, 1, ScatterOp.name, a)
        region = out[tuple(slice(0, s) if d != a else slice(None) for d, s in enumerate(idx.shape))]
        np.put_along_axis(region, i, vals, axis=a)

    return k


@kernel(TakeAlongAxisOp)
def _take_along_axis(p: dict[str, Any]) -> Kernel:
    axis = int(p["axis"])

    def k(data: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        a = axis % data.ndim
        i = _norm_indices(idx, data.shape[a], p, 1, TakeAlongAxisOp.name, a)
        region = data[tuple(slice(0, s) if d != a else slice(None) for d, s in enumerate(idx.shape))]
        np.copyto(out, np.take_along_axis(region, i, axis=a))

    return k


def _full_indices(idx: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Indices of a scatter-reduce broadcast to the data shape."""
    if idx.shape == shape:
        return idx
    return np.broadcast_to(idx.reshape((1,) * axis + (-1,) + (1,) * (len(shape) - axis - 1)), shape)


class _ScatterPlan:
    """Flat positions of a scatter-reduce: data element -> result element (both raveled)."""

    def __init__(self, data_shape: tuple[int, ...], axis: int, n: int) -> None:
        self.axis = axis
        out_shape = data_shape[:axis] + (n,) + data_shape[axis + 1 :]
        self.out_shape = out_shape
        grid = np.indices(data_shape, sparse=True)
        self.grid = grid
        self.n = n

    def targets(self, idx: np.ndarray) -> np.ndarray:
        coords = list(self.grid)
        coords[self.axis] = idx
        return np.ravel_multi_index(np.broadcast_arrays(*coords), self.out_shape).reshape(-1)


def _scatter_reduce_forward(
    data: np.ndarray, tgt: np.ndarray, out: np.ndarray, reduction: str, init: np.ndarray | None
) -> np.ndarray:
    """Fills `out`; returns which result elements received data (flat bool)."""
    flat = np.empty(out.size, out.dtype)
    hit = np.zeros(flat.size, bool)
    hit[tgt] = True
    vals = data.reshape(-1)
    if reduction == "sum":
        flat[...] = 0 if init is None else init.reshape(-1)
        np.add.at(flat, tgt, vals)
    elif reduction in ("max", "min"):
        ufunc = np.maximum if reduction == "max" else np.minimum
        if init is None:
            if vals.dtype.kind == "f":
                fill = -np.inf if reduction == "max" else np.inf
            else:
                info = np.iinfo(vals.dtype)
                fill = info.min if reduction == "max" else info.max
            flat[...] = fill
            ufunc.at(flat, tgt, vals)
            flat[~hit] = 0
        else:
            flat[...] = init.reshape(-1)
            ufunc.at(flat, tgt, vals)
    else:  # none: the last write wins (NumPy assignment order)
        flat[...] = 0 if init is None else init.reshape(-1)
        flat[tgt] = vals
    np.copyto(out, flat.reshape(out.shape))
    return hit


@kernel(ScatterReduceOp)
def _scatter_reduce(p: dict[str, Any]) -> Kernel:
    axis = int(p["axis"])
    n = int(p["axis_size"])
    reduction = str(p["reduction"])
    state: dict[str, Any] = {}

    def k(*a: np.ndarray) -> None:
        data, idx, out = a[0], a[1], a[-1]
        init = a[2] if len(a) == 4 else None
        if not state:
            ax = axis % data.ndim
            state["ax"] = ax
            state["plan"] = _ScatterPlan(data.shape, ax, n)
        ax = state["ax"]
        check_range(idx, 0, n, p, 1, ScatterReduceOp.name, "index", f"axis_size is {n}")
        tgt = state["plan"].targets(_full_indices(idx, data.shape, ax))
        _scatter_reduce_forward(data, tgt, out, reduction, init)

    return k


@kernel(ScatterReduceGradOp)
def _scatter_reduce_grad(p: dict[str, Any]) -> Kernel:
    axis = int(p["axis"])
    n = int(p["axis_size"])
    reduction = str(p["reduction"])
    wrt = str(p["wrt"])
    state: dict[str, Any] = {}

    def k(*a: np.ndarray) -> None:
        dy, data, idx, y, res = a[0], a[1], a[2], a[3], a[-1]
        init = a[4] if len(a) == 6 else None
        if not state:
            ax = axis % data.ndim
            state["ax"] = ax
            state["plan"] = _ScatterPlan(data.shape, ax, n)
        tgt = state["plan"].targets(_full_indices(idx, data.shape, state["ax"]))
        dyf, yf = dy.reshape(-1), y.reshape(-1)
        vals = data.reshape(-1)
        if reduction == "sum":
            g_data = dyf[tgt]
            g_init = dyf
        elif reduction in ("max", "min"):
            win = vals == yf[tgt]
            count = np.bincount(tgt[win], minlength=yf.size).astype(dy.dtype)
            init_win = np.zeros(yf.size, bool) if init is None else init.reshape(-1) == yf
            count += init_win
            share = np.where(count > 0, dyf / np.maximum(count, 1), 0)
            g_data = np.where(win, share[tgt], 0)
            g_init = np.where(init_win, share, 0)
        else:  # none: the element written last (the largest flat position per target)
            last = np.full(yf.size, -1)
            np.maximum.at(last, tgt, np.arange(tgt.size))
            g_data = np.where(last[tgt] == np.arange(tgt.size), dyf[tgt], 0)
            g_init = np.where(last < 0, dyf, 0)
        np.copyto(res, np.reshape(g_data if wrt == "data" else g_init, res.shape), casting="unsafe")

    return k


def _moved(p: dict[str, Any], ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    axes = p.get("axis")
    red = tuple(range(ndim)) if axes is None else tuple(sorted({int(a) % max(ndim, 1) for a in axes}))
    keep = tuple(i for i in range(ndim) if i not in red)
    return keep, red


@kernel(ReduceProdOp)
def _reduce_prod(p: dict[str, Any]) -> Kernel:
    axes = p.get("axis")
    keep = bool(p.get("keepdims", False))
    ax = None if axes is None else tuple(int(a) for a in axes)

    def k(x: np.ndarray, out: np.ndarray) -> None:
        np.prod(x, axis=ax, keepdims=keep, out=out)

    return k


@kernel(ReduceProdGradOp)
def _reduce_prod_grad(p: dict[str, Any]) -> Kernel:
    """dx_i = dy * prod_{j != i} x_j from exclusive cumulative products from both ends
    (exact when some x_j are zero)."""
    state: dict[str, Any] = {}

    def k(x: np.ndarray, dy: np.ndarray, out: np.ndarray) -> None:
        if not state:
            keep, red = _moved(p, x.ndim)
            state["perm"] = keep + red
            state["inv"] = tuple(np.argsort(keep + red))
            state["kshape"] = tuple(x.shape[i] for i in keep)
            state["bshape"] = tuple(1 if i in red else s for i, s in enumerate(x.shape))
        xt = x.transpose(state["perm"]).reshape(state["kshape"] + (-1,))
        ones = np.ones(xt.shape[:-1] + (1,), x.dtype)
        left = np.cumprod(np.concatenate([ones, xt[..., :-1]], axis=-1), axis=-1)
        right = np.flip(np.cumprod(np.concatenate([ones, np.flip(xt, -1)[..., :-1]], axis=-1), axis=-1), -1)
        others = (left * right).reshape(tuple(x.shape[i] for i in state["perm"]))
        np.multiply(others.transpose(state["inv"]), dy.reshape(state["bshape"]), out=out)

    return k


@kernel(LogSoftmaxOp)
def _log_softmax(p: dict[str, Any]) -> Kernel:
    axis = int(p["axis"])

    def k(x: np.ndarray, out: np.ndarray) -> None:
        m = np.max(x, axis=axis, keepdims=True)
        np.subtract(x, m, out=out)
        lse = np.log(np.sum(np.exp(out), axis=axis, keepdims=True))
        np.subtract(out, lse, out=out)

    return k


@kernel(HistogramOp)
def _histogram(p: dict[str, Any]) -> Kernel:
    levels = np.asarray(p["levels"], np.float64)
    absolute = bool(p.get("absolute_of_input", False))

    def k(x: np.ndarray, out: np.ndarray) -> None:
        v = np.abs(x) if absolute else x
        bins = np.searchsorted(levels, v.reshape(-1), side="right")
        np.copyto(out, np.bincount(bins, minlength=levels.size + 1), casting="unsafe")

    return k


# ------------------------------------------------------------------------------------
# Resampling: interpolate, RoI Align (separable weight matrices)
# ------------------------------------------------------------------------------------

_CUBIC_A = -0.75


def _source_coords(out_len: int, in_len: int, scale: float, mode: str) -> np.ndarray:
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    # align_corners, tf_crop_and_resize with the whole input as region
    if out_len > 1:
        return x * (in_len - 1) / (out_len - 1)
    return np.zeros(out_len) if mode == "align_corners" else np.full(out_len, 0.5 * (in_len - 1))


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """Weights of the neighbours at offsets -1, 0, 1, 2 for fractional positions `t`."""
    a = _CUBIC_A

    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def interpolation_matrix(
    in_len: int, out_len: int, scale: float, mode: str, nearest_mode: str, coord_mode: str
) -> np.ndarray:
    """`(out_len, in_len)` weights: output i = sum_j W[i, j] * input j along one axis."""
    src = _source_coords(out_len, in_len, scale, coord_mode)
    w = np.zeros((out_len, in_len))
    rows = np.arange(out_len)
    if mode == "nearest":
        frac = src - np.floor(src)
        if nearest_mode == "floor":
            idx = np.floor(src)
        elif nearest_mode == "ceil":
            idx = np.ceil(src)
        elif nearest_mode == "round_prefer_ceil":
            idx = np.where(frac == 0.5, np.ceil(src), np.round(src))
        else:  # round_prefer_floor
            idx = np.where(frac == 0.5, np.floor(src), np.round(src))
        w[rows, np.clip(idx, 0, in_len - 1).astype(np.int64)] = 1.0
        return w
    base = np.floor(src)
    t = src - base
    if mode == "linear":
        offsets, weights = (0, 1), np.stack([1 - t, t], axis=-1)
    else:
        offsets, weights = (-1, 0, 1, 2), _cubic_weights(t)
    for k, off in enumerate(offsets):
        cols = np.clip(base + off, 0, in_len - 1).astype(np.int64)
        np.add.at(w, (rows, cols), weights[:, k])
    return w


def _interp_mats(p: dict[str, Any], in_shape: tuple[int, ...]) -> list[np.ndarray | None]:
    mode = str(p.get("mode", "nearest"))
    nearest = str(p.get("nearest_mode", "round_prefer_floor"))
    coord = str(p.get("coordinate_transformation_mode", "half_pixel"))
    mats: list[np.ndarray | None] = []
    for n, s in zip(in_shape, p["scales"]):
        out = int(math.floor(n * float(s)))
        m = interpolation_matrix(n, out, float(s), mode, nearest, coord)
        mats.append(None if out == n and np.array_equal(m, np.eye(n)) else m)
    return mats


def _apply_along(x: np.ndarray, mats: list[np.ndarray | None], transpose: bool) -> np.ndarray:
    for axis, m in enumerate(mats):
        if m is None:
            continue
        mm = (m.T if transpose else m).astype(x.dtype, copy=False)
        x = np.moveaxis(np.tensordot(mm, x, axes=([1], [axis])), 0, axis)
    return x


@kernel(InterpolateOp)
def _interpolate(p: dict[str, Any]) -> Kernel:
    """One matrix product per resized axis with its interpolation weights."""
    state: dict[str, Any] = {}

    def k(x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            state["mats"] = _interp_mats(p, x.shape)
        np.copyto(out, _apply_along(x, state["mats"], False), casting="unsafe")

    return k


@kernel(InterpolateGradOp)
def _interpolate_grad(p: dict[str, Any]) -> Kernel:
    state: dict[str, Any] = {}

    def k(dy: np.ndarray, out: np.ndarray) -> None:
        if not state:
            state["mats"] = _interp_mats(p, out.shape)
        np.copyto(out, _apply_along(dy, state["mats"], True), casting="unsafe")

    return k


def _roi_axis_weights(start: float, length: float, bins: int, grid: int, size: int) -> np.ndarray:
    """`(bins, size)`: each bin the mean over its `grid` samples of the bilinear weights
    along one axis (samples beyond [-1, size] contribute nothing)."""
    bin_len = length / bins
    pos = start + np.arange(bins)[:, None] * bin_len + (np.arange(grid)[None, :] + 0.5) * bin_len / grid
    pos = pos.reshape(-1)
    valid = (pos >= -1.0) & (pos <= size)
    y = np.maximum(pos, 0.0)
    low = np.floor(y).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    y = np.where(at_end, low, y)
    frac = y - low
    w = np.zeros((bins * grid, size))
    rows = np.arange(bins * grid)
    np.add.at(w, (rows, low), np.where(valid, 1 - frac, 0))
    np.add.at(w, (rows, high), np.where(valid, frac, 0))
    return w.reshape(bins, grid, size).mean(axis=1)


def _roi_matrices(rois: np.ndarray, p: dict[str, Any], h: int, w: int) -> list[tuple[np.ndarray, np.ndarray]]:
    ph, pw = (int(v) for v in p["output_size"])
    scale = float(p["spatial_scale"])
    ratio = int(p["sampling_ratio"])
    offset = 0.5 if p.get("aligned", False) else 0.0
    out = []
    for x1, y1, x2, y2 in rois.astype(np.float64):
        sx, sy = x1 * scale - offset, y1 * scale - offset
        rw, rh = x2 * scale - offset - sx, y2 * scale - offset - sy
        if not p.get("aligned", False):
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else max(int(math.ceil(rh / ph)), 1)
        gw = ratio if ratio > 0 else max(int(math.ceil(rw / pw)), 1)
        out.append((_roi_axis_weights(sy, rh, ph, gh, h), _roi_axis_weights(sx, rw, pw, gw, w)))
    return out


@kernel(RoiAlignOp)
def _roi_align(p: dict[str, Any]) -> Kernel:
    """Per RoI, `Wy @ t[b] @ Wx^T` with separable bilinear-and-average weights."""

    def k(t: np.ndarray, rois: np.ndarray, bidx: np.ndarray, out: np.ndarray) -> None:
        check_range(bidx, 0, t.shape[0], p, 2, RoiAlignOp.name, "batch index", f"the batch has {t.shape[0]} images")
        for r, (wy, wx) in enumerate(_roi_matrices(rois, p, t.shape[2], t.shape[3])):
            out[r] = np.einsum("ph,chw,qw->cpq", wy, t[int(bidx[r])], wx)

    return k


@kernel(RoiAlignGradOp)
def _roi_align_grad(p: dict[str, Any]) -> Kernel:
    def k(dy: np.ndarray, rois: np.ndarray, bidx: np.ndarray, out: np.ndarray) -> None:
        check_range(
            bidx, 0, out.shape[0], p, 2, RoiAlignGradOp.name, "batch index", f"the batch has {out.shape[0]} images"
        )
        out.fill(0)
        for r, (wy, wx) in enumerate(_roi_matrices(rois, p, out.shape[2], out.shape[3])):
            out[int(bidx[r])] += np.einsum("ph,cpq,qw->chw", wy, dy[r], wx)

    return k
