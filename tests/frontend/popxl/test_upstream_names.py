"""Names and messages as PopXL gives them: `ops.host_load` results are `<name>_hostload`,
the main graph of `ir._pb_ir` contains the Ir's tensors and streams, a RemoteBuffer's
shape and dtype are read-only with PopXL's AttributeError text."""

from __future__ import annotations

import pytest

import popxl
import popxl.ops as ops


def test_host_load_results_are_named_hostload() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((2,), popxl.float32, "x")
        a = ops.host_load(s)
        b = ops.host_load(s)
        c = ops.host_load(s, "named")
        with popxl.name_scope("scope"):
            d = ops.host_load(popxl.h2d_stream((2,), popxl.float32, "y"))
        o = popxl.d2h_stream((2,), popxl.float32, "o")
        ops.host_store(o, a + b + c + d)
    assert (a.id, c.id) == ("x_hostload", "named_hostload")
    assert b.id != a.id and b.id.startswith("x_hostload")  # made unique
    assert d.id == "scope/y_hostload"  # the stream's name without its scope, in the current scope
    streams = {s.tensor_id for s in ir.get_all_h2d_streams()}
    assert streams == {"x", "y"} and not streams & {t.id for t in (a, b, c, d)}


def test_pb_main_graph_contains_tensors_and_streams() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(1.0, name="v")
        d = popxl.h2d_stream((), popxl.float32, "d")
        unused = popxl.h2d_stream((), popxl.float32, "unused")
        t = ops.host_load(d) + v
    main = ir._pb_ir.getMainGraph()
    for tid in (v.id, t.id, d.tensor_id, unused.tensor_id):
        assert tid in main
    assert "nothing" not in main


@pytest.mark.parametrize(("attr", "value"), [("tensor_shape", (11, 11)), ("tensor_dtype", popxl.float16)])
def test_remote_buffer_shape_and_dtype_are_read_only(attr: str, value: object) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2, 3), popxl.float32, 2)
        with pytest.raises(AttributeError) as info:
            setattr(buf, attr, value)
    assert info.value.args[0] == f"can't set attribute '{attr}'"
    assert (buf.tensor_shape, buf.tensor_dtype) == ((2, 3), popxl.float32)  # unchanged
