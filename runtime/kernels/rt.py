"""NumPy kernels for the kernels that only `rt` optimisation passes create (`xl.*`).

The optimised plan (`xl.runtime.plan`) has its own code for them; these factories let
the straightforward plan (and `xl-run`) execute an optimised `rt` program too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xl.dialects.rt_kernels import FusedOp, GemmAccOp
from xl.runtime.errors import PlanError
from xl.runtime.kernels.core import running_mean_factors
from xl.runtime.kernels.registry import Kernel, kernel, kernel_factory


@kernel(GemmAccOp)
def _gemm_acc(p: dict[str, Any]) -> Kernel:
    """`c = alpha * op(a) @ op(b) + beta * c` (`op` transposes when `trans_a`/`trans_b`); with
    a fourth input, the step counter `s`, `alpha = 1 / (s + 1)` and `beta = s / (s + 1)`."""
    ta, tb = bool(p.get("trans_a", False)), bool(p.get("trans_b", False))

    def k(a: np.ndarray, b: np.ndarray, c: np.ndarray, *rest: np.ndarray) -> None:
        if len(rest) == 2:
            alpha, beta = running_mean_factors(float(rest[0].item()))
        else:
            alpha, beta = float(p["alpha"]), float(p["beta"])
        prod = np.matmul(a.T if ta else a, b.T if tb else b)
        prod *= alpha
        if beta != 1.0:
            c *= beta
        c += prod

    return k


_PARSED: dict[int, tuple[Any, list]] = {}


def parse_steps(steps: Any) -> list[tuple[str, tuple[int, ...], dict[str, Any]]]:
    """The `steps` attribute of `xl.fused`: [(kernel, args, props)] (args: -1 = previous result)."""
    hit = _PARSED.get(id(steps))
    if hit is not None and hit[0] is steps:
        return hit[1]
    from xl.dialects.popxl import from_attr

    out = []
    for d in steps.data:
        items = d.data
        name = items["kernel"].data
        args = tuple(int(a) for a in items["args"].get_values())
        props = {k: from_attr(v) for k, v in items.items() if k not in ("kernel", "args")}
        out.append((name, args, props))
    _PARSED[id(steps)] = (steps, out)  # attributes are immutable and shared by clones
    return out


@kernel(FusedOp)
def _fused(p: dict[str, Any]) -> Kernel:
    """Runs the steps in order, each writing the output buffer (elementwise kernels are alias-safe)."""
    steps = [(_step_factory(name)(props), args) for name, args, props in parse_steps(p["steps"])]

    def k(*a: np.ndarray) -> None:
        ins, out = a[:-1], a[-1]
        for fn, args in steps:
            fn(*[out if j < 0 else ins[j] for j in args], out)

    return k


def _step_factory(name: str):  # noqa: ANN202
    factory = kernel_factory(name)
    if factory is None:
        raise PlanError(f"runtime: no NumPy kernel for '{name}' (a step of xl.fused)")
    return factory
