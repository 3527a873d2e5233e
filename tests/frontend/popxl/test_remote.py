"""Remote buffers, remote variables and replicated tensor sharding (RTS), through popxl.

References are independent NumPy computations of what each program must do: the phased
load / add / store round trips (`after == before + data`, and `before + 4 * data` with RTS
over 4 replicas, the reduce-scatter summing the 4 replicas' equal contributions), the
layout of shards (replica r holds shard `position-in-group % shard_over` of the flattened,
zero-padded value), and the host values the Session must return (full, unsharded, one per
group).
"""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tests.helpers.deferred import refused_by_session
from xl.compiler import compile_module
from xl.runtime.kernels import DataRangeError


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _shard(full: np.ndarray, shards: int, i: int) -> np.ndarray:
    """Shard i of `full` over `shards` replicas: flattened, zero-padded, equal 1-D parts."""
    n = -(-full.size // shards)
    flat = np.zeros(n * shards, full.dtype)
    flat[: full.size] = full.reshape(-1)
    return flat[i * n : (i + 1) * n]


# ---------------------------------------------------------------------------------------
# Phased execution: load a layer's variables, update, store back (upstream's test pattern)
# ---------------------------------------------------------------------------------------


def _phased(replicas: int, rts: bool, layers: int = 3, steps: int = 2):
    shape = (4, 6)
    rng = _rng(1)
    before = [rng.standard_normal(shape).astype(np.float32) for _ in range(layers)]
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence():
        if rts:
            buffer = popxl.replica_sharded_buffer(shape, popxl.float32, entries=layers)
            handles = [
                popxl.remote_replica_sharded_variable(b, buffer, i, name=f"layer{i}") for i, b in enumerate(before)
            ]
        else:
            buffer = popxl.remote_buffer(shape, popxl.float32, entries=layers)
            handles = [popxl.remote_variable(b, buffer, i, name=f"layer{i}") for i, b in enumerate(before)]
        data_stream = popxl.h2d_stream(shape, popxl.float32, "data")

        def phase(data: popxl.Tensor, index: popxl.Tensor) -> None:
            w = ops.remote_load(buffer, index)
            if rts:
                full = ops.collectives.replicated_all_gather(w)  # meta shape: the full value
                full = full + data
                w = ops.collectives.replicated_reduce_scatter(full, "add")
            else:
                w = w + data
            ops.remote_store(buffer, index, w)

        g = ir.create_graph(phase, popxl.TensorSpec(shape, popxl.float32), popxl.TensorSpec((), popxl.uint32))
        data = ops.host_load(data_stream)
        for i in range(layers):
            ops.call(g, data, popxl.constant(i, popxl.uint32))
    return ir, handles, before, data_stream, buffer


@pytest.mark.parametrize("replicas,rts,factor", [(1, False, 1), (4, False, 1), (4, True, 4)])
def test_phased_round_trip(replicas: int, rts: bool, factor: int) -> None:
    steps = 2
    ir, handles, before, data_stream, _ = _phased(replicas, rts, steps=steps)
    rng = _rng(2)
    data = rng.standard_normal((steps, replicas, 4, 6)).astype(np.float32)
    feed = data if replicas > 1 else data[:, 0]
    with popxl.Session(ir) as s:
        for k in range(steps):  # each run is one pass over the phases
            s.run({data_stream: feed[k]})
        after = s.get_tensors_data(handles)
    for h, b in zip(handles, before, strict=True):
        if rts:
            # the all-gather gives every replica the layer; each adds its own data; the
            # reduce-scatter sums the replicas' results: 4 * layer + sum of the data
            for k in range(steps):
                b = replicas * b + data[k].sum(axis=0)
        else:
            # each replica keeps its own copy of the buffer: the host reads replica 0's
            b = b + data[:, 0].sum(axis=0)
        np.testing.assert_allclose(after[h], b, rtol=1e-5, atol=1e-5)
    if rts:  # the upstream check: identical data on every replica gives (before + data) * 4
        ir, handles, before, data_stream, _ = _phased(replicas, rts, steps=1)
        d = rng.standard_normal((4, 6)).astype(np.float32)
        with popxl.Session(ir) as s:
            s.run({data_stream: np.stack([d] * replicas)})
            for h, b in zip(handles, before, strict=True):
                np.testing.assert_allclose(s.get_tensor_data(h), (b + d) * factor, rtol=1e-5, atol=1e-5)


def test_phased_shards_are_stored_per_replica() -> None:
    """With RTS each replica's buffer entry holds its shard of the layer (checked in the
    executable's state, against `_shard` of the expected value 4 * layer + sum of data)."""
    ir, handles, before, data_stream, buffer = _phased(4, True, steps=1)
    d = _rng(3).standard_normal((4, 4, 6)).astype(np.float32)
    with popxl.Session(ir) as s:
        s.run({data_stream: d})
        exe = s._exe
        for i, b in enumerate(before):
            want = 4 * b + d.sum(axis=0)
            for r in range(4):
                got = exe.get_state(buffer._name, r)[i]
                np.testing.assert_allclose(got, _shard(want, 4, r), rtol=1e-6, atol=1e-6)
    assert buffer.tensor_shape == (6,) and buffer.meta_shape == (4, 6)


def test_both_plans_agree() -> None:
    """The straightforward plan gives the same buffer contents as the optimised one."""
    ir, handles, before, data_stream, buffer = _phased(4, True, steps=2)
    d = _rng(4).standard_normal((2, 4, 4, 6)).astype(np.float32)
    results = []
    for optimize in (False, True):
        exe = compile_module(ir._module, optimize=optimize)
        exe.run({"data": d[0]})
        exe.run({"data": d[1]})
        results.append(np.stack([exe.get_state(buffer._name, r) for r in range(4)]))
    np.testing.assert_array_equal(results[0], results[1])


# ---------------------------------------------------------------------------------------
# Remote variables: Session get / write, groups, dynamic offsets
# ---------------------------------------------------------------------------------------


def test_remote_variable_session_values() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((3,), popxl.int32, entries=2)
        a = popxl.remote_variable(np.array([1, 2, 3], np.int32), rb, 0, name="a")
        b = popxl.remote_variable(np.array([10, 20, 30], np.int32), rb, 1, name="b")
        x = ops.remote_load(rb, 0)
        y = ops.remote_load(rb, 1)
        ops.remote_store(rb, 0, y)  # swap the two entries
        ops.remote_store(rb, 1, x)
    with popxl.Session(ir) as s:
        assert s.get_tensor_data(a).tolist() == [1, 2, 3]
        s.run()
        assert s.get_tensor_data(a).tolist() == [10, 20, 30]
        assert s.get_tensor_data(b).tolist() == [1, 2, 3]
        s.write_variable_data(a, np.array([7, 8, 9], np.int32))
        s.run()
        assert s.get_tensor_data(b).tolist() == [7, 8, 9]
        assert s.get_tensor_data(a).tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="shape of the data"):
        s.write_variable_data(a, np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="dtype of the data"):
        s.write_variable_data(a, np.zeros(3, np.float32))
    assert a.location_info.is_remote() and not a.location_info.is_sharded()
    assert a.location_info.remote_buffer is rb and b.location_info.offset == 1
    assert isinstance(a, popxl.Variable) and a in ir.main_graph.variables


