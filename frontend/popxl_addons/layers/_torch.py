"""Parameters of torch layers as NumPy arrays (torch is optional: only the argument's
`.detach().cpu().numpy()` is used)."""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl


def param(nn_layer: Any, name: str, dtype: popxl.dtype, layer: str) -> np.ndarray:
    p = getattr(nn_layer, name, None)
    if p is None:
        raise ValueError(f"{layer}.torch_mapping: the torch layer {type(nn_layer).__name__} has no {name!r}")
    data = getattr(p, "data", p)
    if hasattr(data, "detach"):
        data = data.detach().cpu().numpy()
    return np.asarray(data).astype(dtype.as_numpy())


def check_shape(arr: np.ndarray, var: popxl.Tensor, layer: str, name: str) -> np.ndarray:
    if tuple(arr.shape) != tuple(var.shape):
        raise ValueError(
            f"{layer}.torch_mapping: the torch {name} has shape {arr.shape} (after mapping), the "
            f"variable {var.name!r} {tuple(var.shape)}"
        )
    return arr
