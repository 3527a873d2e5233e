"""The aliasing `_` view ops (`ops.reshape_`, `flatten_`, `transpose_`, `slice_`, `concat_`,
`detach_`, `Tensor.reshape_/flatten_/transpose_/T_/detach_`).

Upstream PopXL returns an alias of the input from these ops; xl builds a copy. Programs
that only read the result before the input is updated give the same numbers either way
(checked against NumPy); programs where aliasing would change the numbers (a write
through the result, a read of the result after its input was updated in place, an op
updating the input while reading the result) are refused with `NotImplementedError`
when the Session is created (and by `Ir.to_mlir`), never run with different numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops

X0 = np.arange(12, dtype=np.float32).reshape(3, 4)
Y0 = np.arange(8, dtype=np.float32).reshape(2, 4) * 10

# name -> (build the view from x (3x4) and y (2x4), the NumPy result, the out-of-place op)
VIEWS: dict[str, tuple[Callable[[Any, Any], Any], Callable[[np.ndarray, np.ndarray], np.ndarray], str]] = {
    "ops.reshape_": (lambda x, y: ops.reshape_(x, (2, 6)), lambda x, y: x.reshape(2, 6), "ops.reshape"),
    "Tensor.reshape_": (lambda x, y: x.reshape_((6, -1)), lambda x, y: x.reshape(6, 2), "ops.reshape"),
    "ops.flatten_": (lambda x, y: ops.flatten_(x), lambda x, y: x.reshape(-1), "ops.flatten"),
    "Tensor.flatten_": (lambda x, y: x.flatten_(), lambda x, y: x.reshape(-1), "ops.flatten"),
    "ops.transpose_": (lambda x, y: ops.transpose_(x, (1, 0)), lambda x, y: x.T, "ops.transpose"),
    "Tensor.transpose_": (lambda x, y: x.transpose_(), lambda x, y: x.T, "ops.transpose"),
    "Tensor.T_": (lambda x, y: x.T_, lambda x, y: x.T, "ops.transpose"),
    "ops.slice_": (
        lambda x, y: ops.slice_(x, start=[1, 0], stop=[3, 4], step=[1, 2], axis=[0, 1]),
        lambda x, y: x[1:3, 0:4:2],
        "ops.slice",
    ),
    "ops.concat_": (lambda x, y: ops.concat_([x, y], axis=0), lambda x, y: np.concatenate([x, y]), "ops.concat"),
    "ops.detach_": (lambda x, y: ops.detach_(x), lambda x, y: x, "ops.detach"),
    "Tensor.detach_": (lambda x, y: x.detach_(), lambda x, y: x, "ops.detach"),
}
# the public op name each entry records (Tensor methods go through the ops)
RECORDED = {
    "Tensor.reshape_": "ops.reshape_",
    "Tensor.flatten_": "ops.flatten_",
    "Tensor.transpose_": "ops.transpose_",
    "Tensor.T_": "ops.transpose_",
    "Tensor.detach_": "ops.detach_",
}


def _program(body: Callable[[Any, Any], Any]) -> tuple[popxl.Ir, Any, Any, Any]:
    """x (3x4) and y (2x4) variables; `body(x, y)` returns the tensor to stream out."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        y = popxl.variable(Y0, name="y")
        out = body(x, y)
        d2h = popxl.d2h_stream(out.shape, out.dtype, "out")
        ops.host_store(d2h, out)
    return ir, x, y, d2h


def _run(ir: popxl.Ir, x: Any, d2h: Any) -> tuple[np.ndarray, np.ndarray]:
    s = popxl.Session(ir, "ipu_model")
    with s:
        out = s.run()[d2h]
    return out, s.get_tensor_data(x)


@pytest.mark.parametrize("name", list(VIEWS))
def test_read_only_use_matches_numpy(name: str) -> None:
    view, ref, _ = VIEWS[name]

    def body(x: Any, y: Any) -> Any:
        return view(x, y) * 2.0 + 1.0

    ir, x, _, d2h = _program(body)
    out, _ = _run(ir, x, d2h)
    np.testing.assert_allclose(out, ref(X0, Y0) * 2.0 + 1.0)


