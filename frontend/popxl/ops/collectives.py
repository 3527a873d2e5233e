"""`popxl.ops.collectives`: collectives between replicas (and between IPUs of one replica).

xl simulates replicas one after another, so they cannot exchange data yet and none of
these is implemented: each raises
`NotImplementedError("popxl.ops.collectives.<name> is not implemented in xl yet")`.
The signatures and semantics are upstream PopXL's. `op` is one of `CollectiveOps`;
`group` is a `popxl.ReplicaGrouping` (default: all replicas).
"""

from popxl.ops import _collectives
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

# The exported names are those the implementation lists (test_api_docs checks this
# module's namespace against them).
__all__ = list(_collectives.__all__)
