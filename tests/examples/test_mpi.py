"""Replicas as MPI processes: `mpirun -n 2` runs `tests/helpers/mpi_program.py` as two instances of 2
replicas each (`POPDIST_NUM_TOTAL_REPLICAS=4`); every collective against NumPy, the same
numbers as the simulated 4-replica run bit for bit, training equal to one replica on the
whole batch, popdist values per instance, and clear errors (indivisible replica count,
diverged instances) that stop every instance. Skipped without mpi4py / mpirun (the `[mpi]`
extra). `popdist` in one process needs no MPI."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1] / "helpers"
sys.path.insert(0, str(HERE))

import mpi_program as prog  # noqa: E402
from mpi_launch import HAVE_MPI, SKIP_REASON, finish, launch, needs_mpi  # noqa: E402

import popdist  # noqa: E402
import popxl  # noqa: E402
from tests.helpers.narrow import narrow  # noqa: E402


@pytest.fixture(scope="module")
def mpi_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The three launches, started together: the full program, an indivisible replica count,
    instances that diverge."""
    if not HAVE_MPI:
        pytest.skip(SKIP_REASON)
    out = tmp_path_factory.mktemp("mpi")
    script = str(HERE / "mpi_program.py")
    procs = {
        "all": launch([script, str(out)], env={"POPDIST_NUM_TOTAL_REPLICAS": "4"}),
        "indivisible": launch([script, str(out), "indivisible"], env={"POPDIST_NUM_TOTAL_REPLICAS": "3"}),
        "diverge": launch([script, str(out), "diverge"]),
        "early_exit": launch([script, str(out), "early_exit"]),
        "early_exit_caught": launch([script, str(out), "early_exit_caught"]),
        "barrier": launch([script, str(out), "barrier"]),
        # Python's own buffering of stdout (PYTHONUNBUFFERED unset): lines printed before
        # the error must still come out
        "failed": launch([script, str(out), "failed"], env={"PYTHONUNBUFFERED": ""}),
        "interrupted": launch([script, str(out), "interrupted"]),
    }
    runs: dict[str, Any] = {name: finish(p) for name, p in procs.items()}
    code, log = runs["all"]
    assert code == 0, log
    runs["instances"] = [dict(np.load(out / f"instance{i}.npz")) for i in range(2)]
    return runs


@pytest.fixture(scope="module")
def simulated() -> dict:
    """The same programs with 4 replicas in this process."""
    return {"collective": prog.run_collectives(4), "train": prog.run_training(4)}


# ------------------------------------------------------------------------------------
# NumPy references of the collectives program
# ------------------------------------------------------------------------------------


def _groups(assignment: list[int]) -> list[list[int]]:
    return [[r for r, a in enumerate(assignment) if a == g] for g in range(max(assignment) + 1)]


EVERY, STRIDED, PAIRS, EXPLICIT = [0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 1], [0, 1, 1, 0]


def numpy_collectives() -> dict[str, np.ndarray]:
    x, b = prog.collective_inputs()
    x64 = x.astype(np.float64)

    def per_group(assignment: list[int], f) -> np.ndarray:
        out: dict[int, np.ndarray] = {}
        for members in _groups(assignment):
            for i, r in enumerate(members):
                out[r] = f(members, i, r)
        return np.stack([out[r] for r in range(4)])  # every replica is in a group

    flat_sum = x64.reshape(4, -1).sum(axis=0)
    return {
        "add_all": per_group(EVERY, lambda m, i, r: x64[m].sum(0)),
        "mean_strided": per_group(STRIDED, lambda m, i, r: x64[m].mean(0)),
        "mul_pairs": per_group(PAIRS, lambda m, i, r: x64[m].prod(0)),
        "min_explicit": per_group(EXPLICIT, lambda m, i, r: x64[m].min(0)),
        "max_all": per_group(EVERY, lambda m, i, r: x64[m].max(0)),
        "square_add_strided": per_group(STRIDED, lambda m, i, r: (x64[m] ** 2).sum(0)),
        "and_all": per_group(EVERY, lambda m, i, r: b[m].all(0)),
        "or_strided": per_group(STRIDED, lambda m, i, r: b[m].any(0)),
        "gather_concat_all": per_group(EVERY, lambda m, i, r: np.concatenate(list(x64[m]), axis=1)),
        "gather_new_axis_strided": per_group(STRIDED, lambda m, i, r: x64[m]),
        "reduce_scatter_all": per_group(EVERY, lambda m, i, r: flat_sum[6 * i : 6 * i + 6]),
        "sharded_slice_pairs": per_group(PAIRS, lambda m, i, r: x64[r].reshape(-1)[12 * i : 12 * i + 12]),
        "slice_all": per_group(EVERY, lambda m, i, r: x64[r][i]),
        "identical_inputs": x64,
        "identical_grad_inputs": per_group(STRIDED, lambda m, i, r: x64[m].sum(0)),
        "inplace_add_strided": per_group(STRIDED, lambda m, i, r: x64[m].sum(0)),
    }


