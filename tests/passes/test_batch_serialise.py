"""popxl_addons.transforms.batch_serialise / batch_serialise_fwd_and_grad in every io mode:
the serialised program against NumPy (x * 2 per step, rows and row offsets, function
offsets, a chain of 4 serialised calls = x * 2**4) and, for gradients, against NumPy's
dx = g @ W^T and the plain (un-serialised) forward + backward program on the whole batch;
replica-sharded activations over 2 replicas; the errors."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl.transforms.autodiff import ExpectedConnectionType
from popxl_addons.transforms.batch_serialisation import (
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)

MODES = ["compute", "io", "io_overlapped"]
CB, BF = 2, 4  # rows per step, steps


class Scale(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        scale = self.add_variable_input("scale", partial(np.full, x.shape, 2), x.dtype)
        return x * scale


class Dense(addons.Module):
    """y = gelu(x @ w) (an activation the gradient needs)."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", partial(np.zeros, (x.shape[-1], 4)), popxl.float32)
        return ops.gelu(x @ w)


def _inputs(shape=(CB, 2)) -> np.ndarray:
    return np.arange(BF * np.prod(shape), dtype=np.float32).reshape(BF, *shape)


def _read_buffer(buffer: popxl.RemoteBuffer, entries: list[int], shape) -> popxl.DeviceToHostStream:
    out = popxl.d2h_stream(shape, popxl.float32, "out")
    for e in entries:
        ops.host_store(out, ops.remote_load(buffer, e))
    return out


@pytest.mark.parametrize("io_mode", MODES + ["io_overlapped_1_step"])
def test_fwd_single(io_mode: str) -> None:
    steps = 1 if io_mode == "io_overlapped_1_step" else BF
    mode = "io_overlapped" if io_mode == "io_overlapped_1_step" else io_mode
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x_s = popxl.h2d_stream((CB, 2), popxl.float32, "x_stream")
        args, graph = Scale().create_graph(x_s.spec)
        res = batch_serialise(
            graph, steps, {graph.graph.inputs[0]: x_s}, {},
            {t: (batch_serial_buffer(t, steps=steps), 0) for t in graph.graph.outputs}, io_mode=mode,
        )  # fmt: skip
        assert [t.name for t in res.graph.graph.inputs][0] == "batch_serial_loop_index"
        res.graph.bind(args.init()).call(0)
        handle = res.stored_buffers[graph.graph.outputs[0]]
        assert isinstance(handle, RemoteHandle) and handle.buffer.entries == steps
        out = _read_buffer(handle.buffer, list(range(steps)), x_s.shape)
    ir.num_host_transfers = steps
    x = _inputs()[:steps]
    with popxl.Session(ir) as s:
        got = s.run({x_s: x if steps > 1 else x[0]})[out]
    np.testing.assert_array_equal(got.reshape(x.shape), x * 2)


