"""NumPy kernels for the kernels that only `rt` optimisation passes create (`xl.*`).

The optimised plan (`xl.runtime.plan`) has its own code for them; these factories let
the straightforward plan (and `xl-run`) execute an optimised `rt` program too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xl.runtime.kernels import Kernel, register


@register("xl.gemm_acc")
def _gemm_acc(p: dict[str, Any]) -> Kernel:
    """`c = alpha * op(a) @ op(b) + beta * c` (`op` transposes when `trans_a`/`trans_b`)."""
    alpha, beta = float(p["alpha"]), float(p["beta"])
    ta, tb = bool(p.get("trans_a", False)), bool(p.get("trans_b", False))

    def k(a: np.ndarray, b: np.ndarray, c: np.ndarray, c_out: np.ndarray) -> None:
        prod = np.matmul(a.T if ta else a, b.T if tb else b)
        prod *= alpha
        if beta != 1.0:
            c *= beta
        c += prod

    return k
