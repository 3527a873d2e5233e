"""MNIST with popxl.addons (the tutorial of seeds 000-002), trained on real digits.

    python examples/mnist.py                       # bundled 10,000 digits: 8,000 train, 2,000 test
    python examples/mnist.py --data-dir ~/.torch/datasets   # full MNIST IDX files (MNIST/raw/*-ubyte[.gz])
    python examples/mnist.py --max-steps 100       # a short run: 100 training steps per epoch
    python examples/mnist.py --profile trace.json --memory-report   # see observe.py

The model code is the tutorial's, verbatim: a `Net` of four `Linear` modules with gelu,
`addons.autodiff` for the backward graph, `cross_entropy_with_grad` for the loss and
SGD with `ops.scaled_add_`. Only the data loading differs (no torchvision here).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import observe  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402
from progress_bar import progress  # noqa: E402

import popxl  # noqa: E402
import popxl.ops as ops  # noqa: E402
import popxl_addons as addons  # noqa: E402


class Linear(addons.Module):
    def __init__(self, out_features: int, bias: bool = True):
        super().__init__()
        self.out_features = out_features
        self.bias = bias

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        # add a state variable to the module
        w = self.add_variable_input(
            "weight",
            partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)),
            x.dtype,
        )
        y = x @ w
        if self.bias:
            # add a state variable to the module
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype)
            y = y + b

        return y


class Net(addons.Module):
    def __init__(self, cache: addons.GraphCache | None = None):
        super().__init__(cache=cache)
        self.fc1 = Linear(512)
        self.fc2 = Linear(512)
        self.fc3 = Linear(512)
        self.fc4 = Linear(10)

    def build(self, x: popxl.Tensor):
        x = x.reshape((-1, 28 * 28))
        x = ops.gelu(self.fc1(x))
        x = ops.gelu(self.fc2(x))
        x = ops.gelu(self.fc3(x))
        x = self.fc4(x)
        return x


def train_program(batch_size, device, learning_rate):
    ir = popxl.Ir(replication=1)

    with ir.main_graph:
        # Create input streams from host to device
        img_stream = popxl.h2d_stream((batch_size, 28, 28), popxl.float32, "image")
        img_t = ops.host_load(img_stream)  # load data
        label_stream = popxl.h2d_stream((batch_size,), popxl.int32, "labels")
        labels = ops.host_load(label_stream, "labels")

        # Create forward graph
        facts, fwd_graph = Net().create_graph(img_t)
        # Create backward graph via autodiff transform
        bwd_graph = addons.autodiff(fwd_graph)

        # Initialise variables (weights)
        variables = facts.init()

        # Call the forward graph with call_with_info because we want to retrieve
        # information from the call site
        fwd_info = fwd_graph.bind(variables).call_with_info(img_t)
        x = fwd_info.outputs[0]  # forward output

        # Compute loss and starting gradient for backpropagation
        loss, dx = addons.ops.cross_entropy_with_grad(x, labels)

        # Setup a stream to retrieve loss values from the host
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)

        # retrieve activations from the forward graph
        activations = bwd_graph.grad_graph_info.inputs_dict(fwd_info)
        # call the backward graph providing the starting value for backpropagation and activations
        bwd_info = bwd_graph.call_with_info(dx, args=activations)

        # Optimiser: get a mapping between forward tensors and corresponding
        # gradients and use it to update each tensor
        grads_dict = bwd_graph.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        for t in variables.tensors:
            ops.scaled_add_(t, grads_dict[t], b=-learning_rate)

    ir.num_host_transfers = 1
    return popxl.Session(ir, device), [img_stream, label_stream], variables, loss_stream


def test_program(test_batch_size, device):
    ir = popxl.Ir(replication=1)

    with ir.main_graph:
        # Inputs
        in_stream = popxl.h2d_stream((test_batch_size, 28, 28), popxl.float32, "image")
        in_t = ops.host_load(in_stream)

        # Create graphs
        facts, graph = Net().create_graph(in_t)

        # Initialise variables
        variables = facts.init()

        # Forward
        (outputs,) = graph.bind(variables).call(in_t)
        out_stream = popxl.d2h_stream(outputs.shape, outputs.dtype, "outputs")
        ops.host_store(out_stream, outputs)

    ir.num_host_transfers = 1
    return popxl.Session(ir, device), [in_stream], variables, out_stream


def accuracy(predictions: np.ndarray, labels: np.ndarray):
    ind = np.argmax(predictions, axis=-1).flatten()
    labels = np.asarray(labels).flatten()
    return np.mean(ind == labels) * 100.0


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--data-dir", help="folder with MNIST IDX files (torchvision layout)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--test-batch-size", type=int, default=80)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument(
        "--max-steps", type=int, default=None, help="stop each epoch after this many steps (default: the whole epoch)"
    )
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--device", default="ipu_hw", help="ipu_hw, ipu_model or cpu: all run on NumPy")
    observe.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.max_steps is not None and args.max_steps < 1:
        ap.error(f"--max-steps must be at least 1, got {args.max_steps}")
    observe.check_arguments(ap, args)

    np.random.seed(args.seed)
    train_x, train_y, test_x, test_y = load_mnist(args.data_dir)
    training_data = batches(train_x, train_y, args.batch_size, shuffle=True, seed=args.seed)
    test_data = batches(test_x, test_y, args.test_batch_size, shuffle=False)

    train_session, train_input_streams, train_variables, loss_stream = train_program(
        args.batch_size, args.device, args.lr
    )
    observe.memory(train_session, args)
    num_batches = len(training_data)
    if args.max_steps is not None:
        num_batches = min(num_batches, args.max_steps)
    with train_session, observe.StepProfiler(train_session, args) as runner:
        for epoch in range(1, args.epochs + 1):
            print(f"Epoch {epoch}/{args.epochs}")
            bar = progress(itertools.islice(training_data, num_batches), total=num_batches)
            for data, labels in bar:
                inputs: Mapping[popxl.HostToDeviceStream, np.ndarray] = dict(zip(train_input_streams, [data, labels]))
                loss = runner.run(inputs)[loss_stream]
                bar.set_description(f"Loss:{loss:0.4f}")

    train_vars_to_data = train_session.get_tensors_data(train_variables.tensors)

    test_session, test_input_streams, test_variables, out_stream = test_program(args.test_batch_size, args.device)
    # dictionary { train_session variables : test_session variables }
    train_vars_to_test_vars = train_variables.to_mapping(test_variables)
    # Create a dictionary { test_session variables : tensor data (numpy) }
    test_vars_to_data = {
        test_var: train_vars_to_data[train_var].copy() for train_var, test_var in train_vars_to_test_vars.items()
    }
    # Copy trained weights to the program, with a single host to device transfer
    test_session.write_variables_data(test_vars_to_data)

    # check that weights have been copied correctly
    test_vars_to_data_after_write = test_session.get_tensors_data(test_variables.tensors)
    for test_var, array in test_vars_to_data_after_write.items():
        assert (array == test_vars_to_data[test_var]).all()

    num_batches = len(test_data)
    sum_acc = 0.0
    with test_session:
        for data, labels in progress(test_data, total=num_batches):
            inputs = dict(zip(test_input_streams, [data, labels]))
            output = test_session.run(inputs)
            sum_acc += accuracy(output[out_stream], labels)

    test_set_accuracy = sum_acc / len(test_data)
    print(f"Accuracy on test set: {test_set_accuracy:0.2f}%")
    return test_set_accuracy


if __name__ == "__main__":
    main()
