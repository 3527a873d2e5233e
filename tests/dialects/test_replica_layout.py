"""`xl.dialects.replica_layout`: which replicas hold which value or shard of a variable, and
the leading dims of host stream data, against layouts written out independently."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xl.dialects.replica import ReplicaGroupingAttr
from xl.dialects.replica_layout import ReplicaLayout, group_host_shape, host_data_shape


@st.composite
def layouts(draw: st.DrawFn) -> tuple[ReplicaLayout, np.ndarray]:
    """A layout (stride / group_size grouping or an explicit assignment) and per-group values."""
    stride = draw(st.sampled_from([1, 2]))
    group_size = draw(st.sampled_from([1, 2, 4]))
    rf = stride * group_size * draw(st.sampled_from([1, 2]))
    if group_size == 1:
        stride = 1
    shard_over = draw(st.sampled_from([d for d in (1, 2, 4) if group_size % d == 0]))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    grouping = ReplicaGroupingAttr(stride, group_size)
    if draw(st.booleans()):  # the same grouping as an explicit assignment
        layout = ReplicaLayout(shape, rf, tuple(grouping.assignment(rf)), shard_over)
    else:
        layout = ReplicaLayout(shape, rf, grouping, shard_over)
    groups = rf // group_size
    values = np.arange(groups * math.prod(shape), dtype=np.float32).reshape(groups, *shape) + 1
    return layout, values if groups > 1 else values[0]


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_values_and_shards_round_trip(case: tuple[ReplicaLayout, np.ndarray]) -> None:
    layout, values = case
    rf, s = layout.replication_factor, layout.shard_over
    assignment = [layout.group_of(r) for r in range(rf)]
    assert tuple(assignment) == layout.assignment
    assert layout.host_shape == values.shape
    per_group = values if layout.num_groups > 1 else values[None]
    # replica r's full value: its group's value (written out from the assignment)
    every = layout.every_replica(values)
    np.testing.assert_array_equal(every, np.stack([per_group[g] for g in assignment]))
    np.testing.assert_array_equal(layout.per_group(every), values)
    stored = layout.replica_values(values)
    n = math.prod(layout.shape)
    size = -(-n // s)
    for r, piece in enumerate(stored):
        assert piece.shape == layout.stored_shape
        assert piece.flags.c_contiguous
        if s == 1:
            np.testing.assert_array_equal(piece, per_group[assignment[r]])
        else:
            members = [m for m in range(rf) if assignment[m] == assignment[r]]
            k = members.index(r) % s  # its position in its group, modulo shard_over
            padded = np.concatenate([per_group[assignment[r]].reshape(-1), np.zeros(size * s - n, np.float32)])
            np.testing.assert_array_equal(piece, padded[k * size : (k + 1) * size])
    full = layout.full_values(stored)
    np.testing.assert_array_equal(np.stack(full), every)


def test_layout_errors_and_host_shape() -> None:
    with pytest.raises(ValueError, match="has 3 replicas, but the replication factor is 4"):
        ReplicaLayout((2,), 4, (0, 1, 0))
    with pytest.raises(ValueError, match="not divisible by stride"):
        ReplicaLayout((2,), 6, ReplicaGroupingAttr(1, 4))
    err = ReplicaLayout((2,), 4, ReplicaGroupingAttr(2, 2), shard_over=4).fit_error()
    assert err == "shard_over 4 must divide the replica group size 2 (replication factor 4)"
    lay = ReplicaLayout.from_host_shape((2, 3, 5), 4, ReplicaGroupingAttr(2, 2), 2)
    assert (lay.shape, lay.host_shape, lay.stored_shape) == ((3, 5), (2, 3, 5), (8,))
    assert ReplicaLayout.from_host_shape((2, 3), 4).shape == (2, 3)


@pytest.mark.parametrize(
    ("transfers", "replicas", "want"),
    [(1, 1, (4, 2)), (3, 1, (3, 4, 2)), (1, 2, (2, 4, 2)), (3, 2, (3, 2, 4, 2))],
)
def test_host_data_shape(transfers: int, replicas: int, want: tuple[int, ...]) -> None:
    assert host_data_shape((4, 2), transfers, replicas) == want


@settings(max_examples=60, deadline=None)
@given(layouts())
def test_group_host_shape_is_the_layouts(case: tuple[ReplicaLayout, np.ndarray]) -> None:
    """`group_host_shape` from the group count alone gives the shape of the per-group values
    (the layouts' drawn values are built independently) and `from_host_shape` inverts it."""
    layout, values = case
    host = group_host_shape(layout.shape, layout.num_groups)
    assert host == values.shape == layout.host_shape
    assert ReplicaLayout.from_host_shape(host, layout.replication_factor, layout.grouping).shape == layout.shape
