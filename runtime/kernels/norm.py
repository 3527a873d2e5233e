"""Kernels of `popxl.group_norm` and `popxl.group_norm_grad` (ops.group_norm / layer_norm as
one op with its statistics, as PopART's GroupNormOp). Statistics of float16 data are
computed in float32."""

from __future__ import annotations

from typing import Any

import numpy as np

from xl.dialects.popxl import GroupNormGradOp, GroupNormOp
from xl.runtime.kernels.registry import Kernel, kernel


def _stats_dtype(dt: np.dtype) -> type:
    # statistics of float16 / float8 data in float32, others in their own dtype
    return np.float32 if dt.itemsize < 4 else dt.type


@kernel(GroupNormOp)
def _group_norm(p: dict[str, Any]) -> Kernel:
    """Per (sample, group): mean, biased variance, inverse standard deviation; then the
    normalised values times `weight` plus `bias` per channel."""
    groups = int(p["num_groups"])
    eps = float(p["epsilon"])

    def k(x: np.ndarray, w: np.ndarray, b: np.ndarray, y: np.ndarray, mean: np.ndarray, inv: np.ndarray) -> None:
        n, c = x.shape[0], x.shape[1]
        xg = x.reshape(n, groups, -1).astype(_stats_dtype(x.dtype), copy=False)
        m = xg.mean(axis=2, keepdims=True)
        d = xg - m
        i = 1.0 / np.sqrt(np.mean(d * d, axis=2, keepdims=True) + eps)
        bshape = (1, c) + (1,) * (x.ndim - 2)
        out = (d * i).reshape(x.shape) * w.reshape(bshape) + b.reshape(bshape)
        np.copyto(y, out, casting="unsafe")
        np.copyto(mean, m.reshape(-1), casting="unsafe")
        np.copyto(inv, i.reshape(-1), casting="unsafe")

    return k


@kernel(GroupNormGradOp)
def _group_norm_grad(p: dict[str, Any]) -> Kernel:
    """dbias = sum of dy, dweight = sum of dy * x_hat (over samples and positions); dx =
    inv_std * (g - mean(g) - x_hat * mean(g * x_hat)) per group, g = dy * weight."""
    groups = int(p["num_groups"])

    def k(
        x: np.ndarray,
        w: np.ndarray,
        mean: np.ndarray,
        inv: np.ndarray,
        dy: np.ndarray,
        dx: np.ndarray,
        dw: np.ndarray,
        db: np.ndarray,
    ) -> None:
        n, c = x.shape[0], x.shape[1]
        acc = _stats_dtype(x.dtype)
        xg = x.reshape(n, groups, -1).astype(acc, copy=False)
        i = inv.reshape(n, groups, 1).astype(acc, copy=False)
        x_hat = (xg - mean.reshape(n, groups, 1)) * i
        dyc = dy.reshape(n, c, -1).astype(acc, copy=False)
        np.copyto(db, dyc.sum(axis=(0, 2)), casting="unsafe")
        np.copyto(dw, (dyc * x_hat.reshape(n, c, -1)).sum(axis=(0, 2)), casting="unsafe")
        g = (dyc * w.reshape(1, c, 1)).reshape(n, groups, -1)
        gx = g - g.mean(axis=2, keepdims=True) - x_hat * (g * x_hat).mean(axis=2, keepdims=True)
        np.copyto(dx, (i * gx).reshape(x.shape), casting="unsafe")

    return k
