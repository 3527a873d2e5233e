"""`NamedTensors` and `NamedTensorData`: DotTrees of tensors and of host arrays."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.dot_tree import DotTree

__all__ = ["NamedTensors", "NamedTensorData", "print_named_tensors"]


class NamedTensors(DotTree["popxl.Tensor"]):
    """A DotTree of `popxl.Tensor`s (variables, graph inputs, ...)."""

    @property
    def tensors(self) -> tuple[popxl.Tensor, ...]:
        """All tensors, sorted by tensor name."""
        return tuple(sorted(self.to_dict().values(), key=lambda t: t.name))

    @property
    def named_tensors(self) -> dict[str, popxl.Tensor]:
        """Flat dict of dotted key -> tensor (same as `to_dict`)."""
        return self.to_dict()

    def _check_leaf(self, key: str, value: Any) -> None:
        if not isinstance(value, popxl.Tensor):
            raise TypeError(
                f"NamedTensors: the value for key '{key}' must be a popxl.Tensor, got "
                f"{type(value).__name__} (use NamedTensorData or DotTree for other values)"
            )

    def remap(self, mapping: Mapping[Any, Any]) -> NamedTensors:
        """A new NamedTensors with every tensor `t` replaced by `mapping[t]`
        (KeyError naming the key and the tensor if `mapping` lacks one)."""
        if not isinstance(mapping, Mapping):
            raise TypeError(f"NamedTensors.remap: expected a mapping of tensors, got {type(mapping).__name__}")
        out = {}
        for k, t in self.to_dict().items():
            if t not in mapping:
                raise KeyError(f"NamedTensors.remap: the mapping has no entry for '{k}' ({t!r})")
            out[k] = mapping[t]
        return NamedTensors.from_dict(out)


class NamedTensorData(DotTree[np.ndarray]):
    """A DotTree of host arrays (e.g. the data of NamedTensors)."""


def print_named_tensors(nt: NamedTensors, **kwargs: Any) -> NamedTensors:
    """`ops.print_tensor` every tensor of `nt` (titled with its key); returns the printed tensors."""
    out = {}
    for k, t in nt.to_dict().items():
        kw = dict(kwargs)
        kw.setdefault("title", k)
        out[k] = ops.print_tensor(t, **kw)
    return NamedTensors.from_dict(out)
