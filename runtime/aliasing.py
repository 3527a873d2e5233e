"""Read-before-write for kernels whose inputs overlap their outputs.

A kernel reads its inputs and writes its outputs in whatever order its NumPy code
does. That is only correct when an input and an output are either disjoint or the very
same array the kernel was written to update (an in-place op's destination, an
elementwise kernel writing into its dying input). Anything else, e.g. a view of the
destination passed as another operand, must be read before the kernel writes: both
plans copy such inputs into a private snapshot right before the kernel runs.

The check runs once per kernel at plan-building time on the arrays the kernel is bound
to (so it sees views and shared storage exactly as they will be), and costs nothing
per step unless a snapshot is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from xl.dialects.effects import rereads_inputs
from xl.dialects.rt_kernels import kernel_class
from xl.runtime.errors import PlanError


def inputs_to_snapshot(kernel: str, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> list[int]:
    """Positions of the inputs to copy before the kernel runs (see the module docstring)."""
    cls = kernel_class(kernel)
    # A fused chain writes its output at every step and reads its inputs again later
    # (`RereadsInputs`): not even an input that is the output array itself is safe.
    identical_ok = cls is None or not rereads_inputs(cls)
    bad: list[int] = []
    for i, x in enumerate(ins):
        for o in outs:
            if x is o and identical_ok:
                continue
            if x.size and o.size and np.may_share_memory(x, o):
                bad.append(i)
                break
    return bad


def check_writable(kernel: str, outs: Sequence[np.ndarray], describe: Callable[[int], str]) -> None:
    """Refuse, at plan time, a kernel that writes read-only storage (an `rt.const`);
    `describe(i)` names output `i`."""
    for i, o in enumerate(outs):
        if not o.flags.writeable:
            raise PlanError(f"runtime: '{kernel}' writes the constant {describe(i)} (constants are read-only)")
