"""popxl_addons utilities: seed_variable, InputStreams / OutputStreams, route_tensor_into_graph,
transforms.repeat_graph, array_munging, performance_utils (FLOPs), debugging.print_tensor and
the IPU tuning knobs (documented no-ops). References: NumPy, hand-counted FLOPs, upstream's
documented examples (popxl-addons tests/unit/test_route_tensor.py, test_array_munging.py,
tests/integration/test_repeat_graph.py)."""

import re

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl.printing import schedule_str
from popxl_addons import array_munging as am
from popxl_addons.transforms.repeat_graph import repeat_graph


# -- seed_variable -------------------------------------------------------------------------------
def test_seed_variable_values_and_updates():
    ir = popxl.Ir()
    with ir.main_graph:
        seed_v, seed = addons.seed_variable(1984)
        assert seed.shape == (2,) and seed.dtype == popxl.uint32
        d2h = popxl.d2h_stream(seed.shape, seed.dtype, "seed_out")
        ops.host_store(d2h, seed)
        # an in-place update of the tensor is what the variable reads back
        ops.var_updates.copy_var_update_(seed, seed + popxl.constant(np.array([1, 2], np.uint32)))
    expected = popxl.create_seeds(1984)
    with popxl.Session(ir, "cpu") as s:
        out = s.run()[d2h]
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(s.get_tensor_data(seed_v), expected + np.array([1, 2], np.uint32))
    assert not np.array_equal(popxl.create_seeds(1985), expected)


def test_seed_variable_errors():
    ir = popxl.Ir()
    sg = ir.create_empty_graph("sg")
    with ir.main_graph:
        with pytest.raises(TypeError, match="seed must be an int"):
            addons.seed_variable(1.5)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    with sg, pytest.raises(ValueError, match="main graph"):
        addons.seed_variable(1)


# -- streams -------------------------------------------------------------------------------------
def test_input_output_streams():
    ir = popxl.Ir()
    with ir.main_graph:
        ins = addons.InputStreams(x=((2, 3), popxl.float32), labels=((2,), popxl.int32))
        assert len(ins) == 2 and ins[0] is ins.x and ins["labels"] is ins[1] and ins[:1] == [ins.x]
        x = ops.host_load(ins.x)
        outs = addons.OutputStreams(y=((2, 3), popxl.float32))
        ops.host_store(outs.y, x * 2)
        assert list(outs.keys()) == ["y"]
        with pytest.raises(TypeError, match="must be given as"):
            addons.InputStreams(bad=(2, 3, 4))  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
        with pytest.raises(AttributeError, match="no stream 'z'"):
            _ = ins.z
        again = addons.InputStreams.from_streams({"a": ins.x})
        assert again.a is ins.x
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    with popxl.Session(ir, "cpu") as s:
        res = s.run({ins.x: data})
    np.testing.assert_array_equal(res[outs.y], data * 2)


# -- route_tensor_into_graph ---------------------------------------------------------------------
def test_is_subgraph():
    ir = popxl.Ir()
    g = ir.main_graph
    sg1, sg2, sg3 = (ir.create_empty_graph(n) for n in ("sg1", "sg2", "sg3"))
    with g:
        ops.call(sg1)
    with sg1:
        ops.call(sg2)
    with g:
        ops.call(sg3)
    assert addons.is_subgraph(g, sg1) and addons.is_subgraph(g, sg2) and addons.is_subgraph(sg1, sg2)
    assert addons.is_subgraph(g, sg3)
    assert not addons.is_subgraph(sg1, sg3) and not addons.is_subgraph(sg3, sg2)


def test_route_tensor_many_calls_and_reuse():
    ir = popxl.Ir()
    sg = ir.create_empty_graph("sg1")
    with ir.main_graph:
        a = popxl.variable(np.float32(1.5), name="a")
        ops.call(sg)
        ops.call(sg)
    with sg:
        b = addons.route_tensor_into_graph(a) + 1
        c = addons.route_tensor_into_graph(a) + 2  # the same input again
        popxl.graph_output(b * c)
    assert len(sg.inputs) == 1
    # each call site now passes `a`
    mlir = ir.to_mlir()
    assert mlir.count("call.call") == 2 and mlir.count("(%a)") == 2


