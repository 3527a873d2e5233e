"""`Linear(out_features, bias=True)`: `y = x @ weight + bias` (popxl_addons/layers/linear.py)."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl_addons.layers._torch import check_shape, param
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.utils import WeightsDict, truncated_normal

__all__ = ["Linear"]


class Linear(Module):
    """A fully connected layer on the last axis of `x`.

    Variables: `weight` `(in_features, out_features)` (truncated normal, std 0.02) and,
    with `bias`, `bias` `(out_features,)` (zeros); both of `x`'s dtype.
    """

    def __init__(self, out_features: int, bias: bool = True, replica_grouping: Any | None = None):
        super().__init__()
        if isinstance(out_features, bool) or not isinstance(out_features, int) or out_features < 1:
            raise ValueError(f"Linear: out_features must be a positive int, got {out_features!r}")
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x @ weight (+ bias)` for `x` of shape `(..., in_features)`: shape `(..., out_features)`."""
        if x.rank < 1:
            raise ValueError(f"Linear: the input must have rank >= 1, got shape {x.shape}")
        w = self.add_variable_input(
            "weight",
            partial(truncated_normal, (x.shape[-1], self.out_features)),
            x.dtype,
            replica_grouping=self.replica_grouping,
        )
        y = x @ w
        if self.bias:
            b = self.add_variable_input(
                "bias", partial(np.zeros, (self.out_features,)), x.dtype, replica_grouping=self.replica_grouping
            )
            y = y + b
        return y

    @staticmethod
    def torch_mapping(variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """{variable: data} from a `torch.nn.Linear` (its weight transposed)."""
        out = WeightsDict()
        w = param(nn_layer, "weight", dtype, "Linear").T
        out[variables.weight] = check_shape(np.ascontiguousarray(w), variables.weight, "Linear", "weight")
        if "bias" in variables.keys():
            out[variables.bias] = check_shape(
                param(nn_layer, "bias", dtype, "Linear"), variables.bias, "Linear", "bias"
            )
        return out
