"""Remote buffers and replica-sharded variables with replicas split over MPI processes:
`mpirun -n 2` (2 replicas per instance, 4 in all) gives every instance the values of the
simulated 4-replica run, which equal an independent NumPy computation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.helpers.mpi_launch import finish, launch, needs_mpi

PROGRAM = str(Path(__file__).resolve().parents[1] / "helpers" / "remote_mpi_program.py")


def _results(folder: Path) -> dict[int, dict]:
    """Each instance's `result_<first replica>.json`, by its first replica."""
    return {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in folder.glob("result_*.json")}


def _expected() -> dict:
    rng = np.random.default_rng(0)
    before = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2)]
    data = rng.standard_normal((4, 4, 6)).astype(np.float32)
    layers = [4 * b + data.sum(axis=0) for b in before]  # all-gather, add, reduce-scatter
    layers2 = [4 * b + data.sum(axis=0) for b in layers]
    return {"layers": layers, "layers2": layers2, "sharded": np.full(8, 8.0)}


def _check(res: dict) -> None:
    want = _expected()
    for key in ("layers", "layers2", "sharded"):
        np.testing.assert_allclose(np.array(res[key]), np.array(want[key]), rtol=1e-5, atol=1e-4)


@needs_mpi
def test_remote_rts_over_two_instances(tmp_path: Path) -> None:
    folders = {"mpi": tmp_path / "mpi", "one": tmp_path / "one"}
    for f in folders.values():
        f.mkdir()
    runs = {
        "mpi": launch([PROGRAM, str(folders["mpi"])], env={"POPDIST_NUM_TOTAL_REPLICAS": "4"}),
        "one": launch([PROGRAM, str(folders["one"])], n=None, env={"POPDIST_NUM_TOTAL_REPLICAS": "4"}),
    }
    done = {k: finish(p) for k, p in runs.items()}
    for name, (code, out) in done.items():
        assert code == 0, f"{name}:\n{out}"
    mpi, one = _results(folders["mpi"]), _results(folders["one"])
    assert sorted(mpi) == [0, 2] and sorted(one) == [0]
    _check(one[0])
    for res in mpi.values():
        _check(res)
        assert res == one[0]  # bit for bit the simulated run
