"""`popxl.ReplicaGrouping` (popxl/replica_grouping.py): which replicas share a value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from popxl.ir import Ir

__all__ = ["ReplicaGrouping"]


class ReplicaGrouping:
    """Replicas `r` with the same `assignment[r]` form a group. Create with
    `ir.replica_grouping(stride, group_size)`."""

    def __init__(self) -> None:
        raise TypeError("Use ir.replica_grouping(stride, group_size) to create a ReplicaGrouping")

    @classmethod
    def _from_params(cls, ir: Ir, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        rf = ir.replication_factor
        if group_size is None:
            if not 0 < stride <= rf or rf % stride:
                raise ValueError(f"Invalid stride {stride} for replication factor {rf}")
            group_size = rf // stride
        if not 0 < stride <= rf or rf % stride:
            raise ValueError(f"Invalid stride {stride} for replication factor {rf}")
        if not 0 < group_size <= rf or rf % group_size:
            raise ValueError(f"Invalid group_size {group_size} for replication factor {rf}")
        if group_size == 1:
            stride = 1
        if stride * group_size > rf and group_size > 1:
            raise ValueError(
                f"stride {stride} * group_size {group_size} exceeds replication factor {rf}"
            )
        rg = cls.__new__(cls)
        rg._ir = ir
        rg._num_replicas = rf
        rg._stride = stride
        rg._group_size = group_size
        rg._assignment = None
        return rg

    @classmethod
    def _from_assignments(cls, ir: Ir, assignment: Sequence[int]) -> ReplicaGrouping:
        rf = ir.replication_factor
        assignment = list(assignment)
        if len(assignment) != rf:
            raise ValueError(f"assignment must have {rf} entries, got {len(assignment)}")
        renum: dict[int, int] = {}
        norm = [renum.setdefault(a, len(renum)) for a in assignment]
        sizes = {norm.count(g) for g in renum.values()}
        if len(sizes) != 1:
            raise ValueError("all groups of a replica grouping must have the same size")
        rg = cls.__new__(cls)
        rg._ir = ir
        rg._num_replicas = rf
        rg._group_size = sizes.pop()
        rg._stride = 1
        rg._assignment = norm
        return rg

    @property
    def stride(self) -> int:
        return self._stride

    @property
    def group_size(self) -> int:
        return self._group_size

    @property
    def num_groups(self) -> int:
        return self._num_replicas // self._group_size

    @property
    def is_const(self) -> bool:
        return self._assignment is None

    @property
    def assignment(self) -> list[int]:
        if self._assignment is not None:
            return list(self._assignment)
        rf, s, g = self._num_replicas, self._stride, self._group_size
        out = []
        for r in range(rf):
            # replicas r and r + s*k (k < g) within one block of s*g replicas share a group
            block = r // (s * g)
            out.append(block * s + r % s)
        return out

    def transpose(self) -> ReplicaGrouping:
        """The grouping whose groups take one replica from each group of this one."""
        assign = self.assignment
        groups: dict[int, list[int]] = {}
        for r, a in enumerate(assign):
            groups.setdefault(a, []).append(r)
        new = [0] * self._num_replicas
        for members in groups.values():
            for i, r in enumerate(members):
                new[r] = i
        return ReplicaGrouping._from_assignments(self._ir, new)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplicaGrouping) and self.assignment == other.assignment

    def __hash__(self) -> int:
        return hash(tuple(self.assignment))

    def __repr__(self) -> str:
        return (
            f"ReplicaGrouping(num_replicas={self._num_replicas}, stride={self._stride}, "
            f"group_size={self._group_size}, num_groups={self.num_groups})"
        )
