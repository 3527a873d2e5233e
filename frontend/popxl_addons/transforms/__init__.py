"""`addons.transforms`: autodiff, autodiff_with_accumulation, recompute_graph, pipelining, ...

The transforms live in their own modules and are re-exported here (upstream does
`from .autodiff import *` etc.); `repeat_graph` is reached as its module,
`addons.transforms.repeat_graph.repeat_graph`. Upstream's module paths are there too:
`transforms.recomputation` (`recompute_graph`, `add_recompute_inputs`),
`transforms.use_fc_pass`, `transforms.available_memory_proportion`, and
`transforms.autodiff.autodiff_with_accumulation`.
"""

from __future__ import annotations

from popxl_addons.transforms import repeat_graph as repeat_graph  # the module
from popxl_addons.transforms.accumulate import autodiff_with_accumulation
from popxl_addons.transforms.autodiff import autodiff, remap_grad_info
from popxl_addons.transforms.available_memory_proportion import (
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.transforms.batch_serialisation import (
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.transforms.pipelining import pipelined_execution
from popxl_addons.transforms.recomputation import add_recompute_inputs
from popxl_addons.transforms.recompute import recompute_graph
from popxl_addons.transforms.use_fc_pass import disable_fc_pass, enable_fc_pass

__all__ = [
    "autodiff",
    "remap_grad_info",
    "autodiff_with_accumulation",
    "recompute_graph",
    "add_recompute_inputs",
    "enable_fc_pass",
    "disable_fc_pass",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
    "pipelined_execution",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "batch_serial_buffer",
    "RemoteHandle",
]
