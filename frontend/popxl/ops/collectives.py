"""`popxl.ops.collectives`: collectives between replicas (and between IPUs of one replica).

The signatures and semantics are upstream PopXL's. `op` is one of `CollectiveOps`;
`group` is a `popxl.ReplicaGrouping` (default: all replicas; a legacy `CommGroup` is
accepted too). The replica collectives are ops of the `replica` dialect
(`replica.all_reduce`, `replica.all_gather`, ...) with their gradient rules; `all_reduce`
and its `identical_*` variants reduce across the IPUs of one replica with `ipu.copy` and
elementwise ops.
"""

from popxl.ops._collectives import (
    CollectiveOps,
    CommGroup,
    CommGroupType,
    all_reduce,
    all_reduce_identical_grad_inputs,
    all_reduce_identical_inputs,
    replica_sharded_slice,
    replicated_all_gather,
    replicated_all_reduce,
    replicated_all_reduce_,
    replicated_reduce_scatter,
    replicated_slice,
)

# The names the implementation exports (`_collectives.__all__`; test_api_docs checks the two lists agree
# and that this module's namespace is exactly them).
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
