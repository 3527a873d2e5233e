"""`popdist`: how a program launched as several processes splits its replicas.

PopXL programs written for `poprun` ask `popdist` for the layout of the launch; here the
launcher is MPI's `mpirun` (the `[mpi]` extra installs mpi4py and MPICH, whose `mpirun` sits
in the virtual environment's `bin/`):

    POPDIST_NUM_TOTAL_REPLICAS=4 mpirun -n 2 python prog.py    # 2 instances, 2 replicas each

```python
import popdist, popxl

popdist.init()
ir = popxl.Ir(replication="popdist")     # replication_factor = popdist.getNumTotalReplicas()
ir.instance_replication_factor           # = popdist.getNumLocalReplicas()
```

- instances: the processes of the MPI launch (`MPI.COMM_WORLD`); without an MPI launcher,
  or without mpi4py installed and a one-process launch, one instance;
- total replicas: the environment variable `POPDIST_NUM_TOTAL_REPLICAS` (poprun's
  `--num-replicas`), default one replica per instance; it must be a multiple of the number of
  instances (`ValueError` otherwise);
- instance i runs the replicas `getReplicaIndexOffset() ..` `+ getNumLocalReplicas() - 1`
  (contiguous, as poprun).

mpi4py is imported only when the environment shows an MPI launch (the launcher's `PMI_SIZE`
/ `OMPI_COMM_WORLD_SIZE`). With several instances, `init()` registers the exit exchange of
`xl.runtime.mpi`, so a failing instance cannot leave the others waiting in a collective: an
instance that ends (normally or with an uncaught exception) takes part in one last exchange,
and an instance waiting in a collective, or reaching its next one, stops with
`CommMismatchError` ("instance 0 has stopped with an error"). Every instance ends normally,
its output complete (no `MPI_Abort`, which can cut off what the instances printed last).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xl.runtime.comm import Comm

__all__ = [
    "getDeviceId",
    "getInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "isPopdistEnvSet",
]

# Set by the MPI launchers (MPICH / Intel MPI hydra, Open MPI): the size of the launch.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
TOTAL_REPLICAS_VAR = "POPDIST_NUM_TOTAL_REPLICAS"
IPUS_PER_REPLICA_VAR = "POPDIST_NUM_IPUS_PER_REPLICA"

_instances: tuple[int, int] | None = None  # (number of instances, this instance's index)


def _launcher_size() -> int | None:
    """The number of processes the MPI launcher started (None: not launched by one)."""
    for var in _LAUNCHER_SIZE_VARS:
        value = os.environ.get(var)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"popdist: {var}={value!r} is not an integer") from None
    return None


def _instance_layout() -> tuple[int, int]:
    global _instances
    if _instances is None:
        size = _launcher_size()
        if size is None:
            _instances = (1, 0)
        else:
            try:
                from mpi4py import MPI
            except ImportError:
                if size > 1:
                    raise RuntimeError(
                        f"popdist: launched as {size} MPI processes, but mpi4py is not installed: "
                        "pip install 'xl-popxl[mpi]' (or pip install -e '.[mpi]' in a source checkout)"
                    ) from None
                _instances = (1, 0)
            else:
                comm = MPI.COMM_WORLD
                _instances = (comm.Get_size(), comm.Get_rank())
    return _instances


def _int_env(var: str, default: int) -> int:
    value = os.environ.get(var)
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"popdist: {var}={value!r} is not an integer") from None
    if n < 1:
        raise ValueError(f"popdist: {var}={value!r} must be a positive integer")
    return n


def isPopdistEnvSet() -> bool:
    """Whether the program was launched for popdist: by an MPI launcher, or with
    `POPDIST_NUM_TOTAL_REPLICAS` set."""
    return _launcher_size() is not None or TOTAL_REPLICAS_VAR in os.environ


def getNumInstances() -> int:
    """The number of processes of the launch (1 without an MPI launch)."""
    return _instance_layout()[0]


def getInstanceIndex() -> int:
    """This process's index among the instances, from 0."""
    return _instance_layout()[1]


def getNumTotalReplicas() -> int:
    """Replicas over all instances: `POPDIST_NUM_TOTAL_REPLICAS`, default one per instance."""
    instances = getNumInstances()
    total = _int_env(TOTAL_REPLICAS_VAR, instances)
    if total % instances:
        raise ValueError(
            f"popdist: {TOTAL_REPLICAS_VAR}={total} replicas cannot be split evenly over "
            f"{instances} instances (use a multiple of {instances})"
        )
    return total


def getNumLocalReplicas() -> int:
    """The replicas this instance runs: total / instances."""
    return getNumTotalReplicas() // getNumInstances()


def getReplicaIndexOffset() -> int:
    """The global index of this instance's first replica."""
    return getInstanceIndex() * getNumLocalReplicas()


def getNumIpusPerReplica() -> int:
    """IPUs per replica (`POPDIST_NUM_IPUS_PER_REPLICA`, default 1); informational here:
    a program's virtual IPUs come from its `popxl.ipu` annotations."""
    return _int_env(IPUS_PER_REPLICA_VAR, 1)


def getDeviceId() -> int:
    """The device of this instance: its index (there is no IPU device to choose)."""
    return getInstanceIndex()


def init() -> None:
    """Check the launch (instances, total replicas divisible by them) and, when there are
    several instances, register the exit exchange that stops the others when one ends
    (`xl.runtime.mpi.register_exit_exchange`). Idempotent."""
    if getNumInstances() > 1:
        from xl.runtime.mpi import import_mpi, register_exit_exchange

        register_exit_exchange(import_mpi())
    getNumTotalReplicas()  # raises for an indivisible total


def _instance_comm() -> Comm | None:
    """The comm `popxl.Session` runs an `Ir(replication="popdist")` with: an `MpiComm`
    (`xl.runtime.mpi`) when the launch has several instances, else None (one process runs
    every replica)."""
    init()
    if getNumInstances() <= 1:
        return None
    from xl.runtime.mpi import MpiComm

    return MpiComm()