def test_upstream_remote_variable_examples() -> None:
    """PopXL's documentation examples remote_variable.py and remote_variable_replica_grouped.py."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = np.array(1).astype(np.int32)
        buffer = popxl.remote_buffer(x.shape, popxl.int32, 1)
        remote_x = popxl.remote_variable(x, buffer, 0)
        loaded_x = ops.remote_load(buffer, 0)
        y = popxl.variable(2)
        ops.var_updates.accumulate_(loaded_x, y)
        ops.remote_store(buffer, 0, loaded_x)
        y_d2h = popxl.d2h_stream(loaded_x.shape, loaded_x.dtype)
        ops.host_store(y_d2h, loaded_x)
    with popxl.Session(ir, "ipu_model") as session:
        outputs = session.run({})
        final_weight = session.get_tensor_data(remote_x)
    assert outputs[y_d2h] == 3 and final_weight == 3

    ir = popxl.Ir(replication=2)
    v_h = np.arange(0, 2 * 32).reshape((2, 32)).astype(np.int32)
    rg = ir.replica_grouping(group_size=1)
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((32,), popxl.int32)
        remote_v = popxl.remote_variable(v_h, rb, replica_grouping=rg)
        v = ops.remote_load(rb, 0)
        v += 1
        ops.remote_store(rb, 0, v)
    with popxl.Session(ir, "ipu_model") as sess:
        sess.run()
    assert np.array_equal(sess.get_tensor_data(remote_v), v_h + 1)
    assert remote_v.shape_on_host == (2, 32)


def test_remote_variable_all_replicas_retrieval() -> None:
    """retrieval_mode='all_replicas' reads every replica's entry: replicas that diverge
    (each adds its own stream data) are all returned; writing them is refused."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((2,), popxl.float32)
        v = popxl.remote_variable(np.array([1.0, 2.0], np.float32), rb, retrieval_mode="all_replicas")
        st = popxl.h2d_stream((2,), popxl.float32, "d")
        ops.remote_store(rb, 0, ops.remote_load(rb, 0) + ops.host_load(st))
    d = np.array([[1.0, 1.0], [5.0, 6.0]], np.float32)
    with popxl.Session(ir) as s:
        assert s.get_tensor_data(v).shape == (2, 2)
        s.run({st: d})
        np.testing.assert_array_equal(s.get_tensor_data(v), [[2.0, 3.0], [6.0, 8.0]])
        with pytest.raises(NotImplementedError, match="all_replicas"):
            s.write_variable_data(v, np.zeros((2, 2), np.float32))


