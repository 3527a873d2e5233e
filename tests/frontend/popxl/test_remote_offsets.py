"""An int offset of `ops.remote_load` / `remote_load_` / `remote_store` is a constant tensor
of the graph (`uint32`, named `offset`), as in PopXL; the lowering folds it into the access
(no offset read at run time), and the dialect checks its range like a constant property."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

import popxl
from popxl import ops
from xl.compiler.driver import lower
from xl.dialects import ipu as ipu_d
from xl.dialects import rt


def _build() -> tuple[popxl.Ir, popxl.Tensor, popxl.DeviceToHostStream]:
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence():
        rb = popxl.remote_buffer((2,), popxl.float32, 3)
        v = popxl.variable(np.array([1.0, 2.0], np.float32), name="v")
        ops.remote_store(rb, 2, v)
        x = ops.remote_load(rb, 2)
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(out, x + 1.0)
    return ir, x, out


def test_int_offset_is_a_constant_tensor() -> None:
    ir, x, out = _build()
    g = ir.main_graph
    offsets = [c for c in g.constants if c.name.startswith("offset")]
    assert len(offsets) == 2 and all(c.dtype == popxl.uint32 and c.shape == () for c in offsets)
    # v, the two offsets, the loaded tensor, the constant 1.0 and the sum
    assert len(g.tensors) == 6 and x in g.tensors
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_array_equal(s.run()[out], [2.0, 3.0])


def test_the_lowering_folds_a_constant_offset() -> None:
    ir, _x, _out = _build()
    module = lower(ir._module)
    kernels = [op for op in module.walk() if isinstance(op, rt.KernelOp) and op.kernel.data.startswith("ipu.remote")]
    assert len(kernels) == 2
    for k in kernels:
        assert k.params["offset"] == 2
        ins, _outs = k.io()
        assert len(ins) == 1  # the state (a load) or the tensor (a store): no offset operand


def test_a_constant_offset_operand_out_of_range_is_refused() -> None:
    ir, _x, _out = _build()
    (load,) = [op for op in ir._module.walk() if isinstance(op, ipu_d.RemoteLoadOp)]
    assert load.constant_offset() == 2
    store = next(op for op in ir._module.walk() if isinstance(op, ipu_d.RemoteStoreOp))
    const = store.offset_operand()
    assert const is not None
    from xl.dialects.graph import ConstantOp
    from xl.dialects.utils import dense_attr

    owner = const.owner
    assert isinstance(owner, ConstantOp)
    owner.value = dense_attr(np.array(3, np.uint32))
    with pytest.raises(VerifyException, match="offset 3 is out of range"):
        store.verify()
