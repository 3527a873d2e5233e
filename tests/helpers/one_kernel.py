"""One `rt.kernel` run on given arrays in either plan (the straightforward plan's kernel or
the generated plan's template), for kernel tests that compare both with a reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.helpers.kernel_cases import KernelCase, RtForm, kernel_form
from tests.runtime.test_kernel_views import kernel_runner
from xl.dialects.rt_kernels import KernelClass


def run_kernel(
    cls: KernelClass,
    ins: list[np.ndarray],
    props: dict,
    optimize: bool,
    inplace: int | None = None,
    result_types: list[tuple[tuple[int, ...], Any]] | None = None,
    rt: RtForm | None = None,
) -> list[np.ndarray]:
    """The outputs of the kernel of `cls` on copies of `ins`, in the generated plan when
    `optimize`, else the straightforward one; `inplace`: the (one) result written over that
    input; `result_types`: (shape, dtype) of each result where the op cannot infer them;
    `rt`: the `rt.kernel` itself, for the kernels only `rt` passes make."""
    case = KernelCase(
        cls, lambda r: ins, props=props, result_types=result_types, rt=None if rt is None else lambda i: rt
    )
    ins = [a.copy() for a in ins]
    form = kernel_form(case, ins)
    if inplace is not None:
        form.outs = [inplace]
    run, outs = kernel_runner(case, form, ins, optimize)
    with np.errstate(all="ignore"):
        run()
    return [o.copy() for o in outs]
