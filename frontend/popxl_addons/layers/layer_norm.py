"""`LayerNorm`: layer normalisation of `(N, C)` rows (popxl_addons/layers/layer_norm.py)."""

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

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    """`ops.layer_norm(x, weight, bias, eps)` of a 2-d input `(N, C)` (flatten the
    dimensions to normalise over into the last one first; ValueError otherwise).
    Variables `weight` (ones) and `bias` (zeros) of shape `(C,)`."""

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        """`x` `(N, C)` normalised over `C`, scaled by `weight` and shifted by `bias`."""
        if x.rank != 2:
            raise ValueError(
                f"LayerNorm: the input tensor must be of shape N x C, got {x.shape}. Please flatten "
                "all extra dimensions."
            )
        w = self.add_variable_input("weight", partial(np.ones, (x.shape[-1],)), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, (x.shape[-1],)), x.dtype)
        return ops.layer_norm(x, w, b, eps=eps)

    @staticmethod
    def torch_mapping(variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """{variable: data} from a `torch.nn.LayerNorm` (a multi-dimensional
        `normalized_shape` is flattened, as the input must be)."""
        w = param(nn_layer, "weight", dtype, "LayerNorm").reshape(-1)
        b = param(nn_layer, "bias", dtype, "LayerNorm").reshape(-1)
        return WeightsDict(
            {
                variables.weight: check_shape(w, variables.weight, "LayerNorm", "weight"),
                variables.bias: check_shape(b, variables.bias, "LayerNorm", "bias"),
            }
        )
