"""`popxl.ReplicaGrouping` and its IR attribute `#replica.grouping`: upstream's assignment
and transpose tables, validation, equality, printing, and agreement between the two."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import popxl
from xl.dialects.replica import ReplicaGroupingAttr
from xl.tools.context import xl_context


def test_assignment_table() -> None:
    """The examples of upstream `ReplicaGrouping.assignment` (replication factor 8)."""
    ir = popxl.Ir(replication=8)
    table = {
        (1, 8): [0, 0, 0, 0, 0, 0, 0, 0],
        (1, 1): [0, 1, 2, 3, 4, 5, 6, 7],
        (1, 2): [0, 0, 1, 1, 2, 2, 3, 3],
        (2, 2): [0, 1, 0, 1, 2, 3, 2, 3],
        (1, 4): [0, 0, 0, 0, 1, 1, 1, 1],
        (2, 4): [0, 1, 0, 1, 0, 1, 0, 1],
    }
    for (stride, size), assignment in table.items():
        rg = ir.replica_grouping(stride, size)
        assert rg.assignment == assignment
        assert rg.num_groups == 8 // size and rg.group_size == size and rg.is_const
    assert ir.replica_grouping().assignment == [0] * 8
    assert ir.replica_grouping(stride=4).group_size == 2  # default group_size: replicas // stride
    assert ir.replica_grouping(stride=8, group_size=1).stride == 1  # forced to 1


def test_transpose_table() -> None:
    """Upstream's transpose examples, and the group matrix example on 8 replicas."""
    ir = popxl.Ir(replication=4)
    cases = {
        (0, 0, 0, 0): [0, 1, 2, 3],
        (0, 1, 0, 1): [0, 0, 1, 1],
        (0, 0, 1, 1): [0, 1, 0, 1],
        (0, 1, 2, 3): [0, 0, 0, 0],
    }
    for a, t in cases.items():
        assert ir.replica_grouping_from_assignments(list(a)).transpose().assignment == t
    ir8 = popxl.Ir(replication=8)
    rg = ir8.replica_grouping(2, 2)
    tr = rg.transpose()
    assert tr.assignment == [0, 0, 1, 1, 0, 0, 1, 1] and not tr.is_const
    assert repr(tr) == "ReplicaGrouping(assignment=[0, 0, 1, 1, 0, 0, 1, 1])"
    assert tr.transpose() == rg
    with pytest.raises(NotImplementedError, match="non-constant stride"):
        _ = tr.stride


def test_from_assignments() -> None:
    ir = popxl.Ir(replication=8)
    # a constant-stride assignment becomes a (stride, group_size) grouping
    rg = ir.replica_grouping_from_assignments([0, 1, 0, 1, 2, 3, 2, 3])
    assert rg.is_const and (rg.stride, rg.group_size) == (2, 2)
    # as upstream: labels 0, 1, ... in order of first appearance, nothing else
    assert ir.replica_grouping_from_assignments([0, 0, 1, 1, 2, 2, 3, 3]) == ir.replica_grouping(1, 2)
    for bad in ([5, 5, 1, 1, 2, 2, 0, 0], [1, 1, 2, 2, 3, 3, 4, 4], [0, 0, 2, 2, 3, 3, 4, 4], [0, 0, 2, 2, 1, 1, 3, 3]):
        with pytest.raises(ValueError, match=r"group indices must start at 0 and be numbered 0, 1, \.\.\."):
            ir.replica_grouping_from_assignments(bad)
    with pytest.raises(ValueError, match="same size"):
        ir.replica_grouping_from_assignments([0, 0, 0, 1, 1, 2, 2, 2])
    with pytest.raises(ValueError, match=r"length of `assignment` \(4\) does not equal the number of replicas \(8\)"):
        ir.replica_grouping_from_assignments([0, 1, 0, 1])
    with pytest.raises(TypeError, match="list of ints"):
        ir.replica_grouping_from_assignments([0.0] * 8)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


def test_validation() -> None:
    ir = popxl.Ir(replication=8)
    with pytest.raises(ValueError, match="Stride: 0"):
        ir.replica_grouping(0)
    with pytest.raises(ValueError, match="Stride: 16"):
        ir.replica_grouping(16)
    with pytest.raises(ValueError, match="stride must be a factor"):
        ir.replica_grouping(3)
    with pytest.raises(ValueError, match="Group size: 9"):
        ir.replica_grouping(1, 9)
    with pytest.raises(ValueError, match=r"divisible by stride \* group_size \(2 \* 8\)"):
        ir.replica_grouping(2, 8)
    with pytest.raises(ValueError, match=r"divisible by stride \* group_size \(1 \* 3\)"):
        ir.replica_grouping(1, 3)
    with pytest.raises(TypeError, match="stride must be an int"):
        ir.replica_grouping(1.0)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


