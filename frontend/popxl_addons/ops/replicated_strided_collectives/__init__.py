"""`popxl_addons.ops.replicated_strided_collectives`: all-gather, all-reduce and
reduce-scatter over groups of replicas given by a stride and a group size (upstream's
layout: one submodule each).

Upstream implements them with its own strided GCL calls; xl's replica collectives take
any `popxl.ReplicaGrouping` (strided ones included), so these are those collectives with
upstream's shapes: the gathered and scattered tensors are flat, a reduce-scatter pads
`t` with zeros to a multiple of the group size, and a gather of a sharded tensor
(`meta_shape`) is reshaped to it.
"""

from popxl_addons.ops.replicated_strided_collectives.replicated_all_gather_strided import (
    replicated_all_gather_strided,
)
from popxl_addons.ops.replicated_strided_collectives.replicated_all_reduce_strided import (
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_graph,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
)
from popxl_addons.ops.replicated_strided_collectives.replicated_reduce_scatter_strided import (
    replicated_reduce_scatter_strided,
)

__all__ = [
    "replicated_all_gather_strided",
    "replicated_all_reduce_strided",
    "replicated_all_reduce_strided_graph",
    "replicated_all_reduce_strided_identical_grad_inputs",
    "replicated_all_reduce_strided_identical_inputs",
    "replicated_reduce_scatter_strided",
]
