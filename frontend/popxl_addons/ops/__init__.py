"""`addons.ops`: cross-entropy losses, layer norm helpers, host IO helpers and the tensor-parallel all-reduces."""

from popxl_addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.ops.host_io import host_load, host_store
from popxl_addons.ops.layer_norm import layer_norm, layer_norm_no_affine
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)

__all__ = [
    "cross_entropy", "cross_entropy_with_grad", "host_load", "host_store", "layer_norm", "layer_norm_no_affine",
    "replicated_all_reduce_identical_grad_inputs", "replicated_all_reduce_identical_inputs",
]  # fmt: skip
