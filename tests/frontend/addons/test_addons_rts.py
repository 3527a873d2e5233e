"""popxl_addons.rts: sharding specs, gathering replica-sharded tensors back to their full
value, reducing into shards (reduce-scatter; all-reduce then slice), and an Adam step on replica-sharded weights and optimiser state, all against
NumPy (and the RTS Adam step against the same program unsharded, to 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.optimizers.adam import AdamOptimizerStep
from popxl_addons.rts import (
    all_gather_replica_sharded_graph,
    gather_replica_sharded_tensor,
    reduce_replica_sharded_graph,
    reduce_replica_sharded_tensor,
    replica_sharded_spec,
)

R = 4


def _out(t: popxl.Tensor, name: str) -> popxl.DeviceToHostStream:
    s = popxl.d2h_stream(t.shape, t.dtype, name)
    ops.host_store(s, t)
    return s


def test_replica_sharded_spec() -> None:
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        t = popxl.variable(np.zeros((4, 6), np.float32))
        spec = replica_sharded_spec(t, ir.replica_grouping())
        assert (spec.shape, spec.meta_shape, spec.dtype) == ((6,), (4, 6), popxl.float32)
        assert replica_sharded_spec(t, ir.replica_grouping(group_size=1)) == t.spec
        odd = popxl.variable(np.zeros((5,), np.float32))
        assert replica_sharded_spec(odd, ir.replica_grouping()).meta_shape == ()  # 5 % 4
        assert replica_sharded_spec(popxl.TensorSpec((6,), popxl.float32, (4, 6)), ir.replica_grouping(1, 2)).shape == (
            6,
        )
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'shard_over'"):
            replica_sharded_spec(t)  # pyright: ignore[reportCallIssue]  # the shard grouping is required, as upstream
        with pytest.raises(TypeError, match="expected a popxl.ReplicaGrouping"):
            replica_sharded_spec(t, "all")  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


@pytest.mark.parametrize("group_size", [4, 2])
def test_sharded_then_gathered_equals_original(group_size: int) -> None:
    """replica_sharded_variable shards (in groups of `group_size`); the all-gather graph
    returns the full value on every replica; an unsharded tensor passes through."""
    rng = np.random.default_rng(0)
    full = rng.standard_normal((4, 6)).astype(np.float32)
    small = rng.standard_normal((3,)).astype(np.float32)
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=group_size)
        groups = rg.num_groups
        data = np.stack([full + i for i in range(groups)]) if groups > 1 else full
        _, shard = popxl.replica_sharded_variable(data, popxl.float32, "w", replica_grouping=rg if groups > 1 else None)
        assert shard.shape == (24 // group_size,) and shard.meta_shape == (4, 6)
        ts = addons.NamedTensors.from_dict({"w": shard, "b": popxl.variable(small, name="b")})
        g, names = all_gather_replica_sharded_graph(
            ts, replica_groups=NamedReplicaGrouping.build_groups(["w", "b"], rg)
        )
        assert names == ["b", "w"]
        outs = g.bind(ts).call()
        got = {n: _out(t, n) for n, t in zip(names, outs)}
        direct = _out(gather_replica_sharded_tensor(shard, replica_group=rg), "direct")
    with popxl.Session(ir) as s:
        res = s.run()
    for r in range(R):
        want = full + (r // group_size if groups > 1 else 0)
        np.testing.assert_array_equal(res[got["w"]][r], want)
        np.testing.assert_array_equal(res[direct][r], want)
        np.testing.assert_array_equal(res[got["b"]][r], small)


def _shard(full: np.ndarray, n: int, i: int) -> np.ndarray:
    return full.reshape(-1)[i * (full.size // n) : (i + 1) * (full.size // n)]


def test_reduce_replica_sharded_paths() -> None:
    """Each replica contributes x_r; reduced shards against NumPy for the three paths."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((R, 4, 6)).astype(np.float32)
    total = x.sum(0)
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        xs = popxl.h2d_stream((4, 6), popxl.float32, "x")
        t = ops.host_load(xs)
        scatter = reduce_replica_sharded_tensor(t, "add")  # shard group = replica group
        assert scatter.shape == (6,) and scatter.meta_shape == (4, 6)
        pairs = ir.replica_grouping(group_size=2)
        sliced = reduce_replica_sharded_tensor(t, "add", shard_group=pairs)  # all-reduce + slice
        assert sliced.shape == (12,) and sliced.meta_shape == (4, 6)
        odd = reduce_replica_sharded_tensor(t[:, :5], "add")  # 20 % 4 == 0 -> sharded
        plain = reduce_replica_sharded_tensor(t[:1, :3], "add")  # 3 % 4 -> all-reduce
        assert odd.shape == (5,) and plain.shape == (1, 3) and plain.meta_shape == ()
        # replica group = shard group = pairs: reduce-scatter within each pair
        two = reduce_replica_sharded_tensor(t, "add", replica_group=pairs, shard_group=pairs)
        mean_g, names = reduce_replica_sharded_graph(addons.NamedTensors.from_dict({"x": t}), "mean")
        (mean,) = mean_g.bind(addons.NamedTensors.from_dict({"x": t})).call()
        both = addons.NamedTensors.from_dict({"x": t, "y": t[:2]})
        single = NamedReplicaGrouping.from_dict({"y": ir.replica_grouping(group_size=1)})  # x: the replica group
        thr_g, thr_names = reduce_replica_sharded_graph(both, "add", shard_groups=single)
        thr_x, thr_y = thr_g.bind(both).call()
        assert thr_names == ["x", "y"] and thr_x.shape == (6,) and thr_y.shape == (2, 6)
        outs = {n: _out(v, n) for n, v in
                dict(scatter=scatter, sliced=sliced, odd=odd, plain=plain, two=two, mean=mean, thr_x=thr_x,
                      thr_y=thr_y).items()}  # fmt: skip
    with popxl.Session(ir) as s:
        res = s.run({xs: x})
    for r in range(R):
        np.testing.assert_allclose(res[outs["scatter"]][r], _shard(total, 4, r), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res[outs["sliced"]][r], _shard(total, 2, r % 2), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res[outs["odd"]][r], _shard(total[:, :5].copy(), 4, r), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res[outs["plain"]][r], total[:1, :3], rtol=1e-6, atol=1e-6)
        pair = x[(r // 2) * 2 : (r // 2) * 2 + 2].sum(0)
        np.testing.assert_allclose(res[outs["two"]][r], _shard(pair, 2, r % 2), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res[outs["mean"]][r], _shard(total / R, 4, r), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res[outs["thr_x"]][r], _shard(total, 4, r), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(res[outs["thr_y"]][r], total[:2], rtol=1e-6, atol=1e-6)


def _adam_program(rts: bool, w0: np.ndarray, **kw):
    """Data-parallel Adam over R replicas: the gradients are mean-reduced over the replicas;
    with RTS the weight and both moments are sharded and the reduction is a reduce-scatter."""
    ir = popxl.Ir(replication=R)
    with ir.main_graph, popxl.in_sequence():
        gs = popxl.h2d_stream(w0.shape, popxl.float32, "grad")
        g = ops.host_load(gs)
        if rts:
            handle, var = popxl.replica_sharded_variable(w0, popxl.float32, "w")
            g = reduce_replica_sharded_tensor(g, "mean")
        else:
            handle = var = popxl.variable(w0, popxl.float32, "w")
            g = ops.collectives.replicated_all_reduce(g, "mean")
        facts, step = AdamOptimizerStep().create_graph(var, g.spec, **kw)
        state = facts.init("adam")
        step.bind(state).call(var, g)
    return ir, gs, handle, state


def test_rts_adam_step_equals_unsharded() -> None:
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((6, 8)).astype(np.float32)
    grads = rng.standard_normal((3, R, 6, 8)).astype(np.float32)
    kw = dict(lr=0.05, weight_decay=0.01, first_order_dtype=popxl.float32)
    results = []
    for rts in (False, True):
        ir, gs, handle, state = _adam_program(rts, w0, **kw)
        if rts:
            assert state.first_order.shape == (12,) and state.first_order.meta_shape == (6, 8)
            assert state.second_order.shape == (12,)
        with popxl.Session(ir) as s:
            for k in range(3):
                s.run({gs: grads[k]})
            results.append(s.get_tensor_data(handle))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-6)
    # NumPy AdamW on the replicas' mean gradient
    w, m, v = w0.astype(np.float64), 0.0, 0.0
    for t in range(1, 4):
        g = grads[t - 1].mean(0).astype(np.float64)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        u = (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-5) + 0.01 * w
        w = w - 0.05 * u
    np.testing.assert_allclose(results[1], w, rtol=1e-5, atol=1e-5)
    assert np.abs(results[1] - w0).max() > 0.1
