"""The implementation of `popxl.ops.collectives` (re-exported there, with its documentation)."""

from __future__ import annotations

from typing import Any

from popxl.ops._utils import unimplemented, wrap_public_ops
from popxl.tensor import Tensor

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
    "CollectiveOps",
]

# The reductions a collective's `op` may name.
CollectiveOps = ("add", "mean", "mul", "min", "max", "and", "or", "square_add")


@unimplemented
def replicated_all_reduce(t: Tensor, op: str = "add", group: Any = None) -> Tensor:
    """`t` reduced with `op` over the replicas of `group`; every replica gets the result.

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def replicated_all_reduce_(t: Tensor, op: str = "add", group: Any = None) -> Tensor:
    """`replicated_all_reduce` in place: `t` holds the reduction; returns `t`.

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def replicated_reduce_scatter(
    t: Tensor, op: str = "add", group: Any = None,
    configure_output_for_replicated_tensor_sharding: bool = False,
) -> Tensor:
    """`t` (flattened) reduced with `op` over the replicas of `group`; each replica gets its
    1-D shard of the result.

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def replicated_all_gather(
    t: Tensor, axis: int = 0, group: Any = None, output_shape: str = "auto"
) -> Tensor:
    """The tensors `t` of all replicas of `group` gathered along `axis` (a new axis or
    concatenated, per `output_shape`).

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def replica_sharded_slice(t: Tensor, group: Any = None) -> Tensor:
    """This replica's 1-D shard of `t` (flattened) for replicated tensor sharding.

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def replicated_slice(t: Tensor, axis: int = 0, group: Any = None) -> Tensor:
    """This replica's slice of `t` along `axis` (the dim divided by the group size).

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def all_reduce(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """The tensors `ts` (one per IPU of `ipus`, within one replica) reduced with `op`; one
    copy of the result per IPU.

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def all_reduce_identical_inputs(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """`all_reduce` whose inputs are known to be identical: the forward pass is an
    identity, the gradient an all-reduce.

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


@unimplemented
def all_reduce_identical_grad_inputs(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """`all_reduce` whose input gradients are known to be identical: the forward pass is an
    all-reduce, the gradient an identity.

    Not implemented in xl yet: raises `NotImplementedError`.
    """
    ...


class CommGroupType:
    """How replicas are grouped for a collective (legacy PopART API)."""

    __module__ = "popxl.ops.collectives"

    All = 0
    """One group of all replicas."""
    Consecutive = 1
    """Groups of `replicaGroupSize` consecutive replicas."""
    Orthogonal = 2
    """Groups of replicas `replicaGroupSize` apart."""
    Ungrouped = 3
    """Each replica on its own."""


class CommGroup:
    """A replica group for a collective (legacy PopART API; prefer `popxl.ReplicaGrouping`):
    a `CommGroupType` and the group size."""

    __module__ = "popxl.ops.collectives"

    def __init__(self, type: int = CommGroupType.All, replicaGroupSize: int = 0):
        self.type = type
        self.replicaGroupSize = replicaGroupSize


wrap_public_ops(globals(), __all__, "popxl.ops.collectives")
