"""`addons.transforms`: autodiff, autodiff_with_accumulation, recompute_graph, pipelining, ...

The transforms live in their own modules and are re-exported here (upstream does
`from .autodiff import *` etc.); `repeat_graph` is reached as its module,
`addons.transforms.repeat_graph.repeat_graph`.
"""

from __future__ import annotations

from popxl_addons.transforms import repeat_graph as repeat_graph  # the module
from popxl_addons.transforms.accumulate import autodiff_with_accumulation
from popxl_addons.transforms.autodiff import autodiff, remap_grad_info
from popxl_addons.transforms.batch_serialisation import (
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.transforms.pipelining import pipelined_execution
from popxl_addons.transforms.recompute import recompute_graph

__all__ = [
    "autodiff",
    "remap_grad_info",
    "autodiff_with_accumulation",
    "recompute_graph",
    "pipelined_execution",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "batch_serial_buffer",
    "RemoteHandle",
]
