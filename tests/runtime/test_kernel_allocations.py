"""A steady step allocates no temporary the size of a kernel's data.

Kernels that used to (each second call measured with tracemalloc, inputs of the kernel
cases of `tests/helpers/kernel_cases.py` repeated along their first axis to about 1 MiB):

- `popxl.gather`: `np.take(..., out=)` in NumPy's default mode copies through a temporary
  as large as `out`; the indices are checked first, so mode "wrap" takes the same elements
  directly (what is left is NumPy's int64 copy of int32 indices);
- the Adam / LAMB / Adamax updaters: the denominator was a new array at every call (none
  is left).

The values are checked against the kernel cases' references on the repeated inputs.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import xl.dialects.popxl as P
from tests.helpers.kernel_cases import CASES, KernelCase, kernel_form
from tests.runtime.test_matmul_kernels import run_kernel

# the op class -> the largest allocation a second call may make, against its output's bytes
CLASSES = {P.GatherOp: 1.0, P.AdamUpdaterOp: 0.125, P.LambUpdaterOp: 0.125, P.AdamaxUpdaterOp: 0.125}
TARGET_BYTES = 1 << 20


def _repeated(ins: list[np.ndarray]) -> list[np.ndarray]:
    """The inputs with their first axis repeated until the largest is about TARGET_BYTES
    (0-d inputs as they are; the indices of a gather stay valid for the longer table)."""
    n = max(1, TARGET_BYTES // max(a.nbytes for a in ins))
    return [a if a.ndim == 0 else np.concatenate([a] * n, axis=0) for a in ins]


@pytest.mark.parametrize("case", [c for c in CASES if c.cls in CLASSES], ids=lambda c: c.id)
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_second_call_allocates_no_data_sized_temporary(case: KernelCase, optimize: bool) -> None:
    ins = _repeated([a for a in case.inputs(np.random.default_rng(0)) if a is not None])
    form = kernel_form(case, ins)
    outs = [np.zeros(*o) for o in form.outs if not isinstance(o, int)]
    args = [a.copy() for a in ins]
    with np.errstate(all="ignore"):
        again = run_kernel(form.name, args, outs, optimize, form.attrs)
    if case.ref is not None and not any(isinstance(o, int) for o in form.outs):
        for got, want in zip(outs, case.ref(*ins), strict=True):
            if want is not None:
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with np.errstate(all="ignore"):
            again()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    limit = int(CLASSES[case.cls] * max(a.nbytes for a in outs))
    assert peak < limit, f"{case.id}: the second call allocated {peak} bytes at once (at most {limit})"