@pytest.mark.parametrize("io_mode", MODES)
@pytest.mark.parametrize("offset", ["rows", "row_offset", "function"])
def test_rows_and_offsets(io_mode: str, offset: str) -> None:
    """Row 1 of a 2-row buffer: the graph called with 1 (rows=2), a row offset of 1 (called
    with 0), or a function mapping the row to 1 (called with 0): entries BF..2BF-1."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x_s = popxl.h2d_stream((CB, 2), popxl.float32, "x_stream")
        args, graph = Scale().create_graph(x_s.spec)
        y = graph.graph.outputs[0]
        buffer = batch_serial_buffer(y, steps=BF, rows=1 if offset == "row_offset" else 2)
        handle = {"rows": RemoteHandle(buffer), "row_offset": RemoteHandle(buffer, 1),
                  "function": RemoteHandle(buffer, lambda row: row + 1)}[offset]  # fmt: skip
        res = batch_serialise(graph, BF, {graph.graph.inputs[0]: x_s}, {}, {y: handle},
                              rows=2 if offset == "rows" else 1, io_mode=io_mode)  # fmt: skip
        res.graph.bind(args.init()).call(1 if offset == "rows" else 0)
        assert buffer.entries == 2 * BF
        out = _read_buffer(buffer, list(range(BF, 2 * BF)), x_s.shape)
    ir.num_host_transfers = BF
    x = _inputs()
    with popxl.Session(ir) as s:
        got = s.run({x_s: x})[out]
    np.testing.assert_array_equal(got, x * 2)


@pytest.mark.parametrize("io_mode", MODES)
def test_sequence_of_serialised_calls(io_mode: str) -> None:
    """stream -> row 0; row 0 -> row 1 (called with 0) and row 1 -> row 2 (called with 1);
    row 2 -> stream: x * 2**4, as upstream."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x_s = popxl.h2d_stream((CB, 2), popxl.float32, "in_stream")
        y_s = popxl.d2h_stream(x_s.shape, x_s.dtype, "out_stream")
        args, graph = Scale().create_graph(x_s.spec)
        x, y = graph.graph.inputs[0], graph.graph.outputs[0]
        buffer = batch_serial_buffer(y, steps=BF)
        load = batch_serialise(graph, BF, {x: x_s}, {}, {y: (buffer, 0)}, io_mode=io_mode)
        remote = batch_serialise(graph, BF, {x: (buffer, 0)}, {}, {y: (buffer, 1)}, rows=2, io_mode=io_mode)
        store = batch_serialise(graph, BF, {x: (buffer, 2)}, {y: y_s}, {}, io_mode=io_mode)
        assert buffer.entries == 3 * BF
        var = args.init()
        load.graph.bind(var).call(0)
        remote.graph.bind(var).call(0)
        remote.graph.bind(var).call(1)
        store.graph.bind(var).call(0)
    ir.num_host_transfers = BF
    xs = _inputs()
    with popxl.Session(ir) as s:
        got = s.run({x_s: xs})[y_s]
    np.testing.assert_array_equal(got, xs * 2**4)


