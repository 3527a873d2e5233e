"""The replica collectives and their reductions are listed once, by the `replica` dialect.

The dialect defines the collective op classes (`COLLECTIVES`, every one with the
`CrossReplica` trait) and the reductions a collective's `op` may name (`COLLECTIVE_OPS`,
with `LOGICAL_OPS` for bool tensors and `LINEAR_OPS` for those with a linear gradient).
Derived from those lists, so a collective or a reduction added later is covered:

- every collective op class has a runtime kernel and is built by a frontend entry point;
- every reduction is accepted by the frontend's entry points (the replica all-reduce, the
  addons' one and the all-reduce across the IPUs of a replica, which popxl builds from
  ordinary ops) and computes what NumPy computes over the replicas;
- a name outside the list is refused, with the dialect's list in the message;
- the frontend's collectives module and the runtime's collective kernels keep no list of
  their own: no tuple / list / set of reduction names in their source (a dict from a
  reduction to its maths is the one place that maths is written).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from xl.dialects import get_all_dialects
from xl.dialects.replica import COLLECTIVE_OPS, COLLECTIVES, LINEAR_OPS, LOGICAL_OPS
from xl.dialects.rt_kernels import RT_KERNEL_OPS
from xl.dialects.traits import CrossReplica
from xl.runtime.kernels.collectives import COLLECTIVES as RUNTIME_COLLECTIVES

SOURCE_ROOT = Path(__file__).resolve().parents[2]
# the modules that would otherwise restate the list
NO_OWN_LIST = ("frontend/popxl/ops/_collectives.py", "runtime/kernels/collectives.py")
REPLICAS = 4

# what each reduction computes over the replicas (axis 0), written with NumPy here
REFERENCE: dict[str, Callable[[np.ndarray], Any]] = {
    "add": lambda x: x.sum(0),
    "mean": lambda x: x.mean(0),
    "mul": lambda x: x.prod(0),
    "min": lambda x: x.min(0),
    "max": lambda x: x.max(0),
    "and": lambda x: x.all(0),
    "or": lambda x: x.any(0),
    "square_add": lambda x: (x * x).sum(0),
}


def cross_replica_classes() -> list[type]:
    """Every op class with the CrossReplica trait, from every dialect and the rt-only kernels."""
    classes = [c for f in get_all_dialects().values() for c in f().operations]
    return [c for c in [*classes, *RT_KERNEL_OPS] if c.has_trait(CrossReplica)]


def test_the_lists_agree() -> None:
    assert set(REFERENCE) == set(COLLECTIVE_OPS), "a reduction without a NumPy reference in this test"
    assert set(LOGICAL_OPS) <= set(COLLECTIVE_OPS) and set(LINEAR_OPS) <= set(COLLECTIVE_OPS)
    assert set(COLLECTIVES) == {c for c in cross_replica_classes() if c.name.startswith("replica.")}
    assert ops.collectives.CollectiveOps is COLLECTIVE_OPS


@pytest.mark.parametrize("cls", cross_replica_classes(), ids=lambda c: c.name)
def test_every_collective_has_a_runtime_kernel(cls: type) -> None:
    assert cls in RUNTIME_COLLECTIVES, f"{cls.name}: no collective kernel (xl.runtime.kernels.collectives)"


def test_every_collective_is_built_by_the_frontend() -> None:
    """The frontend entry points together build every collective op class of the dialect."""
    C = ops.collectives
    ir = popxl.Ir(replication=REPLICAS)
    with ir.main_graph:
        x = popxl.variable(np.ones((4, 2), np.float32), name="x")
        C.replicated_all_reduce(x)
        C.replicated_all_reduce_(x)
        C.replicated_reduce_scatter(x)
        C.replicated_all_gather(x)
        C.replica_sharded_slice(x)
        C.replicated_slice(x)
        replicated_all_reduce_identical_inputs(x)
        replicated_all_reduce_identical_grad_inputs(x)
    built = {type(op) for op in ir.main_graph._block.ops}
    missing = sorted(c.name for c in COLLECTIVES if c not in built)
    assert not missing, f"no frontend entry point in this test builds {missing}: add the new one here"


def _inputs(kind: str) -> np.ndarray:
    rng = np.random.default_rng(len(kind))  # a different draw per reduction
    if kind in LOGICAL_OPS:
        return rng.random((REPLICAS, 3)) < 0.6
    return rng.uniform(0.5, 2.0, (REPLICAS, 3)).astype(np.float32)


@pytest.mark.parametrize("kind", COLLECTIVE_OPS)
@pytest.mark.parametrize("entry", ["replicated_all_reduce", "addons.replicated_all_reduce"])
def test_every_reduction_over_replicas(kind: str, entry: str) -> None:
    data = _inputs(kind)
    reduce = ops.collectives.replicated_all_reduce if entry == "replicated_all_reduce" else replicated_all_reduce
    ir = popxl.Ir(replication=REPLICAS)
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.bool if kind in LOGICAL_OPS else popxl.float32, "x")
        ys = popxl.d2h_stream((3,), xs.dtype, "y")
        ops.host_store(ys, reduce(ops.host_load(xs), op=kind))
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({xs: data})[ys]
    want = REFERENCE[kind](data.astype(np.float64) if kind not in LOGICAL_OPS else data)
    for r in range(REPLICAS):
        np.testing.assert_allclose(out[r], want, rtol=1e-6, err_msg=f"{entry} op={kind!r}, replica {r}")


@pytest.mark.parametrize("kind", COLLECTIVE_OPS)
def test_every_reduction_across_ipus(kind: str) -> None:
    """`ops.collectives.all_reduce` over three virtual IPUs (built from ordinary ops)."""
    data = _inputs(kind)[:3]
    ir = popxl.Ir()
    with ir.main_graph:
        ts = []
        for i in range(3):
            with popxl.ipu(i):
                ts.append(popxl.variable(data[i], name=f"t{i}"))
        outs = ops.collectives.all_reduce(ts, [0, 1, 2], op=kind)
        streams = []
        for i, o in enumerate(outs):
            with popxl.ipu(i):
                s = popxl.d2h_stream(o.shape, o.dtype, f"y{i}")
                ops.host_store(s, o)
                streams.append(s)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    want = REFERENCE[kind](data.astype(np.float64) if kind not in LOGICAL_OPS else data)
    for s in streams:
        np.testing.assert_allclose(out[s], want, rtol=1e-6, err_msg=f"all_reduce op={kind!r}")


def test_a_name_outside_the_list_is_refused() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        for build in (
            lambda: ops.collectives.replicated_all_reduce(x, op="sum"),
            lambda: ops.collectives.all_reduce([x], [0], op="sum"),
            lambda: replicated_all_reduce(x, op="sum"),
        ):
            with pytest.raises(ValueError, match="sum") as info:
                build()
            assert all(k in str(info.value) for k in COLLECTIVE_OPS), str(info.value)


def _reduction_lists(path: Path) -> list[str]:
    """`file:line` of every tuple / list / set display holding two or more reduction names."""
    names = set(COLLECTIVE_OPS)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            found = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
            if len(found) >= 2:
                out.append(f"{path.relative_to(SOURCE_ROOT)}:{node.lineno} {found}")
    return out


def test_frontend_and_runtime_keep_no_list_of_their_own() -> None:
    found = [hit for rel in NO_OWN_LIST for hit in _reduction_lists(SOURCE_ROOT / rel)]
    assert not found, "reduction names listed again (use COLLECTIVE_OPS / LOGICAL_OPS / LINEAR_OPS):\n" + "\n".join(
        found
    )
    # the scan sees a list where there is one
    assert _reduction_lists(SOURCE_ROOT / "dialects" / "replica.py")
