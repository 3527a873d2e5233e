"""Argument checks shared by the strided collectives."""

from __future__ import annotations

from typing import Any

import popxl


def checked(t: Any, group: Any, what: str) -> popxl.ReplicaGrouping:
    """The grouping of a strided collective of `t` (default: all replicas)."""
    if not isinstance(t, popxl.Tensor):
        raise TypeError(f"{what}: t must be a popxl Tensor, got {type(t).__name__}")
    ir = t.ir
    group = ir.replica_grouping() if group is None else group
    if not isinstance(group, popxl.ReplicaGrouping):
        raise TypeError(f"{what}: group must be a popxl.ReplicaGrouping, got {type(group).__name__}")
    return group


def checked_op(op: Any, what: str) -> str:
    """Upstream's strided reductions implement `add` and `mean` only."""
    if op not in ("add", "mean"):
        raise ValueError(f"{what}: op must be 'add' or 'mean' (the strided collectives implement those), got {op!r}")
    return op