def _grad_programs(io_mode: str, remote_input: bool):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((BF, CB, 3)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    gs = rng.standard_normal((BF, CB, 4)).astype(np.float32)

    # plain: the whole batch at once
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x_s = popxl.h2d_stream((BF * CB, 3), popxl.float32, "x")
        dx_s = popxl.d2h_stream((BF * CB, 3), popxl.float32, "dx")
        args, graph = Dense().create_graph(x_s.spec)
        dargs, dgraph = addons.autodiff_with_accumulation(
            graph, graph.args.tensors, grads_required=graph.graph.inputs[:1]
        )
        weights = args.init()
        accum = dargs.init()
        info = graph.bind(weights).call_with_info(ops.host_load(x_s))
        (dx,) = dgraph.bind(accum).call(
            popxl.constant(gs.reshape(-1, 4)), args=dgraph.grad_graph_info.inputs_dict(info)
        )
        ops.host_store(dx_s, dx)
    with popxl.Session(ir) as s:
        s.write_variable_data(weights.w, w)
        plain = s.run({x_s: xs.reshape(-1, 3)})[dx_s].reshape(BF, CB, 3)
        plain_dw = s.get_tensor_data(accum.accum.w)

    # serialised
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((CB, 3), popxl.float32, "x")
        dx_s = popxl.d2h_stream((CB, 3), popxl.float32, "dx")
        args, graph = Dense().create_graph(x_s.spec)
        dargs, dgraph = addons.autodiff_with_accumulation(
            graph, graph.args.tensors, grads_required=graph.graph.inputs[:1]
        )
        g_in = dgraph.graph.inputs[0]
        g_buf = batch_serial_buffer(g_in, steps=BF)
        x_buf = popxl.remote_buffer((CB, 3), popxl.float32, BF)
        x_handle = (x_buf, 0) if remote_input else x_s
        fwd, bwd = batch_serialise_fwd_and_grad(
            graph, dgraph, graph.args, BF, {graph.graph.inputs[0]: x_handle, g_in: (g_buf, 0)},
            {dgraph.graph.outputs[0]: dx_s}, {}, io_mode=io_mode,
        )  # fmt: skip
        weights = args.init()
        grad_vars = dargs.init()
        grad_vars.update(weights)
        with popxl.in_sequence():
            for i in range(BF):
                ops.remote_store(g_buf, i, popxl.constant(gs[i]))
                if remote_input:
                    ops.remote_store(x_buf, i, popxl.constant(xs[i]))
            fwd.graph.bind(weights).call(0)
            bwd.graph.bind(grad_vars).call(0)
    ir.num_host_transfers = BF
    with popxl.Session(ir) as s:
        s.write_variable_data(weights.w, w)
        serial = s.run({} if remote_input else {x_s: xs})[dx_s]
        serial_dw = s.get_tensor_data(grad_vars.accum.w)
    return xs, w, gs, plain, plain_dw, serial, serial_dw


def _gelu_grad(z: np.ndarray) -> np.ndarray:
    """Derivative of popxl's gelu (the tanh approximation)."""
    a = np.sqrt(2 / np.pi)
    t = np.tanh(a * (z + 0.044715 * z**3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * a * (1 + 3 * 0.044715 * z * z)


@pytest.mark.parametrize("io_mode", MODES)
@pytest.mark.parametrize("remote_input", [False, True])
def test_fwd_and_grad_equals_plain_program(io_mode: str, remote_input: bool) -> None:
    xs, w, gs, plain, plain_dw, serial, serial_dw = _grad_programs(io_mode, remote_input)
    z = xs.astype(np.float64) @ w
    dz = gs * _gelu_grad(z)
    np.testing.assert_allclose(serial, dz @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(serial, plain, rtol=1e-5, atol=1e-6)
    # accumulated mean of the per-step weight gradients = the whole batch's gradient / BF
    want_dw = np.mean([xs[i].T @ dz[i] for i in range(BF)], axis=0)
    np.testing.assert_allclose(serial_dw, want_dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(serial_dw * BF, plain_dw, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("io_mode", MODES)
def test_sharded_activation_over_replicas(io_mode: str) -> None:
    """2 replicas: the activation the gradient needs is stored sharded over both (each
    replica keeps half of every step's entry) and gathered back for the gradient. Sharding
    needs the activation to be equal on the replicas of the shard group (as for upstream's
    tensor-parallel case), so both get the same data; dx against NumPy."""
    R = 2
    rng = np.random.default_rng(3)
    xs = np.repeat(rng.standard_normal((BF, 1, CB, 3)).astype(np.float32), R, axis=1)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    gs = rng.standard_normal((BF, CB, 4)).astype(np.float32)
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        group = ir.replica_grouping()
        x_s = popxl.h2d_stream((CB, 3), popxl.float32, "x")
        dx_s = popxl.d2h_stream((CB, 3), popxl.float32, "dx")
        args, graph = Dense().create_graph(x_s.spec)
        dargs, dgraph = addons.autodiff_with_accumulation(
            graph, graph.args.tensors, grads_required=graph.graph.inputs[:1]
        )
        acts = [ec.fwd_tensor for ec in dgraph.grad_graph_info.expected_inputs
                if ec.connection_type == ExpectedConnectionType.Fwd and ec.fwd_tensor not in graph.args.tensors]  # fmt: skip
        assert acts
        g_in = dgraph.graph.inputs[0]
        g_buf = batch_serial_buffer(g_in, steps=BF)
        fwd, bwd = batch_serialise_fwd_and_grad(
            graph, dgraph, graph.args, BF, {graph.graph.inputs[0]: x_s, g_in: (g_buf, 0)},
            {dgraph.graph.outputs[0]: dx_s}, {a: group for a in acts}, io_mode=io_mode,
        )  # fmt: skip
        sharded = [h for t, h in fwd.stored_buffers.items() if t in acts]
        assert sharded and all(
            h.buffer.meta_shape == tuple(t.shape) for t, h in fwd.stored_buffers.items() if t in acts
        )
        weights = args.init()
        grad_vars = dargs.init()
        grad_vars.update(weights)
        with popxl.in_sequence():
            for i in range(BF):
                ops.remote_store(g_buf, i, popxl.constant(gs[i]))
            fwd.graph.bind(weights).call(0)
            bwd.graph.bind(grad_vars).call(0)
    ir.num_host_transfers = BF
    with popxl.Session(ir) as s:
        s.write_variable_data(weights.w, w)
        got = s.run({x_s: xs})[dx_s]  # (BF, R, CB, 3)
    z = xs.astype(np.float64) @ w
    dz = gs[:, None] * _gelu_grad(z)
    np.testing.assert_allclose(got, dz @ w.T, rtol=1e-4, atol=1e-4)


def test_seed_input_split_per_step() -> None:
    """A graph with a seed input: each step gets its own seed (split from the one given),
    so the steps' dropout masks differ, and the result is reproducible."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x_s = popxl.h2d_stream((64,), popxl.float32, "x")
        y_s = popxl.d2h_stream((64,), popxl.float32, "y")

        def drop(x: popxl.Tensor, seed: popxl.Tensor) -> popxl.Tensor:
            return ops.dropout(x, seed, 0.5)

        g = ir.create_graph(drop, x_s.spec, popxl.TensorSpec((2,), popxl.uint32))
        res = batch_serialise(addons.GraphWithNamedArgs(g), BF, {g.inputs[0]: x_s}, {g.outputs[0]: y_s}, {},
                              seed_input=g.inputs[1], io_mode="compute")  # fmt: skip
        assert [t.name for t in res.graph.graph.inputs] == ["batch_serial_loop_index", "batch_serial_random_seed"]
        res.graph.call(0, popxl.constant(np.array([1, 2], np.uint32)))
    ir.num_host_transfers = BF
    with popxl.Session(ir) as s:
        y = s.run({x_s: np.ones((BF, 64), np.float32)})[y_s]
    masks = y != 0
    assert set(np.unique(y)) <= {0.0, 2.0}
    assert len({m.tobytes() for m in masks}) == BF  # a different mask per step


def test_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x_s = popxl.h2d_stream((CB, 2), popxl.float32, "x")
        args, graph = Scale().create_graph(x_s.spec)
        x, y = graph.graph.inputs[0], graph.graph.outputs[0]
        with pytest.raises(ValueError, match="unknown io_mode 'fast'"):
            batch_serialise(graph, BF, {x: x_s}, {}, {}, io_mode="fast")
        with pytest.raises(ValueError, match="steps must be a positive int"):
            batch_serialise(graph, 0, {x: x_s}, {}, {})
        with pytest.raises(ValueError, match="rows must be >0"):
            batch_serialise(graph, BF, {x: x_s}, {}, {}, rows=0)
        with pytest.raises(TypeError, match="incompatible handle in load_handles"):
            batch_serialise(graph, BF, {x: 3}, {}, {})
        with pytest.raises(ValueError, match="not an input of"):
            batch_serialise(graph, BF, {y: x_s}, {}, {})
        dargs, dgraph = addons.autodiff_with_accumulation(graph, graph.args.tensors, grads_required=[x])
        with pytest.raises(ValueError, match="FwdGrad input .* must have a load_handle"):
            batch_serialise_fwd_and_grad(graph, dgraph, graph.args, BF, {x: x_s}, {}, {})

    ir2 = popxl.Ir(replication=2)
    with ir2.main_graph:
        t = popxl.variable(np.zeros(3, np.float32))
        assert batch_serial_buffer(t, 2, 3).entries == 6
        with pytest.raises(ValueError, match="not divisible by the shard group size 2"):
            batch_serial_buffer(t, 2, 1, ir2.replica_grouping())
