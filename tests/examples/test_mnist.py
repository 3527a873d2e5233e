"""The MNIST example programs end to end, and against PyTorch."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import mnist as mnist_example  # noqa: E402
import mnist_popxl as mnist_popxl_example  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402


def test_mnist_example_trains(capsys):
    acc = mnist_example.main([])
    out = capsys.readouterr().out
    assert f"Accuracy on test set: {acc:0.2f}%" in out
    assert acc > 85.0


def test_mnist_popxl_example_trains(capsys):
    acc = mnist_popxl_example.main([])
    assert "Accuracy on test set:" in capsys.readouterr().out
    assert acc > 85.0


def test_first_20_losses_match_pytorch():
    pytest.importorskip("torch")
    import mnist_torch_reference as ref

    np.random.seed(42)
    train_x, train_y, _, _ = load_mnist()
    session, streams, variables, loss_stream = mnist_example.train_program(8, "cpu", 0.05)
    init = {k: session.get_tensor_data(t).copy() for k, t in variables.to_dict().items()}
    data = list(batches(train_x, train_y, 8, shuffle=True, seed=42))[:20]
    xl_losses = []
    with session:
        for x, y in data:
            xl_losses.append(float(session.run(dict(zip(streams, [x, y])))[loss_stream]))
    torch_losses, _ = ref.train(init, data, 0.05)
    np.testing.assert_allclose(xl_losses, torch_losses, rtol=1e-4)
    # the weights moved: training really happened
    assert not np.allclose(session.get_tensor_data(variables.fc1.weight), init["fc1.weight"])
