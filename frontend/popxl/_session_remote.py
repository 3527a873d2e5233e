"""The Session's side of remote and replica-sharded variables (popxl/_session_remote.py).

A `popxl.Session` keeps a host copy of every variable. For a remote variable
(`popxl.remote_variable`, `remote_replica_sharded_variable`) or a resident sharded one
(`replica_sharded_variable`) that copy is the full, unsharded value, one per group
(`[num_groups, *shape]` with several groups; `[replication_factor, *shape]` with
retrieval_mode 'all_replicas'), while each replica holds its buffer entry or its shard:
`SessionRemote` reads the replicas' pieces back into full values and writes a full value
out to every local replica.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from popxl.graph import Graph
from popxl.tensor import Variable
from xl.dialects.ipu import RemoteVariableOp, ReplicaShardedVariableOp
from xl.dialects.replica_layout import ReplicaLayout
from xl.dialects.utils import dense_to_numpy

if TYPE_CHECKING:
    from xl.runtime.executable import Executable

__all__ = ["SessionRemote"]


class SessionRemote:
    """The remote and replica-sharded variables of the main graph `main` run by `exe`.

    `all_replicas(v)`: whether the host copy of `v` is every replica's value (the Session's
    rule); `initial_values()` gives each variable's first host copy."""

    def __init__(self, main: Graph, exe: Executable, all_replicas: Callable[[Variable], bool]) -> None:
        self._exe = exe
        self._all_replicas = all_replicas
        self._ops: dict[Variable, RemoteVariableOp | ReplicaShardedVariableOp] = {}
        for op in main._block.ops:
            if isinstance(op, RemoteVariableOp | ReplicaShardedVariableOp):
                v = main._tensor(op.results[0])
                assert isinstance(v, Variable)
                self._ops[v] = op

    def initial_values(self) -> dict[Variable, np.ndarray]:
        """The host copy of each variable before any run, in program order: its data (every
        replica's with 'all_replicas'), zeros when it has none."""
        out: dict[Variable, np.ndarray] = {}
        for v, op in self._ops.items():
            if v._memmap_arr is not None and not self._all_replicas(v):
                out[v] = v._memmap_arr  # the user's memory-mapped file is the host copy
                continue
            init = getattr(v, "_host_init", None)
            if init is None:
                init = (
                    dense_to_numpy(op.init) if op.init is not None
                    else np.zeros(v.shape_on_host, v.dtype._compute_np())
                )  # fmt: skip
            init = np.array(init)
            out[v] = op.layout().every_replica(init) if self._all_replicas(v) else init
        return out

    def layouts(self) -> dict[Variable, ReplicaLayout]:
        """Which replicas hold which value or shard of each variable."""
        return {v: op.layout() for v, op in self._ops.items()}

    def __contains__(self, v: object) -> bool:
        return v in self._ops

    def _where(self, op: Any) -> tuple[str, int | None]:
        if isinstance(op, RemoteVariableOp):
            return op.buffer_name, op.entry
        return op.var_name.data, None

    def _full_values(self, op: Any) -> list[np.ndarray]:
        """The full value each replica sees (its shard group's shards joined)."""
        exe = self._exe
        slot, entry = self._where(op)
        if exe.comm.num_instances > 1:  # other instances' replicas through the comm
            every = np.asarray(exe.gather_state(slot))
            if entry is not None:
                every = every[:, entry]
        else:  # only this variable's entry of each replica's buffer
            at = (entry, ...) if entry is not None else (...,)
            every = np.stack([exe.get_state(slot, r)[at] for r in exe.local_replicas])
        return op.layout().full_values(every)

    def read(self, v: Variable) -> np.ndarray:
        """The host value of `v` from the device."""
        op = self._ops[v]
        values = self._full_values(op)
        return np.stack(values) if self._all_replicas(v) else op.layout().per_group(values)

    def write(self, v: Variable, host: np.ndarray) -> None:
        """Write the host value of `v` (per group) into every local replica's entry or shard."""
        op = self._ops[v]
        exe = self._exe
        slot, entry = self._where(op)
        if slot not in exe.state:
            return
        host = np.asarray(host)
        layout = op.layout()
        if self._all_replicas(v):  # every replica's full value
            per_replica = [layout.stored(host[r], r) for r in range(host.shape[0])]
        else:
            per_replica = layout.replica_values(host)
        for r in exe.local_replicas:
            buf = exe.get_state(slot, r)
            dst = buf[entry, ...] if entry is not None else buf
            np.copyto(dst, per_replica[r].reshape(dst.shape))