# ------------------------------------------------------------------------------------
# Under mpirun
# ------------------------------------------------------------------------------------


@needs_mpi
def test_popdist_values_per_instance(mpi_runs: dict) -> None:
    for i, got in enumerate(mpi_runs["instances"]):
        values = {k.split(".", 1)[1]: got[k].item() for k in got if k.startswith("popdist.")}
        assert values == {
            "num_instances": 2,
            "instance_index": i,
            "total": 4,
            "local": 2,
            "offset": 2 * i,
            "env_set": True,
            "ir_replication_factor": 4,
            "ir_instance_replication_factor": 2,
        }


@needs_mpi
def test_every_collective_under_mpi(mpi_runs: dict, simulated: dict) -> None:
    want = numpy_collectives()
    assert set(want) == set(simulated["collective"])
    for name, ref in want.items():
        sim = simulated["collective"][name]
        np.testing.assert_allclose(sim, ref, rtol=1e-6, atol=1e-6, err_msg=name)
        for i, got in enumerate(mpi_runs["instances"]):
            mine = got[f"collective.{name}"]
            # the local replicas' rows only, bit for bit the simulated ones
            assert mine.shape == sim[2 * i : 2 * i + 2].shape, name
            assert mine.dtype == sim.dtype, name
            np.testing.assert_array_equal(mine, sim[2 * i : 2 * i + 2], err_msg=name)


@needs_mpi
def test_training_under_mpi_equals_the_simulated_run(mpi_runs: dict, simulated: dict) -> None:
    sim = simulated["train"]
    one = prog.run_training(1, batch=4 * prog.BATCH)  # one replica on the whole batch
    initial = prog.run_training(1, batch=4 * prog.BATCH, steps=0)
    weights = [k for k in sim if k.startswith("weight.")]
    assert len(weights) == 3
    for i, got in enumerate(mpi_runs["instances"]):
        # losses of the local replicas, [steps, local replicas]
        np.testing.assert_array_equal(got["train.losses"], sim["losses"][:, 2 * i : 2 * i + 2])
        for k in weights:  # every instance returns the full, same weights
            np.testing.assert_array_equal(got[f"train.{k}"], sim[k], err_msg=k)
    # and the data-parallel run is one replica on the whole batch (means of the losses too)
    np.testing.assert_allclose(sim["losses"].mean(axis=1), one["losses"], rtol=1e-6)
    for k in weights:
        assert np.abs(one[k] - initial[k]).max() > 1e-3, k  # training moved every weight
        np.testing.assert_allclose(sim[k], one[k], rtol=0, atol=1e-6, err_msg=k)


@needs_mpi
def test_grouped_variables_same_on_every_instance(mpi_runs: dict, simulated: dict) -> None:
    data = prog.training_data()
    sums = narrow(sum(x.reshape(4, prog.BATCH, 8).sum(axis=1) for x, _ in data), np.ndarray)  # [replica, 8]
    # stride 2, group size 2: groups {0, 2} and {1, 3}; a group reads its first replica
    want_grouped = np.arange(16, dtype=np.float32).reshape(2, 8) + sums[[0, 1]]
    for got in mpi_runs["instances"]:
        np.testing.assert_allclose(got["train.grouped"], want_grouped, rtol=1e-5)
        np.testing.assert_array_equal(got["train.grouped"], simulated["train"]["grouped"])
        assert got["train.every"].shape == (4, 8)  # all_replicas: every replica, also remote ones
        np.testing.assert_allclose(got["train.every"], sums, rtol=1e-5)
        np.testing.assert_array_equal(got["train.every"], simulated["train"]["every"])


@needs_mpi
def test_indivisible_replica_count_stops_every_instance(mpi_runs: dict) -> None:
    code, log = mpi_runs["indivisible"]
    assert code != 0, log
    error = (
        "ValueError: popdist: POPDIST_NUM_TOTAL_REPLICAS=3 replicas cannot be split evenly over 2 "
        "instances (use a multiple of 2)"
    )
    assert log.count(error) == 2, log  # each instance reports it in full (no abort cuts one off)
    assert "accepted an indivisible" not in log


