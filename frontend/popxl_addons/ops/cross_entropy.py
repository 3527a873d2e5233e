"""Cross-entropy loss on logits (popxl_addons/ops/cross_entropy.py)."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops
from popxl.bridge import describe

__all__ = ["cross_entropy", "cross_entropy_with_grad"]


def _flatten(x: popxl.Tensor, labels: popxl.Tensor, what: str) -> tuple[popxl.Tensor, popxl.Tensor]:
    for arg, t in (("x", x), ("labels", labels)):
        if not isinstance(t, popxl.Tensor):
            raise TypeError(f"addons.{what}: expected a popxl Tensor for {arg}, got {type(t).__name__}")
    if x.rank > 2:
        x = x.reshape((-1, x.shape[-1]))
    if labels.rank > 1:
        labels = labels.reshape((-1,))
    return x, labels


def cross_entropy(
    x: popxl.Tensor,
    labels: popxl.Tensor,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> popxl.Tensor:
    """`nll_loss(softmax(x, axis=-1), labels)` for logits `x` of shape (..., C)."""
    x, labels = _flatten(x, labels, "cross_entropy")
    probs = ops.softmax(x, axis=-1)
    return ops.nll_loss(probs, labels, ignore_index=ignore_index, reduction=reduction)


def cross_entropy_with_grad(
    x: popxl.Tensor,
    labels: popxl.Tensor,
    loss_scaling: float | int | popxl.Tensor = 1,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[popxl.Tensor, popxl.Tensor]:
    """The cross-entropy loss of logits `x` and its gradient w.r.t. `x`.

    Returns `(loss, dx)`: the loss is not scaled, `dx` is scaled by `loss_scaling`
    (the starting value for backpropagation, dL/dL = loss_scaling).
    """
    if isinstance(loss_scaling, bool | np.bool_):
        raise TypeError(
            f"cross_entropy_with_grad: loss_scaling must be a number or a Tensor, got {describe(loss_scaling)}"
        )
    x2, labels = _flatten(x, labels, "cross_entropy_with_grad")
    probs = ops.softmax(x2, axis=-1)
    loss, dx = ops.nll_loss_with_softmax_grad(
        probs, labels, loss_grad=loss_scaling, ignore_index=ignore_index, reduction=reduction
    )
    if tuple(dx.shape) != tuple(x.shape):
        dx = dx.reshape(x.shape)
    return loss, dx
