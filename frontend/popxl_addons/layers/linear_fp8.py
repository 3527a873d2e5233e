"""`LinearFP8`: a linear layer computed in float8 (popxl_addons/layers/linear_fp8.py).

Forward: the weight and the input are cast to `popxl.float8_143` with scales from
`scale_metric` and multiplied with `ops.matmul_pow2scaled`. Backward (its own
`build_grad`): the incoming gradient is cast to `popxl.float8_152` (its scale lowered by
3 for headroom) and both products are float8 matmuls too; the bias gradient is the sum
of the gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.layers._torch import param
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.ops.fp8_amax_scale import fp8_amax_scale
from popxl_addons.ops.fp8_mse_scale import fp8_mse_scale
from popxl_addons.utils import WeightsDict, truncated_normal

__all__ = ["LinearFP8"]


class LinearFP8(Module):
    """`x @ weight + bias` with float8 products.

    Args:
        out_features: the output size.
        bias: whether to add a `bias` variable (zeros).
        scale_metric: how the float8 scales are chosen: `"amax"` (`fp8_amax_scale`),
            `"mse"` (`fp8_mse_scale`) or `"manual_scale"` (the fixed `scale`).
        scale: the `log2_scale` of `"manual_scale"`.
        replica_grouping: the grouping of the variables.

    The weight `(in, out)` starts from a normal of std 0.02 truncated at 2 std.
    """

    def __init__(
        self,
        out_features: int,
        bias: bool = True,
        scale_metric: str = "amax",
        scale: int = 0,
        replica_grouping: popxl.ReplicaGrouping | None = None,
    ):
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping
        self.scale_metric = scale_metric
        self.scale = scale
        self.forward_fp8_type = popxl.float8_143
        self.grad_fp8_type = popxl.float8_152
        self.fp8_scale: Callable[[popxl.Tensor, Any], popxl.Tensor]
        if scale_metric == "amax":
            self.fp8_scale = fp8_amax_scale
        elif scale_metric == "mse":
            self.fp8_scale = fp8_mse_scale
        elif scale_metric == "manual_scale":
            if not isinstance(scale, int) or isinstance(scale, bool) or not -32 <= scale < 32:
                raise ValueError(f"LinearFP8: scale must be an int in [-32, 32), got {scale!r}")
            self.fp8_scale = lambda t, dtype: popxl.constant(np.int32(self.scale), popxl.int32)
        else:
            raise ValueError(
                f"The scale_metric option {scale_metric} is not available. "
                "Please provide one of the following options: amax, mse or manual_scale."
            )

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x @ weight + bias` for float16 / float32 `x`, the product taken in float8 with the chosen scales."""
        if x.dtype not in (popxl.float16, popxl.float32):
            raise TypeError(f"LinearFP8: the input must be float16 or float32, got {x.dtype.name}")
        w = self.add_variable_input(
            "weight",
            partial(truncated_normal, (x.shape[-1], self.out_features)),
            x.dtype,
            replica_grouping=self.replica_grouping,
        )
        lead = x.shape[:-1]
        x2 = x.reshape((-1, x.shape[-1])) if x.rank != 2 else x
        w_log2scale = self.fp8_scale(w, self.forward_fp8_type)
        w_fp8 = ops.pow2scale_cast_to_fp8(w, log2_scale=w_log2scale, data_type=self.forward_fp8_type)
        x_log2scale = self.fp8_scale(x2, self.forward_fp8_type)
        x_fp8 = ops.pow2scale_cast_to_fp8(x2, log2_scale=x_log2scale, data_type=self.forward_fp8_type)
        self.aux["w_log2scale"] = w_log2scale
        self.aux["w_fp8"] = w_fp8
        self.aux["x_log2scale"] = x_log2scale
        self.aux["x_fp8"] = x_fp8
        y = ops.matmul_pow2scaled(x_fp8, w_fp8, log2_scale=-w_log2scale - x_log2scale)  # float16
        if y.dtype != x.dtype:
            y = ops.cast(y, x.dtype)
        if x.rank != 2:
            y = y.reshape((*lead, self.out_features))
        if self.bias:
            b = self.add_variable_input(
                "bias", partial(np.zeros, self.out_features), x.dtype, replica_grouping=self.replica_grouping
            )
            y = y + b
        return y

    def build_grad(self, dLdy: popxl.Tensor) -> popxl.Tensor:
        """dL/dx from float8 products; sets the gradients of `weight` (and `bias`)."""
        dtype = dLdy.dtype
        shape = dLdy.shape
        dy = dLdy.reshape((-1, shape[-1])) if dLdy.rank != 2 else dLdy
        dy_log2scale = ops.clip(self.fp8_scale(dy, self.grad_fp8_type) - popxl.constant(np.int32(3)), -31, 31)
        dy_fp8 = ops.pow2scale_cast_to_fp8(dy, log2_scale=dy_log2scale, data_type=self.grad_fp8_type)
        dx = ops.matmul_pow2scaled(dy_fp8, self.aux["w_fp8"].T, log2_scale=-self.aux["w_log2scale"] - dy_log2scale)
        dw = ops.matmul_pow2scaled(dy_fp8.T, self.aux["x_fp8"], log2_scale=-self.aux["x_log2scale"] - dy_log2scale).T
        if dw.dtype != dtype:
            dx, dw = ops.cast(dx, dtype), ops.cast(dw, dtype)
        self.var_grad["weight"] = dw
        if self.bias:
            self.var_grad["bias"] = ops.sum(dy, 0)
        return dx if len(shape) == 2 else dx.reshape((*shape[:-1], dx.shape[-1]))

    @staticmethod
    def torch_mapping(variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """{variable: data} from a `torch.nn.Linear` (its weight transposed to `(in, out)`)."""
        state = {variables.weight: param(nn_layer, "weight", dtype, "LinearFP8").T.copy()}
        if "bias" in variables.keys():
            state[variables.bias] = param(nn_layer, "bias", dtype, "LinearFP8")
        return WeightsDict(state)
