"""The MNIST network of examples/mnist.py in PyTorch, for comparison.

Same architecture (784-512-512-512-10, tanh-GELU), same initial weights (taken from
the xl training session), same batches in the same order, SGD with the same learning
rate. Used by tests/examples/test_mnist.py and to measure the README's accuracy figures:

    python examples/mnist_torch_reference.py
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = ("fc1", "fc2", "fc3", "fc4")


def torch_net(weights: Mapping[str, np.ndarray]):
    """A torch module with the given `fcN.weight` ((in, out), as in xl) / `fcN.bias`."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.params = torch.nn.ParameterDict(
                {k.replace(".", "_"): torch.nn.Parameter(torch.tensor(np.array(v))) for k, v in weights.items()}
            )

        def forward(self, x):
            x = x.reshape(-1, 28 * 28)
            for i, name in enumerate(LAYERS):
                x = x @ self.params[f"{name}_weight"] + self.params[f"{name}_bias"]
                if i < len(LAYERS) - 1:
                    x = torch.nn.functional.gelu(x, approximate="tanh")
            return x

    return Net()


def train(
    weights: Mapping[str, np.ndarray],
    data: Iterable[tuple[np.ndarray, np.ndarray]],
    lr: float,
    max_steps: int | None = None,
):
    """Train with SGD; returns (per-step losses, trained weights as NumPy)."""
    import torch

    net = torch_net(weights)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    losses: list[float] = []
    for step, (x, y) in enumerate(data):
        if max_steps is not None and step >= max_steps:
            break
        opt.zero_grad()
        logits = net(torch.tensor(x))
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y).long())
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    trained = {k.replace("_", ".", 1): p.detach().numpy().copy() for k, p in net.params.items()}
    return losses, trained


def accuracy(weights: Mapping[str, np.ndarray], images: np.ndarray, labels: np.ndarray) -> float:
    import torch

    with torch.no_grad():
        logits = torch_net(weights)(torch.tensor(images)).numpy()
    return float(np.mean(np.argmax(logits, axis=-1) == labels) * 100.0)


def main() -> None:
    import mnist
    from mnist_data import batches, load_mnist

    np.random.seed(42)
    train_x, train_y, test_x, test_y = load_mnist()
    session, streams, variables, loss_stream = mnist.train_program(8, "cpu", 0.05)
    init = {k: session.get_tensor_data(t).copy() for k, t in variables.to_dict().items()}
    _, trained = train(init, batches(train_x, train_y, 8, shuffle=True, seed=42), 0.05)
    print(f"PyTorch accuracy on test set: {accuracy(trained, test_x, test_y):0.2f}%")


if __name__ == "__main__":
    main()
