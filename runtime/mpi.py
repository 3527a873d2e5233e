"""Replicas as MPI processes: `MpiComm`, the communicator of a program run by `mpirun -n P`.

A program with `replication_factor = R` launched as P processes (instances) runs R / P
replicas in each (instance i runs the replicas `i*R/P .. (i+1)*R/P - 1`, `split_replicas`).
A collective gathers every replica's contribution in global replica order with one MPI
all-gather, then each instance computes the reduction itself, in the same order as a
single process simulating all R replicas: the numbers are bit for bit the simulated ones.

```python
from xl.compiler import compile_module
from xl.runtime.mpi import MpiComm

comm = MpiComm()                  # MPI.COMM_WORLD: P instances, this one's index
exe = compile_module(module, comm=comm)   # builds only this instance's replicas
exe.run(inputs)                   # inputs: [num_host_transfers, R / P, *shape]
```

mpi4py (the `[mpi]` extra: `pip install 'xl-popxl[mpi]'`, which also installs MPICH and its
`mpirun`) is imported only when an `MpiComm` is made. `instance_comm()` is what
`popxl.Session` uses for an `Ir(replication="popdist")`: an `MpiComm` when the launch has
several instances (`popdist.getNumInstances() > 1`), else None (one process, `LocalComm`).

Every instance must reach the same exchanges in the same order. Each exchange first
all-gathers a small header (a sequence number, the count, size, shape and dtype of the
arrays), so instances that disagree (an instance-dependent branch around a collective, different input shapes) get a
`CommMismatchError` naming both sides on every instance instead of wrong numbers; at exit
an instance makes one last header exchange, so an instance left waiting in an exchange the
others never make fails the same way instead of hanging. After a mismatch the communicator
is spent: a later exchange raises at once, and the exit exchange is skipped (every instance
saw the mismatch in the same exchange, so none waits for it).
"""

from __future__ import annotations

import atexit
import sys
import zlib
from typing import Any

import numpy as np

from xl.runtime.comm import Comm, split_replicas

__all__ = ["CommMismatchError", "MpiComm", "instance_comm", "import_mpi"]

# the header of every exchange: sequence number, arrays, bytes per array, shape/dtype fingerprint
_HEADER = 4
# the header an instance sends when its program ends (`_say_goodbye`)
_GOODBYE = np.full(_HEADER, -1, dtype=np.int64)
_goodbye_registered = False
# set when an exchange on MPI.COMM_WORLD mismatched: the exit exchange is skipped
_world_diverged = False


class CommMismatchError(RuntimeError):
    """The instances of a multi-process run reached different exchanges (a collective under
    an instance-dependent condition, or arrays of different shapes)."""