def test_route_tensor_many_paths_modified_updates_variable():
    ir = popxl.Ir()
    sg1, sg2, sg3 = (ir.create_empty_graph(n) for n in ("sg1", "sg2", "sg3"))
    with ir.main_graph:
        a = popxl.variable(np.float32(1.0), name="a")
        ops.call(sg1)
    with sg1:
        ops.call(sg2)
        ops.call(sg3)
    with sg3:
        ops.call(sg2)
    with sg2:
        b = addons.route_tensor_into_graph(a, modified=True)
        ops.var_updates.accumulate_(b, popxl.constant(np.float32(1.0)))
    assert len(ir.main_graph.variables) == 1
    assert len(sg1.inputs) == len(sg2.inputs) == len(sg3.inputs) == 1
    with popxl.Session(ir, "cpu") as s:
        s.run()
        assert s.get_tensor_data(a) == 3.0  # sg2 runs twice (directly and through sg3)


def test_route_tensor_into_repeat_body():
    """A repeat body gets a loop-invariant by-ref input: updated once per iteration."""
    ir = popxl.Ir()
    body = ir.create_empty_graph("body")
    with ir.main_graph:
        acc = popxl.variable(np.float32(0.5), name="acc")
        ops.repeat(body, 4)
    with body:
        a_in = addons.route_tensor_into_graph(acc, modified=True)
        ops.var_updates.accumulate_(a_in, popxl.constant(np.float32(2.0)))
    assert len(body.inputs) == 1
    with popxl.Session(ir, "cpu") as s:
        s.run()
        assert s.get_tensor_data(acc) == 8.5


def test_route_tensor_errors():
    ir = popxl.Ir()
    sg = ir.create_empty_graph("sg1")
    with ir.main_graph:
        a = popxl.variable(np.float32(1))
    with pytest.raises(ValueError) as e:
        addons.route_tensor_into_graph(a, sg)
    assert "is not in the graph" in str(e.value) and "is not in a known parent graph" in str(e.value)
    ir = popxl.Ir()
    sg = ir.create_empty_graph("sg1")
    with ir.main_graph:
        ops.call(sg)
        late = popxl.variable(np.float32(1)) + 1
    with sg, pytest.raises(ValueError, match="defined after a call"):
        addons.route_tensor_into_graph(late)


def test_route_tensor_numbers():
    """sg computes x * a with `a` routed from main: NumPy's product."""
    # build sg's body after the call exists
    ir2 = popxl.Ir()
    sg2 = ir2.create_empty_graph("sg")
    with sg2:
        xin2 = popxl.graph_input((3,), popxl.float32, "x")
    with ir2.main_graph:
        a2 = popxl.variable(np.array([1.0, 2.0, 3.0], np.float32), name="a")
        x2 = popxl.variable(np.array([4.0, 5.0, 6.0], np.float32), name="x")
        ops.call(sg2, x2)
    with sg2:
        a_in = addons.route_tensor_into_graph(a2, modified=True)
        ops.var_updates.copy_var_update_(a_in, xin2 * a_in)
    with popxl.Session(ir2, "cpu") as s:
        s.run()
        np.testing.assert_allclose(s.get_tensor_data(a2), [4.0, 10.0, 18.0])


# -- repeat_graph --------------------------------------------------------------------------------
@pytest.mark.parametrize("repeat_count", [1, 5])
def test_repeat_graph_basic(repeat_count):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.constant(0) + 1
        addons.host_store(x)
    g = repeat_graph(ir.main_graph, repeat_count)
    assert (g == ir.main_graph) == (repeat_count == 1)
    ir.num_host_transfers = repeat_count
    with popxl.Session(ir, "cpu") as s:
        out = s.run()
    assert np.sum(list(out.values())) == repeat_count


