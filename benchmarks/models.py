"""The benchmarked xl programs, built with the popxl / popxl.addons API.

The MNIST model is the tutorial's (seed 001): `Net` = four `Linear` modules
784-512-512-512-10 with gelu, `addons.autodiff`, `cross_entropy_with_grad` and SGD
through `ops.scaled_add_`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

import popxl
import popxl_addons as addons
from popxl import bridge, ops

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from mnist import Net  # noqa: E402  (the tutorial's model, as in examples/mnist.py)


def train_ir(batch_size: int, learning_rate: float = 0.05):
    """The tutorial's training program: returns (ir, [image, labels] streams, variables, loss stream)."""
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        img_stream = popxl.h2d_stream((batch_size, 28, 28), popxl.float32, "image")
        img_t = ops.host_load(img_stream)
        label_stream = popxl.h2d_stream((batch_size,), popxl.int32, "labels")
        labels = ops.host_load(label_stream, "labels")
        facts, fwd_graph = Net().create_graph(img_t)
        bwd_graph = addons.autodiff(fwd_graph)
        variables = facts.init()
        fwd_info = fwd_graph.bind(variables).call_with_info(img_t)
        x = fwd_info.outputs[0]
        loss, dx = addons.ops.cross_entropy_with_grad(x, labels)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)
        activations = bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        bwd_info = bwd_graph.call_with_info(dx, args=activations)
        grads_dict = bwd_graph.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        for t in variables.tensors:
            ops.scaled_add_(t, grads_dict[t], b=-learning_rate)
    ir.num_host_transfers = 1
    return ir, [img_stream, label_stream], variables, loss_stream


def infer_ir(batch_size: int):
    """The tutorial's test program: returns (ir, image stream, variables, output stream)."""
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        in_stream = popxl.h2d_stream((batch_size, 28, 28), popxl.float32, "image")
        in_t = ops.host_load(in_stream)
        facts, graph = Net().create_graph(in_t)
        variables = facts.init()
        (outputs,) = graph.bind(variables).call(in_t)
        out_stream = popxl.d2h_stream(outputs.shape, outputs.dtype, "outputs")
        ops.host_store(out_stream, outputs)
    ir.num_host_transfers = 1
    return ir, in_stream, variables, out_stream


def chain_ir(n_ops: int, width: int = 16, batch: int = 4):
    """A main graph of about `n_ops` popxl ops (blocks of matmul, add, gelu, mul) for compile-time scaling."""
    ir = popxl.Ir(replication=1)
    rng = np.random.default_rng(0)
    with ir.main_graph:
        s = popxl.h2d_stream((batch, width), popxl.float32, "x")
        x = ops.host_load(s)
        w = popxl.variable(rng.normal(0, 0.1, (width, width)).astype(np.float32), name="w")
        b = popxl.variable(np.zeros(width, np.float32), name="b")
        c = popxl.variable(np.full(width, 0.5, np.float32), name="c")
        for _ in range(max(n_ops // 4, 1)):
            x = ops.gelu(x @ w + b) * c
        out = popxl.d2h_stream(x.shape, x.dtype, "y")
        ops.host_store(out, x)
    ir.num_host_transfers = 1
    return ir


def module_of(ir: popxl.Ir) -> ModuleOp:
    """The xDSL module behind an Ir."""
    return bridge.module_of(ir)


def count_ops(module: ModuleOp) -> int:
    """Tensor ops (popxl dialect) in a module."""
    return sum(1 for op in module.walk() if op.name.startswith("popxl."))