def import_mpi() -> Any:
    """`mpi4py.MPI`, or an ImportError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(
            "running replicas as several processes needs mpi4py and an MPI implementation: "
            "pip install 'xl-popxl[mpi]' (or, in a source checkout, pip install -e '.[mpi]')"
        ) from e
    return MPI


def _fingerprint(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return zlib.crc32(f"{shape}|{dtype.str}|{dtype.descr}".encode())


class MpiComm:
    """`xl.runtime.comm.Comm` over an mpi4py communicator (default `MPI.COMM_WORLD`): this
    process is instance `rank` of `size`; `gather` is one `Allgather` of the local arrays."""

    def __init__(self, comm: Any = None) -> None:
        self._MPI = import_mpi()
        self.comm = self._MPI.COMM_WORLD if comm is None else comm
        self.num_instances: int = self.comm.Get_size()
        self.instance_index: int = self.comm.Get_rank()
        self._exchanges = 0
        self._diverged: str | None = None  # the mismatch that spent this communicator
        global _goodbye_registered
        if not _goodbye_registered and self.num_instances > 1 and self.comm == self._MPI.COMM_WORLD:
            # at exit, before mpi4py finalises MPI (atexit runs in reverse order)
            _goodbye_registered = True
            atexit.register(_say_goodbye, self._MPI)

    def local_replicas(self, replication_factor: int) -> range:
        return split_replicas(replication_factor, self.num_instances, self.instance_index)

    def gather(self, local: list[np.ndarray]) -> list[np.ndarray]:
        """Every replica's array in global order: this instance's `local` arrays (all of one
        shape and dtype) and those of the other instances, which pass as many arrays."""
        if not local:
            raise ValueError("MpiComm.gather: no local arrays (every instance runs at least one replica)")
        if self._diverged is not None:
            raise CommMismatchError(f"no exchange after the instances diverged (earlier: {self._diverged})")
        first = np.asarray(local[0])
        shape, dtype = first.shape, first.dtype
        for a in local[1:]:
            if a.shape != shape or a.dtype != dtype:
                raise ValueError(f"MpiComm.gather: local arrays differ: {shape} {dtype} and {a.shape} {a.dtype}")
        n, nbytes = len(local), first.nbytes
        seq = self._exchanges
        self._exchanges += 1
        MPI = self._MPI
        # the headers first: instances that disagree stop here, before any data moves
        header = np.array([seq, n, nbytes, _fingerprint(shape, dtype)], dtype=np.int64)
        headers = np.empty((self.num_instances, _HEADER), dtype=np.int64)
        self.comm.Allgather([header, MPI.INT64_T], [headers, MPI.INT64_T])
        if not (headers == header).all():
            self._mismatch(headers, shape, dtype)
        if n == 1 and first.flags.c_contiguous:
            send = first  # sent as it is: no copy
        else:
            send = np.empty((n, *shape), dtype=dtype)
            for i, a in enumerate(local):
                send[i] = a
        recv = np.empty((self.num_instances * n, *shape), dtype=dtype)
        self.comm.Allgather([send.reshape(-1).view(np.uint8), MPI.BYTE], [recv.reshape(-1).view(np.uint8), MPI.BYTE])
        return list(recv)

    def _mismatch(self, headers: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
        me = self.instance_index
        other = next(i for i in range(self.num_instances) if not (headers[i] == headers[me]).all())

        def side(i: int) -> str:
            if (headers[i] == _GOODBYE).all():
                return f"instance {i} has finished its program"
            seq, n, nbytes, fp = (int(x) for x in headers[i])
            if n == 0:
                return f"instance {i} is at exchange #{seq}, a barrier"
            what = f"{n} array(s) of {nbytes} bytes"
            if i == me:
                what += f" ({dtype} {shape})"
            elif fp != headers[me][3]:
                what += " (another shape or dtype)"
            return f"instance {i} is at exchange #{seq} with {what}"

        self._diverged = f"{side(me)}, but {side(other)}"
        if self.comm == self._MPI.COMM_WORLD:
            global _world_diverged
            _world_diverged = True
        raise CommMismatchError(
            f"the instances diverged: {self._diverged}; every instance must run "
            "the same collectives in the same order on arrays of the same shape (is a "
            "collective under a condition that differs between instances?)"
        )

    def barrier(self) -> None:
        """Wait for every instance: an exchange of headers only (no arrays), so an instance
        that meets another exchange, or an instance that has finished, is reported as in
        `gather`."""
        if self._diverged is not None:
            raise CommMismatchError(f"no barrier after the instances diverged (earlier: {self._diverged})")
        seq = self._exchanges
        self._exchanges += 1
        header = np.array([seq, 0, 0, 0], dtype=np.int64)
        headers = np.empty((self.num_instances, _HEADER), dtype=np.int64)
        self.comm.Allgather([header, self._MPI.INT64_T], [headers, self._MPI.INT64_T])
        if not (headers == header).all():
            self._mismatch(headers, (), np.dtype(np.float32))

    def __repr__(self) -> str:
        return f"MpiComm(instance {self.instance_index} of {self.num_instances})"


def _say_goodbye(MPI: Any) -> None:
    """At exit: one last header exchange, so an instance still waiting in a collective (one
    the others never reach) gets this goodbye as the other side of its header exchange and
    fails with `CommMismatchError` instead of waiting forever. Every exchange starts with a
    header exchange, so the waiting instance always receives it; this instance then notes
    it and ends normally (aborting here could stop the waiting instance before it reports).
    Skipped after a mismatch on `MPI.COMM_WORLD`: every instance saw it, none waits."""
    if _world_diverged:
        return
    comm = MPI.COMM_WORLD
    headers = np.empty((comm.Get_size(), _HEADER), dtype=np.int64)
    comm.Allgather([_GOODBYE, MPI.INT64_T], [headers, MPI.INT64_T])
    if not (headers == _GOODBYE).all():
        waiting = [i for i in range(len(headers)) if not (headers[i] == _GOODBYE).all()]
        print(
            f"xl.runtime.mpi: instance {comm.Get_rank()} has finished, but instance(s) {waiting} "
            "still wait in a collective exchange (they stop with CommMismatchError)",
            file=sys.stderr,
            flush=True,
        )


def instance_comm() -> Comm | None:
    """The comm of a `popdist` program: an `MpiComm` when the launch has several instances
    (`popdist.getNumInstances() > 1`), else None (one process runs every replica)."""
    import popdist

    popdist.init()
    if popdist.getNumInstances() <= 1:
        return None
    return MpiComm()
