"""`LinearGQ`: a linear layer whose weight is stored 4-bit group-quantised
(popxl_addons/layers/linear_gq.py); see `popxl_addons.ops.group_quantize_decompress`."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl_addons.layers._torch import param
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.ops.group_quantize_decompress import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
)
from popxl_addons.utils import WeightsDict

__all__ = ["LinearGQ", "group_quantize_compress_numpy"]


class LinearGQ(Module):
    """`x @ decompress(weight) + bias` with the `(in_features, out_features)` weight held as
    three variables: `weight_compressed` (uint16, four 4-bit integers each),
    `weight_decompression_scale` and `weight_decompression_bias` (the dtype of `x`), in
    groups of `group_size` values along the output axis (`dim=-1` or 1) or the input axis
    (`dim=0`). The variables start as zeros; load real weights with `torch_mapping` (which
    quantises a `torch.nn.Linear`'s weight) or `group_quantize_compress_numpy`.

    Args:
        out_features: the output size.
        bias: whether to add a `bias` variable.
        replica_grouping: the grouping of the variables (tensor-parallel shards).
        group_size: values per quantisation group, a positive multiple of 4 dividing the
            quantised axis.
        dim: the quantised axis of the `(in, out)` weight: -1 / 1 (out) or 0 (in).
    """

    def __init__(
        self,
        out_features: int,
        bias: bool = True,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        group_size: int = 0,
        dim: int = -1,
    ):
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping
        self.group_size = group_size
        self.dim = dim

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x @ decompress(weight) + bias` for `x` of shape `(..., in_features)`."""
        in_features = x.shape[-1]
        if self.dim in (1, -1):
            kept, quantised = in_features, self.out_features
        elif self.dim == 0:
            kept, quantised = self.out_features, in_features
        else:
            raise ValueError(f"LinearGQ: dim must be -1, 1 or 0, got {self.dim!r}")
        gs = self.group_size
        if not isinstance(gs, int) or gs <= 0 or gs % 4 or quantised % gs:
            raise ValueError(
                f"LinearGQ: group_size must be a positive multiple of 4 dividing the quantised axis of size "
                f"{quantised}, got {gs!r}"
            )
        groups = quantised // gs
        rg = self.replica_grouping
        w_packed = self.add_variable_input(
            "weight_compressed", partial(np.zeros, (kept, groups, gs // 4)), popxl.uint16, replica_grouping=rg
        )
        w_scale = self.add_variable_input(
            "weight_decompression_scale", partial(np.zeros, (kept, groups, 1)), x.dtype, replica_grouping=rg
        )
        w_bias = self.add_variable_input(
            "weight_decompression_bias", partial(np.zeros, (kept, groups, 1)), x.dtype, replica_grouping=rg
        )
        y = x @ group_quantize_decompress(w_packed, w_scale, w_bias, self.dim)
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype, replica_grouping=rg)
            y = y + b
        return y

    @staticmethod
    def torch_mapping(
        variables: NamedTensors,
        nn_layer: Any,
        dtype: popxl.dtype = popxl.float32,
        group_size: int = 64,
        dim: int = -1,
    ) -> WeightsDict:
        """{variable: data} from a `torch.nn.Linear`: its weight (transposed to `(in, out)`)
        quantised with `group_size` and `dim`, and its bias in `dtype`."""
        weight = param(nn_layer, "weight", popxl.float32, "LinearGQ").T
        packed, scale, bias = group_quantize_compress_numpy(weight, group_size, dim=dim)
        state = {
            variables.weight_compressed: packed,
            variables.weight_decompression_scale: scale.astype(variables.weight_decompression_scale.dtype.as_numpy()),
            variables.weight_decompression_bias: bias.astype(variables.weight_decompression_bias.dtype.as_numpy()),
        }
        if "bias" in variables.keys():
            state[variables.bias] = param(nn_layer, "bias", dtype, "LinearGQ")
        return WeightsDict(state)
