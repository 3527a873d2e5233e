"""PopART-style op ids (`popxl.bridge.op_id`, `print_schedule`): the public ops of a program
are numbered from 100 in creation order, one id each. `ops.split` is built as one slice per
part but is PopART's one SplitOp: its slices share one id and the ops after it follow on."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.ir import Operation

import popxl
import popxl.ops as ops
from popxl import bridge
from popxl.printing import schedule_str

# a program step: ("split", parts) or a unary / binary op on the last tensor
STEPS = st.lists(
    st.one_of(st.tuples(st.just("split"), st.sampled_from([2, 3, 6])), st.sampled_from([("relu", 0), ("add", 0)])),
    min_size=1,
    max_size=8,
)


def _owner(t: popxl.Tensor) -> Operation:
    op = t._value.owner
    assert isinstance(op, Operation)
    return op


@settings(max_examples=30, deadline=None)
@given(STEPS)
def test_each_public_op_one_id_in_creation_order(steps: list[tuple[str, int]]) -> None:
    ir = popxl.Ir()
    made: list[list[popxl.Tensor]] = []  # the result tensors of each public op
    with ir.main_graph:
        t = popxl.variable(np.ones((6, 2), np.float32), name="x")
        for kind, n in steps:
            if kind == "split":
                parts = ops.split(t, n)
                made.append(parts)
                t = ops.concat(parts, 0)
                made.append([t])
            else:
                t = ops.relu(t) if kind == "relu" else ops.add(t, t)
                made.append([t])
    got = [[bridge.op_id(ir, _owner(r)) for r in out] for out in made]
    assert got == [[100 + i] * len(out) for i, out in enumerate(made)]
    # the schedule shows every public op once (a split as one Split line) with its id
    shown = [int(i) for i in re.findall(r"^\s+\w+\.(\d+) \(", schedule_str(ir.main_graph), re.M)]
    assert shown == [100 + i for i in range(len(made))]


def test_ops_numbered_between_the_parts_move_down() -> None:
    """Parts numbered apart (another op numbered between them, e.g. by a pass) take the first
    part's id; the others keep their order after it; parts of an earlier merged op keep
    sharing their id."""
    ir = popxl.Ir()
    a, p0, b, p1, c, q0, q1, d = (object() for _ in range(8))
    for op in (a, p0, b, p1, c):
        ir._number_op(op)
    ir._number_as_one([p0, p1])
    assert [ir._op_id(o) for o in (a, p0, p1, b, c)] == [100, 101, 101, 102, 103]
    for op in (q0, d, q1):
        ir._number_op(op)
    ir._number_as_one([q0, q1])
    assert [ir._op_id(o) for o in (a, p0, p1, b, c, q0, q1, d)] == [100, 101, 101, 102, 103, 104, 104, 105]
    ir._number_op(e := object())
    assert ir._op_id(e) == 106


def test_print_schedule_shows_a_split_as_one_split_line() -> None:
    """PopART schedules ops.split as one Split op with every part as an output (xl builds one
    slice per part); the ops after it keep their ids."""
    ir = popxl.Ir()
    graph = ir.create_graph(
        lambda x: [ops.mul(p, p) for p in ops.split(ops.add(x, x), [2, 4])], popxl.TensorSpec((6,), popxl.float32)
    )
    assert schedule_str(graph).splitlines()[2:] == [
        "    Add.100 (%1 [(6,) float32], %1 [(6,) float32]) -> (%2 [(6,) float32])",
        "    Split.101 (%2 [(6,) float32]) -> (%3 [(2,) float32], %4 [(4,) float32])",
        "    Mul.102 (%3 [(2,) float32], %3 [(2,) float32]) -> (%5 [(2,) float32])",
        "    Mul.103 (%4 [(4,) float32], %4 [(4,) float32]) -> (%6 [(4,) float32])",
        "  }",
    ]
    with ir.main_graph:  # slices written by hand stay Slice ops
        x = popxl.variable(np.zeros(6, np.float32), name="x")
        ops.slice(x, start=0, stop=2)
        ops.slice(x, start=2, stop=6)
    assert [line.split(".")[0].strip() for line in schedule_str(ir.main_graph).splitlines()[2:-1]] == ["Slice"] * 2