@needs_mpi
def test_diverged_instances_stop_with_an_error(mpi_runs: dict) -> None:
    """Both instances see the mismatch and each reports its own side: both reports come out
    in full (neither aborts the job under the other's report)."""
    code, log = mpi_runs["diverge"]
    assert code != 0, log
    assert log.count("CommMismatchError: the instances diverged") == 2, log
    assert "diverged: instance 0 is at exchange #0 with 1 array(s) of 12 bytes (float32 (3,)), but instance 1" in log
    assert "diverged: instance 1 is at exchange #0 with 1 array(s) of 16 bytes (float32 (4,)), but instance 0" in log
    assert "exchanged them" not in log


@needs_mpi
def test_instance_left_waiting_stops_with_an_error(mpi_runs: dict) -> None:
    """Instance 1 ends while instance 0 waits in an exchange: an error, not a hang. The
    finished instance's goodbye is the other side of instance 0's header exchange, so
    instance 0 always reports it (the finished one only notes it, it does not abort the job
    under instance 0's report)."""
    code, log = mpi_runs["early_exit"]
    assert code != 0, log
    assert "CommMismatchError: the instances diverged: instance 0 is at exchange #1" in log, log
    assert "but instance 1 has finished its program" in log, log
    # and the finished instance's note: no abort cuts either instance's output off
    assert "xl.runtime.mpi: instance 1 has finished, but instance(s) [0] still wait in a collective exchange" in log
    assert "nobody else made" not in log


@needs_mpi
def test_exchange_after_a_mismatch_fails_at_once(mpi_runs: dict) -> None:
    """Instance 0 catches the mismatch and tries again: an error at once, not a wait for an
    instance that has finished; no exit exchange either, so both instances end normally."""
    code, log = mpi_runs["early_exit_caught"]
    assert code == 0, log
    assert "first: the instances diverged: instance 0 is at exchange #1 with 1 array(s) of 12 bytes" in log, log
    assert "but instance 1 has finished its program" in log, log
    assert "second: no exchange after the instances diverged (earlier: instance 0 is at exchange #1" in log, log


@needs_mpi
def test_barrier_meeting_an_exchange_stops_with_an_error(mpi_runs: dict) -> None:
    code, log = mpi_runs["barrier"]
    assert code != 0, log
    assert log.count("CommMismatchError: the instances diverged") == 2, log
    assert "diverged: instance 0 is at exchange #1, a barrier, but instance 1 is at exchange #1 with 1 array" in log
    assert "diverged: instance 1 is at exchange #1 with 1 array(s) of 12 bytes (float32 (3,)), but instance 0 is at " \
        "exchange #1, a barrier" in log, log  # fmt: skip
    assert "met an exchange of arrays" not in log


@needs_mpi
def test_uncaught_exception_stops_the_others_at_their_next_exchange(mpi_runs: dict) -> None:
    """Instance 0 raises; instance 1 reaches its next exchange only after that. Instance 0
    ends normally (its exit exchange is the other side of instance 1's exchange), so its
    traceback and what it printed unflushed come out, and instance 1, not killed, stops with
    an error naming instance 0 (the job used to be aborted from instance 0's excepthook)."""
    code, log = mpi_runs["failed"]
    assert code != 0, log
    assert "instance 0 printed this before its error" in log, log
    assert "RuntimeError: instance 0 fails on its own" in log, log
    assert "instance 1 goes on after instance 0's error" in log, log
    assert (
        "CommMismatchError: the instances diverged: instance 1 is at exchange #1 with 1 array(s) of 12 bytes "
        "(float32 (3,)), but instance 0 has stopped with an error" in log
    ), log
    assert "xl.runtime.mpi: instance 0 has stopped, but instance(s) [1] still wait" in log, log
    assert "exchanged with an instance that had stopped" not in log
    assert "MPI_Abort" not in log


@needs_mpi
def test_instance_stopping_inside_an_exchange_aborts_the_job(mpi_runs: dict) -> None:
    """Instance 0 stops between the header and the data of an exchange while instance 1
    waits in its data: the job is aborted (no hang), instance 0's report complete first."""
    code, log = mpi_runs["interrupted"]
    assert code != 0, log
    assert "RuntimeError: instance 0 stops between the header and the data of an exchange" in log, log
    assert (
        "xl.runtime.mpi: instance 0 stopped inside exchange #0 (the other instances may wait in it); "
        "aborting the job" in log
    ), log
    assert "an exchange went through" not in log