def test_repeat_graph_variables_and_order():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.float32(0.0), name="v")
        y = v * 2.0
        ops.var_updates.accumulate_(v, popxl.constant(np.float32(1.5)))
        d2h = addons.host_store(y)
    body = repeat_graph(ir.main_graph, 4)
    assert [t.name for t in body.inputs] == ["v"]
    assert len(ir.main_graph.variables) == 1
    ir.num_host_transfers = 4
    with popxl.Session(ir, "cpu") as s:
        out = s.run()[d2h]
        np.testing.assert_allclose(out, [0.0, 3.0, 6.0, 9.0])  # y read before each update
        assert s.get_tensor_data(v) == 6.0


def test_repeat_graph_errors():
    ir = popxl.Ir()
    with pytest.raises(TypeError):
        repeat_graph(ir.main_graph, 2.0)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    g = ir.create_graph(lambda x: x * 2, popxl.TensorSpec((2,), popxl.float32))
    with pytest.raises(ValueError, match="is computed by its ops"):
        repeat_graph(g, 3)


# -- array_munging -------------------------------------------------------------------------------
def test_shard_unshard_docs():
    data = np.arange(8).reshape(4, 2)
    np.testing.assert_array_equal(am.shard(data, 2, 0), [[[0, 1], [2, 3]], [[4, 5], [6, 7]]])
    np.testing.assert_array_equal(am.shard(data, 2, 1), [[[0], [2], [4], [6]], [[1], [3], [5], [7]]])
    x = np.random.default_rng(0).random((10, 3, 4))
    for axis in (0, 1, 2, -1):
        n = 2 if x.shape[axis] % 2 == 0 else x.shape[axis]
        np.testing.assert_array_equal(am.unshard(am.shard(x, n, axis), axis), x)
    with pytest.raises(ValueError, match="cannot be split into 2"):
        am.shard(np.arange(3), 2, 0)


