"""Data-parallel MNIST: the benchmarked replicated program and its hand-written NumPy reference.

`dp_train_ir(R, batch)` is the tutorial's training step (seed 001's Net, `addons.autodiff`,
`cross_entropy_with_grad`, SGD with `ops.scaled_add_`) on R replicas, each on its own
`batch` samples, with every gradient averaged over the replicas by
`ops.collectives.replicated_all_reduce_(g, op="mean")` before the update (the upstream
data-parallel tutorial's structure). `NumpyDataParallel` does the same maths by hand:
R replicas' gradients, their mean, the same update on every replica's weights.
"""

from __future__ import annotations

import numpy as np
from models import Net  # noqa: F401  (the tutorial's model, via models' path setup)
from references import NumpyMLP

import popxl
import popxl_addons as addons
from popxl import ops


def dp_train_ir(replicas: int, batch: int, learning_rate: float = 0.05):
    """(ir, [image, labels] streams, variables, loss stream) of the data-parallel step."""
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        img_stream = popxl.h2d_stream((batch, 28, 28), popxl.float32, "image")
        img_t = ops.host_load(img_stream)
        label_stream = popxl.h2d_stream((batch,), popxl.int32, "labels")
        labels = ops.host_load(label_stream, "labels")
        facts, fwd_graph = Net().create_graph(img_t)
        bwd_graph = addons.autodiff(fwd_graph)
        variables = facts.init()
        fwd_info = fwd_graph.bind(variables).call_with_info(img_t)
        loss, dx = addons.ops.cross_entropy_with_grad(fwd_info.outputs[0], labels)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)
        activations = bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        bwd_info = bwd_graph.call_with_info(dx, args=activations)
        grads = bwd_graph.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        for t in variables.tensors:
            g = grads[t]
            ops.collectives.replicated_all_reduce_(g, op="mean")
            ops.scaled_add_(t, g, b=-learning_rate)
    ir.num_host_transfers = 1
    return ir, [img_stream, label_stream], variables, loss_stream


class NumpyDataParallel:
    """R replicas by hand: each replica's gradients, their mean, the SGD update on every
    replica's own copy of the weights."""

    def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]], replicas: int, lr: float = 0.05):
        self.replicas = [NumpyMLP(weights, lr) for _ in range(replicas)]
        self.lr = lr

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> list[float]:
        """`images` `[R, batch, 28, 28]`, `labels` `[R, batch]` (R = 1: no replica dim)."""
        r = len(self.replicas)
        if r == 1:
            images, labels = images[None], labels[None]
        results = [m.grads(images[i], labels[i]) for i, m in enumerate(self.replicas)]
        losses = [loss for loss, _ in results]
        for k in range(len(results[0][1])):
            for j in range(2):
                mean = sum(res[1][k][j] for res in results) / r
                for m in self.replicas:
                    m.params[k][j][...] -= self.lr * mean
        return losses
