"""`popxl.ReplicaGrouping` (popxl/replica_grouping.py): which replicas share a value.

Replicas `r` with the same `assignment[r]` form a group. A grouping made from
`(stride, group_size)` ("constant stride") puts replicas `stride` apart in a group; one
made from an explicit assignment may have any groups of equal size. For
`replication_factor = 8`:

| `ir.replica_grouping(...)` | `assignment` |
|---|---|
| `stride=1, group_size=8` | `[0, 0, 0, 0, 0, 0, 0, 0]` |
| `stride=1, group_size=1` | `[0, 1, 2, 3, 4, 5, 6, 7]` |
| `stride=1, group_size=2` | `[0, 0, 1, 1, 2, 2, 3, 3]` |
| `stride=2, group_size=2` | `[0, 1, 0, 1, 2, 3, 2, 3]` |
| `stride=2, group_size=4` | `[0, 1, 0, 1, 0, 1, 0, 1]` |

In the IR a grouping is a `#replica.grouping<stride = S, group_size = G>` attribute
(`#replica.grouping<assignment = [...]>` for a grouping without a constant stride).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from popxl._checks import describe
from xl.dialects.replica import ReplicaGroupingAttr

if TYPE_CHECKING:
    from popxl.ir import Ir

__all__ = ["ReplicaGrouping", "checked_grouping", "checked_shard_over", "replica_group_size"]


def _strides(assignment: Sequence[int]) -> set[int]:
    """The distances between consecutive members of every group."""
    out: set[int] = set()
    last: dict[int, int] = {}
    for r, g in enumerate(assignment):
        if g in last:
            out.add(r - last[g])
        last[g] = r
    return out


def _const_assignment(num_replicas: int, stride: int, group_size: int) -> list[int]:
    return [r % stride + stride * (r // (stride * group_size)) for r in range(num_replicas)]


class ReplicaGrouping:
    """A grouping of the replicas of an `Ir` (create with `ir.replica_grouping(stride,
    group_size)` or `ir.replica_grouping_from_assignments(assignment)`).

    - `stride`: the distance between consecutive members of a group (`NotImplementedError`
      for a grouping without a constant stride); `group_size`, `num_groups`;
    - `assignment`: the group of each replica; `is_const`: a constant stride;
    - `transpose()`: the grouping whose `i`-th group holds the `i`-th member of each group;
    - equality compares the Ir and the assignment.
    """

    __module__ = "popxl"

    _ir: Ir
    _num_replicas: int
    _stride: int | None
    _group_size: int
    _assignment: list[int]

    def __init__(self) -> None:
        raise RuntimeError("popxl.ReplicaGrouping cannot be constructed directly (use `ir.replica_grouping`).")

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def _from_params(cls, ir: Ir, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        rf = ir.replication_factor
        for arg, v in (("stride", stride), ("group_size", group_size)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError(f"ir.replica_grouping: {arg} must be an int, got {v!r}")
        if not 0 < stride <= rf:
            raise ValueError(
                "ir.replica_grouping: stride must be greater than zero and at most the number "
                f"of replicas. Stride: {stride}. Replicas: {rf}"
            )
        if rf % stride:
            raise ValueError(
                "ir.replica_grouping: stride must be a factor of the number of replicas. "
                f"Stride: {stride}. Replicas: {rf}"
            )
        if group_size is None:
            group_size = rf // stride
        if not 0 < group_size <= rf:
            raise ValueError(
                "ir.replica_grouping: group size must be greater than zero and at most the "
                f"number of replicas. Group size: {group_size}. Replicas: {rf}"
            )
        if group_size == 1:
            stride = 1  # stride has no effect on groups of one replica
        if rf % (stride * group_size):
            raise ValueError(
                f"ir.replica_grouping: the number of replicas ({rf}) must be divisible by "
                f"stride * group_size ({stride} * {group_size})"
            )
        self = object.__new__(cls)
        self._ir = ir
        self._num_replicas = rf
        self._stride = stride
        self._group_size = group_size
        self._assignment = _const_assignment(rf, stride, group_size)
        return self

    @classmethod
    def _from_assignments(cls, ir: Ir, assignment: Sequence[int]) -> ReplicaGrouping:
        """Groups by label; as upstream, the labels must be 0, 1, ... in order of their first
        appearance (ValueError otherwise)."""
        rf = ir.replication_factor
        what = "ir.replica_grouping_from_assignments"
        a = list(assignment)
        if any(not isinstance(v, int) or isinstance(v, bool) for v in a):
            raise TypeError(f"{what}: assignment must be a list of ints, got {a!r}")
        if len(a) != rf:
            raise ValueError(
                f"{what}: the length of `assignment` ({len(a)}) does not equal the number of replicas ({rf})."
            )
        renumber: dict[int, int] = {}
        numbered = [renumber.setdefault(g, len(renumber)) for g in a]  # numbered by first appearance
        if numbered != a:
            raise ValueError(
                f"{what}: the group indices must start at 0 and be numbered 0, 1, ... in order of their "
                f"first appearance (e.g. {numbered}), got {a}"
            )
        sizes = {g: a.count(g) for g in range(len(renumber))}
        if len(set(sizes.values())) != 1:
            by_label = {label: sizes[g] for label, g in renumber.items()}
            raise ValueError(f"{what}: all groups should have the same size. (Group, Size): {sorted(by_label.items())}")
        strides = _strides(a)
        size = sizes[0]
        if len(strides) <= 1:
            stride = strides.pop() if strides else 1
            if rf % (stride * size) == 0 and _const_assignment(rf, stride, size) == a:
                return cls._from_params(ir, stride, size)
        self = object.__new__(cls)
        self._ir = ir
        self._num_replicas = rf
        self._stride = None
        self._group_size = size
        self._assignment = a
        return self

    # -- properties -------------------------------------------------------------------------
    @property
    def stride(self) -> int:
        """The offset between consecutive members of a group."""
        if self._stride is None:
            raise NotImplementedError(
                f"This ReplicaGrouping has a non-constant stride: it has no stride (assignment {self._assignment})"
            )
        return self._stride

    @property
    def group_size(self) -> int:
        """Replicas per group."""
        return self._group_size

    @property
    def num_groups(self) -> int:
        """The number of groups."""
        return self._num_replicas // self._group_size

    @property
    def assignment(self) -> list[int]:
        """The group index of each replica."""
        return list(self._assignment)

    @property
    def is_const(self) -> bool:
        """Whether the grouping has a constant stride (a `(stride, group_size)` grouping)."""
        return self._stride is not None

    @property
    def groups(self) -> list[list[int]]:
        """The replicas of each group, ascending."""
        out: list[list[int]] = [[] for _ in range(self.num_groups)]
        for r, g in enumerate(self._assignment):
            out[g].append(r)
        return out

    @property
    def const_rg(self) -> ReplicaGrouping:
        """A constant-stride grouping that splits the groups of this one as little as possible
        (this grouping itself when it has a constant stride): for `[0, 0, 1, 1, 0, 0, 1, 1]`,
        `[0, 0, 1, 1, 2, 2, 3, 3]`."""
        if self._stride is not None:
            return self
        strides = _strides(self._assignment)
        stride = min(strides)
        split = list(self._assignment)
        next_group = max(split)
        for g in sorted(set(self._assignment)):
            members = [r for r, a in enumerate(self._assignment) if a == g]
            moved = False
            for prev, r in zip(members, members[1:]):
                if r - prev > stride:  # a gap wider than the stride starts a new group
                    moved = True
                    next_group += 1
                if moved:
                    split[r] = next_group
        size = 0
        for g in set(split):
            size = math.gcd(size, split.count(g))
        return ReplicaGrouping._from_params(self._ir, stride if size > 1 else 1, size)

    @property
    def to_device_map(self) -> list[int] | None:
        """For a grouping without constant stride: the group of this grouping each group of
        `const_rg` belongs to (None for a constant-stride grouping)."""
        if self._stride is not None:
            return None
        out: dict[int, int] = {}
        for c, g in zip(self.const_rg.assignment, self._assignment):
            out.setdefault(c, g)
        return [out[c] for c in sorted(out)]

    @property
    def to_host_map(self) -> list[int] | None:
        """For a grouping without constant stride: a group of `const_rg` for each group of
        this grouping (its first), None for a constant-stride grouping."""
        if self._stride is not None:
            return None
        out: dict[int, int] = {}
        for c, g in zip(self.const_rg.assignment, self._assignment):
            out.setdefault(g, c)
        return [out[g] for g in sorted(out)]

    def transpose(self) -> ReplicaGrouping:
        """The grouping whose `i`-th group holds the `i`-th member of every group:
        `[0, 0, 0, 0] -> [0, 1, 2, 3]`, `[0, 1, 0, 1] -> [0, 0, 1, 1]`."""
        new = [0] * self._num_replicas
        for members in self.groups:
            for i, r in enumerate(members):
                new[r] = i
        return ReplicaGrouping._from_assignments(self._ir, new)

    # -- IR ---------------------------------------------------------------------------------
    def _to_attr(self) -> Any:
        """The `#replica.grouping` attribute of this grouping."""
        if self._stride is not None:
            return ReplicaGroupingAttr(self._stride, self._group_size)
        return ReplicaGroupingAttr(assignment=self._assignment)

    def _check_ir(self, ir: Ir, what: str) -> None:
        """The grouping belongs to `ir` and fits its current replication factor."""
        if self._ir is not ir:
            raise ValueError(f"{what}: {self!r} belongs to another Ir ({self._ir!r}), not to {ir!r}")
        if self._num_replicas != ir.replication_factor:
            raise ValueError(
                f"{what}: {self!r} was made for {self._num_replicas} replicas, but the "
                f"replication factor is now {ir.replication_factor}"
            )

    # -- comparison, printing ---------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicaGrouping):
            raise TypeError(f"Value must be of type popxl.ReplicaGrouping. Type: {type(other)}. Value: {other}.")
        return self._ir is other._ir and self._assignment == other._assignment

    def __hash__(self) -> int:
        return hash((id(self._ir), tuple(self._assignment)))

    def __repr__(self) -> str:
        if self._stride is None:
            return f"ReplicaGrouping(assignment={self._assignment})"
        return (
            f"ReplicaGrouping(num_replicas={self._num_replicas}, stride={self._stride}, "
            f"group_size={self._group_size}, num_groups={self.num_groups})"
        )


# ---------------------------------------------------------------------------------------
# Arguments of the functions creating variables and sharded buffers
# ---------------------------------------------------------------------------------------


def checked_grouping(ir: Ir, replica_grouping: Any, what: str) -> tuple[ReplicaGroupingAttr | None, int]:
    """A `replica_grouping` argument (None: all replicas in one group) of a function
    building in `ir`: (its attribute or None, the number of groups)."""
    if replica_grouping is None:
        return None, 1
    if not isinstance(replica_grouping, ReplicaGrouping):
        raise TypeError(
            f"{what}: replica_grouping must be a popxl.ReplicaGrouping (from ir.replica_grouping), "
            f"got {describe(replica_grouping)}"
        )
    replica_grouping._check_ir(ir, what)
    if replica_grouping.num_groups == 1 and replica_grouping._stride == 1:
        # All replicas in one group, in order: what no grouping means. Recorded as no
        # grouping, so the IR reads the same (and follows a later replication factor).
        return None, 1
    return replica_grouping._to_attr(), int(replica_grouping.num_groups)


def replica_group_size(ir: Ir, replica_grouping: ReplicaGrouping | None) -> int:
    """The replicas of each group of `replica_grouping` (all replicas without one)."""
    rf = ir.replication_factor
    if replica_grouping is None:
        return rf
    return rf // int(replica_grouping.num_groups)


def checked_shard_over(ir: Ir, replica_grouping: ReplicaGrouping | None, shard_over: Any, what: str) -> int:
    """A `shard_over` argument: the replicas a value is sharded over, a divisor of the
    group size (its default)."""
    size = replica_group_size(ir, replica_grouping)
    if shard_over is None:
        return size
    if isinstance(shard_over, bool) or not isinstance(shard_over, int | np.integer) or shard_over < 1:
        raise ValueError(f"{what}: shard_over must be a positive int, got {describe(shard_over)}")
    if shard_over > size:
        raise ValueError(
            f"The sharding group size ({shard_over}) must be less than or equal to the replica "
            f"group size ({size}). Note that if no replica grouping was passed, the replica "
            "group size defaults to the IR's global replication factor; and if no sharding "
            "group size was passed, it defaults to the replica group size."
        )
    if size % shard_over:
        raise ValueError(
            f"The replica group size ({size}) must be divisible by the sharding group size "
            f"({shard_over}). Note that if no replica grouping was passed, the replica group "
            "size defaults to the IR's global replication factor; and if no sharding group "
            "size was passed, it defaults to the replica group size."
        )
    return int(shard_over)