def test_repeat_helpers_docs():
    d = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(am.repeat(d, 2, 0), [[[0, 1, 2], [3, 4, 5]]] * 2)
    np.testing.assert_array_equal(am.repeat(d, 2, 1), [[[0, 1, 2], [0, 1, 2]], [[3, 4, 5], [3, 4, 5]]])
    np.testing.assert_array_equal(am.repeat_axis(d, 2, 0), [[0, 1, 2], [3, 4, 5], [0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(am.repeat_axis(d, 2, 1), [[0, 1, 2, 0, 1, 2], [3, 4, 5, 3, 4, 5]])
    a = np.arange(4)
    np.testing.assert_array_equal(am.repeat_shard(a, 2, 2, 0, "contiguous"), [[0, 1], [2, 3], [0, 1], [2, 3]])
    np.testing.assert_array_equal(am.repeat_shard(a, 2, 2, 0, "strided"), [[0, 1], [0, 1], [2, 3], [2, 3]])
    np.testing.assert_array_equal(am.repeat_shard(np.arange(6), 3, 2, 0, "strided"), [[0, 1, 2]] * 3 + [[3, 4, 5]] * 3)
    with pytest.raises(ValueError, match="'contiguous' or 'strided'"):
        am.repeat_shard(a, 2, 2, 0, "bogus")


def test_shard2d_docs():
    data = np.arange(8).reshape(4, 2)
    np.testing.assert_array_equal(am.shard2D(data, 2, 2, 0, 1), [[[0], [2]], [[1], [3]], [[4], [6]], [[5], [7]]])
    np.testing.assert_array_equal(am.shard2D(data, 2, 2, 1, 0), [[[0], [2]], [[4], [6]], [[1], [3]], [[5], [7]]])
    x = np.random.default_rng(1).random((10, 3, 4))
    s = am.shard2D(x, 2, 4, 0, 2)
    assert s.shape == (8, 5, 3, 1)
    np.testing.assert_array_equal(am.unshard2D(s, 2, 4, 0, 2), x)


def test_tensor_parallel_io_docs():
    a = np.arange(4)
    np.testing.assert_array_equal(am.tensor_parallel_input(a, 1, 2), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(am.tensor_parallel_input(a, 2, 2), [[0, 0], [1, 1], [2, 2], [3, 3]])
    np.testing.assert_array_equal(am.tensor_parallel_input(a, 2, 4), [[0, 0, 1, 1], [2, 2, 3, 3]])
    np.testing.assert_array_equal(
        am.tensor_parallel_input(a, 2, 2, repeat_fn=lambda x, i: x * 10 if i else x),
        [[0, 0], [1, 10], [2, 20], [3, 30]],
    )
    with pytest.raises(ValueError, match="does not equally divide"):
        am.tensor_parallel_input(a, 3, 4)
    with pytest.raises(ValueError, match="is not less than"):
        am.tensor_parallel_input(a, 4, 2)
    # output of 3 transfers on rf=4 (dp=2, tp=2) of shape (5,)
    out = np.arange(3 * 4 * 5).reshape(3, 4, 5)
    got = am.tensor_parallel_output(out, 3, 2, 4, (5,))
    np.testing.assert_array_equal(got, out.reshape(3, 2, 2, 5)[:, :, 0].reshape(6, 5))
    got2 = am.tensor_parallel_output(out, 3, 2, 4, (5,), tp_identical=False, true_num_host_transfers=2)
    assert got2.shape == (4, 2, 5)


def test_pad_squeeze_axes():
    d = np.arange(6).reshape(3, 2)
    np.testing.assert_array_equal(am.pad_axis(d, 5, 1), [[0, 1, 0, 0, 0], [2, 3, 0, 0, 0], [4, 5, 0, 0, 0]])
    assert am.squeeze_safe(np.zeros((1, 3, 1)), [0, 1]).shape == (3, 1)
    assert am.squeeze_safe(np.zeros((1, 3, 1))).shape == (3,)
    assert am.handle_negative_axis(np.zeros((2, 3)), -1) == 1
    with pytest.raises(IndexError):
        am.handle_negative_axis(np.zeros((2, 3)), 2)
    with pytest.raises(IndexError):
        am.handle_negative_axis(np.float32(1), 0)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    # re-exported at top level, as upstream
    assert addons.shard is am.shard and addons.squeeze_safe is am.squeeze_safe


# -- performance_utils ---------------------------------------------------------------------------
def _mlp_ir(batch=8, n_in=4, hidden=16, n_out=3, repeat=1):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((batch, n_in), np.float32))
        w1 = popxl.variable(np.ones((n_in, hidden), np.float32))
        b1 = popxl.variable(np.ones((hidden,), np.float32))
        w2 = popxl.variable(np.ones((hidden, n_out), np.float32))
        b2 = popxl.variable(np.ones((n_out,), np.float32))

        def mlp(x, w1, b1, w2, b2):
            h = ops.gelu(x @ w1 + b1)
            return h @ w2 + b2

        g = ir.create_graph(mlp, x, w1, b1, w2, b2)
        ops.call(g, x, w1, b1, w2, b2)
        if repeat > 1:
            body = ir.create_graph(lambda v: v - 1.0, x)
            ops.repeat(body, repeat, x)
    return ir


def test_flops_of_small_mlp_by_hand():
    batch, n_in, hidden, n_out = 8, 4, 16, 3
    mm1 = 2 * n_in * batch * hidden  # each of batch*hidden outputs: n_in mul + n_in add
    add1 = batch * hidden
    mm2 = 2 * hidden * batch * n_out
    add2 = batch * n_out
    ir = _mlp_ir(batch, n_in, hidden, n_out)
    assert addons.total_FLOPs(ir) == mm1 + add1 + mm2 + add2 == 1944
    bd = addons.evaluate_ir_FLOPs(ir)
    assert addons.performance_utils._sum(bd["MatMul"]) == mm1 + mm2
    assert addons.performance_utils._sum(bd["Add"]) == add1 + add2
    (key,) = bd["MatMul"].keys()
    assert key.startswith("Call_") and key.endswith("mlp)")
    # a repeat of 5 subtractions of (8, 4) counts 5 * 32 more
    assert addons.total_FLOPs(_mlp_ir(repeat=5)) == 1944 + 5 * batch * n_in
    # replicas multiply
    ir2 = popxl.Ir(replication=2)
    with ir2.main_graph:
        a = popxl.variable(np.ones((2, 3), np.float32))
        b = popxl.variable(np.ones((3, 5), np.float32))
        _ = a @ b
    assert addons.total_FLOPs(ir2) == 2 * (2 * 3 * 2 * 5)


def test_flops_keyed_by_op_id() -> None:
    """Ops are keyed by the op id `print_schedule` shows: numbered from 100 in creation order,
    constants and variables (tensors, not ops) get none."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        v = popxl.constant(np.ones(4, np.float32))
        m = popxl.constant(np.ones((4, 8), np.float32))
        _ = v @ m  # 100
        w = popxl.variable(np.ones(4, np.float32))
        _ = v.T @ w  # transpose 101, matmul 102
        _ = popxl.constant(np.ones((3, 5, 10, 9), np.float32)) @ popxl.constant(np.ones((3, 5, 9, 3), np.float32))
    bd = addons.evaluate_FLOPs(ir.main_graph)
    assert bd["MatMul"] == {100: 2 * 4 * 8, 102: 2 * 4, 103: 2 * 9 * 10 * 3 * 3 * 5}
    shown = re.findall(r"MatMul\.(\d+)", schedule_str(ir.main_graph))
    assert [int(i) for i in shown] == sorted(bd["MatMul"])


def test_flops_printing_and_format():
    assert addons.format_flops_scientific(9072) == "9.072E+03"
    assert addons.format_flops_scientific(900) == "0.900E+03"
    assert addons.format_flops_scientific(64) == "64.000E+00"
    assert addons.format_flops_scientific(2_500_000, "M") == "2.500E+06"
    with pytest.raises(ValueError, match="unknown format"):
        addons.format_flops_scientific(1, "X")
    bd = addons.evaluate_ir_FLOPs(_mlp_ir())
    text = addons.print_FLOPs(bd)
    assert text.splitlines()[0].split() == ["Op", "Type", "|", "FLOPs", "|", "%"]
    assert "TOT" in text and "1.944E+03" in text
    flat = addons.print_FLOPs(bd, mode="flat")
    assert "MatMul" in flat and flat.strip().splitlines()[-1].startswith("TOT")
    with pytest.raises(ValueError, match="unknown mode"):
        addons.print_FLOPs(bd, mode="bogus")


# -- debugging -----------------------------------------------------------------------------------
def test_debug_print_tensor_levels(monkeypatch):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32))
        n_ops = len(ir.main_graph.tensors)
        monkeypatch.setenv("MODEL_LOG_LEVEL", "INFO")
        assert addons.print_tensor(x) is x  # DEBUG < INFO: nothing added
        addons.print_text("hello")
        assert len(ir.main_graph.tensors) == n_ops
        y = addons.print_tensor(x, "title", level="WARN")  # enabled: ops.print_tensor
        assert y is not x and y.shape == x.shape
        monkeypatch.setenv("MODEL_LOG_LEVEL", "TRACE")
        z = addons.print_tensor(x, "t")
        assert z is not x
        with pytest.raises(ValueError, match="level must be one of"):
            addons.print_tensor(x, level="LOUD")
        monkeypatch.setenv("MODEL_LOG_LEVEL", "NOISY")
        with pytest.raises(ValueError, match="MODEL_LOG_LEVEL must be one of"):
            addons.print_tensor(x)


# -- tuning knobs --------------------------------------------------------------------------------
def test_tuning_knobs_are_checked_noops():
    ir = _mlp_ir()
    before = ir.to_mlir()
    addons.set_available_memory_proportion_by_ipu(ir, [0.3, 0.6])
    g = ir.create_graph(lambda x: x + 1, popxl.TensorSpec((2,), popxl.float32))
    addons.set_graph_available_memory_proportion_by_ipu(g, 0.5)
    addons.enable_fc_pass(ir)
    addons.disable_fc_pass(ir)
    assert ir.to_mlir().replace(before[:0], "").count("popxl.matmul") == before.count("popxl.matmul")
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        addons.set_available_memory_proportion_by_ipu(ir, [1.5])
    with pytest.raises(TypeError, match="expected a popxl.Ir"):
        addons.enable_fc_pass("ir")  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    with pytest.raises(TypeError, match="popxl.Graph"):
        addons.set_graph_available_memory_proportion_by_ipu(3, [0.5])
