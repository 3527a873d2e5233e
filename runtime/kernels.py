"""NumPy kernels for the `rt.kernel` ops, keyed by the high-level op name.

Contract: ``KERNELS[op_name](props) -> fn`` where ``props`` is the op's properties as
plain Python values (see ``xl.dialects.popxl.op_props``) and ``fn(*ins, *outs)`` is
called with the input arrays followed by preallocated output arrays (right shape and
dtype) that it must fill in place. For ops that update operands in place (``WRITES``),
``outs`` are the written operands (the same arrays as in ``ins``) followed by results.
Factories run once at compile time; ``fn`` runs every step, so it does no lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Kernel = Callable[..., None]
KernelFactory = Callable[[dict[str, Any]], Kernel]

KERNELS: dict[str, KernelFactory] = {}


def register(name: str) -> Callable[[KernelFactory], KernelFactory]:
    def deco(f: KernelFactory) -> KernelFactory:
        KERNELS[name] = f
        return f

    return deco


@register("popxl.add")
def _add(p: dict[str, Any]) -> Kernel:
    def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.add(a, b, out=out)

    return k


@register("popxl.matmul")
def _matmul(p: dict[str, Any]) -> Kernel:
    def k(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        np.matmul(a, b, out=out)

    return k
