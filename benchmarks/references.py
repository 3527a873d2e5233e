"""Hand-written implementations of the benchmarked maths: NumPy, and PyTorch / JAX when installed.

The NumPy step is written the way a person would write it from the formulas: gelu as
`0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))`, its derivative by hand, softmax and
the cross-entropy gradient `(p - onehot) / n`, bias gradients as sums, SGD as
`w -= lr * dw`. Same float32 maths as the xl program (gelu recomputed in the backward
pass, as the xl gradient does). `NumpyMLP(pow3=False)` writes `x*x*x` instead of `x**3`,
to show how much of the difference comes from that one choice.
"""

from __future__ import annotations

import math

import numpy as np

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


class NumpyMLP:
    """Net 784-512-512-512-10 with gelu; `train_step` = forward, backward, SGD."""

    def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]], lr: float = 0.05, pow3: bool = True):
        self.params = [(w.copy(), b.copy()) for w, b in weights]
        self.lr = lr
        self.pow3 = pow3

    def cube(self, x: np.ndarray) -> np.ndarray:
        return x**3 if self.pow3 else x * x * x

    def gelu(self, x: np.ndarray) -> np.ndarray:
        return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * self.cube(x))))

    def gelu_grad(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        t = np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * self.cube(x)))
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x**2))

    def forward(self, images: np.ndarray) -> np.ndarray:
        h = images.reshape(-1, 28 * 28)
        for i, (w, b) in enumerate(self.params):
            h = h @ w + b
            if i < 3:
                h = self.gelu(h)
        return h

    def grads(self, images: np.ndarray, labels: np.ndarray) -> tuple[float, list[tuple[np.ndarray, np.ndarray]]]:
        """Forward and backward: the loss and each layer's (dW, db)."""
        n = images.shape[0]
        h = images.reshape(-1, 28 * 28)
        inputs, pre = [], []
        for i, (w, b) in enumerate(self.params):
            inputs.append(h)
            z = h @ w + b
            if i < 3:
                pre.append(z)
                h = self.gelu(z)
            else:
                h = z
        # softmax + cross entropy
        e = np.exp(h - h.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        loss = -np.log(p[np.arange(n), labels]).mean()
        g = p.copy()
        g[np.arange(n), labels] -= 1
        g /= n
        # backward
        grads = []
        for i in range(3, -1, -1):
            w, _ = self.params[i]
            grads.append((inputs[i].T @ g, g.sum(axis=0)))
            if i > 0:
                g = self.gelu_grad(pre[i - 1], g @ w.T)
        return float(loss), list(reversed(grads))

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> float:
        loss, grads = self.grads(images, labels)
        for (w, b), (dw, db) in zip(self.params, grads):
            w -= self.lr * dw
            b -= self.lr * db
        return loss


def torch_mlp(weights: list[tuple[np.ndarray, np.ndarray]], lr: float = 0.05):
    """(train_step, forward) in eager PyTorch, or None when torch is not installed."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        return None
    params = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)) for w, b in weights]
    flat = [t for wb in params for t in wb]

    def forward(x):
        h = x.reshape(-1, 28 * 28)
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < 3:
                h = F.gelu(h, approximate="tanh")
        return h

    def train_step(images: np.ndarray, labels: np.ndarray) -> float:
        x = torch.from_numpy(images)
        y = torch.from_numpy(labels).long()
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        with torch.no_grad():
            for t in flat:
                assert t.grad is not None  # set by loss.backward()
                t.add_(t.grad, alpha=-lr)
                t.grad = None
        return float(loss.detach())

    def infer(images: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return forward(torch.from_numpy(images)).numpy()

    return train_step, infer


def jax_mlp(weights: list[tuple[np.ndarray, np.ndarray]], lr: float = 0.05):
    """(train_step, forward) with jax.jit, or None when jax is not installed."""
    try:
        import jax
        import jax.numpy as jnp
    except Exception:
        return None
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in weights]

    def forward(params, x):
        h = x.reshape(-1, 28 * 28)
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < 3:
                h = jax.nn.gelu(h, approximate=True)
        return h

    def loss_fn(params, x, y):
        logp = jax.nn.log_softmax(forward(params, x))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

    fwd = jax.jit(forward)
    state = {"params": params}

    def train_step(images: np.ndarray, labels: np.ndarray) -> float:
        state["params"], loss = step(state["params"], images, labels)
        return float(loss)

    def infer(images: np.ndarray) -> np.ndarray:
        return np.asarray(fwd(state["params"], images).block_until_ready())

    return train_step, infer
