"""MNIST with PopXL alone (the PopXL user guide's application example, seed 004).

    python examples/mnist_popxl.py [--data-dir DIR] [--epochs 1] [--batch-size 32] [--max-steps N]
    python examples/mnist_popxl.py --profile trace.json --memory-report   # see observe.py

Two linear layers built as `popxl.Module` subclasses whose weights are graph inputs,
graphs created with `ir.create_graph`, called with `ops.call_with_info`; gradients
from `popxl.transforms.autodiff`, used in two ways: all gradients of layer 1 through
`fwd_parent_ins_to_grad_parent_outs`, and `grads_required=[W, b]` for layer 0; the
loss and its gradient from `softmax` + `nll_loss_with_softmax_grad`; SGD updates with
`ops.scaled_add_`. Training and testing use separate IRs.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import observe  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402
from progress_bar import progress  # noqa: E402

import popxl  # noqa: E402
import popxl.ops as ops  # noqa: E402
import popxl.transforms as transforms  # noqa: E402


class Linear(popxl.Module):
    def __init__(self) -> None:
        self.W: popxl.Tensor | None = None
        self.b: popxl.Tensor | None = None

    def build(self, x: popxl.Tensor, out_features: int, bias: bool = True, gelu: bool = True) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        y = x @ self.W
        if bias:
            self.b = popxl.graph_input((out_features,), popxl.float32, "b")
            y = y + self.b
        if gelu:
            y = ops.gelu(y)
        return y


def create_network_fwd_graph(ir, x):
    # Linear layer 0
    x = x.reshape((-1, 28 * 28))
    W0_data = np.random.normal(0, 0.02, (x.shape[1], 32)).astype(np.float32)
    W0 = popxl.variable(W0_data, name="W0")
    b0_data = np.random.normal(0, 0.02, (32)).astype(np.float32)
    b0 = popxl.variable(b0_data, name="b0")

    # Linear layer 1
    W1_data = np.random.normal(0, 0.02, (32, 10)).astype(np.float32)
    W1 = popxl.variable(W1_data, name="W1")
    b1_data = np.random.normal(0, 0.02, (10)).astype(np.float32)
    b1 = popxl.variable(b1_data, name="b1")

    # Create graph to call for linear layer 0
    linear_0 = Linear()
    linear_graph_0 = ir.create_graph(linear_0, x, out_features=32)
    assert linear_0.W is not None and linear_0.b is not None  # inputs made by build (bias=True)

    # Call the linear layer 0 graph
    fwd_call_info_0 = ops.call_with_info(linear_graph_0, x, inputs_dict={linear_0.W: W0, linear_0.b: b0})
    # Output of linear layer 0
    x1 = fwd_call_info_0.outputs[0]

    # Create graph to call for linear layer 1
    linear_1 = Linear()
    linear_graph_1 = ir.create_graph(linear_1, x1, out_features=10, gelu=False)
    assert linear_1.W is not None and linear_1.b is not None

    # Call the linear layer 1 graph
    fwd_call_info_1 = ops.call_with_info(linear_graph_1, x1, inputs_dict={linear_1.W: W1, linear_1.b: b1})
    # Output of linear layer 1
    y = fwd_call_info_1.outputs[0]

    outputs = (x1, y)
    params = (W0, b0, W1, b1)
    linears = (linear_0, linear_1)
    graphs = (linear_graph_0, linear_graph_1)
    fwd_call_infos = (fwd_call_info_0, fwd_call_info_1)
    return outputs, params, linears, graphs, fwd_call_infos


def calculate_grads(dy, outputs, graphs, fwd_call_infos, linears, params):
    x1 = outputs[0]
    W0, b0, W1, b1 = params

    # Layer 1: gradients of all its inputs (x1, W1, b1)
    bwd_graph_info_1 = transforms.autodiff(graphs[1])
    activations_1 = bwd_graph_info_1.inputs_dict(fwd_call_infos[1])
    grads_1_call_info = ops.call_with_info(bwd_graph_info_1.graph, dy, inputs_dict=activations_1)
    grads_1 = bwd_graph_info_1.fwd_parent_ins_to_grad_parent_outs(fwd_call_infos[1], grads_1_call_info)
    grad_x_1 = grads_1[x1]
    grad_w_1 = grads_1[W1]
    grad_b_1 = grads_1[b1]

    # Layer 0: only the gradients of W0 and b0, returned directly by the call
    bwd_graph_info_0 = transforms.autodiff(graphs[0], grads_required=[linears[0].W, linears[0].b])
    activations_0 = bwd_graph_info_0.inputs_dict(fwd_call_infos[0])
    grad_w_0, grad_b_0 = ops.call(bwd_graph_info_0.graph, grad_x_1, inputs_dict=activations_0)
    return grad_w_0, grad_b_0, grad_w_1, grad_b_1


def update_weights_bias(grads, params, lr):
    for param, grad in zip(params, grads):
        ops.scaled_add_(param, grad, b=-lr)


def build_train_ir(batch_size, lr):
    ir = popxl.Ir()
    ir.replication_factor = 1
    with ir.main_graph, popxl.in_sequence():
        # Host to device streams: images and labels
        img_stream = popxl.h2d_stream((batch_size, 28, 28), popxl.float32, "image")
        img_t = ops.host_load(img_stream, "img")
        label_stream = popxl.h2d_stream((batch_size,), popxl.int32, "labels")
        labels = ops.host_load(label_stream, "labels")

        outputs, params, linears, graphs, fwd_call_infos = create_network_fwd_graph(ir, img_t)
        probs = ops.softmax(outputs[1], axis=-1)
        loss, dy = ops.nll_loss_with_softmax_grad(probs, labels)

        grads = calculate_grads(dy, outputs, graphs, fwd_call_infos, linears, params)
        update_weights_bias(grads, params, lr)

        # Device to host stream: the loss
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss_stream")
        ops.host_store(loss_stream, loss)
    ir.num_host_transfers = 1
    return ir, (img_stream, label_stream), params, loss_stream


def build_test_ir(batch_size):
    ir = popxl.Ir()
    ir.replication_factor = 1
    with ir.main_graph, popxl.in_sequence():
        img_stream = popxl.h2d_stream((batch_size, 28, 28), popxl.float32, "image")
        img_t = ops.host_load(img_stream, "img")
        outputs, params, _, _, _ = create_network_fwd_graph(ir, img_t)
        out_stream = popxl.d2h_stream(outputs[1].shape, outputs[1].dtype, "outputs")
        ops.host_store(out_stream, outputs[1])
    ir.num_host_transfers = 1
    return ir, img_stream, params, out_stream


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--data-dir")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--test-batch-size", type=int, default=80)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--device", default="ipu_hw")
    ap.add_argument(
        "--max-steps", type=int, default=None, help="stop each epoch after this many steps (default: the whole epoch)"
    )
    observe.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.max_steps is not None and args.max_steps < 1:
        ap.error(f"--max-steps must be at least 1, got {args.max_steps}")
    observe.check_arguments(ap, args)

    np.random.seed(0)
    train_x, train_y, test_x, test_y = load_mnist(args.data_dir)
    train_ir, (img_stream, label_stream), train_params, loss_stream = build_train_ir(args.batch_size, args.lr)
    train_session = popxl.Session(train_ir, args.device)
    observe.memory(train_session, args)
    training_data = batches(train_x, train_y, args.batch_size, shuffle=True, seed=0)
    num_batches = len(training_data)
    if args.max_steps is not None:
        num_batches = min(num_batches, args.max_steps)
    with train_session, observe.StepProfiler(train_session, args) as runner:
        for epoch in range(args.epochs):
            bar = progress(itertools.islice(training_data, num_batches), total=num_batches)
            for data, labels in bar:
                out = runner.run({img_stream: data, label_stream: labels})
                bar.set_description(f"Epoch {epoch + 1} loss: {out[loss_stream]:0.4f}")
    trained_weights_data_dict = train_session.get_tensors_data(train_params)

    test_ir, test_stream, test_params, out_stream = build_test_ir(args.test_batch_size)
    test_session = popxl.Session(test_ir, args.device)
    test_session.write_variables_data({tp: trained_weights_data_dict[p] for p, tp in zip(train_params, test_params)})
    test_data = batches(test_x, test_y, args.test_batch_size, shuffle=False)
    correct = 0
    total = 0
    with test_session:
        for data, labels in progress(test_data, total=len(test_data)):
            out = test_session.run({test_stream: data})
            correct += int(np.sum(np.argmax(out[out_stream], axis=-1) == labels))
            total += len(labels)
    acc = correct / total * 100.0
    print(f"Accuracy on test set: {acc:0.2f}%")
    return acc


if __name__ == "__main__":
    main()
