"""NumPy kernels of the popxl neural-network ops, registered by op class (see `xl.runtime.kernels`).

Convolutions and pooling are vectorised: the windows of the padded input are a strided
view (`sliding_window_view`), copied once into columns (im2col) and contracted with
one batched `matmul` per call; the adjoint direction (transposed convolution, pooling
gradients) accumulates the columns back with one strided add per kernel position
(col2im), never a Python loop over pixels.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

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
from xl.runtime.kernels import Kernel, check_range, kernel


# ------------------------------------------------------------------------------------
# Windows (compile-time parameters, run-time views)
# ------------------------------------------------------------------------------------


class _Geometry:
    """Stride, pads, dilation and kernel of a windowed op over `nd` spatial dims."""

    def __init__(self, p: dict[str, Any], kernel_shape: tuple[int, ...]) -> None:
        nd = len(kernel_shape)
        self.nd = nd
        self.kernel = tuple(int(k) for k in kernel_shape)
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
        return (slice(None), slice(None)) + tuple(
            slice(b, b + n) for b, n in zip(self.begin, x_shape[2:])
        )

    def windows(self, xp: np.ndarray, out_sp: tuple[int, ...]) -> np.ndarray:
        """View `(N, C, *out, *kernel)` of the windows of the padded input `xp`."""
        nd = self.nd
        v = sliding_window_view(xp, self.extent, axis=tuple(range(2, 2 + nd)))
        idx = (slice(None), slice(None))
        idx += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out_sp, self.stride))
        idx += tuple(slice(None, None, d) for d in self.dilation)
        return v[idx]

    def kernel_positions(self, out_sp: tuple[int, ...]) -> list[tuple[slice, ...]]:
        """For each kernel position (row-major), the strided slice of the padded input its
        column reads: the col2im targets."""
        out = []
        for pos in itertools.product(*(range(k) for k in self.kernel)):
            out.append(
                tuple(
                    slice(j * d, j * d + (o - 1) * s + 1, s)
                    for j, d, o, s in zip(pos, self.dilation, out_sp, self.stride)
                )
            )
        return out


def _col2im(
    cols: np.ndarray, geo: _Geometry, out_sp: tuple[int, ...], target: np.ndarray
) -> None:
    """`target` (padded, `(N, C, *padded)`) += the columns `cols` `(N, C, *kernel, *out)`
    at their windows."""
    ksize = math.prod(geo.kernel)
    flat = cols.reshape(cols.shape[:2] + (ksize,) + tuple(out_sp))
    for kidx, sl in enumerate(geo.kernel_positions(out_sp)):
        target[(slice(None), slice(None)) + sl] += flat[:, :, kidx]


class _Padded:
    """A zero-filled (or `fill`-filled) padded copy of the input, allocated on first use."""

    def __init__(self, geo: _Geometry, fill: float = 0.0) -> None:
        self.geo = geo
        self.fill = fill
        self.buf: np.ndarray | None = None
        self.inner: tuple[slice, ...] = ()

    def of(self, x: np.ndarray, out_sp: tuple[int, ...]) -> np.ndarray:
        geo = self.geo
        if not any(geo.begin) and not any(geo.end) and self.padded_same(x.shape, out_sp):
            return x
        if self.buf is None:
            self.buf = np.full(geo.padded_shape(x.shape, out_sp), self.fill, x.dtype)
            self.inner = geo.interior(x.shape)
        self.buf[self.inner] = x
        return self.buf

    def padded_same(self, shape: tuple[int, ...], out_sp: tuple[int, ...]) -> bool:
        return self.geo.padded_shape(shape, out_sp) == tuple(shape)


# ------------------------------------------------------------------------------------
# Convolution
# ------------------------------------------------------------------------------------


def _im2col(win: np.ndarray, groups: int) -> np.ndarray:
    """Windows `(N, C, *out, *kernel)` -> columns `(groups, N * prod(out), C/groups * prod(kernel))`."""
    n, c = win.shape[:2]
    nd = (win.ndim - 2) // 2
    out_sp = win.shape[2 : 2 + nd]
    k_sp = win.shape[2 + nd :]
    g = groups
    # (N, g, C/g, *out, *k) -> (g, N, *out, C/g, *k)
    w = win.reshape((n, g, c // g) + tuple(out_sp) + tuple(k_sp))
    perm = (1, 0) + tuple(range(3, 3 + nd)) + (2,) + tuple(range(3 + nd, 3 + 2 * nd))
    cols = np.ascontiguousarray(w.transpose(perm))
    return cols.reshape(g, n * math.prod(out_sp), (c // g) * math.prod(k_sp))


@kernel(ConvOp)
def _conv(p: dict[str, Any]) -> Kernel:
    """im2col of the padded input, one batched matmul per group with the weight."""
    groups = int(p.get("groups", 1))
    state: dict[str, Any] = {}

    def k(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        if not state:
            state["geo"] = geo = _Geometry(p, w.shape[2:])
            state["pad"] = _Padded(geo)
            state["out_sp"] = out.shape[2:]
            m = w.shape[0]
            state["wshape"] = (groups, m // groups, -1)
        geo, out_sp = state["geo"], state["out_sp"]
        xp = state["pad"].of(x, out_sp)
        cols = _im2col(geo.windows(xp, out_sp), groups)  # (g, N*O, C/g*K)
        wm = w.reshape(state["wshape"])  # (g, M/g, C/g*K)
        y = np.matmul(cols, wm.transpose(0, 2, 1))  # (g, N*O, M/g)
        n = x.shape[0]
        y = y.reshape((groups, n) + tuple(out_sp) + (w.shape[0] // groups,))
        # (g, N, *out, M/g) -> (N, g, M/g, *out)
        nd = len(out_sp)
        perm = (1, 0, 2 + nd) + tuple(range(2, 2 + nd))
        np.copyto(out, y.transpose(perm).reshape(out.shape), casting="unsafe")

    return k


def _conv_adjoint(
    x: np.ndarray, w: np.ndarray, geo: _Geometry, groups: int, full: np.ndarray
) -> None:
    """`full` (the padded result, zeroed) += the transposed convolution of `x`
    `(N, C, *in)` with `w` `(C, M/g, *kernel)`, before cropping."""
    n, c = x.shape[:2]
    g = groups
    in_sp = x.shape[2:]
    nd = len(in_sp)
    mg = w.shape[1]
    ksize = math.prod(geo.kernel)
    # x as (g, N*in, C/g); w as (g, C/g, M/g*K)
    xm = x.reshape((n, g, c // g, math.prod(in_sp))).transpose(1, 0, 3, 2).reshape(g, -1, c // g)
    wm = w.reshape(g, c // g, mg * ksize)
    cols = np.matmul(xm, wm)  # (g, N*in, M/g*K)
    cols = cols.reshape((g, n) + tuple(in_sp) + (mg, ksize))
    # -> (N, g*M/g, K, *in)
    perm = (1, 0, 2 + nd, 3 + nd) + tuple(range(2, 2 + nd))
    cols = cols.transpose(perm).reshape((n, g * mg, ksize) + tuple(in_sp))
    for kidx, sl in enumerate(geo.kernel_positions(tuple(in_sp))):
        full[(slice(None), slice(None)) + sl] += cols[:, :, kidx]


@kernel(ConvTransposeOp)
def _conv_transpose(p: dict[str, Any]) -> Kernel:
    """Columns `x @ w` scattered back to their windows (col2im), then cropped by the pads."""
    groups = int(p.get("groups", 1))
    state: dict[str, Any] = {}

    def k(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        if not state:
            geo = _Geometry(p, w.shape[2:])
            state["geo"] = geo
            in_sp = x.shape[2:]
            # the full (uncropped) result, large enough for the output padding too
            full_sp = tuple(
                max((i - 1) * s + e, b + o)
                for i, s, e, b, o in zip(in_sp, geo.stride, geo.extent, geo.begin, out.shape[2:])
            )
            state["full"] = np.zeros(out.shape[:2] + full_sp, out.dtype)
            state["crop"] = (slice(None), slice(None)) + tuple(
                slice(b, b + o) for b, o in zip(geo.begin, out.shape[2:])
            )
        full = state["full"]
        full.fill(0)
        _conv_adjoint(x, w, state["geo"], groups, full)
        np.copyto(out, full[state["crop"]], casting="unsafe")

    return k



@kernel(ConvWeightGradOp)
def _conv_weight_grad(p: dict[str, Any]) -> Kernel:
    """`dw[m, c, k] = sum over n, o of dy[n, m, o] * x_padded[n, c, o * stride + k * dilation]`:
    the im2col columns of the forward input contracted with `dy`."""
    groups = int(p.get("groups", 1))
    state: dict[str, Any] = {}

    def k(dy: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            state["geo"] = geo = _Geometry(p, tuple(p["kernel"]))
            state["pad"] = _Padded(geo)
            state["out_sp"] = dy.shape[2:]
        geo, out_sp = state["geo"], state["out_sp"]
        g = groups
        xp = state["pad"].of(x, out_sp)
        cols = _im2col(geo.windows(xp, out_sp), g)  # (g, N*O, C/g*K)
        n, m = dy.shape[:2]
        nd = len(out_sp)
        # dy (N, g, M/g, *out) -> (g, M/g, N*O)
        dym = dy.reshape((n, g, m // g) + tuple(out_sp))
        dym = dym.transpose((1, 2, 0) + tuple(range(3, 3 + nd))).reshape(g, m // g, -1)
        dw = np.matmul(dym, cols)  # (g, M/g, C/g*K)
        np.copyto(out, dw.reshape(out.shape), casting="unsafe")

    return k


# ------------------------------------------------------------------------------------
# Pooling
# ------------------------------------------------------------------------------------


def _pool_setup(p: dict[str, Any], x_shape: tuple[int, ...], out_sp: tuple[int, ...]) -> _Geometry:
    return _Geometry(p, tuple(p["kernel"]))


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


@kernel(MaxPoolOp)
def _max_pool(p: dict[str, Any]) -> Kernel:
    state: dict[str, Any] = {}

    def k(x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            state["geo"] = geo = _pool_setup(p, x.shape, out.shape[2:])
            state["pad"] = _Padded(geo, -np.inf)
            state["axes"] = tuple(range(2 + geo.nd, 2 + 2 * geo.nd))
        out_sp = out.shape[2:]
        win = state["geo"].windows(state["pad"].of(x, out_sp), out_sp)
        np.max(win, axis=state["axes"], out=out)

    return k


@kernel(AveragePoolOp)
def _average_pool(p: dict[str, Any]) -> Kernel:
    include = bool(p.get("count_include_pad", False))
    state: dict[str, Any] = {}

    def k(x: np.ndarray, out: np.ndarray) -> None:
        if not state:
            out_sp = out.shape[2:]
            state["geo"] = geo = _pool_setup(p, x.shape, out_sp)
            state["pad"] = _Padded(geo, 0.0)
            state["axes"] = tuple(range(2 + geo.nd, 2 + 2 * geo.nd))
            state["counts"] = _window_counts(geo, x.shape, out_sp, include, out.dtype)
        out_sp = out.shape[2:]
        win = state["geo"].windows(state["pad"].of(x, out_sp), out_sp)
        np.sum(win, axis=state["axes"], out=out)
        np.divide(out, state["counts"], out=out)

    return k


@kernel(AveragePoolGradOp)
def _average_pool_grad(p: dict[str, Any]) -> Kernel:
    include = bool(p.get("count_include_pad", False))
    state: dict[str, Any] = {}

    def k(dy: np.ndarray, out: np.ndarray) -> None:
        out_sp = dy.shape[2:]
        if not state:
            state["geo"] = geo = _pool_setup(p, out.shape, out_sp)
            state["counts"] = _window_counts(geo, out.shape, out_sp, include, out.dtype)
            state["full"] = np.zeros(geo.padded_shape(out.shape, out_sp), out.dtype)
            state["inner"] = geo.interior(out.shape)
        geo, full = state["geo"], state["full"]
        share = dy / state["counts"]
        full.fill(0)
        for sl in geo.kernel_positions(out_sp):
            full[(slice(None), slice(None)) + sl] += share
        np.copyto(out, full[state["inner"]])

    return k


@kernel(MaxPoolGradOp)
def _max_pool_grad(p: dict[str, Any]) -> Kernel:
    """dy to the first maximum of each window (row-major over the kernel), as PyTorch."""
    state: dict[str, Any] = {}

    def k(dy: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        out_sp = dy.shape[2:]
        if not state:
            state["geo"] = geo = _pool_setup(p, x.shape, out_sp)
            state["pad"] = _Padded(geo, -np.inf)
            state["full"] = np.zeros(geo.padded_shape(x.shape, out_sp), out.dtype)
            state["inner"] = geo.interior(x.shape)
            state["ksize"] = math.prod(geo.kernel)
        geo, full, ksize = state["geo"], state["full"], state["ksize"]
        win = geo.windows(state["pad"].of(x, out_sp), out_sp)
        nd = geo.nd
        # (N, C, *out, K) -> argmax over K
        flat = win.reshape(win.shape[: 2 + nd] + (ksize,))
        arg = np.argmax(flat, axis=-1)
        full.fill(0)
        for kidx, sl in enumerate(geo.kernel_positions(out_sp)):
            full[(slice(None), slice(None)) + sl] += np.where(arg == kidx, dy, 0)
        np.copyto(out, full[state["inner"]])

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
        i = _norm_indices(idx, data.shape[a], p, 1, "popxl.scatter", a)
        region = out[tuple(slice(0, s) if d != a else slice(None) for d, s in enumerate(idx.shape))]
        np.put_along_axis(region, i, vals, axis=a)

    return k


@kernel(TakeAlongAxisOp)
def _take_along_axis(p: dict[str, Any]) -> Kernel:
    axis = int(p["axis"])

    def k(data: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        a = axis % data.ndim
        i = _norm_indices(idx, data.shape[a], p, 1, "popxl.take_along_axis", a)
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
    flat = out.reshape(-1)
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
        check_range(idx, 0, n, p, 1, "popxl.scatter_reduce", "index", f"axis_size is {n}")
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
        np.copyto(res.reshape(-1), g_data if wrt == "data" else g_init, casting="unsafe")

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


def _roi_axis_weights(
    start: float, length: float, bins: int, grid: int, size: int
) -> np.ndarray:
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


def _roi_matrices(
    rois: np.ndarray, p: dict[str, Any], h: int, w: int
) -> list[tuple[np.ndarray, np.ndarray]]:
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
        check_range(bidx, 0, t.shape[0], p, 2, "popxl.roi_align", "batch index", f"the batch has {t.shape[0]} images")
        for r, (wy, wx) in enumerate(_roi_matrices(rois, p, t.shape[2], t.shape[3])):
            out[r] = np.einsum("ph,chw,qw->cpq", wy, t[int(bidx[r])], wx)

    return k


@kernel(RoiAlignGradOp)
def _roi_align_grad(p: dict[str, Any]) -> Kernel:
    def k(dy: np.ndarray, rois: np.ndarray, bidx: np.ndarray, out: np.ndarray) -> None:
        check_range(bidx, 0, out.shape[0], p, 2, "popxl.roi_align_grad", "batch index", f"the batch has {out.shape[0]} images")
        out.fill(0)
        for r, (wy, wx) in enumerate(_roi_matrices(rois, p, out.shape[2], out.shape[3])):
            out[int(bidx[r])] += np.einsum("ph,cpq,qw->chw", wy, dy[r], wx)

    return k