def test_dynamic_offset_in_a_loop_and_out_of_range() -> None:
    """Offsets read at run time: a repeat loop walks the entries with a counter; an offset
    from the host past the last entry raises DataRangeError naming op, buffer and value."""
    entries = 4
    init = np.arange(entries * 2, dtype=np.float32).reshape(entries, 2)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((2,), popxl.float32, entries)
        vs = [popxl.remote_variable(init[i], rb, i, name=f"e{i}") for i in range(entries)]
        counter = popxl.variable(np.array(0, np.uint32), name="counter")

        def body(c: popxl.TensorByRef) -> None:
            x = ops.remote_load(rb, c)
            ops.remote_store(rb, c, x * 2.0)
            ops.increment_mod_(c, 1, entries)

        g = ir.create_graph(body, counter)
        ops.repeat(g, 3, counter)
        idx_stream = popxl.h2d_stream((), popxl.uint32, "idx")
        idx = ops.host_load(idx_stream)
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(out, ops.remote_load(rb, idx))
    with popxl.Session(ir) as s:
        res = s.run({idx_stream: np.array(1, np.uint32)})
        np.testing.assert_array_equal(res[out], init[1] * 2)
        got = s.get_tensors_data(vs)
        for i, v in enumerate(vs):
            np.testing.assert_array_equal(got[v], init[i] * (2 if i < 3 else 1))
        with pytest.raises(DataRangeError) as e:
            s.run({idx_stream: np.array(7, np.uint32)})
    msg = str(e.value)
    assert "ipu.remote_load" in msg and "offset 7" in msg and '"remote_buffer_1"' in msg
    assert "[0, 4)" in msg and 'stream "idx"' in msg


def test_remote_load_inplace_and_names() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((2, 2), popxl.float32, 2)
        popxl.remote_variable(np.eye(2, dtype=np.float32), rb, 1)
        t = popxl.variable(np.zeros((2, 2), np.float32), name="t")
        r = ops.remote_load_(rb, 1, t)
        loaded = ops.remote_load(rb, 1, name="mine")
        default = ops.remote_load(rb, 0)
    # PopXL's in-place ops return a new tensor aliasing their input
    assert r is not t and r.spec == t.spec and r in ir.main_graph.tensors
    assert loaded.name == "mine" and default.name.startswith("id_1_offset_0")
    with popxl.Session(ir) as s:
        s.run()
        np.testing.assert_array_equal(s.get_tensor_data(t), np.eye(2))


