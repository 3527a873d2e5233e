"""`popxl.Session`: attach/detach, host copies of variables, input validation and data
layout (after POPART tests/integration/popxl/test_session*.py)."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops


def counter_program(num_host_transfers: int = 1, replication: int = 1):
    """y = x + w; w += 1 each run; also stores w."""
    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        w = popxl.variable(np.zeros(3, np.float32), name="w")
        c = popxl.constant(np.array([1, 2, 3], np.int32), name="c")
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        ys = popxl.d2h_stream((3,), popxl.float32, "y")
        x = ops.host_load(xs)
        y = x + w
        ops.host_store(ys, y)
        ops.scaled_add_(w, popxl.constant(np.ones(3, np.float32)))
    ir.num_host_transfers = num_host_transfers
    return ir, w, c, xs, ys, y


def test_run_requires_attached_and_returns_streams():
    ir, w, _c, xs, ys, _y = counter_program()
    s = popxl.Session(ir, "ipu_hw")
    assert s.ir is ir and not s.is_attached
    with pytest.raises(ValueError, match="Must be attached to device.*`Session` context"):
        s.run({xs: np.ones(3, np.float32)})
    with s:
        assert s.is_attached
        out = s.run({xs: np.ones(3, np.float32)})
        assert list(out) == [ys]
        np.testing.assert_allclose(out[ys], [1, 1, 1])
        out = s.run({xs: np.ones(3, np.float32)})
        np.testing.assert_allclose(out[ys], [2, 2, 2])
    assert not s.is_attached
    np.testing.assert_allclose(s.get_tensor_data(w), [2, 2, 2])


def test_input_validation():
    ir, _w, _c, xs, ys, _y = counter_program()
    other = popxl.Ir()
    with other.main_graph:
        foreign = popxl.h2d_stream((3,), popxl.float32, "foreign")
    with popxl.Session(ir, "cpu") as s:
        with pytest.raises(ValueError, match=r"Missing: x \(3,\) float32"):
            s.run({})
        with pytest.raises(ValueError, match=r"(?s)Unexpected: foreign.*Missing: x"):
            s.run({foreign: np.ones(3, np.float32)})
        with pytest.raises(ValueError, match=r"stream 'x' has shape \(4,\), expected \(3,\)"):
            s.run({xs: np.ones(4, np.float32)})
        with pytest.raises(ValueError, match=r"stream 'x' has dtype float64, expected float32"):
            s.run({xs: np.ones(3)}, downcast_inputs=False)
        with pytest.raises(ValueError, match="dtype int32"):
            s.run({xs: np.ones(3, np.int32)})
        # float64 is downcast; array-likes are accepted
        np.testing.assert_allclose(s.run({xs: np.ones(3)})[ys], [1, 1, 1])
        np.testing.assert_allclose(s.run({xs: [1.0, 1.0, 1.0]})[ys], [2, 2, 2])

        class ArrayLike:
            def __array__(self, dtype=None, copy=None):
                return np.full(3, 10.0, np.float32)

        np.testing.assert_allclose(s.run({xs: ArrayLike()})[ys], [12, 12, 12])
    with pytest.raises(ValueError, match="device_desc"):
        popxl.Session(ir, "gpu")


def test_torch_inputs():
    torch = pytest.importorskip("torch")
    ir, _w, _c, xs, ys, _y = counter_program()
    with popxl.Session(ir, "cpu") as s:
        out = s.run({xs: torch.ones(3, dtype=torch.float64)})
    np.testing.assert_allclose(out[ys], [1, 1, 1])


def test_context_manager_weights_and_reentrancy():
    ir, w, _c, xs, ys, _y = counter_program()
    s = popxl.Session(ir, "cpu")
    x = {xs: np.zeros(3, np.float32)}
    # written while detached: goes to the host copy, sent to the device on enter
    s.write_variable_data(w, np.full(3, 5.0, np.float32))
    np.testing.assert_allclose(s.get_tensor_data(w), [5, 5, 5])
    with s:
        with s:  # re-entrant: the inner exit neither syncs nor detaches
            np.testing.assert_allclose(s.run(x)[ys], [5, 5, 5])
        assert s.is_attached
        # lazily fetched from the device after a run
        np.testing.assert_allclose(s.get_tensor_data(w), [6, 6, 6])
        np.testing.assert_allclose(s.run(x)[ys], [6, 6, 6])
    np.testing.assert_allclose(s.get_tensor_data(w), [7, 7, 7])
    # weights_to_host / weights_from_host need a device
    with pytest.raises(ValueError, match="Must be attached"):
        s.weights_to_host()
    with pytest.raises(ValueError, match="Must be attached"):
        s.weights_from_host()

    # weights_to_host_on_exit=False: the host copy keeps its value ...
    s2 = popxl.Session(ir, "cpu", weights_to_host_on_exit=False)
    with s2:
        s2.run(x)
    np.testing.assert_allclose(s2.get_tensor_data(w), [0, 0, 0])
    # ... and entering again sends it to the device
    with s2:
        np.testing.assert_allclose(s2.run(x)[ys], [0, 0, 0])
        s2.weights_to_host()
    np.testing.assert_allclose(s2.get_tensor_data(w), [1, 1, 1])


def test_exception_in_context_skips_weights_to_host():
    ir, w, _c, xs, _ys, _y = counter_program()
    s = popxl.Session(ir, "cpu")
    with pytest.raises(RuntimeError), s:
        s.run({xs: np.zeros(3, np.float32)})
        raise RuntimeError("boom")
    assert not s.is_attached
    np.testing.assert_allclose(s.get_tensor_data(w), [0, 0, 0])


def test_get_and_write_tensor_data():
    ir, w, c, xs, ys, y = counter_program()
    with ir.main_graph:
        h = popxl.variable(np.zeros((2, 2), np.float16), name="h")
    s = popxl.Session(ir, "cpu")
    np.testing.assert_array_equal(s.get_tensor_data(c), [1, 2, 3])
    with pytest.raises(TypeError):
        s.get_tensor_data(y)
    with pytest.raises(TypeError):
        s.get_tensors_data([w, y])
    with pytest.raises(TypeError, match="dtype"):
        s.write_variable_data(w, np.zeros(3, np.float64))
    with pytest.raises(ValueError, match="shape"):
        s.write_variable_data(w, np.zeros(4, np.float32))
    with pytest.raises(TypeError):
        s.write_variable_data(c, np.zeros(3, np.int32))  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    s.write_variable_data(h, 2.0)  # Python scalars are allowed
    np.testing.assert_array_equal(s.get_tensor_data(h), np.full((2, 2), 2.0, np.float16))
    _other_ir, other_w, *_ = counter_program()
    with pytest.raises(ValueError, match="not part of this session"):
        s.write_variable_data(other_w, np.zeros(3, np.float32))
    with s:
        s.write_variables_data({w: np.full(3, 3.0, np.float32), h: np.ones((2, 2), np.float16)})
        np.testing.assert_allclose(s.run({xs: np.zeros(3, np.float32)})[ys], [3, 3, 3])
        data = s.get_tensors_data([w, h])
        np.testing.assert_allclose(data[w], [4, 4, 4])
        np.testing.assert_allclose(data[h], np.ones((2, 2)))
        # writing while attached goes to the device at once
        s.write_variable_data(w, np.full(3, -1.0, np.float32))
        np.testing.assert_allclose(s.run({xs: np.zeros(3, np.float32)})[ys], [-1, -1, -1])


def test_layout_num_host_transfers_and_replication():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((2,), popxl.float32, "x")
        ys = popxl.d2h_stream((2,), popxl.float32, "y")

        def step():
            ops.host_store(ys, ops.host_load(xs) * 2)

        g = ir.create_graph(step)
        ops.repeat(g, 3)
    ir.num_host_transfers = 3
    s = popxl.Session(ir, "ipu_model")
    assert s._full_input_shape((2,)) == (3, 2, 2)
    assert s.expected_inputs() == [xs]
    outs = s.create_host_outputs()
    assert list(outs) == [ys] and outs[ys].shape == (3, 2, 2) and outs[ys].dtype == np.float32
    data = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    with s:
        res = s.run({xs: data})
        np.testing.assert_allclose(res[ys], data * 2)
        with pytest.raises(ValueError, match=r"expected \(3, 2, 2\)"):
            s.run({xs: data[0]})
        s.run_with_outputs({xs: data + 1}, outs)
        np.testing.assert_allclose(outs[ys], (data + 1) * 2)
        with pytest.raises(ValueError, match="run_with_outputs"):
            s.run_with_outputs({xs: data}, {ys: np.zeros((2, 2), np.float32)})
    # seed pattern (evaluate_throughput): inputs from _full_input_shape/expected_inputs
    inputs = {st: np.ones(s._full_input_shape(st.shape), st.dtype.as_numpy()) for st in s.expected_inputs()}
    with s:
        np.testing.assert_allclose(s.run(inputs)[ys], np.full((3, 2, 2), 2.0))
    with pytest.raises(RuntimeError):
        ir.replication_factor = 4  # fixed once a session exists


def test_seed_style_scalar_loss_format():
    """`f"{loss:0.4f}"` on a scalar stream output (seed 001 training loop)."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((4,), popxl.float32, "x")
        ls = popxl.d2h_stream((), popxl.float32, "loss")
        ops.host_store(ls, ops.sum(ops.host_load(xs)))
    with popxl.Session(ir, "ipu_hw") as s:
        loss = s.run({xs: np.ones(4, np.float32)})[ls]
    assert f"{loss:0.4f}" == "4.0000"


