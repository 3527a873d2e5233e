"""How closely two plans of one program must agree: what "the same results" means.

The optimised plan (`compile_module(m)`) computes some float values another way than the
straightforward plan (`compile_module(m, optimize=False)`), and an outlined, recomputed or
pipelined program another way than its plain form:

- an SGD update folded into the weight-gradient matmul is one accumulating BLAS gemm, which
  adds the products in another order than a matmul followed by a scaled add (measured on a
  784x512 update: at most 1 ulp of the result's largest element);
- fused elementwise chains compute the same float32 operations in the same order (measured
  equal), but what they feed may be folded or summed differently;
- an outlined function, a recomputed activation or a pipelined stage may be folded differently.

The differences add up through a step: over three MNIST training steps (`examples/mnist.py`,
`mnist_popxl.py`) at most 6.2 float32 ulps of the largest element of a weight array, losses
equal. Everything else — ints and bools, copies, views, host transfers, collectives, random
ops — is the same bit for bit, and tests of those compare exactly (`assert_array_equal`).

`PLAN_TOL` is what a comparison of two plans allows: 8.4 float32 ulps of the value itself
(`rtol`), or of 1 for a value that results from cancellation among operands of magnitude about
1, the data of the tests (`atol`). `CHAIN_TOL` is for random programs of up to 14 ops run over
two steps (`tests/runtime/test_runtime_optimize_random.py`, the fuzzer's differential check), where the
differences of successive ops add up: ten times `PLAN_TOL`.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np


class Tolerance(TypedDict):
    rtol: float
    atol: float


FLOAT32_ULP = float(np.finfo(np.float32).eps)
"""One float32 ulp at 1.0 (1.19e-7)."""

PLAN_TOL = Tolerance(rtol=1e-6, atol=1e-6)
"""Two plans of one program: 8.4 float32 ulps (see the module docstring)."""

CHAIN_TOL = Tolerance(rtol=10 * PLAN_TOL["rtol"], atol=10 * PLAN_TOL["atol"])
"""Two plans of a random chain of up to 14 ops over two steps."""


def assert_plans_agree(got: np.ndarray, want: np.ndarray, err_msg: str = "", tol: Tolerance = PLAN_TOL) -> None:
    """`got` and `want`, results of two plans of one program, agree: within `tol` for floats,
    exactly for ints and bools, NaN where NaN."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, **tol, equal_nan=True, err_msg=err_msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=err_msg)
