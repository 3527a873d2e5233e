"""`addons.ops`: cross-entropy losses, layer norm helpers, host IO helpers, the tensor-parallel
all-reduces and `fp8_amax_scale`.

The ops upstream writes as C++ custom ops are imported by their module, as upstream:
`popxl_addons.ops.cross_entropy_sharded_loss`, `.cross_entropy_sharded_wr_loss`,
`.grad_reduce_square_add`, `.group_quantize_decompress`, `.layer_norm_distributed`,
`.linear_layout`, `.replicated_all_reduce_TP`, `.replicated_strided_collectives`,
`.rotary_pos_embed`, `.static_sparse_ops`, `.fp8_mse_scale` (`.fp8_utils`: the formats)."""

from popxl_addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.ops.fp8_amax_scale import fp8_amax_scale
from popxl_addons.ops.host_io import host_load, host_store
from popxl_addons.ops.layer_norm import layer_norm, layer_norm_no_affine
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)

__all__ = [
    "cross_entropy", "cross_entropy_with_grad", "fp8_amax_scale", "host_load", "host_store", "layer_norm",
    "layer_norm_no_affine", "replicated_all_reduce_identical_grad_inputs", "replicated_all_reduce_identical_inputs",
]  # fmt: skip