def test_grouped_variable_per_replica_values():
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping(stride=1, group_size=2)  # replicas [0, 0, 1, 1]
    with ir.main_graph:
        v = popxl.variable(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), name="v", replica_grouping=rg)
        ys = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(ys, v * 1)
        ops.scaled_add_(v, popxl.constant(np.ones(2, np.float32)))
    assert v.shape == (2,) and v.shape_on_host == (2, 2)
    s = popxl.Session(ir, "cpu")
    with s:
        out = s.run()[ys]
    np.testing.assert_allclose(out, [[1, 2], [1, 2], [3, 4], [3, 4]])
    np.testing.assert_allclose(s.get_tensor_data(v), [[2, 3], [4, 5]])
    s.write_variable_data(v, np.zeros((2, 2), np.float32))
    with s:
        np.testing.assert_allclose(s.run()[ys], np.zeros((4, 2)))


def test_iadd_updates_in_place():
    """`t += 1` is ops.add_: the variable itself changes, run after run."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(3, np.float32), name="v")
        alias = v
        v += 1.0
        assert v is alias
        s = popxl.d2h_stream((3,), popxl.float32, "out")
        ops.host_store(s, v)
    with popxl.Session(ir, "cpu") as sess:
        first = sess.run()[s].copy()
        second = sess.run()[s]
    np.testing.assert_array_equal(first, np.ones(3))
    np.testing.assert_array_equal(second, np.full(3, 2.0))
    np.testing.assert_array_equal(sess.get_tensor_data(v), np.full(3, 2.0))
