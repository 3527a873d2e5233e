"""`popxl.ops.collectives`: replica collectives (not available in xl yet)."""

from __future__ import annotations

from typing import Any

from popxl.ops._utils import not_implemented

__all__ = [
    "CommGroup",
    "CommGroupType",
    "all_reduce",
    "all_reduce_identical_grad_inputs",
    "all_reduce_identical_inputs",
    "replica_sharded_slice",
    "replicated_all_gather",
    "replicated_all_reduce",
    "replicated_all_reduce_",
    "replicated_reduce_scatter",
    "replicated_slice",
]

CollectiveOps = ("add", "mean", "mul", "min", "max", "and", "or", "square_add")


def _stub(name: str) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        raise not_implemented(f"popxl.ops.collectives.{name}")

    f.__name__ = name
    return f


replicated_all_reduce = _stub("replicated_all_reduce")
replicated_all_reduce_ = _stub("replicated_all_reduce_")
replicated_reduce_scatter = _stub("replicated_reduce_scatter")
replicated_all_gather = _stub("replicated_all_gather")
replica_sharded_slice = _stub("replica_sharded_slice")
replicated_slice = _stub("replicated_slice")
all_reduce = _stub("all_reduce")
all_reduce_identical_inputs = _stub("all_reduce_identical_inputs")
all_reduce_identical_grad_inputs = _stub("all_reduce_identical_grad_inputs")


class CommGroupType:
    All = 0
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3


class CommGroup:
    def __init__(self, type: int = CommGroupType.All, replicaGroupSize: int = 0):
        self.type = type
        self.replicaGroupSize = replicaGroupSize
