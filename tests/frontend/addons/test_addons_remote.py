"""popxl_addons.remote and named_replica_grouping: buffers for named variables, load / store
graphs for phased execution, replica-sharded buffers (against NumPy: after one pass over the
phases every layer holds `replicas * before + sum of the replicas' data`, which is `before +
data` on one replica and upstream's `(before + data) * 4` with equal data on 4 replicas)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons.named_replica_grouping import (
    NamedReplicaGrouping,
    get_ild_replica_grouping,
    get_instance_replica_grouping,
    is_cross_ild,
    is_cross_instance,
)
from popxl_addons.remote import (
    NamedRemoteBuffers,
    create_remote_buffer,
    load_remote,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote,
    store_remote_graph,
)
from popxl_addons.rts import all_gather_replica_sharded_graph, reduce_replica_sharded_graph
from tests.helpers.narrow import narrow

W_SHAPE, B_SHAPE = (4, 8), (3,)


class AddData(addons.Module):
    """w += x, b += y (one layer of the phased test)."""

    def build(self, x: popxl.Tensor, y: popxl.Tensor) -> None:
        w = self.add_variable_input("w", partial(np.zeros, W_SHAPE), popxl.float32, by_ref=True)
        b = self.add_variable_input("b", partial(np.zeros, B_SHAPE), popxl.float32, by_ref=True)
        ops.var_updates.accumulate_(w, x)
        ops.var_updates.accumulate_(b, y)


def _phased(replicas: int, shard_w: bool, layers: int = 3):
    rng = np.random.default_rng(0)
    before = [{"w": rng.standard_normal(W_SHAPE).astype(np.float32),
               "b": rng.standard_normal(B_SHAPE).astype(np.float32)} for _ in range(layers)]  # fmt: skip
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence():
        facts, layer = AddData().create_graph(
            popxl.TensorSpec(W_SHAPE, popxl.float32), popxl.TensorSpec(B_SHAPE, popxl.float32)
        )
        for k in ("w", "b"):  # layer i's initial values, in init_remote's (alphabetical) order
            it = iter([before[i][k] for i in range(layers)])
            facts.insert(k, addons.VariableFactory(it, popxl.float32, k), overwrite=True)
        # w sharded over every replica (when asked), b (3 elements) never
        buffers = named_variable_buffers(
            facts, entries=layers, shard_over_dict={"w": replicas if shard_w else 1, "b": 1}
        )
        variables = [facts.init_remote(buffers, i, f"layer{i}") for i in range(layers)]
        load, names = load_remote_graph(buffers)
        store = store_remote_graph(buffers)
        xs = popxl.h2d_stream(W_SHAPE, popxl.float32, "x")
        ys = popxl.h2d_stream(B_SHAPE, popxl.float32, "y")
        x, y = ops.host_load(xs), ops.host_load(ys)
        for i in range(layers):
            loaded = addons.NamedTensors.pack(names, load.call(i))
            gather, gnames = all_gather_replica_sharded_graph(loaded)
            full = addons.NamedTensors.pack(gnames, gather.bind(loaded).call())
            layer.bind(full).call(x, y)
            # shard the reduction like the buffers: all replicas for sharded buffers, none else
            shard_groups = NamedReplicaGrouping.from_dict(
                {
                    k: ir.replica_grouping(group_size=replicas if b.meta_shape else 1)
                    for k, b in buffers.to_dict().items()
                }  # fmt: skip
            )
            reduce, rnames = reduce_replica_sharded_graph(full, shard_groups=shard_groups)
            reduced = addons.NamedTensors.pack(rnames, reduce.bind(full).call())
            store.bind(reduced).call(i)
    return ir, buffers, variables, before, xs, ys


@pytest.mark.parametrize("replicas,shard_w", [(1, True), (4, True), (4, False)])
def test_phased_round_trip(replicas: int, shard_w: bool) -> None:
    ir, buffers, variables, before, xs, ys = _phased(replicas, shard_w)
    sharded = replicas > 1 and shard_w
    assert buffers.w.meta_shape == (W_SHAPE if sharded else ())
    assert buffers.w.tensor_shape == ((32 // replicas,) if sharded else W_SHAPE)
    assert buffers.b.meta_shape == () and buffers.b.entries == 3
    rng = np.random.default_rng(1)
    x = rng.standard_normal((replicas, *W_SHAPE)).astype(np.float32)
    y = rng.standard_normal((replicas, *B_SHAPE)).astype(np.float32)
    feed = {xs: x, ys: y} if replicas > 1 else {xs: x[0], ys: y[0]}
    with popxl.Session(ir) as s:
        s.run(feed)
        got = [s.get_tensors_data(v.tensors) for v in variables]
        if sharded:  # each replica's entry holds its shard of the new value
            want = replicas * before[1]["w"] + x.sum(0)
            for r in range(replicas):
                np.testing.assert_allclose(
                    s._exe.get_state(buffers.w._name, r)[1], want.reshape(-1)[r * 8 : (r + 1) * 8], rtol=1e-6, atol=1e-6
                )
    for i, v in enumerate(variables):
        for k, data in (("w", x), ("b", y)):
            want = replicas * before[i][k] + data.sum(0)
            np.testing.assert_allclose(got[i][narrow(v.get(k), popxl.Tensor)], want, rtol=1e-5, atol=1e-6)
    if replicas == 4 and sharded:  # upstream's check: equal data on every replica -> (before + data) * 4
        ir, buffers, variables, before, xs, ys = _phased(replicas, shard_w, layers=2)
        with popxl.Session(ir) as s:
            s.run({xs: np.stack([x[0]] * 4), ys: np.stack([y[0]] * 4)})
            w1 = s.get_tensor_data(variables[1].w)
        np.testing.assert_allclose(w1, (before[1]["w"] + x[0]) * 4, rtol=1e-5, atol=1e-6)


def test_named_buffers_and_load_store_in_main() -> None:
    """`named_buffers`: a buffer per tensor keyed alike, of the tensor's shape (a replica
    shard's buffer has its meta_shape); `store_remote` then `load_remote` in the main graph
    returns the stored values (doubled in between)."""
    ir = popxl.Ir(replication=2)
    a0 = np.arange(8, dtype=np.float32).reshape(2, 4)
    c0 = np.arange(3, dtype=np.float32)
    with ir.main_graph, popxl.in_sequence():
        ts = addons.NamedTensors.from_dict({"l.a": popxl.variable(a0, name="a"), "l.c": popxl.variable(c0, name="c")})
        shards = addons.NamedTensors.from_dict({"l.a": ops.collectives.replica_sharded_slice(ts.l.a), "l.c": ts.l.c})
        bufs = named_buffers(shards, entries=2)
        assert isinstance(bufs, NamedRemoteBuffers)
        assert bufs.l.a.meta_shape == (2, 4) and bufs.l.a.tensor_shape == (4,) and bufs.l.a.entries == 2
        assert bufs.l.c.meta_shape == () and bufs.l.c.tensor_shape == (3,)
        with pytest.raises(KeyError, match="no tensor for the buffers"):
            store_remote(bufs, addons.NamedTensors.from_dict({"l.a": ts.l.a}))
        plain = named_buffers(ts, entries=2)
        assert plain.l.a.meta_shape == () and plain.l.a.tensor_shape == (2, 4)
        store_remote(plain, ts, entry=1)
        back = load_remote(plain, 1)
        outs = {}
        for k, t in back.to_dict().items():
            outs[k] = popxl.d2h_stream(t.shape, t.dtype, k)
            ops.host_store(outs[k], t * 2)
    with popxl.Session(ir) as s:
        res = s.run()
    np.testing.assert_array_equal(res[outs["l.a"]], np.stack([a0 * 2] * 2))
    np.testing.assert_array_equal(res[outs["l.c"]], np.stack([c0 * 2] * 2))


def test_create_remote_buffer_cases_and_errors() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        spec = popxl.TensorSpec((4, 4), popxl.float32)
        full = create_remote_buffer(spec, 2)  # shard_over: the whole (default) replica group
        assert (full.meta_shape, full.tensor_shape, full.entries) == ((4, 4), (4,), 2)
        assert create_remote_buffer(spec, 2, shard_over=2).tensor_shape == (8,)
        plain = create_remote_buffer(spec, 2, shard_over=1)
        assert plain.meta_shape == () and plain.tensor_shape == (4, 4)
        assert create_remote_buffer(popxl.variable(np.zeros((2, 2), np.float32)), shard_over=4).tensor_shape == (1,)
        with pytest.raises(ValueError, match="cannot shard a tensor of 15 elements"):
            create_remote_buffer(popxl.TensorSpec((5, 3), popxl.float32))
        with pytest.raises(ValueError, match="shard_over=5 must be between 1 and the replica group size 4"):
            create_remote_buffer(spec, shard_over=5)
        already = create_remote_buffer(popxl.TensorSpec((8,), popxl.float32, (4, 4)), 3)
        assert already.tensor_shape == (8,) and already.meta_shape == (4, 4) and already.entries == 3
        pairs = ir.replica_grouping(stride=2, group_size=2)  # 2 groups of 2
        b = create_remote_buffer(spec, 1, replica_group=pairs)
        assert b.tensor_shape == (8,) and b.meta_shape == (4, 4)
        with pytest.raises(ValueError, match="entries must be a positive int"):
            create_remote_buffer(spec, 0)
        with pytest.raises(TypeError, match="not a popxl.RemoteBuffer"):
            load_remote_graph(NamedRemoteBuffers.from_dict({"a": 1}))
        facts = addons.NamedVariableFactories.from_dict(
            {"a": addons.VariableFactory(np.zeros((2, 2), np.float32), name="a")}
        )
        with pytest.raises(KeyError, match="no buffer for the factories"):
            facts.init_remote(NamedRemoteBuffers(), 0)
        # a name of no variable is ignored (upstream; BERT's phased pretraining passes one)
        extra = named_variable_buffers(facts, shard_over_dict={"b": 2})
        whole = named_variable_buffers(facts)
        assert (
            (extra.a.tensor_shape, extra.a.meta_shape) == (whole.a.tensor_shape, whole.a.meta_shape) == ((1,), (2, 2))
        )
        with pytest.raises(ValueError, match="shard_over_dict must be a dict, an int or a bool"):
            named_variable_buffers(facts, shard_over_dict="all")  # pyright: ignore[reportArgumentType]  # bad input
        with pytest.raises(ValueError, match=r"\('a'\): shard_over=8 must be between 1"):
            named_variable_buffers(facts, shard_over_dict=8)


def test_grouped_sharded_remote_variable_round_trip() -> None:
    """A variable grouped in 2 groups (stride 2) with its buffer sharded in each group:
    the Session reads back each group's full value, and the loaded shards gathered over the
    group equal it."""
    ir = popxl.Ir(replication=4)
    data = np.arange(2 * 16, dtype=np.float32).reshape(2, 4, 4)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)
        facts = addons.NamedVariableFactories.from_dict(
            {"w": addons.VariableFactory(iter(data), popxl.float32, "w", replica_grouping=rg)}
        )
        bufs = named_variable_buffers(facts, entries=1)  # sharded over each group (2 replicas)
        assert bufs.w.meta_shape == (4, 4) and bufs.w.tensor_shape == (8,)
        v = facts.init_remote(bufs, 0)
        loaded = load_remote(bufs, 0)
        full = ops.collectives.replicated_all_gather(loaded.w, group=rg)
        out = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(out, full)
    with popxl.Session(ir) as s:
        np.testing.assert_array_equal(s.get_tensor_data(v.w), data)
        res = s.run()[out]
    for r in range(4):  # replica r is in group r % 2
        np.testing.assert_array_equal(res[r], data[r % 2])


def test_replica_grouping_helpers(monkeypatch) -> None:
    ir = popxl.Ir(replication=8)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=4)
        assert not is_cross_instance(rg) and get_instance_replica_grouping(rg) == rg
        assert get_instance_replica_grouping() == ir.replica_grouping()
        names = NamedReplicaGrouping.build_groups(["a", "b.c"])
        assert names.b.c == ir.replica_grouping() and names.a.group_size == 8
        with pytest.raises(TypeError, match="expected a popxl.ReplicaGrouping"):
            is_cross_instance(3)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
        monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 4}')
        assert is_cross_ild(rg) and not is_cross_ild(ir.replica_grouping(1, 4))
        assert get_ild_replica_grouping(rg) == ir.replica_grouping(stride=2, group_size=2)
        assert get_ild_replica_grouping() == ir.replica_grouping(1, 4)
        monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 1}')
        with pytest.raises(ValueError, match="stride \\(2\\) must be at most"):
            get_ild_replica_grouping(rg)


def test_io_tile_graphs_round_trip() -> None:
    """Store and load graphs on the IO tiles with sharded buffers: the shards of `a + 1`
    stored at entry 1, loaded and all-gathered (on IO tiles) give `a + 1` on both replicas."""
    ir = popxl.Ir(replication=2)
    a = np.arange(8, dtype=np.float32)
    with ir.main_graph, popxl.in_sequence():
        ts = addons.NamedTensors.from_dict({"a": popxl.variable(a, name="a")})
        shard = ops.collectives.replica_sharded_slice(ts.a + 1)
        bufs = named_buffers(addons.NamedTensors.from_dict({"a": shard}), entries=2)
        store = store_remote_graph(bufs, use_io_tiles=True)
        store.bind(addons.NamedTensors.from_dict({"a": shard})).call(1)
        load, names = load_remote_graph(bufs, use_io_tiles=True)
        loaded = addons.NamedTensors.pack(names, load.call(1))
        gather, _ = all_gather_replica_sharded_graph(loaded, use_io_tiles=True)
        (full,) = gather.bind(loaded).call()
        out = popxl.d2h_stream(full.shape, full.dtype, "full")
        ops.host_store(out, full)
    with popxl.Session(ir) as s:
        got = s.run()[out]
    np.testing.assert_array_equal(got, np.stack([a + 1] * 2))
