"""Kernels of `popxl.custom` / `popxl.custom_grad`: the user's NumPy implementation
registered under the op's type (`xl.dialects.custom_ops`), looked up once when the plan
is built. The implementation sees its inputs read-only and the op's attributes as
keyword arguments; what it returns is checked against the op's result types (shape
exactly, values cast to the result dtype) and copied into the results."""

from __future__ import annotations

from typing import Any

import numpy as np

from xl.dialects.custom_ops import CustomOpError, custom_op_definition
from xl.dialects.popxl import CustomGradOp, CustomOp, attributes_of
from xl.runtime.kernels.registry import Kernel, kernel


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _store(op_type: str, what: str, got: np.ndarray, out: np.ndarray) -> None:
    if got.shape != out.shape:
        raise CustomOpError(
            f"custom op {op_type!r}: {what} has shape {got.shape}, the op's result has shape {out.shape}"
        )
    np.copyto(out, got, casting="unsafe")


@kernel(CustomOp)
def _custom(p: dict[str, Any]) -> Kernel:
    op_type = str(p["op_type"])
    d = custom_op_definition(op_type)
    attrs = attributes_of(p["attrs"])
    n_out = d.num_outputs

    def k(*a: np.ndarray) -> None:
        ins, outs = a[:-n_out], a[-n_out:]
        got = d.run_forward([_read_only(x) for x in ins], attrs)
        for i, (g, o) in enumerate(zip(got, outs)):
            _store(op_type, f"forward output {i}", g, o)

    return k


@kernel(CustomGradOp)
def _custom_grad(p: dict[str, Any]) -> Kernel:
    op_type = str(p["op_type"])
    d = custom_op_definition(op_type)
    attrs = attributes_of(p["attrs"])
    n_dy = int(p["num_output_grads"])

    def k(*a: np.ndarray) -> None:
        n_in = (len(a) - n_dy) // 2
        dys, ins, outs = a[:n_dy], a[n_dy : n_dy + n_in], a[n_dy + n_in :]
        got = d.run_grad([_read_only(x) for x in dys], [_read_only(x) for x in ins], attrs)
        for i, (g, o) in enumerate(zip(got, outs)):
            if g is None:
                o.fill(0)
            else:
                _store(op_type, f"gradient of input {i}", g, o)

    return k
