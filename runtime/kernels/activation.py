"""Softmax and GELU (tanh) with their gradients: each one NumPy function, run by the kernel
of the straightforward plan and called by the generated plan's template with precomputed
views and scratch buffers (`xl.runtime.codegen`), so the maths and its constants exist once.

Softmax runs on rows `(N, C)` (the softmax axis last, contiguous; other layouts and dtypes
go through contiguous float32 / float64 copies). Its row reductions avoid NumPy's reduction
over each short row, which costs about 60 ns per row (the 64-wide attention rows of a
transformer):

- the shift is the maximum of a block of rows (`_block_rows`: one attention head's scores),
  a reduction NumPy vectorises; a row whose own maximum is far below its block's (its sum
  of exponentials under `_TINY_SUM`, or NaN) is computed again with its own maximum, so the
  result is the softmax of each row as exactly as with per-row shifts;
- the sums of exponentials are one `einsum` (`ij->i`): each row summed on its own, the same
  bits whichever rows are summed with it (a matrix-vector product with ones is ~5 us faster
  on 4096 x 64, but OpenBLAS's sums depend on the rows around them, which would keep the
  kernel from running in blocks of rows).

GELU is `x (0.5 + 0.5 tanh(u))`, `u = sqrt(2/pi) (x + 0.044715 x^3)`; its gradient
`0.5 (1 + t) (1 + x u' (1 - t))`, `t = tanh(u)`, `u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)`:
eight and fifteen ufunc calls writing preallocated buffers, no temporaries.

```python
from xl.runtime.kernels.activation import softmax_rows
```
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from xl.dialects.popxl import GeluGradOp, GeluOp, SoftmaxGradOp, SoftmaxOp
from xl.dialects.rt_kernels import FusedOp, GeluGradTanhOp, GeluTanhOp, SoftmaxFusedOp, SoftmaxGradFusedOp
from xl.runtime.codegen import Gen, K, template
from xl.runtime.kernels.buffers import FAST_FLOATS, Alloc, call, consts, empty, scratch
from xl.runtime.kernels.registry import KERNELS, Kernel, kernel

# ------------------------------------------------------------------------------------
# Softmax
# ------------------------------------------------------------------------------------

_BLOCK = 4096  # elements of a block of rows sharing one shift
_TINY_SUM = 1e-15  # a row's sum of exponentials below this: its shift was too far above its maximum


def _block_rows(n: int, c: int) -> int:
    """Rows per shift block: the largest divisor of `n` with at most `_BLOCK` elements (>= 1)."""
    best = 1
    for r in range(2, min(n, _BLOCK // max(c, 1)) + 1):
        if n % r == 0:
            best = r
    return best


def _rows(a: np.ndarray, axis: int) -> np.ndarray | None:
    """`a` as a `(rows, C)` view with the softmax axis last, or None (not that layout)."""
    if a.ndim == 0 or axis % a.ndim != a.ndim - 1 or not a.flags.c_contiguous or a.size == 0:
        return None
    return a.reshape(-1, a.shape[-1])


def softmax_rows(
    x: np.ndarray,
    out: np.ndarray,
    xb: np.ndarray,
    ob: np.ndarray,
    bmax: np.ndarray,
    s: np.ndarray,
    s2: np.ndarray,
    *,
    redo: Callable[[], None] | None = None,
) -> None:
    """out = exp(x - shift) / sum per row of `x` `(N, C)`; `xb` / `ob` are `x` / `out` as blocks
    of rows `(B, R C)`, `bmax` `(B, 1)` scratch, `s` `(N,)` scratch and `s2` its `(N, 1)` view.
    With one row per block (`B == N`) the shift is each row's maximum; `x` may then be `out`.
    With blocks, `x` may be `out` when `redo` writes the scores into it again (a fused
    prologue, `xl.softmax`)."""
    np.maximum.reduce(xb, axis=1, out=bmax, keepdims=True)
    np.subtract(xb, bmax, ob)
    np.exp(ob, ob)
    np.einsum("ij->i", out, out=s)
    if bmax.shape[0] != s.shape[0] and not s.min() >= _TINY_SUM:
        _own_shifts(x, out, bmax, s, redo)
    np.reciprocal(s, s)
    np.multiply(out, s2, out)


def _own_shifts(
    x: np.ndarray, out: np.ndarray, bmax: np.ndarray, s: np.ndarray, redo: Callable[[], None] | None
) -> None:
    """The exponentials again, where a row's sum under its block's shift is below
    `_TINY_SUM` (or NaN: a row far below its block's maximum) shifted by the row's own
    maximum, the other rows by their block's as before: each row's result depends on its
    block of rows only, so blocks of rows computed apart give the same bits."""
    bad = ~(s >= _TINY_SUM)
    shift = np.repeat(bmax.reshape(-1), s.shape[0] // bmax.shape[0])
    if redo is not None:
        redo()
    shift[bad] = np.maximum.reduce(x[bad], axis=1)
    np.subtract(x, shift[:, None], out)
    np.exp(out, out)
    np.einsum("ij->i", out, out=s)


def rows_split_exactly(x: np.ndarray, out: np.ndarray, axis: int, redo: bool) -> bool:
    """Whether the softmax of `x` into `out` along `axis` (`redo`: with a prologue writing
    the scores into `out`, `xl.softmax`), computed over any run of whole slices of the
    leading axis on its own, gives the bits it gives in the whole: the rows layout, and
    either every row shifted by its own maximum (`x` is `out`, no prologue) or each leading
    slice made of whole shift blocks of the largest size (`_block_rows` then picks that size
    for any run of slices, and `_own_shifts` keeps rows within their block)."""
    x2, o2 = _rows(x, axis), _rows(out, axis)
    if x2 is None or o2 is None or x.dtype != out.dtype or x.dtype not in FAST_FLOATS or x.shape != out.shape:
        return False
    if np.may_share_memory(x, out) and not redo:
        return True
    n, c = o2.shape
    cap = _BLOCK // c
    return cap >= 1 and (n // x.shape[0]) % cap == 0


def _softmax_operands(
    x: np.ndarray, out: np.ndarray, axis: int, alloc: Alloc, redo: bool = False
) -> list[np.ndarray] | None:
    """The arguments of `softmax_rows` for these buffers, or None (not rows of a float32 /
    float64 softmax over the last axis); `redo`: a prologue can write x again."""
    x2, o2 = _rows(x, axis), _rows(out, axis)
    if x2 is None or o2 is None or x.dtype != out.dtype or x.dtype not in FAST_FLOATS or x.shape != out.shape:
        return None
    n, c = x2.shape
    r = 1 if np.may_share_memory(x, out) and not redo else _block_rows(n, c)
    s = alloc((n,), x.dtype)
    return [x2, o2, x2.reshape(n // r, r * c), o2.reshape(n // r, r * c), alloc((n // r, 1), x.dtype), s]


def _softmax_args(
    x: np.ndarray, out: np.ndarray, axis: int, alloc: Alloc, redo: bool = False
) -> list[np.ndarray] | None:
    ops = _softmax_operands(x, out, axis, alloc, redo)
    if ops is None:
        return None
    s = ops[-1]
    return [*ops, s.reshape(-1, 1)]


def _moved(
    body: Callable[..., None],
    args: Callable[..., list[np.ndarray] | None],
    ins: list[np.ndarray],
    out: np.ndarray,
    axis: int,
    alloc: Alloc,
) -> Callable[[], None] | None:
    """A rows body on any layout and float dtype: the inputs copied into float32 / float64
    contiguous scratch with the axis last, the result copied back into `out` (None: empty)."""
    if out.size == 0:
        return None
    wide = out.dtype if out.dtype in FAST_FLOATS else np.dtype(np.float32)
    ax = axis % max(out.ndim, 1)

    def moved(a: np.ndarray) -> np.ndarray:
        return np.moveaxis(a, ax, -1) if a.ndim else a.reshape(1)

    src, dst = [moved(np.broadcast_to(a, out.shape)) for a in ins], moved(out)
    cont = [alloc(dst.shape, wide) for _ in range(len(ins) + 1)]
    a = args(*cont, -1, alloc)
    assert a is not None  # contiguous, float, non-empty: rows

    def run() -> None:
        for m, c in zip(src, cont):
            np.copyto(c, m, casting="unsafe")
        body(*a)
        np.copyto(dst, cont[-1], casting="unsafe")

    return run


@kernel(SoftmaxOp)
def _softmax(p: dict[str, Any]) -> Kernel:
    """exp(x - max) / sum, along `axis`."""
    axis = int(p["axis"])

    def k(x: np.ndarray, out: np.ndarray) -> None:
        a = _softmax_args(x, out, axis, empty)
        if a is not None:
            softmax_rows(*a)
        elif (run := _moved(softmax_rows, _softmax_args, [x], out, axis, empty)) is not None:
            run()

    return k


@template(SoftmaxOp)
def _t_softmax(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if len(op.ins) != 1 or len(op.outs) != 1:
        return None
    x, out, axis = g.arr(op.ins[0]), g.arr(op.outs[0]), int(p["axis"])
    a = _softmax_args(x, out, axis, scratch(g))
    if a is not None:
        return call(g, softmax_rows, a)
    run = _moved(softmax_rows, _softmax_args, [x], out, axis, scratch(g))
    return [] if run is None else [f"{g.bind(run, 'softmax')}()"]


def softmax_grad_rows(
    dy: np.ndarray, y: np.ndarray, out: np.ndarray, t: np.ndarray, s: np.ndarray, s2: np.ndarray
) -> None:
    """out = y (dy - sum(dy y)) per row of `(N, C)` arrays; `t` is `out`, or scratch when `out`
    overlaps `y`; `s` `(N,)` scratch and `s2` its `(N, 1)` view."""
    np.einsum("ij,ij->i", dy, y, out=s)
    np.subtract(dy, s2, t)
    np.multiply(t, y, out)


def _softmax_grad_args(
    dy: np.ndarray, y: np.ndarray, out: np.ndarray, axis: int, alloc: Alloc
) -> list[np.ndarray] | None:
    d2, y2, o2 = _rows(dy, axis), _rows(y, axis), _rows(out, axis)
    if d2 is None or y2 is None or o2 is None or not (dy.dtype == y.dtype == out.dtype) or out.dtype not in FAST_FLOATS:
        return None
    if not (dy.shape == y.shape == out.shape):
        return None
    t = alloc(o2.shape, out.dtype) if np.may_share_memory(out, y) else o2
    s = alloc((o2.shape[0],), out.dtype)
    return [d2, y2, o2, t, s, s.reshape(-1, 1)]


@kernel(SoftmaxGradOp)
def _softmax_grad(p: dict[str, Any]) -> Kernel:
    """y (dy - sum(dy y)) along `axis` (`y` the softmax's output)."""
    axis = int(p["axis"])

    def k(dy: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        a = _softmax_grad_args(dy, y, out, axis, empty)
        if a is not None:
            softmax_grad_rows(*a)
        elif (run := _moved(softmax_grad_rows, _softmax_grad_args, [dy, y], out, axis, empty)) is not None:
            run()

    return k


@template(SoftmaxGradOp)
def _t_softmax_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if len(op.ins) != 2 or len(op.outs) != 1:
        return None
    dy, y, out = (g.arr(v) for v in (*op.ins, *op.outs))
    axis = int(p["axis"])
    a = _softmax_grad_args(dy, y, out, axis, scratch(g))
    if a is not None:
        return call(g, softmax_grad_rows, a)
    run = _moved(softmax_grad_rows, _softmax_grad_args, [dy, y], out, axis, scratch(g))
    return [] if run is None else [f"{g.bind(run, 'softmax_grad')}()"]


# ------------------------------------------------------------------------------------
# xl.softmax / xl.softmax_grad: softmax with an elementwise prologue, its gradient with an
# elementwise epilogue (`rt-fuse-softmax`); the steps run as `xl.fused`'s kernel does
# ------------------------------------------------------------------------------------


def _steps_kernel(p: dict[str, Any]) -> Kernel:
    """The kernel running the elementwise `steps` of `p` (`xl.fused`'s), each writing the output."""
    return KERNELS[FusedOp](p)


@kernel(SoftmaxFusedOp)
def _softmax_fused(p: dict[str, Any]) -> Kernel:
    """The prologue's scores in the output, then their softmax along `axis` in place."""
    axis, steps = int(p["axis"]), _steps_kernel(p)

    def k(*a: np.ndarray) -> None:
        ins, out = a[:-1], a[-1]
        redo = partial(steps, *ins, out)
        redo()
        args = _softmax_args(out, out, axis, empty, redo=True)
        if args is not None:
            softmax_rows(*args, redo=redo)
        elif (run := _moved(softmax_rows, _softmax_args, [out], out, axis, empty)) is not None:
            run()

    return k


@template(SoftmaxFusedOp)
def _t_softmax_fused(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if len(op.outs) != 1:
        return None
    out = g.arr(op.outs[0])
    args = _softmax_args(out, out, int(p["axis"]), scratch(g), redo=True)
    if args is None:
        return None
    redo = g.bind(partial(_steps_kernel(p), *(g.arr(v) for v in op.ins), out), "prologue")
    return [f"{redo}()", f"{g.fn(softmax_rows)}({', '.join(g.view(v) for v in args)}, redo={redo})"]


@kernel(SoftmaxGradFusedOp)
def _softmax_grad_fused(p: dict[str, Any]) -> Kernel:
    """Inputs `(dy, y, *others)`: the softmax gradient along `axis` in the output, then the
    epilogue's steps on it."""
    grad, steps = _softmax_grad(p), _steps_kernel(p)

    def k(*a: np.ndarray) -> None:
        grad(a[0], a[1], a[-1])
        steps(*a)

    return k


@template(SoftmaxGradFusedOp)
def _t_softmax_grad_fused(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if len(op.outs) != 1 or len(op.ins) < 2:
        return None
    grad = _t_softmax_grad(g, K(SoftmaxGradOp.name, SoftmaxGradOp, op.ins[:2], op.outs), i[:2], o, p)
    if grad is None:
        return None
    epilogue = g.bind(partial(_steps_kernel(p), *(g.arr(v) for v in (*op.ins, *op.outs))), "epilogue")
    return [*grad, f"{epilogue}()"]


# ------------------------------------------------------------------------------------
# GELU (tanh approximation)
# ------------------------------------------------------------------------------------

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu_consts(dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """sqrt(2/pi) a, sqrt(2/pi), 3 sqrt(2/pi) a, 0.5, 1 in `dtype`."""
    return consts(dtype, _SQRT_2_OVER_PI * _GELU_A, _SQRT_2_OVER_PI, 3 * _SQRT_2_OVER_PI * _GELU_A, 0.5, 1.0)


def _tanh_u(x: np.ndarray, sq: np.ndarray, t: np.ndarray) -> None:
    """t = tanh(sqrt(2/pi) x (1 + 0.044715 x^2)) from `sq` = x * x (`sq` may be `t`)."""
    ka, k0, _, _, _ = _gelu_consts(t.dtype)
    np.multiply(sq, ka, t)
    np.add(t, k0, t)
    np.multiply(t, x, t)
    np.tanh(t, t)


def _half_one_plus(t: np.ndarray, h: np.ndarray) -> None:
    """h = 0.5 (1 + t) (`h` may be `t`)."""
    half = _gelu_consts(t.dtype)[3]
    np.multiply(t, half, h)
    np.add(h, half, h)


def gelu_tanh_into(x: np.ndarray, out: np.ndarray, t: np.ndarray, h: np.ndarray) -> None:
    """out = x (0.5 + 0.5 tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), keeping t = tanh(u) in `t`
    (`xl.gelu_tanh`) unless `h`, scratch of out's shape, is `t` (`out` may be `x`)."""
    np.multiply(x, x, t)
    _tanh_u(x, t, t)
    _half_one_plus(t, h)
    np.multiply(x, h, out)


def gelu_into(x: np.ndarray, out: np.ndarray, t: np.ndarray) -> None:
    """`gelu_tanh_into` with `t` as its only scratch (`out` may be `x`)."""
    gelu_tanh_into(x, out, t, t)


def _float_scratch(out: np.ndarray, alloc: Alloc) -> np.ndarray:
    return alloc(out.shape, out.dtype if out.dtype.kind == "f" else np.dtype(np.float64))


@kernel(GeluOp)
def _gelu(p: dict[str, Any]) -> Kernel:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

    def k(x: np.ndarray, out: np.ndarray) -> None:
        gelu_into(x, out, _float_scratch(out, empty))

    return k


@template(GeluOp)
def _t_gelu(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if len(op.ins) != 1 or len(op.outs) != 1 or g.arr(op.outs[0]).dtype.kind != "f":
        return None
    return call(g, gelu_into, [i[0], o[0], _float_scratch(g.arr(op.outs[0]), scratch(g))])


def _gelu_grad_from(dy: np.ndarray, x: np.ndarray, t: np.ndarray, out: np.ndarray, v: np.ndarray, w: np.ndarray):
    """out = dy 0.5 (1 + t) (1 + x u' (1 - t)) from t = tanh(u) and `v` = x * x; `w` scratch
    (`out` may be `dy`, `x` or `t`: written last)."""
    _, k0, k3a, _, one = _gelu_consts(t.dtype)
    np.multiply(v, k3a, v)
    np.add(v, k0, v)
    np.multiply(v, x, v)  # x u'
    np.subtract(one, t, w)
    np.multiply(v, w, v)
    np.add(v, one, v)  # 1 + x u' (1 - t)
    _half_one_plus(t, w)
    np.multiply(v, w, v)
    np.multiply(dy, v, out)


def gelu_grad_into(dy: np.ndarray, x: np.ndarray, out: np.ndarray, v: np.ndarray, t: np.ndarray, w: np.ndarray) -> None:
    """out = dy 0.5 (1 + t) (1 + x u' (1 - t)), t = tanh(u) (see the module); `v`, `t`, `w`
    scratch of out's shape (`out` may be `dy` or `x`)."""
    np.multiply(x, x, v)
    _tanh_u(x, v, t)
    _gelu_grad_from(dy, x, t, out, v, w)


def gelu_grad_tanh_into(
    dy: np.ndarray, x: np.ndarray, t: np.ndarray, out: np.ndarray, v: np.ndarray, w: np.ndarray
) -> None:
    """`gelu_grad_into` reading t = tanh(u) (`xl.gelu_grad_tanh`, from `xl.gelu_tanh`); `v`,
    `w` scratch of out's shape (`out` may be `dy`, `x` or `t`)."""
    np.multiply(x, x, v)
    _gelu_grad_from(dy, x, t, out, v, w)


def _gelu_grad_scratch(out: np.ndarray, alloc: Alloc) -> list[np.ndarray]:
    return [_float_scratch(out, alloc) for _ in range(3)]


@kernel(GeluGradOp)
def _gelu_grad(p: dict[str, Any]) -> Kernel:
    """dy (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u')."""

    def k(dy: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        gelu_grad_into(dy, x, out, *_gelu_grad_scratch(out, empty))

    return k


@template(GeluGradOp)
def _t_gelu_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    out = g.arr(op.outs[0]) if len(op.outs) == 1 else None
    if len(op.ins) != 2 or out is None or out.dtype.kind != "f":
        return None
    return call(g, gelu_grad_into, [*i, o[0], *_gelu_grad_scratch(out, scratch(g))])


@kernel(GeluTanhOp)
def _gelu_tanh(p: dict[str, Any]) -> Kernel:
    """(0.5 x (1 + tanh u), tanh u) for float results."""

    def k(x: np.ndarray, out: np.ndarray, t: np.ndarray) -> None:
        gelu_tanh_into(x, out, t, empty(out.shape, out.dtype))

    return k


@template(GeluTanhOp)
def _t_gelu_tanh(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    out = g.arr(op.outs[0])
    return call(g, gelu_tanh_into, [i[0], *o, scratch(g)(out.shape, out.dtype)])


@kernel(GeluGradTanhOp)
def _gelu_grad_tanh(p: dict[str, Any]) -> Kernel:
    """dy (0.5 (1 + t) + 0.5 x (1 - t^2) u') from t = tanh u."""

    def k(dy: np.ndarray, x: np.ndarray, t: np.ndarray, out: np.ndarray) -> None:
        gelu_grad_tanh_into(dy, x, t, out, empty(out.shape, out.dtype), empty(out.shape, out.dtype))

    return k


@template(GeluGradTanhOp)
def _t_gelu_grad_tanh(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    out = g.arr(op.outs[0])
    alloc = scratch(g)
    return call(g, gelu_grad_tanh_into, [*i, o[0], alloc(out.shape, out.dtype), alloc(out.shape, out.dtype)])
