"""Run single popxl ops through the whole pipeline (IR -> passes -> rt -> runtime)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Region

from xl.compiler import compile_module
from xl.dialects.effects import written_operands
from xl.dialects.graph import (
    D2HStreamOp,
    H2DStreamOp,
    HostLoadOp,
    HostStoreOp,
    MainGraphOp,
)
from xl.dialects.popxl import PopxlOp
from xl.dialects.utils import tensor_type


def build_single_op_module(
    op_cls: type[PopxlOp],
    inputs: Sequence[np.ndarray],
    result_types: Sequence[TensorType] | None = None,
    **props: Any,
) -> ModuleOp:
    decls: list = []
    block = Block()
    values = []
    for i, x in enumerate(inputs):
        t = tensor_type(x.shape, x.dtype)
        decls.append(H2DStreamOp(f"in{i}", t))
        load = HostLoadOp(f"in{i}", t)
        block.add_op(load)
        values.append(load.result)
    op = op_cls.make(values, result_types, **props)
    block.add_op(op)
    outs = [values[i] for i in written_operands(op)] + list(op.results)
    for j, v in enumerate(outs):
        decls.append(D2HStreamOp(f"out{j}", v.type))
        block.add_op(HostStoreOp(f"out{j}", v))
    module = ModuleOp([*decls, MainGraphOp(Region(block))])
    module.verify()
    return module


def run_op(
    op_cls: type[PopxlOp],
    inputs: Sequence[np.ndarray],
    result_types: Sequence[TensorType] | None = None,
    **props: Any,
) -> list[np.ndarray]:
    """Results of one op on NumPy inputs: written operands first, then results."""
    inputs = [np.asarray(x) for x in inputs]
    module = build_single_op_module(op_cls, inputs, result_types, **props)
    exe = compile_module(module)
    outs = exe.run({f"in{i}": x for i, x in enumerate(inputs)})
    return [outs[f"out{j}"] for j in range(len(outs))]
