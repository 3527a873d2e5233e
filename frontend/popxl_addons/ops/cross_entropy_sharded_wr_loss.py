"""Cross-entropy of logits sharded over the IPUs of one replica along the class axis
("within replica" tensor parallelism): `popxl_addons.ops.cross_entropy_sharded_wr_loss`.

Shard `s` of the logits `(n_samples, classes_s)` lives on IPU `ipus[s]` with its own copy of
the (unshifted) labels; the op shifts the labels by the classes of the shards before it.
Each IPU computes its part of the softmax statistics and picks the true logit when its
shard holds it; the parts are summed on `ipus[0]` (IPU copies), which holds the
unreduced loss `(n_samples,)`. Built from popxl ops and IPU copies, so autodiff gives
each shard `dloss * (softmax - onehot(label))` on its IPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

import popxl
import popxl.ops as ops
from popxl.errors import UndefinedValue
from popxl_addons.ops.cross_entropy_sharded_loss import pick_rows

__all__ = ["cross_entropy_sharded_wr_loss", "handle_ipus"]


def handle_ipus(ts: Sequence[popxl.Tensor], ipus: Iterable[int] | None) -> list[int]:
    """The IPU of each tensor of `ts`: `ipus` when given (one per tensor, else
    ValueError), otherwise the IPU each tensor was created on (ValueError when a tensor
    has none yet: a variable or graph input no op uses)."""
    try:
        out = [t.ipu for t in ts] if ipus is None else list(ipus)
    except UndefinedValue as e:
        raise ValueError(
            "Could not automatically infer the IPU of all input Tensors. "
            "Please specify the IPUs via the `ipus` parameter."
        ) from e
    if len(ts) != len(out):
        raise ValueError(f"Number of specified tensor does not equal number of specified IPUs. {len(ts)} != {len(out)}")
    for i in out:
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise ValueError(f"IPUs must be non-negative integers, got {i!r}")
    return out


def _to(t: popxl.Tensor, src: int, dst: int) -> popxl.Tensor:
    return t if src == dst else t.copy_to_ipu(dst, src)


def cross_entropy_sharded_wr_loss(
    logits: list[popxl.Tensor], indices: list[popxl.Tensor], ipus: Iterable[int] | None = None
) -> popxl.Tensor:
    """Cross-entropy `-log_softmax(concat(logits, axis=1))[indices]` per sample, the shards
    of the logits on different IPUs of one replica.

    Args:
        logits: one `(n_samples, classes_s)` tensor per shard, in class order.
        indices: one `(n_samples,)` integer tensor per shard, all holding the same labels
            in `[0, sum classes_s)` (not shifted: the op shifts them per shard).
        ipus: the IPU of each shard and its indices (default: the IPU each logits tensor
            is on, and then each indices tensor must be on the same IPU).

    Returns:
        The unreduced loss `(n_samples,)` on `ipus[0]`, of the logits' dtype (computed in
        float32 for float16).
    """
    what = "addons.ops.cross_entropy_sharded_wr_loss"
    logits, indices = list(logits), list(indices)
    for arg, ts in (("logits", logits), ("indices", indices)):
        for t in ts:
            if not isinstance(t, popxl.Tensor):
                raise TypeError(f"{what}: every element of {arg} must be a popxl Tensor, got {type(t).__name__}")
    if not logits:
        raise ValueError(f"{what}: give at least one shard of logits")
    if len(logits) != len(indices):
        raise ValueError(f"{what}: You must provide the same number of logits and indices.")
    given = ipus is not None
    ipus = handle_ipus(logits, ipus)
    if handle_ipus(indices, ipus if given else None) != ipus:
        raise ValueError(f"{what}: The logits and indices IPUs do not match.")
    n = logits[0].shape[0] if logits[0].rank == 2 else -1
    dtype = logits[0].dtype
    for s, (x, i) in enumerate(zip(logits, indices)):
        if x.rank != 2 or x.shape[0] != n or x.dtype != dtype:
            raise ValueError(
                f"{what}: every logits shard must be (n_samples, classes) of one dtype: shard {s} is "
                f"{x.shape} {x.dtype.name}, shard 0 {logits[0].shape} {dtype.name}"
            )
        if i.rank != 1 or i.shape[0] != n or not i.dtype.is_int:
            raise ValueError(f"{what}: indices {s} must be integers of shape ({n},), got {i.shape} {i.dtype.name}")
    if not dtype.is_floating_point:
        raise TypeError(f"{what}: logits must be float tensors, got {dtype.name}")

    home = ipus[0]
    xs: list[popxl.Tensor] = []
    tops: list[popxl.Tensor] = []
    for x, ipu in zip(logits, ipus):
        with popxl.ipu(ipu):
            x = x if dtype != popxl.float16 else ops.cast(x, popxl.float32)
            xs.append(x)
            tops.append(_to(ops.detach(ops.max(x, axis=1)), ipu, home))
    with popxl.ipu(home):
        top = ops.maximum(*tops) if len(tops) > 1 else tops[0]  # detached: keeps exp in range
    parts: list[popxl.Tensor] = []
    picks: list[popxl.Tensor] = []
    offset = 0
    for x, i, ipu in zip(xs, indices, ipus):
        with popxl.ipu(ipu):
            shifted = x - _to(top, home, ipu).reshape((n, 1))
            parts.append(_to(ops.sum(ops.exp(shifted), axis=1), ipu, home))
            shifted_labels = ops.cast(i, popxl.int32) - popxl.constant(np.int32(offset))
            picks.append(_to(pick_rows(shifted, shifted_labels), ipu, home))
        offset += x.shape[1]
    with popxl.ipu(home):
        denominator, true_logit = parts[0], picks[0]
        for p, q in zip(parts[1:], picks[1:]):
            denominator = denominator + p
            true_logit = true_logit + q
        loss = ops.log(denominator) - true_logit
        return loss if loss.dtype == dtype else ops.cast(loss, dtype)