def test_equality_and_repr() -> None:
    ir = popxl.Ir(replication=8)
    other = popxl.Ir(replication=8)
    rg = ir.replica_grouping(2, 4)
    assert repr(rg) == "ReplicaGrouping(num_replicas=8, stride=2, group_size=4, num_groups=2)"
    assert rg == ir.replica_grouping(2, 4) and hash(rg) == hash(ir.replica_grouping(2, 4))
    assert rg != ir.replica_grouping(1, 4)
    assert rg != other.replica_grouping(2, 4)  # another Ir
    with pytest.raises(TypeError, match="must be of type popxl.ReplicaGrouping"):
        _ = rg == [0, 1, 0, 1, 0, 1, 0, 1]
    with pytest.raises(RuntimeError, match="cannot be constructed directly"):
        popxl.ReplicaGrouping()


def test_frontend_and_attribute_agree() -> None:
    """For every valid grouping of 1..16 replicas, the IR attribute's assignment, groups and
    group count equal the frontend's, and the groups are `stride` apart within blocks of
    `stride * group_size` replicas (built here by enumeration)."""
    for rf in range(1, 17):
        ir = popxl.Ir(replication=rf)
        for stride in range(1, rf + 1):
            for size in range(1, rf + 1):
                if rf % stride or rf % (stride * size):
                    continue
                rg = ir.replica_grouping(stride, size)
                attr = rg._to_attr()
                assert attr.assignment(rf) == rg.assignment
                assert attr.groups(rf) == rg.groups and attr.num_groups(rf) == rg.num_groups
                expected = []
                for block in range(0, rf, stride * size):
                    for offset in range(stride if size > 1 else stride * size):
                        expected.append([block + offset + k * stride for k in range(size)])
                assert sorted(rg.groups) == sorted(expected), (rf, stride, size)
                # the transpose's groups are the columns of the group matrix (i-th members)
                columns = np.array(rg.groups).T.tolist()
                assert sorted(rg.transpose().groups) == sorted(columns)


def test_attribute_syntax_and_errors() -> None:
    ctx = xl_context()
    a = Parser(ctx, "#replica.grouping<stride = 2, group_size = 4>").parse_attribute()
    assert isinstance(a, ReplicaGroupingAttr) and a.assignment(8) == [0, 1, 0, 1, 0, 1, 0, 1]
    assert str(a) == "#replica.grouping<stride = 2, group_size = 4>"
    b = Parser(ctx, "#replica.grouping<assignment = [0, 1, 1, 0]>").parse_attribute()
    assert isinstance(b, ReplicaGroupingAttr) and b.groups(4) == [[0, 3], [1, 2]]
    assert ReplicaGroupingAttr(3, 1) == ReplicaGroupingAttr(1, 1)  # stride of singleton groups
    with pytest.raises(ValueError, match="replication factor 6 is not divisible by stride \\* group_size = 8"):
        a.assignment(6)
    with pytest.raises(ValueError, match="assigns 4 replicas, but the replication factor is 8"):
        b.groups(8)
    with pytest.raises(VerifyException, match="must number its groups 0, 1, ..."):
        ReplicaGroupingAttr(assignment=[1, 0, 1, 0])
    with pytest.raises(VerifyException, match="differ in size"):
        ReplicaGroupingAttr(assignment=[0, 0, 1])
    with pytest.raises(VerifyException, match="must be positive"):
        ReplicaGroupingAttr(0, 2)


def test_const_rg_and_maps() -> None:
    """Upstream's example: [0, 0, 1, 1, 0, 0, 1, 1] maps through the constant-stride grouping
    [0, 0, 1, 1, 2, 2, 3, 3] with to_device_map [0, 1, 0, 1] and to_host_map [0, 1]."""
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
    assert rg.const_rg.assignment == [0, 0, 1, 1, 2, 2, 3, 3] and rg.const_rg.is_const
    assert rg.to_device_map == [0, 1, 0, 1] and rg.to_host_map == [0, 1]
    const = ir.replica_grouping(2, 2)
    assert const.const_rg is const and const.to_device_map is None and const.to_host_map is None
    # every const_rg group lies inside one group of the original grouping
    for a in ([0, 1, 1, 0, 2, 3, 3, 2], [0, 0, 1, 1, 0, 0, 1, 1], [0, 1, 0, 1, 1, 0, 1, 0]):
        rg = ir.replica_grouping_from_assignments(a)
        for members in rg.const_rg.groups:
            assert len({rg.assignment[m] for m in members}) == 1
        device_map = rg.to_device_map
        assert device_map is not None  # none of these groupings is const
        assert [device_map[c] for c in rg.const_rg.assignment] == rg.assignment
