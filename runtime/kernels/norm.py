"""Kernels of `popxl.group_norm` and `popxl.group_norm_grad` (ops.group_norm / layer_norm as
one op with its statistics, as PopART's GroupNormOp), each one NumPy function that the
straightforward plan's kernel runs and the generated plan's template calls with precomputed
views and scratch buffers: the maths exists once.

The data is seen as rows, one per (sample, group) (`x` `(N, C, *spatial)` as `(N G, L)`,
`L = C / G * spatial`): row sums are one matrix-vector product with a vector of ones and
row dot products one `einsum`, where a NumPy reduction over each short row costs about
60 ns per row (a layer norm's rows are a transformer's hidden size); the per-channel sums
of the gradient are a vector-matrix product too. Data of other dtypes than float32 /
float64 (float16: statistics in float32) or laid out otherwise goes through contiguous
float32 copies.

```python
from xl.runtime.kernels.norm import group_norm_rows, group_norm_grad_rows
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xl.dialects.popxl import GroupNormGradOp, GroupNormOp
from xl.runtime.codegen import Gen, K, template
from xl.runtime.kernels.buffers import FAST_FLOATS, Alloc, const, empty, ones
from xl.runtime.kernels.registry import Kernel, kernel


class _Layout:
    """The views a group-norm body reads its arrays through: rows `(N G, L)`, channels
    `(N, C)` (or `(N, C, S)` with spatial positions) and the per-channel vectors' shape."""

    def __init__(self, shape: tuple[int, ...], groups: int) -> None:
        self.n, self.c = shape[0], shape[1]
        self.spatial = int(np.prod(shape[2:], dtype=np.int64))
        self.rows = (self.n * groups, (self.c // groups) * self.spatial)
        self.channels = (self.n, self.c) if self.spatial == 1 else (self.n, self.c, self.spatial)
        self.vector = (self.c,) if self.spatial == 1 else (self.c, 1)


def _fast(arrays: Sequence[np.ndarray], shape: tuple[int, ...]) -> bool:
    """One float32 / float64 dtype, C-contiguous, non-empty, `x` of rank >= 2."""
    dt = arrays[0].dtype
    return (
        len(shape) >= 2
        and all(a.dtype == dt and a.flags.c_contiguous for a in arrays)
        and dt in FAST_FLOATS
        and int(np.prod(shape)) > 0
    )


def _channel_sum(a: np.ndarray, out: np.ndarray, ones_n: np.ndarray) -> None:
    """out[c] = sum of `a` `(N, C)` / `(N, C, S)` over samples (and positions)."""
    if a.ndim == 2:
        np.matmul(ones_n, a, out)
    else:
        np.add.reduce(a, axis=(0, 2), out=out)


# ------------------------------------------------------------------------------------
# Forward
# ------------------------------------------------------------------------------------


def group_norm_rows(
    x: np.ndarray,
    y: np.ndarray,
    yc: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    mean: np.ndarray,
    inv: np.ndarray,
    mean2: np.ndarray,
    inv2: np.ndarray,
    ones: np.ndarray,
    inv_l: np.ndarray,
    eps: np.ndarray,
) -> None:
    """Per row of `x` `(R, L)`: mean, biased variance, inverse standard deviation (`mean`,
    `inv` `(R,)`, `mean2` / `inv2` their `(R, 1)` views); `y` `(R, L)` the normalised rows,
    then `yc` (`y` as channels) `* w + b` per channel. `ones` `(L,)`, `inv_l` 1 / L, `eps`."""
    np.matmul(x, ones, mean)
    np.multiply(mean, inv_l, mean)
    np.subtract(x, mean2, y)
    np.einsum("ij,ij->i", y, y, out=inv)
    np.multiply(inv, inv_l, inv)
    np.add(inv, eps, inv)
    np.sqrt(inv, inv)
    np.reciprocal(inv, inv)
    np.multiply(y, inv2, y)
    np.multiply(yc, w, yc)
    np.add(yc, b, yc)


def _group_norm_args(arrays: Sequence[np.ndarray], p: dict[str, Any], alloc: Alloc) -> list[np.ndarray] | None:
    """The arguments of `group_norm_rows` for `(x, w, b, y, mean, inv)`, or None (not the
    fast layout)."""
    x, w, b, y, mean, inv = arrays
    if not _fast(arrays, x.shape) or y.shape != x.shape:
        return None
    lay = _Layout(x.shape, int(p["num_groups"]))
    if mean.size != lay.rows[0] or inv.size != lay.rows[0] or w.size != lay.c or b.size != lay.c:
        return None
    dt = x.dtype
    m, i = mean.reshape(-1), inv.reshape(-1)
    return [
        *(a.reshape(lay.rows) for a in (x, y)),
        y.reshape(lay.channels),
        *(a.reshape(lay.vector) for a in (w, b)),
        m,
        i,
        m.reshape(-1, 1),
        i.reshape(-1, 1),
        ones(lay.rows[1], dt),
        const(1.0 / lay.rows[1], dt),
        const(float(p["epsilon"]), dt),
    ]


def _through_copies(
    body: Callable[..., None],
    args: Callable[[Sequence[np.ndarray], dict[str, Any], Alloc], list[np.ndarray] | None],
    ins: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    p: dict[str, Any],
    alloc: Alloc,
) -> Callable[[], None] | None:
    """`body` on contiguous float32 / float64 copies of the arrays (statistics of float16
    data in float32), the results copied back; None when there is nothing to compute."""
    if any(a.size == 0 for a in (*ins, *outs)):
        return None
    dt = np.result_type(*ins)
    wide = dt if dt in FAST_FLOATS else np.dtype(np.float32)
    cins = [alloc(a.shape, wide) for a in ins]
    couts = [alloc(a.shape, wide) for a in outs]
    a = args([*cins, *couts], p, alloc)
    assert a is not None  # contiguous, one float dtype

    def run() -> None:
        for src, c in zip(ins, cins):
            np.copyto(c, src, casting="unsafe")
        body(*a)
        for dst, c in zip(outs, couts):
            np.copyto(dst, c, casting="unsafe")

    return run


def _template(body: Callable[..., None], args: Callable[..., list[np.ndarray] | None], n_in: int):
    """The plan template of a group-norm op: one call of `body` with bound views and scratch."""

    def t(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]) -> list[str] | None:
        if len(op.ins) != n_in:
            return None
        arrays = [g.arr(v) for v in (*op.ins, *op.outs)]

        def alloc(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
            return g.scratch(shape, dtype)[0]

        a = args(arrays, p, alloc)
        if a is not None:
            return [f"{g.fn(body)}({', '.join(g.view(v) for v in a)})"]
        run = _through_copies(body, args, arrays[:n_in], arrays[n_in:], p, alloc)
        return [] if run is None else [f"{g.bind(run, 'norm')}()"]

    return t


def _kernel(body: Callable[..., None], args: Callable[..., list[np.ndarray] | None], n_in: int, p: dict[str, Any]):
    """The straightforward plan's kernel of a group-norm op: `body` on its arrays (scratch
    allocated per call)."""

    def k(*arrays: np.ndarray) -> None:
        a = args(arrays, p, empty)
        if a is not None:
            body(*a)
        elif (run := _through_copies(body, args, arrays[:n_in], arrays[n_in:], p, empty)) is not None:
            run()

    return k


@kernel(GroupNormOp)
def _group_norm(p: dict[str, Any]) -> Kernel:
    """Inputs `(x, weight, bias)`, results `(y, mean, inv_std_dev)` (see `group_norm_rows`)."""
    return _kernel(group_norm_rows, _group_norm_args, 3, p)


template(GroupNormOp)(_template(group_norm_rows, _group_norm_args, 3))


# ------------------------------------------------------------------------------------
# Gradient
# ------------------------------------------------------------------------------------


def group_norm_grad_rows(
    x: np.ndarray,
    dy: np.ndarray,
    dx: np.ndarray,
    dyc: np.ndarray,
    w: np.ndarray,
    mean2: np.ndarray,
    inv2: np.ndarray,
    dw: np.ndarray,
    db: np.ndarray,
    xh: np.ndarray,
    t: np.ndarray,
    tc: np.ndarray,
    s: np.ndarray,
    s2: np.ndarray,
    ones: np.ndarray,
    ones_n: np.ndarray,
    inv_l: np.ndarray,
) -> None:
    """dbias = sum of dy, dweight = sum of dy x_hat per channel; dx = inv_std (g - mean(g) -
    x_hat mean(g x_hat)) per row, g = dy * weight. `x`, `dy`, `dx`, scratch `xh`, `t` are rows
    `(R, L)`; `dyc`, `tc` the channel views of `dy`, `t`; `mean2`, `inv2` `(R, 1)`; `s` `(R,)`
    scratch, `s2` its `(R, 1)` view; `ones` `(L,)`, `ones_n` `(N,)`, `inv_l` 1 / L."""
    np.subtract(x, mean2, xh)
    np.multiply(xh, inv2, xh)  # x_hat
    _channel_sum(dyc, db, ones_n)
    np.multiply(dy, xh, t)
    _channel_sum(tc, dw, ones_n)
    np.multiply(dyc, w, tc)  # g
    np.einsum("ij,ij->i", t, xh, out=s)
    np.multiply(s, inv_l, s)  # mean(g x_hat)
    np.multiply(xh, s2, xh)
    np.matmul(t, ones, s)
    np.multiply(s, inv_l, s)  # mean(g)
    np.subtract(t, s2, dx)
    np.subtract(dx, xh, dx)
    np.multiply(dx, inv2, dx)


def _group_norm_grad_args(arrays: Sequence[np.ndarray], p: dict[str, Any], alloc: Alloc) -> list[np.ndarray] | None:
    """The arguments of `group_norm_grad_rows` for `(x, w, mean, inv, dy, dx, dw, db)`, or None."""
    x, w, mean, inv, dy, dx, dw, db = arrays
    if not _fast(arrays, x.shape) or not (dy.shape == dx.shape == x.shape):
        return None
    lay = _Layout(x.shape, int(p["num_groups"]))
    r, n_l = lay.rows
    if mean.size != r or inv.size != r or w.size != lay.c or dw.size != lay.c or db.size != lay.c:
        return None
    dt = x.dtype
    t = alloc(lay.rows, dt)
    s = alloc((r,), dt)
    return [
        *(a.reshape(lay.rows) for a in (x, dy, dx)),
        dy.reshape(lay.channels),
        w.reshape(lay.vector),
        mean.reshape(r, 1),
        inv.reshape(r, 1),
        dw.reshape(-1),
        db.reshape(-1),
        alloc(lay.rows, dt),
        t,
        t.reshape(lay.channels),
        s,
        s.reshape(r, 1),
        ones(n_l, dt),
        ones(lay.n, dt),
        const(1.0 / n_l, dt),
    ]


@kernel(GroupNormGradOp)
def _group_norm_grad(p: dict[str, Any]) -> Kernel:
    """Inputs `(x, weight, mean, inv_std_dev, dy)`, results `(dx, dweight, dbias)` (see
    `group_norm_grad_rows`)."""
    return _kernel(group_norm_grad_rows, _group_norm_grad_args, 5, p)


template(GroupNormGradOp)(_template(group_norm_grad_rows, _group_norm_grad_args, 5))
