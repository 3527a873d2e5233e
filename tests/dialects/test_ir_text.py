"""A frontend Ir printed as text: xl-opt parses it, xl-run runs it with the Session's results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import mnist as mnist_example  # noqa: E402

BIN = Path(sys.executable).parent


def test_training_ir_as_text_runs_like_the_session(tmp_path):
    np.random.seed(1)
    session, (img_stream, label_stream), variables, loss_stream = mnist_example.train_program(4, "cpu", 0.05)
    text = session.ir.to_mlir()
    prog = tmp_path / "train.mlir"
    prog.write_text(text)

    # xl-opt parses the program and lowers it
    lowered = subprocess.run(
        [BIN / "xl-opt", prog, "-p", "inline,canonicalize,cse,dce,lower-to-rt"],
        capture_output=True,
        text=True,
    )
    assert lowered.returncode == 0, lowered.stderr
    assert "rt.program" in lowered.stdout and 'rt.kernel "popxl.matmul"' in lowered.stdout

    rng = np.random.default_rng(0)
    images = rng.normal(size=(4, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, size=(4,)).astype(np.int32)
    np.savez(tmp_path / "in.npz", image=images, labels=labels)

    with session:
        expected_loss = [session.run({img_stream: images, label_stream: labels})[loss_stream] for _ in range(2)]
    expected_vars = {k: session.get_tensor_data(t) for k, t in variables.to_dict().items()}

    run = subprocess.run(
        [
            BIN / "xl-run",
            prog,
            tmp_path / "in.npz",
            "--steps",
            "2",
            "-o",
            tmp_path / "out.npz",
            "--save-vars",
            tmp_path / "vars.npz",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["loss"], expected_loss[-1], rtol=1e-6)
    saved = np.load(tmp_path / "vars.npz")
    for name, value in expected_vars.items():
        np.testing.assert_allclose(saved[name], value, rtol=1e-6, atol=1e-7)
