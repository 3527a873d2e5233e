"""`GroupNorm(num_groups)` over channel axis 1 (popxl_addons/layers/group_norm.py)."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.layers._torch import check_shape, param
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.utils import WeightsDict

__all__ = ["GroupNorm"]


class GroupNorm(Module):
    """`ops.group_norm(x, weight, bias, num_groups, eps)` of `x` `(N, C, *)`; variables
    `weight` (ones) and `bias` (zeros) of shape `(C,)`."""

    def __init__(self, num_groups: int, replica_grouping: Any | None = None, eps: float = 1e-5, cache: bool = False):
        super().__init__(cache)
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
            raise ValueError(f"GroupNorm: num_groups must be a positive int, got {num_groups!r}")
        self.num_groups = num_groups
        self.replica_grouping = replica_grouping
        self.eps = eps

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x` `(N, C, *)` normalised per group of channels, scaled by `weight`, shifted by `bias`."""
        if x.rank < 2:
            raise ValueError(f"GroupNorm: the input must be (N, C, *), got shape {x.shape}")
        c = x.shape[1]
        self.weight = self.add_variable_input(
            "weight", partial(np.ones, (c,)), x.dtype, replica_grouping=self.replica_grouping
        )
        self.bias = self.add_variable_input(
            "bias", partial(np.zeros, (c,)), x.dtype, replica_grouping=self.replica_grouping
        )
        return ops.group_norm(x, self.weight, self.bias, num_groups=self.num_groups, eps=self.eps)

    @staticmethod
    def torch_mapping(variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """{variable: data} from a `torch.nn.GroupNorm`."""
        return WeightsDict(
            {
                variables.weight: check_shape(
                    param(nn_layer, "weight", dtype, "GroupNorm"), variables.weight, "GroupNorm", "weight"
                ),
                variables.bias: check_shape(
                    param(nn_layer, "bias", dtype, "GroupNorm"), variables.bias, "GroupNorm", "bias"
                ),
            }
        )
