"""Where values lie on the replicas: a variable's groups and shards, and host stream data.

A variable of a replicated program (`replication_factor = R`) has a replica grouping:
replicas with the same `assignment[r]` form a group and share one value, so the variable
has one value per group, `[num_groups, *shape]` (just `shape` with one group); that is
its initial value in the IR and its host copy in a Session. Sharded over `shard_over`
replicas (replicated tensor sharding), each replica stores only its shard: the value
flattened, zero-padded to `shard_over * shard_size` elements and cut into `shard_over`
pieces of `shard_size = ceil(elements / shard_over)`; replica r holds piece
`p % shard_over`, `p` its position in its group, and the `shard_over` consecutive members
of its group around it hold the pieces of its value. `ReplicaLayout` answers every
question about that layout, for the dialects (`rt.state`, `ipu.remote_variable`,
`ipu.replica_sharded_variable`), the lowering and the Session:

>>> lay = ReplicaLayout((3,), 4, grouping=(0, 1, 0, 1), shard_over=2)
>>> lay.num_groups, lay.host_shape, lay.stored_shape, lay.shard_index
(2, (2, 3), (2,), (0, 0, 1, 1))
>>> [v.tolist() for v in lay.replica_values(np.array([[1, 2, 3], [4, 5, 6]]))]
[[1, 2], [4, 5], [3, 0], [6, 0]]

A variable's host shape from its group count alone is `group_host_shape`. Host stream data
is laid out `[num_host_transfers, replicas, *shape]` with size-1 leading dims dropped
(`host_data_shape`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from xl.dialects.replica import ReplicaGroupingAttr, shard_size

__all__ = ["ReplicaLayout", "group_host_shape", "host_data_shape"]


def group_host_shape(shape: Sequence[int], num_groups: int) -> tuple[int, ...]:
    """The host shape of a variable of `shape` with one value per replica group:
    `(num_groups, *shape)` with several groups, else `shape`.

    >>> group_host_shape((2, 3), 4), group_host_shape((2, 3), 1)
    ((4, 2, 3), (2, 3))
    """
    return (num_groups, *shape) if num_groups > 1 else tuple(shape)


def host_data_shape(shape: Sequence[int], num_host_transfers: int, replicas: int) -> tuple[int, ...]:
    """The host array of a stream of `shape`: `[num_host_transfers, replicas, *shape]`
    with size-1 leading dims dropped.

    >>> host_data_shape((4,), 3, 1), host_data_shape((4,), 1, 2), host_data_shape((), 1, 1)
    ((3, 4), (2, 4), ())
    """
    lead = tuple(n for n in (num_host_transfers, replicas) if n > 1)
    return (*lead, *shape)


@dataclass(frozen=True)
class ReplicaLayout:
    """The layout of a variable of full shape `shape` over `replication_factor` replicas
    grouped by `grouping` (a grouping attribute, an assignment: the group of each replica
    numbered 0, 1, ..., or None: all replicas in one group), each value sharded over
    `shard_over` replicas of its group (1: not sharded). ValueError when the grouping does
    not fit the replication factor. Asking for one replica's group or value costs O(1)."""

    shape: tuple[int, ...]
    replication_factor: int
    grouping: ReplicaGroupingAttr | tuple[int, ...] | None = None
    shard_over: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        g = self.grouping
        if isinstance(g, ReplicaGroupingAttr):
            g.check(self.replication_factor)
        elif g is not None:
            object.__setattr__(self, "grouping", g := tuple(int(x) for x in g))
            if len(g) != self.replication_factor:
                raise ValueError(
                    f"the assignment {list(g)} has {len(g)} replicas, "
                    f"but the replication factor is {self.replication_factor}"
                )

    @classmethod
    def from_host_shape(
        cls,
        host_shape: Sequence[int],
        replication_factor: int,
        grouping: ReplicaGroupingAttr | Sequence[int] | None = None,
        shard_over: int = 1,
    ) -> ReplicaLayout:
        """The layout of a variable whose per-group values have `host_shape`: the value's
        shape is `host_shape` without its leading (groups) dim when there are several
        groups (`host_shape`'s inverse)."""
        g = grouping if grouping is None or isinstance(grouping, ReplicaGroupingAttr) else tuple(grouping)
        groups = cls((), replication_factor, g).num_groups
        shape = tuple(host_shape)
        return cls(shape[1:] if groups > 1 else shape, replication_factor, g, shard_over)

    # -- groups -------------------------------------------------------------------------
    @cached_property
    def assignment(self) -> tuple[int, ...]:
        """The group of each replica."""
        g = self.grouping
        if g is None:
            return (0,) * self.replication_factor
        if isinstance(g, ReplicaGroupingAttr):
            return tuple(g.assignment(self.replication_factor))
        return g

    def group_of(self, replica: int) -> int:
        g = self.grouping
        if g is None:
            return 0
        if isinstance(g, ReplicaGroupingAttr):
            return g.group_of(replica, self.replication_factor)
        return g[replica]

    @cached_property
    def num_groups(self) -> int:
        g = self.grouping
        if g is None:
            return 1
        if isinstance(g, ReplicaGroupingAttr):
            return g.num_groups(self.replication_factor)
        return max(g, default=0) + 1

    @cached_property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """Each group's replicas, ascending; groups in index order."""
        out: list[list[int]] = [[] for _ in range(self.num_groups)]
        for r, g in enumerate(self.assignment):
            out[g].append(r)
        return tuple(tuple(m) for m in out)

    @property
    def group_size(self) -> int:
        """Replicas per group (groups have equal sizes)."""
        return self.replication_factor // self.num_groups

    @property
    def host_shape(self) -> tuple[int, ...]:
        """The shape of the variable's values, one per group: `(num_groups, *shape)` with
        several groups, else `shape` (its initial value, its host copy)."""
        return group_host_shape(self.shape, self.num_groups)

    def group_value(self, values: np.ndarray, replica: int) -> np.ndarray:
        """The full value of `replica` from the per-group `values` (of `host_shape`)."""
        return values[self.group_of(replica)] if self.num_groups > 1 else values

    def every_replica(self, values: np.ndarray) -> np.ndarray:
        """Every replica's full value, `[replication_factor, *shape]`, from the per-group
        `values`."""
        return np.stack([self.group_value(values, r) for r in range(self.replication_factor)])

    def per_group(self, every: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
        """The per-group values (of `host_shape`) from every replica's full value: each
        group's is its first replica's (`every_replica`'s inverse)."""
        if self.num_groups == 1:
            return np.asarray(every[0])
        return np.stack([every[members[0]] for members in self.groups])

    # -- shards -------------------------------------------------------------------------
    @property
    def sharded(self) -> bool:
        return self.shard_over > 1

    @property
    def shard_size(self) -> int:
        """Elements per shard: the value's elements over `shard_over`, rounded up."""
        return shard_size(math.prod(self.shape), self.shard_over)

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """The shape each replica stores: its shard `(shard_size,)`, or the full shape."""
        return (self.shard_size,) if self.sharded else self.shape

    def fit_error(self) -> str | None:
        """Why `shard_over` does not fit the groups (None: it does)."""
        if self.shard_over < 1:
            return f"shard_over must be >= 1, got {self.shard_over}"
        if self.group_size % self.shard_over:
            return (
                f"shard_over {self.shard_over} must divide the replica group size {self.group_size} "
                f"(replication factor {self.replication_factor})"
            )
        return None

    @cached_property
    def shard_index(self) -> tuple[int, ...]:
        """The shard each replica holds: its position in its group modulo `shard_over`."""
        seen: dict[int, int] = {}
        out = []
        for g in self.assignment:
            p = seen.get(g, 0)
            seen[g] = p + 1
            out.append(p % self.shard_over)
        return tuple(out)

    def shard_group(self, replica: int) -> tuple[int, ...]:
        """The replicas whose shards, in order, make up `replica`'s value (itself alone
        when not sharded)."""
        members = self.groups[self.assignment[replica]]
        start = members.index(replica) // self.shard_over * self.shard_over
        return members[start : start + self.shard_over]

    def stored(self, full: np.ndarray, replica: int) -> np.ndarray:
        """What `replica` stores of the full value `full`: itself, or its shard (flattened,
        zero-padded)."""
        if not self.sharded:
            return full
        n = self.shard_size
        flat = np.zeros(n * self.shard_over, full.dtype)
        flat[: full.size] = full.reshape(-1)
        i = self.shard_index[replica]
        return flat[i * n : (i + 1) * n]

    def replica_values(self, values: np.ndarray) -> list[np.ndarray]:
        """What each replica stores (contiguous, `stored_shape`) from the per-group
        `values` (of `host_shape`)."""
        return [
            np.asarray(self.stored(self.group_value(values, r), r), order="C") for r in range(self.replication_factor)
        ]

    def full_values(self, stored: Sequence[np.ndarray] | np.ndarray) -> list[np.ndarray]:
        """The full value each replica sees (of `shape`) from what every replica stores:
        its shard group's shards joined (`replica_values`' inverse)."""
        if not self.sharded:
            return [np.asarray(s).reshape(self.shape) for s in stored]
        n = math.prod(self.shape)
        out = []
        for r in range(self.replication_factor):
            flat = np.concatenate([np.asarray(stored[m]).reshape(-1) for m in self.shard_group(r)])
            out.append(flat[:n].reshape(self.shape))
        return out
