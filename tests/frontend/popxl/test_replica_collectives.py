"""Every replica collective through `popxl.Session` against NumPy, for the groupings
(stride, group_size) = (R, 1) (every replica alone), (1, R) (all replicas), (2, R/2), a
strided grouping of pairs and a grouping without a constant stride, on 4 and 8 replicas.

The references are computed here from the assignment of each grouping: the members of
replica r's group are the replicas with the same group index, in ascending order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from tests.helpers.replica_harness import runtime_has_collectives

pytestmark = pytest.mark.skipif(not runtime_has_collectives(), reason="the runtime has no replica collective kernels")

C = ops.collectives
SHAPE = (2, 4)


def _groupings(r: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        f"({r},1)": (r, 1),
        f"(1,{r})": (1, r),
        f"(2,{r // 2})": (2, r // 2),
        "strided(2,2)": (2, 2),
    }
    # groups {0, 3}, {1, 2}, ...: no constant stride
    out["explicit"] = [g for k in range(r // 4) for g in (2 * k, 2 * k + 1, 2 * k + 1, 2 * k)]
    return out


CASES = [(r, name) for r in (4, 8) for name in _groupings(r)]


def _make_group(ir: popxl.Ir, spec: Any) -> Any:
    if isinstance(spec, list):
        return ir.replica_grouping_from_assignments(spec)
    return ir.replica_grouping(*spec)


def _members(assignment: list[int]) -> list[list[int]]:
    """The members of each replica's group, ascending (one list per replica)."""
    return [[k for k, g in enumerate(assignment) if g == assignment[r]] for r in range(len(assignment))]


NP_REDUCE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "add": lambda a: a.sum(0),
    "mean": lambda a: a.mean(0),
    "mul": lambda a: a.prod(0),
    "min": lambda a: a.min(0),
    "max": lambda a: a.max(0),
    "square_add": lambda a: (a * a).sum(0),
    "and": lambda a: np.logical_and.reduce(a, axis=0),
    "or": lambda a: np.logical_or.reduce(a, axis=0),
}


def _chunk(flat: np.ndarray, i: int, n: int) -> np.ndarray:
    s = flat.size // n
    return flat[i * s : (i + 1) * s]


@pytest.mark.parametrize(("replicas", "gname"), CASES, ids=[f"R{r}-{n}" for r, n in CASES])
def test_collectives_against_numpy(replicas: int, gname: str) -> None:
    spec = _groupings(replicas)[gname]
    ir = popxl.Ir(replication=replicas)
    outs: dict[str, Any] = {}
    with ir.main_graph:
        group = _make_group(ir, spec)
        assignment = group.assignment
        xs = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        bs = popxl.h2d_stream(SHAPE, popxl.bool, "b")
        x = ops.host_load(xs)
        b = ops.host_load(bs)
        results: dict[str, popxl.Tensor] = {}
        for op in ("add", "mean", "mul", "min", "max", "square_add"):
            results[f"all_reduce-{op}"] = C.replicated_all_reduce(x, op, group)
            results[f"reduce_scatter-{op}"] = C.replicated_reduce_scatter(x, op, group)
        for op in ("and", "or"):
            results[f"all_reduce-{op}"] = C.replicated_all_reduce(b, op, group)
        inplace = ops.identity(x)
        C.replicated_all_reduce_(inplace, "max", group)
        results["all_reduce_-max"] = inplace
        results["all_gather-axis0"] = C.replicated_all_gather(x, 0, group)
        results["all_gather-axis1"] = C.replicated_all_gather(x, 1, group)
        results["all_gather-new_axis"] = C.replicated_all_gather(x, 0, group, "new_axis")
        results["sharded_slice"] = C.replica_sharded_slice(x, group)
        if SHAPE[1] % group.group_size == 0:
            results["slice-axis1"] = C.replicated_slice(x, 1, group)
        results["identical_inputs"] = addons.ops.replicated_all_reduce_identical_inputs(x, "add", group)
        results["identical_grad_inputs"] = addons.ops.replicated_all_reduce_identical_grad_inputs(x, "mean", group)
        for k, t in results.items():
            outs[k] = popxl.d2h_stream(t.shape, t.dtype, k)
            ops.host_store(outs[k], t)

    rng = np.random.default_rng(replicas * 100 + len(gname))
    data = rng.integers(1, 4, size=(replicas, *SHAPE)).astype(np.float32)  # exact products
    bools = rng.random(size=(replicas, *SHAPE)) < 0.6
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({xs: data, bs: bools})

    members = _members(assignment)
    g = group.group_size
    expected: dict[str, list[np.ndarray]] = {k: [] for k in results}
    for r in range(replicas):
        m = members[r]
        i = m.index(r)
        for op in ("add", "mean", "mul", "min", "max", "square_add"):
            red = NP_REDUCE[op](data[m])
            expected[f"all_reduce-{op}"].append(red)
            expected[f"reduce_scatter-{op}"].append(_chunk(red.reshape(-1), i, g))
        for op in ("and", "or"):
            expected[f"all_reduce-{op}"].append(NP_REDUCE[op](bools[m]))
        expected["all_reduce_-max"].append(data[m].max(0))
        expected["all_gather-axis0"].append(np.concatenate(list(data[m]), 0))
        expected["all_gather-axis1"].append(np.concatenate(list(data[m]), 1))
        expected["all_gather-new_axis"].append(np.stack(list(data[m])))
        expected["sharded_slice"].append(_chunk(data[r].reshape(-1), i, g))
        if "slice-axis1" in results:
            part = np.split(data[r], g, axis=1)[i]
            expected["slice-axis1"].append(part if part.shape[1] > 1 else part[:, 0])
        expected["identical_inputs"].append(data[r])
        expected["identical_grad_inputs"].append(data[m].mean(0))
    for k, ref in expected.items():
        want = np.stack(ref)
        have = got[outs[k]]
        assert have.shape == want.shape, (k, have.shape, want.shape)
        assert have.dtype == want.dtype or k.endswith(("and", "or")), (k, have.dtype)
        np.testing.assert_allclose(have, want, rtol=1e-6, err_msg=k)