@pytest.mark.parametrize("name", list(VIEWS))
def test_base_written_after_last_read_is_allowed(name: str) -> None:
    """Upstream and xl agree when the input is updated after the view's last use."""
    view, ref, _ = VIEWS[name]

    def body(x: Any, y: Any) -> Any:
        r = view(x, y) + 0.5
        ops.add_(x, 100.0)
        return r

    ir, x, _, d2h = _program(body)
    out, xv = _run(ir, x, d2h)
    np.testing.assert_allclose(out, ref(X0, Y0) + 0.5)
    np.testing.assert_allclose(xv, X0 + 100.0)


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_made_after_the_update_sees_it(name: str) -> None:
    view, ref, _ = VIEWS[name]

    def body(x: Any, y: Any) -> Any:
        ops.add_(x, 100.0)
        return view(x, y) - 1.0

    ir, x, _, d2h = _program(body)
    out, _ = _run(ir, x, d2h)
    np.testing.assert_allclose(out, ref(X0 + 100.0, Y0) - 1.0)


@pytest.mark.parametrize("name", list(VIEWS))
def test_write_through_the_view_is_refused(name: str) -> None:
    view, _, plain = VIEWS[name]
    recorded = RECORDED.get(name, name)

    def body(x: Any, y: Any) -> Any:
        v = view(x, y)
        ops.add_(v, 1.0)
        return x + 0.0

    ir, *_ = _program(body)
    with pytest.raises(NotImplementedError) as e:
        popxl.Session(ir, "ipu_model")
    msg = str(e.value)
    assert msg.startswith("Session: popxl.scaled_add_ updates ")
    assert f"was made by {recorded}, which upstream is an alias of 'x'" in msg
    assert f"use the out-of-place op ({plain})" in msg


@pytest.mark.parametrize("name", list(VIEWS))
def test_read_after_base_write_is_refused(name: str) -> None:
    view, _, plain = VIEWS[name]
    recorded = RECORDED.get(name, name)

    def body(x: Any, y: Any) -> Any:
        v = view(x, y)
        ops.var_updates.accumulate_(x, popxl.constant(np.ones((3, 4), np.float32)))
        return v + 0.0

    ir, *_ = _program(body)
    with pytest.raises(NotImplementedError) as e:
        popxl.Session(ir, "ipu_model")
    msg = str(e.value)
    assert f"made by {recorded} as an alias of 'x', after 'x' was updated in place" in msg
    assert msg.startswith("Session: popxl.add reads ")
    assert f"use the out-of-place op ({plain})" in msg
    with pytest.raises(NotImplementedError, match="after 'x' was updated in place"):
        ir.to_mlir()


def test_concat_alias_of_its_second_input() -> None:
    def body(x: Any, y: Any) -> Any:
        v = ops.concat_([x, y])
        ops.add_(y, 1.0)
        return v + 0.0

    ir, *_ = _program(body)
    with pytest.raises(NotImplementedError, match="ops.concat_ as an alias of 'y', after 'y' was updated"):
        popxl.Session(ir, "ipu_model")


def test_view_of_a_view() -> None:
    def write_base(x: Any, y: Any) -> Any:
        v = x.T_.reshape_((2, 6))
        ops.add_(x, 1.0)
        return v + 0.0

    ir, *_ = _program(write_base)
    with pytest.raises(NotImplementedError, match="made by ops.reshape_ as an alias of 'x'"):
        popxl.Session(ir, "ipu_model")

    def write_middle(x: Any, y: Any) -> Any:
        v = x.T_
        w = v.reshape_((2, 6))
        ops.add_(v, 1.0)
        return w + 0.0

    ir, *_ = _program(write_middle)
    with pytest.raises(NotImplementedError, match="made by ops.transpose_, which upstream is an alias of 'x'"):
        popxl.Session(ir, "ipu_model")

    def read_only(x: Any, y: Any) -> Any:
        return ops.flatten_(x.T_.reshape_((2, 6))) * 3.0

    ir, x, _, d2h = _program(read_only)
    out, _ = _run(ir, x, d2h)
    np.testing.assert_allclose(out, X0.T.reshape(-1) * 3.0)


