"""The data-parallel examples give the same trained weights (bit for bit), printed losses and test
accuracy in one process (all replicas simulated) and under `mpirun -n 2`: the tutorial's
data-parallel MNIST, seed 003's pipelined program with `--data-parallel 2` (one replica per
process) and the RTS program (4 replicas, 2 per process), a few steps each. The printed loss of
a step is the mean over every replica, gathered from both processes. Skipped without mpi4py /
mpirun (the `[mpi]` extra)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1] / "helpers"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(HERE))

from mpi_launch import finish, launch, needs_mpi  # noqa: E402

CASES = {
    "mnist_data_parallel": ["--max-steps", "2", "--device", "cpu"],
    "mnist_pipeline": ["--data-parallel", "2", "--max-steps", "2", "--no-throughput", "--device", "cpu"],
    "mnist_rts": ["--max-steps", "2", "--gradient-accumulation", "2", "--device", "cpu"],
}
# the weights each example saves (the RTS program also saves its 8 layer tensors)
SAVED = {"mnist_data_parallel": 8, "mnist_pipeline": 8, "mnist_rts": 8}


def _losses(log: str) -> list[str]:
    """The step losses the progress bar printed (instance 0 only)."""
    return re.findall(r"Loss:([0-9.]+)", log)


def _accuracy(log: str) -> str:
    found = re.findall(r"^Accuracy on test set: ([0-9.]+)%$", log, re.M)
    assert len(found) == 1, log  # printed by instance 0 only
    return found[0]


@needs_mpi
@pytest.mark.parametrize("example", sorted(CASES))
def test_example_under_mpirun_equals_one_process(example: str, tmp_path: Path) -> None:
    # both runs with one BLAS thread (a different thread count may round matmuls differently)
    args = [str(EXAMPLES / f"{example}.py"), *CASES[example], "--save-weights"]
    mpi_run = launch([*args, str(tmp_path / "mpi.npz")], n=2)
    one_run = launch([*args, str(tmp_path / "one.npz")], n=None)  # 2 simulated replicas, 1 process
    big_run = None
    if example == "mnist_data_parallel":
        # one replica accumulating the whole global batch of 64 (8 micro batches of 8)
        big_run = launch(
            [*args, str(tmp_path / "big.npz"), "--data-parallel", "1", "--gradient-accumulation", "8"], n=None
        )
    code, log = finish(mpi_run)
    assert code == 0, log
    one_code, one_log = finish(one_run)
    assert one_code == 0, one_log
    if example == "mnist_data_parallel":
        assert "train session: 2 replicas, 2 instance(s) of 1; global batch 64" in log, log
        assert "train session: 2 replicas, 1 instance(s) of 2; global batch 64" in one_log, one_log
    one = np.load(tmp_path / "one.npz")
    mpi = np.load(tmp_path / "mpi.npz")
    assert sorted(one) == sorted(mpi) and len(one) == SAVED[example]
    for name in one:
        np.testing.assert_array_equal(mpi[name], one[name], err_msg=name)
    assert _accuracy(log) == _accuracy(one_log)
    # the losses printed: every replica's, the same figures (each instance alone would print
    # its own replicas' mean)
    assert len(_losses(one_log)) >= 2 and _losses(log) == _losses(one_log), (log, one_log)
    if example == "mnist_data_parallel":
        assert big_run is not None  # launched above for this example
        big_code, big_log = finish(big_run)
        assert big_code == 0, big_log
        big = np.load(tmp_path / "big.npz")
        initial = _initial_weights()
        for name in one:
            moved = np.abs(one[name] - initial[name]).max()
            assert moved > 1e-3, name  # Adam moved every weight by about lr per step
            # Adam divides by sqrt(v): rounding-level gradient differences of near-zero
            # gradients show at ~1e-5, far below the update (~2e-3 after 2 steps)
            np.testing.assert_allclose(one[name], big[name], rtol=0, atol=1e-4, err_msg=name)


def _initial_weights() -> dict[str, np.ndarray]:
    """The example's initial weights (seed 42), from its training program."""
    sys.path.insert(0, str(EXAMPLES))
    import mnist_data_parallel as dp

    np.random.seed(42)
    opts = dp.parse_args(["--device", "cpu"])
    session, _, variables, _ = dp.train_program(opts)
    data = session.get_tensors_data(variables.tensors)
    return {name: np.array(data[t]) for name, t in variables.named_tensors.items()}
