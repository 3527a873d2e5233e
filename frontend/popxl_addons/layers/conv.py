"""`Conv2D(out_channels, kernel_size, ...)` on `(N, C, H, W)` (popxl_addons/layers/conv.py)."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.layers._torch import check_shape, param
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.utils import WeightsDict, truncated_normal

__all__ = ["Conv2D"]


class Conv2D(Module):
    """`ops.conv(x, weight, ...) + bias` for `x` `(N, C, H, W)`.

    Args:
        out_channels: output channels M.
        kernel_size: int or (kh, kw).
        strides, dilations: (sh, sw), (dh, dw).
        paddings: (top, left, bottom, right) (ONNX order) or a pad type 'same_upper',
            'same_lower', 'valid'.
        groups: channel groups.
        bias: add a bias per output channel (variable of shape (1, M, 1, 1)).
        available_memory_proportions, partials_types, enable_conv_dithering: passed to
            `ops.conv` (IPU tuning; no effect in xl).

    Variables: `weight` `(M, C / groups, kh, kw)` (truncated normal, std 0.02), `bias`.
    """

    def __init__(
        self,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        strides: tuple[int, int] = (1, 1),
        paddings: str | tuple[int, int, int, int] = (0, 0, 0, 0),
        dilations: tuple[int, int] = (1, 1),
        groups: int = 1,
        bias: bool = True,
        available_memory_proportions: list[float] | None = None,
        partials_types: list[str] | None = None,
        enable_conv_dithering: list[int] | None = None,
        replica_grouping: Any | None = None,
    ):
        super().__init__()
        self.out_channels = out_channels
        if isinstance(kernel_size, tuple | list):
            if len(kernel_size) != 2:
                raise ValueError(f"Conv2D: kernel_size must be an int or (kh, kw), got {kernel_size!r}")
            self.k_h, self.k_w = int(kernel_size[0]), int(kernel_size[1])
        else:
            self.k_h = self.k_w = int(kernel_size)
        self.strides = tuple(strides)
        self.dilations = tuple(dilations)
        self.groups = groups
        if isinstance(paddings, str):
            self.pad_type = paddings
            self.paddings = (0, 0, 0, 0)
        else:
            self.pad_type = "not_set"
            self.paddings = tuple(paddings)
        self.use_bias = bias
        self.replica_grouping = replica_grouping
        self.available_memory_proportions = available_memory_proportions
        self.partials_types = partials_types
        self.enable_conv_dithering = enable_conv_dithering

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """The convolution of `x` `(N, C, H, W)` with `weight`, plus `bias`: `(N, out_channels, H', W')`."""
        if x.rank != 4:
            raise ValueError(f"Conv2D: the input must be (N, C, H, W), got shape {x.shape}")
        c = x.shape[1]
        if c % self.groups:
            raise ValueError(f"Conv2D: {c} input channels are not divisible by groups={self.groups}")
        kernel_shape = (self.out_channels, c // self.groups, self.k_h, self.k_w)
        self.weight = self.add_variable_input(
            "weight", partial(truncated_normal, kernel_shape), x.dtype, replica_grouping=self.replica_grouping
        )
        y = ops.conv(
            x,
            self.weight,
            stride=self.strides,
            padding=self.paddings,
            dilation=self.dilations,
            groups=self.groups,
            pad_type=self.pad_type,
            available_memory_proportions=self.available_memory_proportions,
            partials_types=self.partials_types,
            enable_conv_dithering=self.enable_conv_dithering,
        )
        if self.use_bias:
            self.bias = self.add_variable_input(
                "bias",
                partial(np.zeros, (1, self.out_channels, 1, 1)),
                x.dtype,
                replica_grouping=self.replica_grouping,
            )
            y = y + self.bias
        return y

    @staticmethod
    def torch_mapping(variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """{variable: data} from a `torch.nn.Conv2d` (same weight layout; bias reshaped)."""
        out = WeightsDict()
        out[variables.weight] = check_shape(
            param(nn_layer, "weight", dtype, "Conv2D"), variables.weight, "Conv2D", "weight"
        )
        if "bias" in variables.keys():
            b = param(nn_layer, "bias", dtype, "Conv2D").reshape(variables.bias.shape)
            out[variables.bias] = b
        return out
