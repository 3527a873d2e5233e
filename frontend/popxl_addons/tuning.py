"""IPU tuning knobs (upstream's available_memory.py and fc pass switches).

On an IPU these trade tile memory for speed in matmuls and convolutions
(`availableMemoryProportion` per IPU) or enable the fully-connected pass. xl runs on
NumPy, where neither changes what a program computes or how fast, so they check their
arguments and do nothing else (documented no-ops): programs that call them run
unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import popxl

__all__ = [
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
    "enable_fc_pass",
    "disable_fc_pass",
]


def _check_proportions(proportions: Any, what: str) -> list[float]:
    if isinstance(proportions, int | float) and not isinstance(proportions, bool):
        proportions = [proportions]
    if not isinstance(proportions, Iterable) or isinstance(proportions, str):
        raise TypeError(f"{what}: proportions must be a list of floats (one per IPU), got {type(proportions).__name__}")
    out = []
    for i, p in enumerate(proportions):
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 < float(p) <= 1.0:
            raise ValueError(f"{what}: proportion for IPU {i} must be a number in (0, 1], got {p!r}")
        out.append(float(p))
    if not out:
        raise ValueError(f"{what}: proportions is empty; give one per IPU")
    return out


def set_available_memory_proportion_by_ipu(ir: popxl.Ir, proportions: Iterable[float] | float) -> None:
    """No-op in xl (checks `ir` and that each proportion, or the one number, is in (0, 1])."""
    if not isinstance(ir, popxl.Ir):
        raise TypeError(f"set_available_memory_proportion_by_ipu: expected a popxl.Ir, got {type(ir).__name__}")
    _check_proportions(proportions, "set_available_memory_proportion_by_ipu")


def set_graph_available_memory_proportion_by_ipu(graph: Any, proportions: Iterable[float] | float) -> None:
    """No-op in xl (checks `graph`, a Graph or GraphWithNamedArgs, and the proportions)."""
    g = getattr(graph, "graph", graph)
    if not isinstance(g, popxl.Graph):
        raise TypeError(
            "set_graph_available_memory_proportion_by_ipu: expected a popxl.Graph or GraphWithNamedArgs, "
            f"got {type(graph).__name__}"
        )
    _check_proportions(proportions, "set_graph_available_memory_proportion_by_ipu")


def enable_fc_pass(ir: popxl.Ir) -> None:
    """No-op in xl (there is no fully-connected pass to enable)."""
    if not isinstance(ir, popxl.Ir):
        raise TypeError(f"enable_fc_pass: expected a popxl.Ir, got {type(ir).__name__}")


def disable_fc_pass(ir: popxl.Ir) -> None:
    """No-op in xl."""
    if not isinstance(ir, popxl.Ir):
        raise TypeError(f"disable_fc_pass: expected a popxl.Ir, got {type(ir).__name__}")