def test_op_writing_the_base_while_reading_its_view_is_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.eye(3, dtype=np.float32) + 1, name="x")
        ops.add_(x, x.T_)
    with pytest.raises(NotImplementedError, match="updates 'x' in place while reading 't0', made by ops.transpose_"):
        popxl.Session(ir, "ipu_model")


def test_graph_output_view_of_an_updated_input_is_refused() -> None:
    """A graph output is read at the end of the graph, after the update."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")

        def f(t: popxl.Tensor) -> popxl.Tensor:
            v = t.reshape_((12,))
            ops.add_(t, 1.0)
            return v

        g = ir.create_graph(f, x)
        ops.call(g, x)
    with pytest.raises(NotImplementedError, match=r"the output of graph '.*' reads '.*', made by ops.reshape_"):
        popxl.Session(ir, "ipu_model")


def test_by_ref_call_on_the_base_then_read_is_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")

        def inc(t: popxl.TensorByRef) -> None:
            ops.add_(t, 1.0)

        g = ir.create_graph(inc, x)
        v = x.T_
        ops.call(g, x)
        d2h = popxl.d2h_stream(v.shape, v.dtype, "out")
        ops.host_store(d2h, v)
    with pytest.raises(
        NotImplementedError, match="graph.host_store reads 't0', made by ops.transpose_ as an alias of 'x'"
    ):
        popxl.Session(ir, "ipu_model")


def test_by_ref_call_on_the_view_is_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")

        def inc(t: popxl.TensorByRef) -> None:
            ops.add_(t, 1.0)

        v = x.flatten_()
        g = ir.create_graph(inc, v)
        ops.call(g, v)
    with pytest.raises(NotImplementedError, match="updates 't0' in place, but 't0' was made by ops.flatten_"):
        popxl.Session(ir, "ipu_model")


def test_input_marked_modified_after_the_call_is_seen() -> None:
    """`set_parent_input_modified` after the call site still counts as a write there."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")

        def inc(t: popxl.Tensor) -> None:
            ops.add_(t, 1.0)

        g = ir.create_graph(inc, x)
        v = x.T_
        info = ops.call_with_info(g, x)
        d2h = popxl.d2h_stream(v.shape, v.dtype, "out")
        ops.host_store(d2h, v)
        info.set_parent_input_modified(x)
    with pytest.raises(NotImplementedError, match="after 'x' was updated in place"):
        popxl.Session(ir, "ipu_model")


def test_views_inside_a_subgraph_read_only() -> None:
    """A view of a subgraph input, only read, in a repeated subgraph that updates its
    by-reference input after the read: runs and matches NumPy."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")
        acc = popxl.variable(np.zeros((2, 2), np.float32), name="acc")

        def body(t: popxl.TensorByRef, a: popxl.TensorByRef) -> None:
            ops.add_(a, t.T_ * 2.0)
            ops.add_(t, t)

        g = ir.create_graph(body, x, acc)
        ops.repeat(g, 3, x, acc)
    s = popxl.Session(ir, "ipu_model")
    with s:
        s.run()
        got = s.get_tensor_data(acc)
    ref = np.zeros((2, 2), np.float32)
    t = np.ones((2, 2), np.float32)
    for _ in range(3):
        ref += t.T * 2.0
        t = t + t
    np.testing.assert_allclose(got, ref)


def test_slice_without_bounds_is_the_input_itself() -> None:
    """Upstream `ops.slice_(t)` with no start/stop/step returns `t`: an update of the
    result is an update of `t`."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X0, name="x")
        v = ops.slice_(x)
        assert v is x
        ops.add_(v, 1.0)
    s = popxl.Session(ir, "ipu_model")
    with s:
        s.run()
        np.testing.assert_allclose(s.get_tensor_data(x), X0 + 1.0)
