"""examples/mnist_rts.py for a few steps: the RTS program (sharded gradients, weights and
remote Adam state over 4 replicas) trains the same weights as examples/mnist_data_parallel.py
(all-reduced gradients, resident unsharded state) from the same initial weights and data."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))

import mnist_data_parallel  # noqa: E402
import mnist_rts  # noqa: E402


def test_mnist_rts_equals_data_parallel_program() -> None:
    args = ["--data-parallel", "4", "--gradient-accumulation", "2", "--max-steps", "2", "--seed", "3"]
    rts = mnist_rts.main(args)
    plain = mnist_data_parallel.main(args)
    assert rts["weights"].keys() == plain["weights"].keys()
    np.testing.assert_allclose(rts["losses"], plain["losses"], rtol=1e-5)
    for k, w in rts["weights"].items():
        np.testing.assert_allclose(w, plain["weights"][k], rtol=1e-4, atol=2e-6, err_msg=k)
    assert rts["accuracy"] > 20  # 2 steps already beat chance


def test_mnist_rts_shards_large_tensors() -> None:
    """The train program reduce-scatters the large gradients and keeps sharded Adam state in
    remote buffers: remote bytes = (m fp16 + v fp32) of every tensor + step counters."""
    opts = mnist_rts.parse_args(["--data-parallel", "4", "--gradient-accumulation", "2"])
    session = mnist_rts.train_program(opts)[0]
    report = session.memory_report(print_table=False).ipu(0)
    sizes = {"fc1.weight": 784 * 512, "fc1.bias": 512, "fc2.weight": 512 * 512, "fc2.bias": 512,
             "fc3.weight": 512 * 512, "fc3.bias": 512, "fc4.weight": 512 * 10, "fc4.bias": 10}  # fmt: skip
    # each replica holds a quarter of every sharded state (>= 512 elements), all of the others
    per_replica = sum((n // 4 if n >= 512 else n) * (2 + 4) + 4 for n in sizes.values())
    assert report.remote_staging == per_replica
