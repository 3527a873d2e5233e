"""What the example programs show about a run besides their results: a profile, the memory
report, and every replica's losses (the options are the same in every example).

    python examples/mnist.py --profile trace.json              # 5 training steps after the first
    python examples/mnist.py --profile trace.json --profile-steps 20 --json
    python examples/mnist_pipeline.py --memory-report --liveness liveness.svg

- `--profile FILE.json`: the training session records `--profile-steps` (5) runs after the
  first one (a warm-up, as `torch.profiler.schedule(wait=1, active=5)`) inside
  `with session.profile():`, writes them as a Chrome trace (Perfetto, chrome://tracing: a row
  per virtual IPU, a slice per graph call and per op, with its input shapes and FLOPs) and
  prints torch.profiler's table (`key_averages().table(sort_by="self_cpu_time_total")`) by op
  type and by call site. The other runs use the session's unprofiled plan.
- `--memory-report`: the training program's memory per virtual IPU, in the program's terms
  (`session.memory_report()`: the tensors live at each IPU's peak, named as `print_schedule`
  names them, the largest buffers, the variables by module).
- `--liveness FILE.svg` (or `.png`, with matplotlib): the live bytes of each virtual IPU over
  the schedule.
- `--json`: the op tables and the memory report as JSON instead of text, each one JSON
  document on one line (`{"profile": ...}`, `{"memory": ...}`) among the program's output.

Under `mpirun` every instance profiles its own replicas; instance 0 prints and writes
FILE.json, instance k writes FILE.instance<k>.json. `replica_values` gathers an output of
every replica from every instance, so that a printed loss is the mean over all replicas,
the same figure in one process and under `mpirun`.
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

import popdist
import popxl

__all__ = ["StepProfiler", "add_arguments", "memory", "replica_values"]

PROFILE_WAIT = 1  # runs before the profiled ones (the first run warms caches up)


def add_arguments(ap: argparse.ArgumentParser, memory_report: bool = True) -> None:
    """Add `--profile`, `--profile-steps`, `--liveness`, `--json` and (unless the example has
    its own) `--memory-report` to an example's parser."""
    ap.add_argument(
        "--profile",
        metavar="FILE.json",
        help="profile training steps: write their Chrome trace here and print the time per op",
    )
    ap.add_argument(
        "--profile-steps", type=int, default=5, help="training steps profiled, after the first (default: 5)"
    )
    if memory_report:
        ap.add_argument("--memory-report", action="store_true", help="print the training program's memory report")
    ap.add_argument(
        "--liveness", metavar="FILE.svg", help="draw the training program's live bytes per IPU (.svg, or .png)"
    )
    ap.add_argument("--json", action="store_true", help="print the op tables and the memory report as JSON")


def check_arguments(ap: argparse.ArgumentParser, opts: argparse.Namespace) -> None:
    """Refuse bad values of the options `add_arguments` adds (before any work is done)."""
    if opts.profile_steps < 1:
        ap.error("--profile-steps must be at least 1")
    for option, path, suffixes in (("--profile", opts.profile, (".json",)), ("--liveness", opts.liveness, None)):
        if path is None:
            continue
        p = Path(path)
        if not p.parent.is_dir():
            ap.error(f"{option} {path}: folder {p.parent} does not exist")
        if suffixes is None and p.suffix.lower() not in (".svg", ".png"):
            ap.error(f"{option} {path}: the file name must end in .svg or .png")


def _printing() -> bool:
    return popdist.getInstanceIndex() == 0


def _instance_path(path: str) -> Path:
    """FILE for instance 0, FILE.instance<k>.json for instance k."""
    p = Path(path)
    k = popdist.getInstanceIndex()
    return p if k == 0 else p.with_name(f"{p.stem}.instance{k}{p.suffix}")


class StepProfiler:
    """`runner.run(inputs)` is `session.run(inputs)`; with `opts.profile` set, the runs
    `PROFILE_WAIT + 1` to `PROFILE_WAIT + opts.profile_steps` happen inside one
    `session.profile()` block. `close()` (or leaving the `with`) writes the trace and prints
    the tables."""

    def __init__(self, session: popxl.Session, opts: argparse.Namespace, what: str = "training") -> None:
        self.session = session
        self.path = getattr(opts, "profile", None)
        self.steps = getattr(opts, "profile_steps", 5)
        self.json = getattr(opts, "json", False)
        self.what = what
        self.runs = 0
        self._block = ExitStack()
        self._prof: Any = None
        self._done = False

    def run(self, inputs: Any) -> dict[Any, np.ndarray]:
        if self.path is not None and not self._done:
            if self.runs == PROFILE_WAIT:
                self._prof = self._block.enter_context(self.session.profile())
            elif self.runs == PROFILE_WAIT + self.steps:
                self._block.close()  # back to the unprofiled plan
        self.runs += 1
        return self.session.run(inputs)

    def close(self) -> None:
        """End the profile: write the trace, print the tables (once)."""
        if self._done or self.path is None:
            return
        self._done = True
        self._block.close()
        prof = self._prof
        if prof is None:
            if _printing():
                print(f"--profile: no {self.what} step profiled ({self.runs} run, the first is not profiled)")
            return
        path = _instance_path(self.path) if self.path is not None else None
        if path is not None:
            prof.export_chrome_trace(path)
        if not _printing():
            return
        steps = len(prof.steps())
        by_type, by_site = prof.key_averages("type"), prof.key_averages("site")
        if self.json:
            tables = {
                "steps": steps,
                "trace": str(path),
                "type": by_type.as_dict(),
                "site": by_site.as_dict(row_limit=15),
            }
            print(json.dumps({"profile": tables}))
            return
        print(f"profile of {steps} {self.what} step{'s' if steps != 1 else ''}: trace written to {path}")
        print(by_type.table(sort_by="self_cpu_time_total", row_limit=15))
        print(by_site.table(sort_by="self_cpu_time_total", row_limit=10))

    def __enter__(self) -> StepProfiler:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._done = True
            self._block.close()


def memory(session: popxl.Session, opts: argparse.Namespace, report: bool = True) -> None:
    """The `--memory-report` (unless `report=False`: the example prints its own) and
    `--liveness` of the session's program (by instance 0)."""
    want_report = report and getattr(opts, "memory_report", False)
    liveness = getattr(opts, "liveness", None)
    if not (want_report or liveness) or not _printing():
        return
    mem = session.memory_report(print_table=False)
    if want_report:
        print(json.dumps({"memory": mem.as_dict()}) if getattr(opts, "json", False) else mem.text())
    if liveness:
        print(f"liveness written to {mem.write_liveness(liveness)}")


_comm: Any = None


def replica_values(session: popxl.Session, local: np.ndarray) -> np.ndarray:
    """Every replica's value of an output, `[num_host_transfers, replication_factor, *shape]`
    in replica order: `local` (this instance's replicas, as `session.run` returns it, size-1
    dims dropped), joined with the other instances' under `mpirun` (one exchange of the
    session's communicator kind: every instance must call it)."""
    global _comm
    ir = session.ir
    n, reps, mine = ir.num_host_transfers, ir.replication_factor, ir.instance_replication_factor
    shape = np.shape(local)[(n > 1) + (mine > 1) :]
    arr = np.asarray(local).reshape(n, mine, *shape)
    if mine == reps:
        return arr
    if _comm is None:
        from xl.runtime.mpi import MpiComm

        _comm = MpiComm()
    parts = _comm.gather([np.ascontiguousarray(arr)])  # one per instance, in instance order
    return np.concatenate(parts, axis=1)
