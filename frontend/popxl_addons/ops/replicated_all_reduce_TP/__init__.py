"""`popxl_addons.ops.replicated_all_reduce_TP`: the tensor-parallel all-reduces (defined in
the submodule of the same name, upstream's layout)."""

from popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP import (
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)

__all__ = [
    "replicated_all_reduce",
    "replicated_all_reduce_identical_grad_inputs",
    "replicated_all_reduce_identical_inputs",
]