def test_groupings_of_the_cases() -> None:
    """The groupings above are the ones named: assignments checked by hand."""
    ir = popxl.Ir(replication=8)
    g = _groupings(8)
    assert _make_group(ir, g["(8,1)"]).assignment == list(range(8))
    assert _make_group(ir, g["(1,8)"]).assignment == [0] * 8
    assert _make_group(ir, g["(2,4)"]).assignment == [0, 1, 0, 1, 0, 1, 0, 1]
    assert _make_group(ir, g["strided(2,2)"]).assignment == [0, 1, 0, 1, 2, 3, 2, 3]
    explicit = _make_group(ir, g["explicit"])
    assert explicit.assignment == [0, 1, 1, 0, 2, 3, 3, 2] and not explicit.is_const


def test_mul_is_a_product_not_a_mean() -> None:
    """Upstream maps 'mul' to a mean; xl multiplies."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((1,), popxl.float32, "x")
        y = C.replicated_all_reduce(ops.host_load(xs), "mul")
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({xs: np.array([[3.0], [5.0]], np.float32)})
    np.testing.assert_array_equal(out[ys], [[15.0], [15.0]])


def test_frontend_errors() -> None:
    ir = popxl.Ir(replication=4)
    other = popxl.Ir(replication=4)
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32), name="x")
        with pytest.raises(ValueError, match=r"replicated_all_reduce: not a valid op: 'sum'"):
            C.replicated_all_reduce(x, "sum")
        with pytest.raises(ValueError, match="belongs to another Ir"):
            C.replicated_all_reduce(x, group=other.replica_grouping())
        # 6 elements over 4 replicas: shards of 2, the last padded (tests/runtime/test_rts_padding.py)
        assert C.replicated_reduce_scatter(x).shape == (2,) and C.replica_sharded_slice(x).shape == (2,)
        with pytest.raises(ValueError, match=r"replicated_slice: replicated slice must equally divide axis 1"):
            C.replicated_slice(x, 1, ir.replica_grouping(1, 2))
        with pytest.raises(ValueError, match="axis 2 is out of range"):
            C.replicated_all_gather(x, 2)
        with pytest.raises(ValueError, match="output_shape must equal one of"):
            C.replicated_all_gather(x, output_shape="stack")
        with pytest.raises(ValueError, match="has no meta shape"):
            C.replicated_all_gather(x, output_shape="meta_shape")
        with pytest.raises(TypeError, match="group must be a popxl.ReplicaGrouping"):
            C.replicated_all_reduce(x, group=2)
        with pytest.raises(ValueError, match="op 'and' needs a bool tensor"):
            C.replicated_all_reduce(x, "and")
        with pytest.raises(ValueError, match="could not infer the IPU"):
            C.all_reduce([x, x])
        with pytest.raises(
            ValueError, match=r"number of specified tensors does not equal number of specified IPUs. 2 != 1"
        ):
            C.all_reduce([x, x], [0])
        with pytest.raises(ValueError, match="has no gradient here"):
            C.all_reduce_identical_inputs([x, x], [0, 1], "max")
        grouping = ir.replica_grouping(1, 2)
    ir.replication_factor = 8
    with ir.main_graph, pytest.raises(ValueError, match="was made for 4 replicas, but the replication factor is now 8"):
        C.replicated_all_reduce(x, group=grouping)


def test_legacy_comm_group() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x = popxl.variable(np.ones(4, np.float32), name="x")
        y = C.replicated_all_reduce(x, group=C.CommGroup(C.CommGroupType.Orthogonal, 2))
        z = C.replicated_all_reduce(x, group=C.CommGroup(C.CommGroupType.Consecutive, 2))
    text = ir.to_mlir()
    assert "#replica.grouping<stride = 2, group_size = 2>" in text
    assert "#replica.grouping<stride = 1, group_size = 2>" in text
    assert y.shape == z.shape == (4,)


def test_all_gather_meta_shape_restores_the_sharded_tensor() -> None:
    """`output_shape='auto'` on a tensor with a meta shape (a replica-sharded graph input):
    the gathered shards reshaped to the meta shape, i.e. the tensor before sharding."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((3, 2), popxl.float32, "x")
        full = ops.host_load(xs)
        shard = C.replica_sharded_slice(full)
        assert shard.shape == (3,)

        def gather(t: popxl.Tensor) -> popxl.Tensor:
            return C.replicated_all_gather(t)

        g = ir.create_graph(gather, popxl.TensorSpec((3,), popxl.float32, meta_shape=(3, 2)))
        assert g.inputs[0].meta_shape == (3, 2)
        (y,) = ops.call(g, shard)
        assert y.shape == (3, 2)
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    same = np.broadcast_to(np.arange(6, dtype=np.float32).reshape(3, 2), (2, 3, 2)).copy()
    data = np.arange(12, dtype=np.float32).reshape(2, 3, 2)  # different per replica
    with popxl.Session(ir, "ipu_model") as session:
        out_same = session.run({xs: same})[ys]
        out = session.run({xs: data})[ys]
    np.testing.assert_array_equal(out_same, same)  # a replicated tensor, sharded and reassembled
    mixed = np.concatenate([data[0].reshape(-1)[:3], data[1].reshape(-1)[3:]]).reshape(3, 2)
    np.testing.assert_array_equal(out, np.stack([mixed, mixed]))  # shard i comes from replica i
