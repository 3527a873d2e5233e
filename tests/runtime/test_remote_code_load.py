"""`ops.remote_code_load`: recorded as `ipu.remote_code_load`, nothing to do on NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops


def _program(load: str | None) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream, popxl.Graph]:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((3,), popxl.float32, "x")
        g = ir.create_graph(lambda a: a * 3.0 + 1.0, popxl.TensorSpec((3,), popxl.float32))
        if load is not None:
            ops.remote_code_load(g, load)
        (y,) = ops.call(g, ops.host_load(x_s))
        y_s = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(y_s, y)
    return ir, x_s, y_s, g


@pytest.mark.parametrize("destination", ["executable", "compute_buffer", "io_buffer"])
def test_recorded_and_runs_like_the_program_without_it(destination: str) -> None:
    ir, x_s, y_s, g = _program(destination)
    text = ir.to_mlir()
    line = f'ipu.remote_code_load @"{g.name}" to "{destination}"'
    plain = f'ipu.remote_code_load @{g.name} to "{destination}"'
    assert line in text or plain in text, text
    x = np.array([1.0, -2.0, 0.5], np.float32)
    with popxl.Session(ir, "cpu") as s:
        y = s.run({x_s: x})[y_s]
    np.testing.assert_array_equal(y, x * np.float32(3.0) + np.float32(1.0))


def test_errors_name_the_function() -> None:
    ir, _, _, g = _program(None)
    other = popxl.Ir()
    with other.main_graph:
        g_other = other.create_graph(lambda a: a + 1.0, popxl.TensorSpec((2,), popxl.float32))
    with ir.main_graph:
        with pytest.raises(TypeError, match=r"^ops\.remote_code_load: expected a popxl\.Graph, got str"):
            ops.remote_code_load("g", "executable")
        with pytest.raises(ValueError, match=r"^ops\.remote_code_load: destination must be one of"):
            ops.remote_code_load(g, "remote")
        with pytest.raises(ValueError, match=r"belongs to another Ir"):
            ops.remote_code_load(g_other, "executable")
        # the graph the op would be recorded in, worded as upstream's message
        with pytest.raises(
            ValueError, match=r"^The remote_code_load op cannot load the code of the graph it is called in"
        ):
            ops.remote_code_load(ir.main_graph, "executable")

    def load_self_and_main(a: popxl.Tensor) -> popxl.Tensor:
        with pytest.raises(
            ValueError, match=r"^The remote_code_load op cannot load the code of the graph it is called in"
        ):
            ops.remote_code_load(popxl.gcg(), "executable")
        with pytest.raises(ValueError, match=r"main graph's code cannot be loaded"):
            ops.remote_code_load(ir.main_graph, "executable")
        return a

    with ir.main_graph:
        ir.create_graph(load_self_and_main, popxl.TensorSpec((2,), popxl.float32))
