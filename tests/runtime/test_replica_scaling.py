"""How many replicas xl simulates, and what compiling and running them costs.

- A replica count above `xl.runtime.MAX_REPLICAS` (what one process can simulate: every
  replica runs here with its own buffers) is refused where it is given: `popxl.Ir`, the
  `replication_factor` setter, the runtime's compile, with a message naming the limit and why.
- The work per replica is constant: a `Session` (compile, weights written per replica and per
  group, a step with collectives, weights read back) and `xl-run --vars` with one value per
  replica do at most 16 times the work for 1024 replicas as for 64. Work is counted as the
  Python and C function calls made (`sys.setprofile`), a deterministic proxy for time: a
  step that is quadratic in the replicas (the replica-invariance check of `set_state`, the
  group of each replica found by building the whole assignment, the first replica of each
  group by `list.index`) makes 1024 replicas cost 40-60 times 64.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from xl.runtime import MAX_REPLICAS, PlanError
from xl.runtime.executable import compile_program
from xl.tools import run as xl_run

SMALL, LARGE = 64, 1024


@contextmanager
def counted_calls() -> Iterator[list[int]]:
    """Counts the function calls (Python and C) made on this thread inside the block."""
    count = [0]

    def profile(frame: object, event: str, arg: object) -> None:
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(None)


def replicated_program(r: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    """Variables of every kind a replica can hold (one value, one per group of two, one
    per replica, one updated only by an all-reduced value) and two all-reduces."""
    ir = popxl.Ir(replication=r)
    with ir.main_graph:
        w = popxl.variable(np.ones(4, np.float32), name="w")
        pairs = ir.replica_grouping(group_size=2)
        wg = popxl.variable(
            np.arange(pairs.num_groups * 4, dtype=np.float32).reshape(-1, 4), name="wg", replica_grouping=pairs
        )
        wa = popxl.variable(np.ones(4, np.float32), name="wa", retrieval_mode="all_replicas")
        xs = popxl.h2d_stream((4,), popxl.float32, "x")
        x = ops.host_load(xs)
        y = ops.collectives.replicated_all_reduce(x * w + wg + wa)
        ops.scaled_add_(w, ops.collectives.replicated_all_reduce(x), b=0.1)
        ops.var_updates.accumulate_(wa, x)
        ys = popxl.d2h_stream((4,), popxl.float32, "y")
        ops.host_store(ys, y)
    return ir, xs, ys


def session_work(r: int) -> Callable[[], None]:
    ir, xs, ys = replicated_program(r)
    x = np.arange(r * 4, dtype=np.float32).reshape(r, 4)

    def work() -> None:
        session = popxl.Session(ir, "ipu_model")
        with session:
            out = session.run({xs: x})
        np.testing.assert_array_equal(out[ys][0], out[ys][-1])  # all-reduced: the same everywhere
        assert session.get_tensor_data(ir.main_graph.variables[2]).shape == (r, 4)

    return work


def xl_run_work(r: int, tmp: Path) -> Callable[[], None]:
    ir, _, _ = replicated_program(r)
    prog, vars_, x, out = tmp / f"p{r}.mlir", tmp / f"v{r}.npz", tmp / f"x{r}.npy", tmp / f"o{r}.npz"
    prog.write_text(ir.to_mlir())
    np.save(x, np.ones((r, 4), np.float32))
    # one value per replica for every variable
    np.savez(vars_, wa=np.arange(r * 4, dtype=np.float32).reshape(r, 4), w=np.ones((r, 4), np.float32))

    def work() -> None:
        assert xl_run.main([str(prog), str(x), "--vars", str(vars_), "-o", str(out)]) == 0

    return work


@pytest.mark.parametrize("path", ["Session", "xl-run --vars"])
def test_work_per_replica_is_constant(path: str, tmp_path: Path) -> None:
    make = session_work if path == "Session" else lambda r: xl_run_work(r, tmp_path)
    make(4)()  # warm caches (parsed pass pipelines, compiled plan sources, imports)
    counts = {}
    for r in (SMALL, LARGE):
        work = make(r)
        with counted_calls() as n:
            work()
        counts[r] = n[0]
    assert counts[LARGE] <= LARGE // SMALL * counts[SMALL], (
        f"{path}: {counts[SMALL]} calls for {SMALL} replicas, {counts[LARGE]} for {LARGE} "
        f"({counts[LARGE] / counts[SMALL]:.1f} times; at most {LARGE // SMALL} when linear)"
    )


def test_replicas_share_one_compiled_source() -> None:
    """The replicas' plans are the same code (compiled once), each under its own file name."""
    ir, _, _ = replicated_program(4)
    session = popxl.Session(ir, "ipu_model")
    exe = session._exe  # noqa: SLF001
    assert len(set(exe.sources)) == 1
    assert len({rep.filename for rep in exe.replicas}) == 4
    codes = {rep.step.__code__.co_code for rep in exe.replicas}
    assert len(codes) == 1


# -- the limit ---------------------------------------------------------------------------------


def _limit_message(e: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(e.value)
    assert f"the {MAX_REPLICAS} replicas xl simulates in one process" in msg, msg
    assert "its own copy of every buffer" in msg and "replication='popdist'" in msg, msg
    return msg


def test_ir_refuses_more_replicas_than_simulated() -> None:
    with pytest.raises(ValueError) as e:
        popxl.Ir(replication=10**7)
    assert _limit_message(e).startswith("Ir: replication=10000000 is more than")
    with pytest.raises(ValueError) as e:
        popxl.Ir(replication=MAX_REPLICAS + 1)
    _limit_message(e)
    ir = popxl.Ir(replication=MAX_REPLICAS)  # the limit itself is accepted
    assert ir.replication_factor == MAX_REPLICAS
    with pytest.raises(ValueError) as e:
        ir.replication_factor = MAX_REPLICAS + 1
    assert _limit_message(e).startswith(f"replication_factor={MAX_REPLICAS + 1} is more than")
    assert ir.replication_factor == MAX_REPLICAS


def test_runtime_refuses_more_replicas_than_simulated() -> None:
    from xdsl.dialects.builtin import IntegerAttr, i64

    from xl.dialects import rt

    program = rt.ProgramOp(attributes={"replication_factor": IntegerAttr(MAX_REPLICAS + 1, i64)})
    with pytest.raises(PlanError) as e:
        compile_program(program)
    assert _limit_message(e).startswith(f"runtime: {MAX_REPLICAS + 1} replicas in one process are more than")
