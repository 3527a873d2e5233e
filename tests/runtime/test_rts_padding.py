"""Replica sharding of sizes that do not divide by the group size, as PopART: a
reduce-scatter or sharded slice gives each member `ceil(nelms / group_size)` elements, the
last shards zero-padded; gathering a shard back to its meta shape drops the padding; a
remote replica-sharded variable may be created with a buffer of its full shape (the
entries become its shards); a remote variable may have another shape than its buffer
with as many elements. References: NumPy from each grouping's assignment."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.deferred import refused_by_session

C = ops.collectives
R = 4
GROUPINGS = {"all": (1, 4), "pairs": (1, 2), "strided": (2, 2)}
REDUCE = {"add": np.sum, "mean": np.mean, "max": np.max}


def _members(ir: popxl.Ir, spec: tuple[int, int]) -> list[list[int]]:
    a = ir.replica_grouping(*spec).assignment
    return [[k for k in range(R) if a[k] == a[r]] for r in range(R)]


def _run(ir: popxl.Ir, tensors: list[popxl.Tensor], feeds: dict) -> list[np.ndarray]:
    with ir.main_graph:
        streams = []
        for t in tensors:
            s = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, "cpu") as session:
        out = session.run(feeds)
    return [out[s] for s in streams]


@pytest.mark.parametrize("shape", [(1,), (3,), (2, 3), (7,), (5, 1)])
@pytest.mark.parametrize("gname", list(GROUPINGS))
@pytest.mark.parametrize("op", list(REDUCE))
def test_reduce_scatter_pads(shape: tuple[int, ...], gname: str, op: str) -> None:
    ir = popxl.Ir(replication=R)
    rng = np.random.default_rng(len(shape) * 10 + sum(shape))
    x = rng.normal(size=(R, *shape)).astype(np.float32)
    with ir.main_graph:
        xs = popxl.h2d_stream(shape, popxl.float32, "x")
        group = ir.replica_grouping(*GROUPINGS[gname])
        xt = ops.host_load(xs)
        y = C.replicated_reduce_scatter(xt, op, group)
        z = C.replica_sharded_slice(xt, group)
    size = GROUPINGS[gname][1]
    n = math.prod(shape)
    s = -(-n // size)
    assert y.shape == z.shape == (s,)
    got_y, got_z = _run(ir, [y, z], {xs: x})
    for r, members in enumerate(_members(ir, GROUPINGS[gname])):
        i = members.index(r)
        full = np.zeros(s * size, np.float64)
        full[:n] = REDUCE[op](x[members].reshape(len(members), n).astype(np.float64), axis=0)
        np.testing.assert_allclose(got_y[r], full[i * s : (i + 1) * s], rtol=1e-6)
        own = np.zeros(s * size, np.float32)
        own[:n] = x[r].reshape(-1)
        np.testing.assert_array_equal(got_z[r], own[i * s : (i + 1) * s])


@pytest.mark.parametrize("shape", [(5,), (3, 3), (1, 2)])
def test_sharded_slice_gathers_back_to_its_meta_shape(shape: tuple[int, ...]) -> None:
    ir = popxl.Ir(replication=R)
    data = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + 1
    with ir.main_graph:
        x = popxl.variable(data, name="x")
        shard = C.replica_sharded_slice(x)
        assert shard.meta_shape == shape
        back = C.replicated_all_gather(shard)
        assert back.shape == shape
    (got,) = _run(ir, [back], {})
    np.testing.assert_array_equal(got, np.broadcast_to(data, (R, *shape)))


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_replica_sharded_variable_of_any_size(shape: tuple[int, ...]) -> None:
    ir = popxl.Ir(replication=R)
    data = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) - 2
    with ir.main_graph:
        v, shard = popxl.replica_sharded_variable(data, name="v")
        ops.var_updates.accumulate_(shard, popxl.constant(np.ones(shard.shape, np.float32)))
        full = C.replicated_all_gather(shard)
    assert shard.shape == (-(-math.prod(shape) // R),) and full.shape == shape
    (got,) = _run(ir, [full], {})
    np.testing.assert_array_equal(got, np.broadcast_to(data + 1, (R, *shape)))


def test_remote_replica_sharded_variable_with_a_full_shape_buffer() -> None:
    ir = popxl.Ir(replication=R)
    data = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((2, 3), popxl.float32, 2)
        w = popxl.remote_replica_sharded_variable(data, buffer, 1, name="w")
        assert buffer.tensor_shape == (2,) and buffer.meta_shape == (2, 3)  # shards of ceil(6 / 4)
        shard = ops.remote_load(buffer, 1)
        assert shard.shape == (2,) and shard.meta_shape == (2, 3)
        ops.remote_store(buffer, 1, shard * 2.0)
        full = C.replicated_all_gather(shard)
    with ir.main_graph:
        out = popxl.d2h_stream(full.shape, full.dtype)
        ops.host_store(out, full)
    with popxl.Session(ir, "cpu") as s:
        got = s.run()[out]
        after = s.get_tensor_data(w)
    np.testing.assert_array_equal(got, np.broadcast_to(data, (R, 2, 3)))
    np.testing.assert_array_equal(after, data * 2.0)

    ir2 = popxl.Ir(replication=R)
    with ir2.main_graph:
        used = popxl.remote_buffer((2, 3), popxl.float32, 1)
        ops.remote_load(used, 0)
        with pytest.raises(ValueError, match="ops already load or store its entries"):
            popxl.remote_replica_sharded_variable(data, used, 0)


def test_remote_variable_of_another_shape_with_as_many_elements() -> None:
    # another element count: built, as in PopXL, and refused when the program is compiled
    refused_by_session(
        lambda: popxl.remote_variable(np.zeros((2, 2), np.float32), popxl.remote_buffer((3,), popxl.float32, 1), 0),
        "does not match remote buffer .*the element counts differ",
    )
    ir = popxl.Ir(replication=2)
    data = np.array([[1.0], [2.0], [3.0]], np.float32)
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((3,), popxl.float32, 1)
        w = popxl.remote_variable(data, buffer, 0, name="w")
        assert w.shape == (3, 1)
        loaded = ops.remote_load(buffer, 0)
        assert loaded.shape == (3,)  # the buffer's shape
        ops.remote_store(buffer, 0, loaded + 1.0)
    (got,) = _run(ir, [loaded], {})
    np.testing.assert_array_equal(got, np.broadcast_to(data.reshape(3), (2, 3)))
    with popxl.Session(ir, "cpu") as s:
        s.run()
        np.testing.assert_array_equal(s.get_tensor_data(w), data + 1.0)
