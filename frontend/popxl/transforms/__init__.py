"""`popxl.transforms`: graph transforms (autodiff, ...)."""

from __future__ import annotations

from popxl.transforms.autodiff import ExpectedConnection, ExpectedConnectionType, GradGraphInfo, autodiff
from popxl.transforms.decompose_sum import decompose_sum
from popxl.transforms.merge_exchange import io_tile_exchange, merge_exchange

__all__ = [
    "ExpectedConnection",
    "ExpectedConnectionType",
    "GradGraphInfo",
    "autodiff",
    "decompose_sum",
    "io_tile_exchange",
    "merge_exchange",
]
