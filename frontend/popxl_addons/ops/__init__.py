"""`addons.ops`: cross-entropy losses, layer norm helpers and host IO helpers."""

from popxl_addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.ops.host_io import host_load, host_store
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.ops.layer_norm import layer_norm, layer_norm_no_affine

__all__ = [
    "cross_entropy", "cross_entropy_with_grad", "host_load", "host_store", "layer_norm", "layer_norm_no_affine",
]  # fmt: skip