# ------------------------------------------------------------------------------------
# popdist in one process (no MPI launch)
# ------------------------------------------------------------------------------------


@pytest.fixture
def one_process(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "POPDIST_NUM_TOTAL_REPLICAS",
                "POPDIST_NUM_IPUS_PER_REPLICA"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(popdist, "_instances", None)
    return monkeypatch


def test_popdist_without_a_launch_is_one_instance(one_process: pytest.MonkeyPatch) -> None:
    popdist.init()
    assert not popdist.isPopdistEnvSet()
    assert (popdist.getNumInstances(), popdist.getInstanceIndex()) == (1, 0)
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset()) == (1, 1, 0)
    assert popdist.getNumIpusPerReplica() == 1
    ir = popxl.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (1, 1)


def test_popdist_total_replicas_in_one_process(one_process: pytest.MonkeyPatch) -> None:
    """POPDIST_NUM_TOTAL_REPLICAS without mpirun: one instance runs them all (LocalComm)."""
    one_process.setenv("POPDIST_NUM_TOTAL_REPLICAS", "4")
    assert popdist.isPopdistEnvSet()
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas()) == (4, 4)
    got = prog.run_collectives("popdist")
    for name, ref in numpy_collectives().items():
        np.testing.assert_allclose(got[name], ref, rtol=1e-6, atol=1e-6, err_msg=name)


def test_popdist_bad_environment(one_process: pytest.MonkeyPatch) -> None:
    one_process.setenv("POPDIST_NUM_TOTAL_REPLICAS", "two")
    with pytest.raises(ValueError, match=r"popdist: POPDIST_NUM_TOTAL_REPLICAS='two' is not an integer"):
        popxl.Ir(replication="popdist")
    one_process.setenv("POPDIST_NUM_TOTAL_REPLICAS", "0")
    with pytest.raises(ValueError, match=r"POPDIST_NUM_TOTAL_REPLICAS='0' must be a positive integer"):
        popdist.getNumTotalReplicas()


def test_popdist_launch_without_mpi4py(one_process: pytest.MonkeyPatch) -> None:
    """Launched as 2 MPI processes but mpi4py missing: a clear error, not one instance."""
    one_process.setenv("PMI_SIZE", "2")
    one_process.setitem(sys.modules, "mpi4py", None)  # import fails
    with pytest.raises(RuntimeError, match=r"launched as 2 MPI processes, but mpi4py is not installed: pip install"):
        popxl.Ir(replication="popdist")
    # a one-process launch without mpi4py is one instance
    one_process.setattr(popdist, "_instances", None)
    one_process.setenv("PMI_SIZE", "1")
    assert popdist.isPopdistEnvSet() and popdist.getNumInstances() == 1


def test_wait_until_read_waits_for_the_reader_of_a_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An aborting instance first waits until the launcher has read its output: the wait
    ends when the reader has read everything, not before, and gives up after its timeout
    when nobody reads; files are not waited for."""
    import threading
    import time

    import xl.runtime.mpi as mpi

    r, w = os.pipe()
    try:
        os.write(w, b"x" * 1000)
        assert mpi.unread_bytes(w) == 1000 and mpi.unread_bytes(r) == 1000
        assert not mpi.wait_until_read((w,), 0.05)  # nobody reads: the timeout
        assert mpi.unread_bytes(w) == 1000
        # the reader starts only once the wait has seen the unread bytes (its first pause)
        go = threading.Event()
        got: list[bytes] = []

        sleep = time.sleep

        def pause(s: float) -> None:
            go.set()
            sleep(s)

        def reader() -> None:
            go.wait()
            got.append(os.read(r, 600))
            got.append(os.read(r, 600))

        monkeypatch.setattr(mpi.time, "sleep", pause)
        t = threading.Thread(target=reader)
        t.start()
        assert mpi.wait_until_read((w,), 60)
        assert go.is_set()  # it did wait
        assert mpi.unread_bytes(w) == 0 and sum(map(len, got)) == 1000  # and returned once all was read
        t.join()
    finally:
        os.close(r)
        os.close(w)
    with open(tmp_path / "f", "wb") as f:
        f.write(b"y" * 10)
        f.flush()
        assert mpi.unread_bytes(f.fileno()) is None
        assert mpi.wait_until_read((f.fileno(),), 0)


def test_mpi_comm_import_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from xl.runtime.mpi import MpiComm

    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(ImportError, match=r"pip install 'xl-popxl\[mpi\]'"):
        MpiComm()
