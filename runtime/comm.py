"""The communicator replica collectives use: which replicas run here, and how to see the others'.

A program with `replication_factor = R` runs R replicas. One process may run all of them
(`LocalComm`, the default) or only some (`local_replicas`, e.g. one MPI instance of several,
`xl.runtime.mpi`). A collective kernel gathers the contributions of every replica of its
groups: the local replicas' arrays directly, the remote ones through `Comm.gather`. Every
instance then computes the same reductions in the same order (ascending replica index), so a
multi-process run gives bit for bit the numbers of a simulated one.

```python
from xl.runtime.comm import LocalComm

comm = LocalComm()
assert comm.local_replicas(4) == range(0, 4)
assert comm.gather([a0, a1, a2, a3]) == [a0, a1, a2, a3]   # every replica's array, global order
```

An implementation for several processes splits the replicas evenly (`split_replicas`) and
implements `gather` as an all-gather of the local lists (instance order = replica order).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Comm", "LocalComm", "split_replicas"]


@runtime_checkable
class Comm(Protocol):
    """Which global replicas run in this process, and every replica's array of a collective."""

    num_instances: int
    instance_index: int

    def local_replicas(self, replication_factor: int) -> range:
        """The global indices of the replicas this instance runs (contiguous, ascending)."""
        ...

    def gather(self, local: list[np.ndarray]) -> list[np.ndarray]:
        """Every replica's array, in global replica order, given this instance's local
        replicas' arrays (in `local_replicas` order). Every instance must call it for the
        same collective in the same order; the returned local entries may be the given
        arrays themselves (read them, never write them)."""
        ...


def split_replicas(replication_factor: int, num_instances: int, instance_index: int) -> range:
    """The replicas instance `instance_index` of `num_instances` runs: an even, contiguous split.

    Raises `ValueError` when `replication_factor` is not a multiple of `num_instances` (as
    poprun requires)."""
    if num_instances < 1 or not 0 <= instance_index < num_instances:
        raise ValueError(f"instance {instance_index} of {num_instances} instances does not exist")
    if replication_factor % num_instances:
        raise ValueError(
            f"replication_factor {replication_factor} cannot be split evenly over {num_instances} instances"
        )
    per = replication_factor // num_instances
    return range(instance_index * per, (instance_index + 1) * per)


class LocalComm:
    """One process runs every replica; `gather` returns its argument."""

    num_instances = 1
    instance_index = 0

    def local_replicas(self, replication_factor: int) -> range:
        return range(replication_factor)

    def gather(self, local: list[np.ndarray]) -> list[np.ndarray]:
        return local

    def __repr__(self) -> str:
        return "LocalComm()"
