"""Named replica groupings and groupings restricted to one instance (popxl_addons/named_replica_grouping.py).

A `NamedReplicaGrouping` is a `DotTree` of `popxl.ReplicaGrouping`s keyed like the variables
they describe (`NamedVariableFactories.replica_groupings`). The helpers restrict a grouping to
the replicas one process (instance) runs, which is where replica-sharded remote buffers
live:

```python
ir = popxl.Ir(replication=8)              # one instance runs all 8 replicas
with ir.main_graph:
    rg = ir.replica_grouping(stride=2)     # 2 groups of 4
    is_cross_instance(rg)                  # False: 2 * 4 <= 8
    get_instance_replica_grouping()        # ReplicaGrouping(num_replicas=8, stride=1, group_size=8)
```
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import popxl
from popxl_addons.dot_tree import DotTree

__all__ = [
    "NamedReplicaGrouping",
    "fill_none_group",
    "get_instance_replica_grouping",
    "is_cross_instance",
    "get_ild_size_from_popdist",
    "get_ild_replica_grouping",
    "is_cross_ild",
]


def fill_none_group(rg: Any | None, none_value: Any) -> Any:
    """`rg`, or `none_value` when `rg` is None."""
    return none_value if rg is None else rg


class NamedReplicaGrouping(DotTree[Any]):
    """A `DotTree` of `popxl.ReplicaGrouping`s."""

    @classmethod
    def build_groups(cls, names: Iterable[str], value: Any | None = None) -> NamedReplicaGrouping:
        """The same grouping `value` (default: all replicas of the current Ir) under every name."""
        if value is None:
            value = popxl.gcg().ir.replica_grouping()
        names = list(names)
        return cls.pack(names, [value] * len(names))


def _ir_and_group(replica_grouping: popxl.ReplicaGrouping | None, what: str) -> tuple[popxl.Ir, popxl.ReplicaGrouping]:
    ir = popxl.gcg().ir
    if replica_grouping is None:
        replica_grouping = ir.replica_grouping()
    if not isinstance(replica_grouping, popxl.ReplicaGrouping):
        raise TypeError(f"{what}: expected a popxl.ReplicaGrouping, got {type(replica_grouping).__name__}")
    return ir, replica_grouping


def is_cross_instance(replica_grouping: popxl.ReplicaGrouping | None) -> bool:
    """Whether the groups of `replica_grouping` span more replicas than one instance runs
    (`group_size * stride > ir.instance_replication_factor`)."""
    ir, rg = _ir_and_group(replica_grouping, "is_cross_instance")
    return rg.group_size * rg.stride > ir.instance_replication_factor


def get_instance_replica_grouping(replica_grouping: popxl.ReplicaGrouping | None = None) -> popxl.ReplicaGrouping:
    """`replica_grouping` (default: all replicas) restricted to one instance: the same
    stride, only the replicas of the instance replication factor. A grouping inside one
    instance is returned as it is."""
    ir, rg = _ir_and_group(replica_grouping, "get_instance_replica_grouping")
    irf = ir.instance_replication_factor
    if rg.stride > irf:
        raise ValueError(
            f"get_instance_replica_grouping: the replica grouping's stride ({rg.stride}) must be "
            f"at most the instance replication factor ({irf})"
        )
    if is_cross_instance(rg):
        return ir.replica_grouping(stride=rg.stride, group_size=irf // rg.stride)
    return rg


def get_ild_size_from_popdist() -> int:
    """The IPU link domain size: `ipuLinkDomainSize` of `POPLAR_TARGET_OPTIONS` (JSON) when
    set, else `min(replication_factor, 64)`."""
    try:
        opts = json.loads(os.environ.get("POPLAR_TARGET_OPTIONS", "{}") or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f"POPLAR_TARGET_OPTIONS is not valid JSON: {e}") from None
    size = opts.get("ipuLinkDomainSize")
    if size is None:
        return min(popxl.gcg().ir.replication_factor, 64)
    return int(size)


def is_cross_ild(replica_grouping: popxl.ReplicaGrouping | None) -> bool:
    """Whether the groups of `replica_grouping` span more than one IPU link domain."""
    _, rg = _ir_and_group(replica_grouping, "is_cross_ild")
    return rg.group_size * rg.stride > get_ild_size_from_popdist()


def get_ild_replica_grouping(replica_grouping: popxl.ReplicaGrouping | None = None) -> popxl.ReplicaGrouping:
    """`replica_grouping` (default: all replicas) restricted to one IPU link domain."""
    ir, rg = _ir_and_group(replica_grouping, "get_ild_replica_grouping")
    ild = get_ild_size_from_popdist()
    if rg.stride > ild:
        raise ValueError(
            f"get_ild_replica_grouping: the replica grouping's stride ({rg.stride}) must be at "
            f"most the IPU link domain size ({ild})"
        )
    if is_cross_ild(rg):
        return ir.replica_grouping(stride=rg.stride, group_size=ild // rg.stride)
    return rg
