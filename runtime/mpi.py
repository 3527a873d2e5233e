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
`mpirun`) is imported only when an `MpiComm` is made. `popxl.Session` runs an
`Ir(replication="popdist")` with an `MpiComm` when the launch has several instances
(`popdist.getNumInstances() > 1`), else in one process (`LocalComm`).

Every instance must reach the same exchanges in the same order. Each exchange first
all-gathers a small header (a sequence number, the count, size, shape and dtype of the
arrays), so instances that disagree (an instance-dependent branch around a collective, different input shapes) get a
`CommMismatchError` naming both sides on every instance instead of wrong numbers; at exit
an instance makes one last header exchange (registered by the first `MpiComm` on
`MPI.COMM_WORLD`, or by `popdist.init()`), so an instance left waiting in an exchange the
others never make fails the same way instead of hanging, whether the others finished or
stopped with an uncaught exception ("instance 1 has stopped with an error"). After a
mismatch the communicator is spent: a later exchange raises at once, and the exit exchange
is skipped (every instance saw the mismatch in the same exchange, so none waits for it).

No instance calls `MPI_Abort` for these errors: every instance ends normally and its output
(its traceback, its printed lines) reaches `mpirun`'s output in full. MPICH's launcher can
drop what an instance wrote just before an abort, and an abort kills the other instances
before they report. The job is aborted only when an instance ends inside an exchange (an
exception between its header and its data, e.g. an interrupt or an MPI error): the others
may wait in its data exchange, which no header exchange can answer; the instance first
flushes its output and waits (a few seconds at most) until the launcher has read it.
"""

from __future__ import annotations

import atexit
import os
import stat
import struct
import sys
import time
import zlib
from typing import Any, NoReturn

import numpy as np

from xl.runtime.comm import split_replicas

__all__ = ["CommMismatchError", "MpiComm", "import_mpi", "register_exit_exchange"]

# the header of every exchange: sequence number, arrays, bytes per array, shape/dtype fingerprint
_HEADER = 4
# the header an instance sends when its program ends (`_say_goodbye`): normally, or after
# an uncaught exception
_GOODBYE = np.full(_HEADER, -1, dtype=np.int64)
_FAILED = np.full(_HEADER, -2, dtype=np.int64)
_goodbye_registered = False
# set when an exchange on MPI.COMM_WORLD mismatched: the exit exchange is skipped
_world_diverged = False
# the exchange an instance is inside of (between its header and the end of its data), on
# any communicator: ending there, it aborts the job (`_say_goodbye`)
_inside: str | None = None
# how long an aborting instance waits for the launcher to read its output (`abort_job`)
DRAIN_TIMEOUT_S = 10.0


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
        self._world = self.comm == self._MPI.COMM_WORLD
        if self._world:
            register_exit_exchange(self._MPI)

    def local_replicas(self, replication_factor: int) -> range:
        return split_replicas(replication_factor, self.num_instances, self.instance_index)

    def gather(self, local: list[np.ndarray]) -> list[np.ndarray]:
        """Every replica's array in global order: this instance's `local` arrays (all of one
        shape and dtype) and those of the other instances, which pass as many arrays."""
        if not local:
            raise ValueError("MpiComm.gather: no local arrays (every instance runs at least one replica)")
        first = np.asarray(local[0])
        shape, dtype = first.shape, first.dtype
        for a in local[1:]:
            if a.shape != shape or a.dtype != dtype:
                raise ValueError(f"MpiComm.gather: local arrays differ: {shape} {dtype} and {a.shape} {a.dtype}")
        n, nbytes = len(local), first.nbytes
        if n == 1 and first.flags.c_contiguous:
            send = first  # sent as it is: no copy
        else:
            send = np.empty((n, *shape), dtype=dtype)
            for i, a in enumerate(local):
                send[i] = a
        recv = np.empty((self.num_instances * n, *shape), dtype=dtype)
        MPI = self._MPI
        # the headers first: instances that disagree stop here, before any data moves
        self._begin(n, nbytes, shape, dtype)
        self.comm.Allgather([send.reshape(-1).view(np.uint8), MPI.BYTE], [recv.reshape(-1).view(np.uint8), MPI.BYTE])
        global _inside
        _inside = None
        return list(recv)

    def _begin(self, n: int, nbytes: int, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """The header exchange starting the next exchange (sequence number, arrays, bytes per
        array, shape / dtype fingerprint; `n = 0` for a barrier): `CommMismatchError` when the
        instances disagree or the communicator is spent. From here until the exchange ends (its
        data exchanged, or a mismatch raised) this instance is inside it: ending there aborts
        the job."""
        if self._diverged is not None:
            raise CommMismatchError(f"no exchange after the instances diverged (earlier: {self._diverged})")
        global _inside
        seq = self._exchanges
        self._exchanges += 1
        _inside = f"exchange #{seq}"
        header = np.array([seq, n, nbytes, _fingerprint(shape, dtype) if n else 0], dtype=np.int64)
        headers = np.empty((self.num_instances, _HEADER), dtype=np.int64)
        self.comm.Allgather([header, self._MPI.INT64_T], [headers, self._MPI.INT64_T])
        if not (headers == header).all():
            self._mismatch(headers, shape, dtype)

    def _mismatch(self, headers: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
        me = self.instance_index
        other = next(i for i in range(self.num_instances) if not (headers[i] == headers[me]).all())

        def side(i: int) -> str:
            if (headers[i] == _GOODBYE).all():
                return f"instance {i} has finished its program"
            if (headers[i] == _FAILED).all():
                return f"instance {i} has stopped with an error"
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
        global _world_diverged, _inside
        _inside = None  # every instance saw the mismatch: none waits in this exchange
        if self._world:
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
        self._begin(0, 0, (), np.dtype(np.float32))
        global _inside
        _inside = None

    def __repr__(self) -> str:
        return f"MpiComm(instance {self.instance_index} of {self.num_instances})"


def register_exit_exchange(MPI: Any) -> None:
    """Make this instance's last act one header exchange on `MPI.COMM_WORLD` (`_say_goodbye`),
    when the launch has several instances. Idempotent; `MpiComm` on `MPI.COMM_WORLD` and
    `popdist.init()` call it."""
    global _goodbye_registered
    if not _goodbye_registered and MPI.COMM_WORLD.Get_size() > 1:
        # a Python atexit function: it runs before mpi4py finalises MPI (mpi4py's own
        # finalisation runs after every atexit function)
        _goodbye_registered = True
        atexit.register(_say_goodbye, MPI)


def _say_goodbye(MPI: Any) -> None:
    """At exit: one last header exchange, so an instance still waiting in a collective (one
    the others never reach) gets this goodbye as the other side of its header exchange and
    fails with `CommMismatchError` instead of waiting forever. Every exchange starts with a
    header exchange, so the waiting instance always receives it; this instance then notes
    it and ends normally (aborting here could stop the waiting instance before it reports).
    The goodbye says whether the program ended with an uncaught exception.
    Skipped after a mismatch on `MPI.COMM_WORLD`: every instance saw it, none waits.
    Ending inside an exchange, the job is aborted (`abort_job`): the others may wait in its
    data exchange, which a header exchange cannot answer."""
    comm = MPI.COMM_WORLD
    if _inside is not None:
        print(
            f"xl.runtime.mpi: instance {comm.Get_rank()} stopped inside {_inside} (the other instances "
            "may wait in it); aborting the job",
            file=sys.stderr,
            flush=True,
        )
        abort_job(MPI)
    if _world_diverged:
        return
    # set by the interpreter when it printed an uncaught exception
    failed = getattr(sys, "last_value", None) is not None
    headers = np.empty((comm.Get_size(), _HEADER), dtype=np.int64)
    comm.Allgather([_FAILED if failed else _GOODBYE, MPI.INT64_T], [headers, MPI.INT64_T])
    ended = (headers == _GOODBYE).all(axis=1) | (headers == _FAILED).all(axis=1)
    if not ended.all():
        waiting = [i for i in range(len(headers)) if not ended[i]]
        print(
            f"xl.runtime.mpi: instance {comm.Get_rank()} has {'stopped' if failed else 'finished'}, but "
            f"instance(s) {waiting} still wait in a collective exchange (they stop with CommMismatchError)",
            file=sys.stderr,
            flush=True,
        )


def abort_job(MPI: Any) -> NoReturn:
    """Abort every instance (`MPI_Abort`), this one's output first delivered: Python's
    buffers flushed, then (stdout and stderr being pipes to the launcher, as under `mpirun`)
    a wait until the launcher has read them, at most `DRAIN_TIMEOUT_S`. The launcher can drop
    what is still in the pipe when the abort arrives. Does not return."""
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None:
                f.flush()
        except (OSError, ValueError):
            pass  # closed or broken: nothing more to deliver
    wait_until_read((1, 2), DRAIN_TIMEOUT_S)
    try:
        MPI.COMM_WORLD.Abort(1)
    finally:
        # MPICH's MPI_Abort returns once the launcher has the request: stop here, no more MPI
        os._exit(1)


def unread_bytes(fd: int) -> int | None:
    """The bytes written to pipe `fd` (either end) that its reader has not read yet; None
    when `fd` is not a pipe (a file or a terminal keeps what was written)."""
    import fcntl  # (POSIX only: imported where used)
    import termios

    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return None


def wait_until_read(fds: tuple[int, ...], timeout: float) -> bool:
    """Wait until the readers of the pipes `fds` have read everything written to them (True),
    or `timeout` seconds (False: a reader that does not read, e.g. a stopped launcher)."""
    deadline = time.monotonic() + timeout
    while any(unread_bytes(fd) for fd in fds):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True
