"""Grouped variables in the frontend and the IR: `popxl.variable(..., replica_grouping=,
retrieval_mode=)`, the `Variable` properties, and every group's value in `ir.to_mlir()`."""

from __future__ import annotations

import re

import numpy as np
import pytest
from xdsl.parser import Parser

import popxl
import popxl.ops as ops
from tests.helpers.replica_harness import runtime_has_collectives
from xl.dialects.graph import VariableOp
from xl.dialects.replica import ReplicaGroupingAttr
from xl.dialects.utils import dense_to_numpy
from xl.tools.context import xl_context


def _variables(text: str) -> dict[str, VariableOp]:
    module = Parser(xl_context(), text).parse_module()
    module.verify()
    return {op.var_name.data: op for op in module.walk() if isinstance(op, VariableOp)}


def _initial_value(op: VariableOp) -> np.ndarray:
    """The value a printed variable is initialised with (these all have one)."""
    assert op.init is not None, op.var_name.data
    return dense_to_numpy(op.init)


def test_variable_properties() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)
        v = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="v", replica_grouping=rg)
        w = popxl.variable(np.ones((1, 3), np.float32), name="w", retrieval_mode="all_replicas",
                           replica_grouping=ir.replica_grouping(1, 4))  # fmt: skip
        s = popxl.variable(np.ones((4, 3), np.float32), name="s", replica_grouping=ir.replica_grouping(1, 1))
        u = popxl.variable(np.zeros(3, np.float32), name="u")
    assert v.shape == v.shape_on_replica == (3,) and v.shape_on_host == (2, 3)
    assert v.replica_grouping is rg and v.retrieval_mode == "one_per_group"
    assert w.shape == (1, 3) and w.shape_on_host == (1, 3)  # one group: no group axis
    assert w.replica_grouping.num_groups == 1 and w.retrieval_mode == "all_replicas"
    assert s.shape == (3,) and s.shape_on_host == (4, 3) and s.replica_grouping.num_groups == 4
    assert u.replica_grouping == ir.replica_grouping() and u.shape_on_host == (3,)


def test_variable_errors() -> None:
    ir = popxl.Ir(replication=4)
    other = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(1, 2)
        with pytest.raises(ValueError, match=r"the data must have shape \(num_groups=2, \*shape\), got \(3,\)"):
            popxl.variable(np.ones(3, np.float32), replica_grouping=rg)
        with pytest.raises(ValueError, match=r"got \(4, 3\)"):
            popxl.variable(np.ones((4, 3), np.float32), replica_grouping=rg)
        with pytest.raises(ValueError, match="belongs to another Ir"):
            popxl.variable(np.ones((2, 3), np.float32), replica_grouping=other.replica_grouping(1, 2))
        with pytest.raises(TypeError, match="replica_grouping must be a popxl.ReplicaGrouping"):
            popxl.variable(np.ones((2, 3), np.float32), replica_grouping=2)  # pyright: ignore[reportArgumentType]
        with pytest.raises(ValueError, match="invalid retrieval_mode 'each'"):
            popxl.variable(np.ones(3, np.float32), retrieval_mode="each")


def test_grouped_variable_in_the_ir() -> None:
    ir = popxl.Ir(replication=8)
    init = np.arange(12, dtype=np.float32).reshape(4, 3)
    with ir.main_graph:
        popxl.variable(init, name="v", replica_grouping=ir.replica_grouping(stride=2, group_size=2))
        popxl.variable(np.ones((2, 2), np.float32), name="t",
                       replica_grouping=ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1]))  # fmt: skip
    text = ir.to_mlir()
    assert re.search(
        r'graph.variable "v" = dense<.*> : tensor<4x3xf32> -> tensor<3xf32> '
        r"\{grouping = #replica.grouping<stride = 2, group_size = 2>\}",
        text,
    ), text
    assert "#replica.grouping<assignment = [0, 0, 1, 1, 0, 0, 1, 1]>" in text
    ops_ = _variables(text)
    np.testing.assert_array_equal(_initial_value(ops_["v"]), init)  # every group's value
    g = ops_["v"].grouping
    assert isinstance(g, ReplicaGroupingAttr)
    assert g.assignment(8) == [0, 1, 0, 1, 2, 3, 2, 3]
    assert g.groups(8) == [[0, 2], [1, 3], [4, 6], [5, 7]] and g.num_groups(8) == 4


@pytest.mark.skipif(not runtime_has_collectives(), reason="the runtime has no per-replica state")
def test_current_values_of_every_group_reach_the_ir() -> None:
    """After a run that updates each replica differently, `to_mlir()` holds each group's
    value (the first member's), for both retrieval modes."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        x = ops.host_load(xs)
        v = popxl.variable(np.zeros((2, 3), np.float32), name="v",
                           replica_grouping=ir.replica_grouping(stride=2, group_size=2))  # fmt: skip
        w = popxl.variable(np.zeros((2, 3), np.float32), name="w", retrieval_mode="all_replicas",
                           replica_grouping=ir.replica_grouping(stride=1, group_size=2))  # fmt: skip
        # replicas of one group receive the same data, so they stay equal
        ops.var_updates.accumulate_(v, x)
        ops.var_updates.accumulate_(w, x)
    data = np.array([[1, 1, 1], [2, 2, 2], [1, 1, 1], [2, 2, 2]], np.float32)  # groups of v: {0,2}, {1,3}
    with popxl.Session(ir, "ipu_model") as session:
        session.run({xs: data})
        got_v = session.get_tensor_data(v)
        got_w = session.get_tensor_data(w)
        text = ir.to_mlir()
    np.testing.assert_array_equal(got_v, [[1, 1, 1], [2, 2, 2]])
    assert got_w.shape == (4, 3)  # all replicas
    vars_ = _variables(text)
    np.testing.assert_array_equal(_initial_value(vars_["v"]), got_v)
    np.testing.assert_array_equal(_initial_value(vars_["w"]), got_w[[0, 2]])  # groups {0,1}, {2,3}
    initial = _variables(ir.to_mlir(values="initial"))
    np.testing.assert_array_equal(_initial_value(initial["v"]), np.zeros((2, 3)))
