"""Errors of the runtime and how they name the buffers of an `rt` program."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdsl.ir import SSAValue

from xl.dialects import rt


class PlanError(ValueError):
    """The rt program cannot be turned into a plan (unknown kernel, bad stream use)."""

    pass


def describe_buffer(v: SSAValue) -> str:
    """How run-time errors name a buffer: its tensor name and the host stream it is
    loaded from (if any)."""
    name = f'tensor "{v.name_hint}"' if v.name_hint else "an unnamed tensor"
    streams = sorted({u.operation.stream.data for u in v.uses if isinstance(u.operation, rt.H2DOp)})
    if streams:
        name += " loaded from stream " + ", ".join(f'"{s}"' for s in streams)
    return name


class BufferNames:
    """`describe_buffer` with each buffer described once per compile: a buffer used by
    every kernel (a weight, a constant) would otherwise cost a walk over all its uses per
    kernel, quadratic in the program's size."""

    def __init__(self) -> None:
        self._names: dict[SSAValue, str] = {}

    def __call__(self, v: SSAValue) -> str:
        name = self._names.get(v)
        if name is None:
            name = self._names[v] = describe_buffer(v)
        return name


def diagnostic_props(op: rt.KernelOp, describe: Callable[[SSAValue], str]) -> dict[str, Any]:
    """`_kernel` and `_operands` (one description per input) for kernel error messages
    (`xl.runtime.kernels.DataRangeError`)."""
    return {"_kernel": op.kernel.data, "_operands": tuple(describe(v) for v in op.ins)}
