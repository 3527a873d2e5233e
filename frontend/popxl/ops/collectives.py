"""`popxl.ops.collectives`: collectives between replicas (and between IPUs of one replica).

xl runs one replica (`ir.replication_factor` is recorded but the runtime executes a
single instance), so none of these is implemented yet: each raises
`NotImplementedError("popxl.ops.collectives.<name> is not implemented in xl yet")`.
The signatures and semantics are upstream PopXL's. `op` is one of `CollectiveOps`;
`group` is a `popxl.ReplicaGrouping` (default: all replicas).
"""

from popxl.ops._collectives import (
    all_reduce,
    all_reduce_identical_grad_inputs,
    all_reduce_identical_inputs,
    CollectiveOps,
    CommGroup,
    CommGroupType,
    replica_sharded_slice,
    replicated_all_gather,
    replicated_all_reduce,
    replicated_all_reduce_,
    replicated_reduce_scatter,
    replicated_slice,
)

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
