"""Launching `mpirun -n P python ...` from the tests, with a watchdog.

`MPIRUN` is the environment's `mpirun` (the `mpich` wheel of the `[mpi]` extra puts it next to
python), else the one on PATH; `needs_mpi` skips a test without it or without mpi4py. A launch
runs in its own process group with `MPIEXEC_TIMEOUT` set (hydra ends the job after it), and
`finish` kills the whole group if it still runs `TIMEOUT + 30` s later, so a failing instance
can never hang the test suite.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def _mpirun() -> str | None:
    here = Path(sys.executable).parent / "mpirun"
    if here.exists():
        return str(here)
    return shutil.which("mpirun")


def _have_mpi4py() -> bool:
    try:
        import mpi4py  # noqa: F401  (the package only: MPI is not initialised)
    except ImportError:
        return False
    return True


MPIRUN = _mpirun()
HAVE_MPI = _have_mpi4py() and MPIRUN is not None
SKIP_REASON = "needs mpi4py and mpirun: pip install -e '.[mpi]'"
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason=SKIP_REASON)
TIMEOUT = 180  # s, for one mpirun (seconds normally)

# the variables of an enclosing MPI launch: a test's mpirun must not inherit them
_LAUNCH_VARS = ("PMI_SIZE", "PMI_RANK", "PMI_FD", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")


def launch(args: list[str], n: int | None = 2, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `mpirun -n n python *args`, or plain `python *args` for `n=None` (output: stdout
    and stderr together). One BLAS thread per process either way: the numbers of a matmul
    may depend on the thread count."""
    full = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    full.pop("POPDIST_NUM_TOTAL_REPLICAS", None)
    full["MPIEXEC_TIMEOUT"] = str(TIMEOUT)
    full["OPENBLAS_NUM_THREADS"] = "1"
    full.update(env or {})
    cmd = [sys.executable, *args]
    if n is not None:
        assert MPIRUN is not None
        cmd = [MPIRUN, "-n", str(n), *cmd]
    return subprocess.Popen(
        cmd, env=full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip


def finish(p: subprocess.Popen) -> tuple[int, str]:
    """Wait for a launch: (exit code, output); kills the launch after the watchdog time."""
    try:
        out, _ = p.communicate(timeout=TIMEOUT + 30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"mpirun did not finish in {TIMEOUT + 30} s:\n{out}")
    return p.returncode, out