# ---------------------------------------------------------------------------------------
# Replica-sharded variables: sharded then gathered equals the original
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "replicas,group_size,shard_over,shape",
    [(4, None, None, (4, 6)), (4, None, 2, (3, 5)), (4, 2, 2, (7,)), (4, 2, 1, (2, 2)), (2, None, None, (5,))],
)
def test_replica_sharded_variable_gathered_equals_original(replicas, group_size, shard_over, shape) -> None:
    ir = popxl.Ir(replication=replicas)
    rg = ir.replica_grouping(group_size=group_size) if group_size is not None else None
    groups = replicas // (group_size or replicas)
    full_shape = (groups, *shape) if groups > 1 else shape
    data = _rng(5).standard_normal(full_shape).astype(np.float32)
    s_over = shard_over or (group_size or replicas)
    n = -(-int(np.prod(shape)) // s_over)
    with ir.main_graph:
        v, shard = popxl.replica_sharded_variable(data, name="w", replica_grouping=rg, shard_over=shard_over)
        assert shard.shape == (n,) and shard.meta_shape == shape and v.shape == shape
        out_shard = popxl.d2h_stream(shard.shape, shard.dtype, "shard")
        ops.host_store(out_shard, shard)
        if n * s_over == int(np.prod(shape)):  # no padding: all-gather over the shard group
            gathered = ops.collectives.replicated_all_gather(shard, group=ir.replica_grouping(group_size=s_over))
            out_full = popxl.d2h_stream(gathered.shape, gathered.dtype, "full")
            ops.host_store(out_full, gathered)
        else:
            out_full = None
    per_group = data if groups > 1 else data[None]
    assignment = (rg or ir.replica_grouping()).assignment
    with popxl.Session(ir) as s:
        res = s.run()
        np.testing.assert_array_equal(s.get_tensor_data(v), data)
    seen: dict[int, int] = {}
    for r in range(replicas):
        grp = assignment[r]
        pos = seen.get(grp, 0)
        seen[grp] = pos + 1
        np.testing.assert_array_equal(res[out_shard][r], _shard(per_group[grp], s_over, pos % s_over))
        if out_full is not None:
            np.testing.assert_array_equal(res[out_full][r], per_group[grp])
    assert v.location_info.is_sharded() and not v.location_info.is_remote()


def test_replica_sharded_variable_update_and_write() -> None:
    """The shard is resident state: updated in place it persists between runs; the Session
    gathers the full value and scatters written values."""
    ir = popxl.Ir(replication=4)
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    with ir.main_graph:
        v, shard = popxl.replica_sharded_variable(data, name="w")
        ops.var_updates.accumulate_(shard, popxl.constant(0.5))
    with popxl.Session(ir) as s:
        s.run()
        s.run()
        np.testing.assert_array_equal(s.get_tensor_data(v), data + 1.0)
        s.write_variable_data(v, data * 3)
        s.run()
        np.testing.assert_array_equal(s.get_tensor_data(v), data * 3 + 0.5)
        for r in range(4):
            np.testing.assert_array_equal(s._exe.get_state("w", r), _shard(data * 3 + 0.5, 4, r))
    with pytest.raises(ValueError, match="main graph|handle|cannot use"):
        ir2 = popxl.Ir(replication=2)
        with ir2.main_graph:
            v2, _ = popxl.replica_sharded_variable(np.ones(4, np.float32))
            ops.relu(v2)
        popxl.Session(ir2)


def test_upstream_remote_rts_example() -> None:
    """PopXL's documentation example remote_rts_var.py: [1, 2] sharded over 2 replicas,
    gathered, added [3, 4], sliced and stored back gives [4, 6]."""
    ir = popxl.Ir()
    ir.replication_factor = 2
    with ir.main_graph, popxl.in_sequence():
        x = np.array([1, 2]).astype(np.int32)
        buffer = popxl.remote_buffer((x.size // 2,), popxl.int32, 1)
        remote_x = popxl.remote_replica_sharded_variable(x, buffer, 0)
        loaded_x = ops.remote_load(buffer, 0)
        assert loaded_x.meta_shape == (2,)
        y = popxl.variable([3, 4])
        full_x = ops.collectives.replicated_all_gather(loaded_x)
        ops.var_updates.accumulate_(full_x, y)
        updated_shard = ops.collectives.replica_sharded_slice(full_x)
        ops.remote_store(buffer, 0, updated_shard)
    with popxl.Session(ir, "ipu_model") as session:
        session.run({})
        final_weight = session.get_tensor_data(remote_x)
    np.testing.assert_array_equal(final_weight, [4, 6])


# ---------------------------------------------------------------------------------------
# Memory report: remote bytes apart from resident bytes
# ---------------------------------------------------------------------------------------


def test_memory_report_counts_remote_bytes_apart() -> None:
    layers, shape = 4, (64, 64)
    nbytes = 64 * 64 * 4

    def build(phased: bool) -> popxl.Ir:
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence():
            x = popxl.variable(np.ones((8, 64), np.float32), name="x")
            if phased:
                rb = popxl.remote_buffer(shape, popxl.float32, layers)
                for i in range(layers):
                    popxl.remote_variable(np.eye(64, dtype=np.float32), rb, i, name=f"w{i}")
                for i in range(layers):
                    w = ops.remote_load(rb, i)
                    x = x @ w
            else:
                for i in range(layers):
                    x = x @ popxl.variable(np.eye(64, dtype=np.float32), name=f"w{i}")
            ops.host_store(popxl.d2h_stream(x.shape, x.dtype, "y"), x)
        return ir

    plain = popxl.Session(build(False)).memory_report(print_table=False).ipu(0)
    phased = popxl.Session(build(True)).memory_report(print_table=False).ipu(0)
    assert plain.remote_staging == 0 and plain.variables == layers * nbytes + 8 * 64 * 4
    assert phased.remote_staging == layers * nbytes
    assert phased.variables == 8 * 64 * 4
    # resident: weights are loaded one at a time into activations, not all held at once
    assert phased.total < plain.total
    assert phased.total == phased.variables + phased.constants + phased.activations_peak


# ---------------------------------------------------------------------------------------
# Errors (upstream's where upstream has one)
# ---------------------------------------------------------------------------------------


def test_errors() -> None:
    # a value of another element count than the buffer's entries: built, as in PopXL, and
    # refused when the program is compiled
    refused_by_session(
        lambda: popxl.remote_variable(np.ones(3, np.float32), popxl.remote_buffer((2,), popxl.float32, 2), 0),
        r"ipu.remote_variable .*\(3,\) float32 does not match remote buffer .*the element counts differ",
    )
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError, match="Entries must be a non-zero, positive integer. Got 0"):
            popxl.remote_buffer((2,), popxl.float32, 0)
        rb = popxl.remote_buffer((2,), popxl.float32, 2)
        with pytest.raises(ValueError, match="Entries must be a non-zero"):
            rb.entries = 0
        with pytest.raises(ValueError, match=r"offset 2 is out of range \[0, 2\)"):
            ops.remote_load(rb, 2)
        with pytest.raises(TypeError, match="offset must be an int or a Tensor"):
            ops.remote_load(rb, 1.5)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
        with pytest.raises(ValueError, match="offset must be an int or an integer Tensor of one element"):
            ops.remote_load(rb, popxl.constant(1.0))
        with pytest.raises(ValueError, match="offset must be an int or an integer Tensor of one element"):
            ops.remote_load(rb, popxl.constant([0, 1]))
        # a (1,) offset tensor, as upstream's programs pass `popxl.constant([0])`
        assert ops.remote_load(rb, popxl.constant([1])).shape == (2,)
        with pytest.raises(TypeError, match="remote_buffer must be a popxl.RemoteBuffer"):
            ops.remote_load("rb", 0)
        wrong = popxl.constant(np.ones(3, np.float32), name="wrong")
        with pytest.raises(ValueError, match=f"^Tensor {wrong.id} does not match buffer"):  # named, as upstream
            ops.remote_store(rb, 0, wrong)
        with pytest.raises(ValueError, match="dtype int32 does not match"):
            popxl.remote_variable(np.ones(2, np.int32), rb, 0)
        popxl.remote_variable(np.ones(2, np.float32), rb, 0, name="first")
        with pytest.raises(ValueError, match="entry 0 of .* already holds remote variable 'first'"):
            popxl.remote_variable(np.ones(2, np.float32), rb, 0)
        with pytest.raises(ValueError, match="replication factor is 1"):
            popxl.replica_sharded_variable(np.ones(4, np.float32))
        rb.entries = 3
        assert rb.entries == 3 and ops.remote_load(rb, 2).shape == (2,)
    other = popxl.Ir()
    with other.main_graph:
        with pytest.raises(ValueError, match="belongs to another Ir"):
            ops.remote_load(rb, 0)
    ir4 = popxl.Ir(replication=4)
    with ir4.main_graph:
        with pytest.raises(
            ValueError, match=r"sharding group size \(3\) must be less than|divisible by the sharding group size \(3\)"
        ):
            popxl.replica_sharded_buffer((8,), popxl.float32, shard_over=3)
        with pytest.raises(ValueError, match=r"sharding group size \(8\) must be less than or equal"):
            popxl.replica_sharded_buffer((8,), popxl.float32, shard_over=8)
        buf = popxl.replica_sharded_buffer((8,), popxl.float32)
        assert buf.tensor_shape == (2,) and buf.meta_shape == (8,)
        popxl.remote_replica_sharded_variable(np.ones(8, np.float32), buf, 0)
        buf.entries = 2
        with pytest.raises(ValueError, match=r"meta_shape has already been set to: \(8,\)"):
            popxl.remote_replica_sharded_variable(np.ones(4, np.float32), buf, 1)
        # entries that hold no shard: built, refused by a Session (test_remote_sharded_creation.py)


def test_variable_in_subgraph_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        rb = popxl.remote_buffer((2,), popxl.float32)

    def f() -> None:
        popxl.remote_variable(np.ones(2, np.float32), rb, 0)

    with pytest.raises(ValueError, match="cannot initialise a variable tensor within a graph"):
        ir.create_graph(f)


# ---------------------------------------------------------------------------------------
# merge_exchange / io_tile_exchange
# ---------------------------------------------------------------------------------------


def test_io_tile_exchange() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        rb = popxl.remote_buffer((2,), popxl.float32, 2)
        popxl.remote_variable(np.array([1.0, 2.0], np.float32), rb, 0)
        v = popxl.variable(np.array([1.0, 2.0], np.float32))
        out = popxl.d2h_stream((2,), popxl.float32, "o")
        with popxl.transforms.io_tile_exchange() as record:
            x = ops.remote_load(rb, 0)
            ops.remote_store(rb, 1, v)
            ops.host_store(out, v)
        assert x.tile_set == "io" and len(record.exchanges) == 3 and len(record.remaining()) == 1
        # an exchange needing another's result (directly or through other ops) cannot merge with it
        with pytest.raises(RuntimeError, match="More than one Op remained") as e:
            with popxl.transforms.io_tile_exchange():
                ops.remote_store(rb, 1, ops.remote_load(rb, 0))
        assert str(e.value).count("MergeExchange") == 2
        with popxl.transforms.merge_exchange() as m:
            ops.remote_store(rb, 1, ops.remote_load(rb, 0) + 1.0)
            ops.remote_load(rb, 1)
        assert [op.name for op in m.remaining()] == ["ipu.remote_load", "popxl.add", "ipu.remote_store"]
        with pytest.raises(RuntimeError, match="More than one Op remained after `io_tile_exchange`") as e:
            with popxl.transforms.io_tile_exchange():
                y = ops.remote_load(rb, 1)
                ops.relu(y)
        assert "popxl.relu" in str(e.value) and "MergeExchange" in str(e.value)
        with popxl.transforms.io_tile_exchange(verify_overlap=False):
            ops.relu(ops.remote_load(rb, 1))
        with popxl.transforms.merge_exchange() as m:
            ops.remote_load(rb, 0)
            ops.gelu(x)
        # the offset 0 is a constant (a tensor in PopXL), then the load and the gelu
        assert [op.name for op in m.ops] == ["graph.constant", "ipu.remote_load", "popxl.gelu"]
    with popxl.Session(ir) as s:
        np.testing.assert_array_equal(s.run()[out], [1.0, 2.0])


# ---------------------------------------------------------------------------------------
# Text and autodiff
# ---------------------------------------------------------------------------------------


def test_to_mlir_current_values_run_by_xl_run(tmp_path) -> None:
    """`ir.to_mlir()` prints the current (full) values of remote and sharded variables; the
    text runs with xl-run and gives the Session's next values."""
    import subprocess
    import sys
    from pathlib import Path

    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((2,), popxl.float32, 2)
        w = popxl.remote_variable(np.array([1.0, 5.0], np.float32), rb, 0, name="w")
        v, shard = popxl.replica_sharded_variable(np.arange(4, dtype=np.float32), name="r")
        ops.var_updates.accumulate_(shard, popxl.constant(1.0))
        ops.remote_store(rb, 0, ops.remote_load(rb, 0) * 2.0)
    with popxl.Session(ir) as s:
        s.run()
        text = ir.to_mlir()
        s.run()
        want_w, want_r = s.get_tensor_data(w), s.get_tensor_data(v)
    assert (
        "dense<[2.000000e+00, 1.000000e+01]>" in text
        and "dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]>" in text
    )
    prog = tmp_path / "p.mlir"
    prog.write_text(text)
    out = tmp_path / "v.npz"
    xl_run = Path(sys.executable).parent / "xl-run"
    subprocess.run([str(xl_run), str(prog), "--save-vars", str(out)], check=True)
    saved = np.load(out)
    np.testing.assert_array_equal(saved["remote_buffer_1"][:, 0], [want_w, want_w])  # per replica, entry 0
    np.testing.assert_array_equal(np.concatenate(list(saved["r"])), want_r)  # shards of replicas 0, 1


def test_autodiff_through_remote_ops() -> None:
    """A loaded weight carries no gradient (NoGradient): d(x * w)/dx = w, and the graph's
    store still runs in the forward call."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((3,), popxl.float32, 1)
        wv = popxl.remote_variable(np.array([1.0, 2.0, 3.0], np.float32), rb, 0)

        def f(x: popxl.Tensor) -> popxl.Tensor:
            w = ops.remote_load(rb, 0)
            ops.remote_store(rb, 0, w + 1.0)
            return x * w

        g = ir.create_graph(f, popxl.TensorSpec((3,), popxl.float32))
        info = popxl.transforms.autodiff(g)
        x = popxl.variable(np.ones(3, np.float32), name="x")
        call = ops.call_with_info(g, x)
        (dx,) = ops.call(info.graph, popxl.constant(np.ones(3, np.float32)), inputs_dict=info.inputs_dict(call))
        o = popxl.d2h_stream((3,), popxl.float32, "dx")
        ops.host_store(o, dx)
    with popxl.Session(ir) as s:
        np.testing.assert_array_equal(s.run()[o], [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(s.get_tensor_data(wv), [2.0, 3.0, 4.0])


def test_remote_kernels() -> None:
    """The copy kernels directly: constant and run-time entries, 0-d entries, the range error."""
    from xl.dialects.ipu import RemoteLoadInplaceOp, RemoteLoadOp, RemoteStoreOp
    from xl.runtime.kernels import KERNELS

    store = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    out = np.empty(2, np.float32)
    KERNELS[RemoteLoadOp]({"buffer": "rb", "offset": 2})(store, out)
    assert out.tolist() == [4.0, 5.0]
    KERNELS[RemoteLoadInplaceOp]({"buffer": "rb"})(store, np.array(1, np.uint32), out)
    assert out.tolist() == [2.0, 3.0]
    KERNELS[RemoteStoreOp]({"buffer": "rb"})(np.array([9.0, 8.0], np.float32), np.array(0, np.int32), store)
    assert store.tolist() == [[9.0, 8.0], [2.0, 3.0], [4.0, 5.0]]
    scalars = np.zeros(2, np.int32)
    KERNELS[RemoteStoreOp]({"buffer": "s", "offset": 1})(np.array(7, np.int32), scalars)
    assert scalars.tolist() == [0, 7]
    p = {"buffer": "rb", "_kernel": "ipu.remote_store", "_operands": ('tensor "x"', 'tensor "i"')}
    with pytest.raises(DataRangeError) as e:
        KERNELS[RemoteStoreOp](p)(out, np.array(-1, np.int32), store)
    assert str(e.value) == (
        'ipu.remote_store: offset -1 of tensor "i" is out of range [0, 3) for remote buffer "rb" (3 entries)'
    )
