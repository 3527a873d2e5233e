"""Data-parallel MNIST (the PopXL data-parallelism tutorial): replicas, gradient accumulation, Adam.

    python examples/mnist_data_parallel.py                  # 2 replicas simulated in one process
    mpirun -n 2 python examples/mnist_data_parallel.py      # 2 processes, one replica each
    mpirun -n 2 python examples/mnist_data_parallel.py --data-parallel 4   # 2 replicas per process
    python examples/mnist_data_parallel.py --profile trace.json --memory-report   # see observe.py

Each replica takes `gradient_accumulation` (4) micro batches of 8 images per step, the
backward graph (`addons.autodiff_with_accumulation`) averages their gradients, then
`ops.collectives.replicated_all_reduce_(g, op="mean")` averages the accumulated gradients of
all replicas and every replica takes the same Adam step: the global batch is
8 x 4 x 2 = 64 images. The model, the `Adam` module and `optimizer_step` are the tutorial's.

Under `mpirun` (the `[mpi]` extra) the program is built with `popxl.Ir(replication="popdist")`
and `--data-parallel` replicas in total (`POPDIST_NUM_TOTAL_REPLICAS`, unless set already):
each of the P processes runs `data_parallel / P` of the replicas and feeds them its share of
every global batch (`[gradient_accumulation, instance_replication_factor, 8, 28, 28]`); the
collectives exchange the gradients with MPI and the result is bit for bit the one-process
run's. The printed loss of a step is the mean over every replica (each instance's losses are
gathered, `observe.replica_values`), the same figure in one process and under `mpirun`.
Every instance evaluates the trained weights; instance 0 prints. Data: the bundled
MNIST digits (`mnist_data.py`), or full MNIST with `--data-dir`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from time import time
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import observe  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402

import popdist  # noqa: E402
import popxl  # noqa: E402
import popxl.ops as ops  # noqa: E402
import popxl_addons as addons  # noqa: E402
from popxl_addons.named_tensors import NamedTensors  # noqa: E402


def accuracy(predictions: np.ndarray, labels: np.ndarray):
    ind = np.argmax(predictions, axis=-1).flatten()
    labels = np.asarray(labels).flatten()
    return np.mean(ind == labels) * 100.0


# ------------------------------------------------------------------------------------------
# The tutorial's model and optimizer
# ------------------------------------------------------------------------------------------


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


class Adam(addons.Module):
    # in_sequence: many operations are in place and their order must be kept
    @popxl.in_sequence()
    def build(
        self,
        var: popxl.TensorByRef,
        grad: popxl.Tensor,
        *,
        lr: float | popxl.Tensor,
        beta1: float | popxl.Tensor = 0.9,
        beta2: float | popxl.Tensor = 0.999,
        eps: float | popxl.Tensor = 1e-5,
        weight_decay: float | popxl.Tensor = 1e-2,
        first_order_dtype: popxl.dtype = popxl.float16,
        bias_correction: bool = True,
    ):
        # gradient estimators for the variable var - same shape as the variable
        first_order = self.add_variable_input(
            "first_order", partial(np.zeros, var.shape), first_order_dtype, by_ref=True
        )
        ops.var_updates.accumulate_moving_average_(first_order, grad, f=beta1)

        # variance estimators for the variable var - same shape as the variable
        second_order = self.add_variable_input("second_order", partial(np.zeros, var.shape), popxl.float32, by_ref=True)
        ops.var_updates.accumulate_moving_average_square_(second_order, grad, f=beta2)

        # adam is a biased estimator: provide the step to correct bias
        step = None
        if bias_correction:
            step = self.add_variable_input("step", partial(np.zeros, ()), popxl.float32, by_ref=True)

        # calculate the weight increment with adam heuristic
        updater = ops.var_updates.adam_updater(
            first_order,
            second_order,
            weight=var,
            weight_decay=weight_decay,
            time_step=step,
            beta1=beta1,
            beta2=beta2,
            epsilon=eps,
        )

        # in place weight update: w += (-lr)*dw
        ops.scaled_add_(var, updater, b=-lr)


def optimizer_step(
    variables: NamedTensors,
    grads: dict[popxl.Tensor, popxl.Tensor],
    optimizer: addons.Module,
    accum_counter: popxl.Tensor | None,
    lr: float | popxl.Tensor = 1e-3,
):
    """Update all variables, one optimizer graph per variable (shape)."""
    for var in variables.named_tensors.values():
        # create optimizer and state factories for the variable
        opt_facts, opt_graph = optimizer.create_graph(var, var.spec, lr=lr, weight_decay=0.0, bias_correction=True)
        state = opt_facts.init()
        # bind the graph to its state and call it.
        opt_graph.bind(state).call(var, grads[var])

    if accum_counter is not None:
        # Resetting the counter for mean gradient accumulation is sufficient to zero the
        # accumulators in the next call to ops.accumulate_mean_
        ops.var_updates.accumulator_scale_(accum_counter, 0.0)


# ------------------------------------------------------------------------------------------
# Programs
# ------------------------------------------------------------------------------------------


def replication(data_parallel: int) -> int | str:
    """`Ir(replication=...)`: 'popdist' when launched by mpirun, with `data_parallel` replicas
    in total (POPDIST_NUM_TOTAL_REPLICAS, unless already set) split over the processes;
    else the int (every replica in this process)."""
    if popdist.isPopdistEnvSet():
        os.environ.setdefault(popdist.TOTAL_REPLICAS_VAR, str(data_parallel))
        return "popdist"
    return data_parallel


def train_program(opts):
    ir = popxl.Ir(replication=replication(opts.data_parallel))
    if ir.replication_factor != opts.data_parallel:
        raise SystemExit(
            f"--data-parallel {opts.data_parallel} but the launch has {ir.replication_factor} replicas "
            f"(POPDIST_NUM_TOTAL_REPLICAS={os.environ.get(popdist.TOTAL_REPLICAS_VAR)})"
        )

    with ir.main_graph:
        # Create input streams from host to device
        img_spec = popxl.TensorSpec((opts.train_micro_batch_size, 28, 28), popxl.float32)

        img_stream = popxl.h2d_stream(img_spec.shape, popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.train_micro_batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")

        # Create forward graph
        facts, fwd_graph = Net().create_graph(img_spec)
        variables = facts.init()
        bound_fwd = fwd_graph.bind(variables)

        counter = None
        required_grads = fwd_graph.args.tensors

        if opts.gradient_accumulation < 1:
            raise ValueError(f"gradient_accumulation must be >= 1, got {opts.gradient_accumulation}")
        if opts.gradient_accumulation > 1:
            bwd_facts, bwd_graph = addons.autodiff_with_accumulation(fwd_graph, required_grads)
            accumulated_grads = bwd_facts.init()
            counter = accumulated_grads.mean_accum_counter
            bound_bwd = bwd_graph.bind(accumulated_grads)
        else:
            # standard autodiff, avoid extra memory
            bwd_graph = addons.autodiff(fwd_graph, grads_required=required_grads)
            accumulated_grads = bound_bwd = None
        grads: tuple[popxl.Tensor, ...] = ()  # set by the (at least one) accumulation step below

        # in sequence needed for in place ops
        with popxl.in_sequence(True):
            # gradient accumulation loop
            for _ in range(opts.gradient_accumulation):
                # load data
                img_t = ops.host_load(img_stream)
                labels = ops.host_load(label_stream, "labels")

                # fwd
                fwd_info = bound_fwd.call_with_info(img_t)
                x = fwd_info.outputs[0]

                # loss
                loss, dx = addons.ops.cross_entropy_with_grad(x, labels)
                ops.host_store(loss_stream, loss)

                # bwd
                activations = bwd_graph.grad_graph_info.inputs_dict(fwd_info)

                if bound_bwd is not None and accumulated_grads is not None:  # gradient_accumulation > 1
                    bound_bwd.call(dx, args=activations)
                    grads = accumulated_grads.tensors[:-1]  # exclude the counter
                else:
                    grads = bwd_graph.call(dx, args=activations)

            # reduce gradients across replicas with mean op
            if opts.data_parallel > 1:
                for g in grads:
                    g = ops.collectives.replicated_all_reduce_(g, op="mean")

            # optimizer step: the optimizer resets the accumulators
            grads_dict = dict(zip(variables.tensors, grads))
            optimizer = Adam(cache=True)
            optimizer_step(variables, grads_dict, optimizer, counter, opts.lr)

    # we have a for loop, the number of host loads is equal to gradient_accumulation
    ir.num_host_transfers = opts.gradient_accumulation

    return popxl.Session(ir, opts.device), [img_stream, label_stream], variables, loss_stream


def test_program(opts):
    ir = popxl.Ir(replication=1)

    with ir.main_graph:
        # Inputs
        in_stream = popxl.h2d_stream((opts.test_batch_size, 28, 28), popxl.float32, "image")
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
    return popxl.Session(ir, opts.device), [in_stream], variables, out_stream


# ------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------


def local_share(array: np.ndarray, ir: popxl.Ir, micro_batch: int) -> np.ndarray:
    """A global batch `[gradient_accumulation * replicas * micro_batch, ...]` as the tutorial
    feeds it, `[num_host_transfers, replication_factor, micro_batch, ...]`, cut to this
    instance's replicas (dims of size 1 dropped, as Session expects)."""
    full = array.reshape(ir.num_host_transfers, ir.replication_factor, micro_batch, *array.shape[1:])
    offset = popdist.getReplicaIndexOffset() if ir.instance_replication_factor < ir.replication_factor else 0
    mine = full[:, offset : offset + ir.instance_replication_factor]
    lead = [d for d in mine.shape[:2] if d > 1]
    return mine.reshape(*lead, *mine.shape[2:])


def is_printing_instance() -> bool:
    return popdist.getInstanceIndex() == 0


def progress(iterable: Any, total: int | None = None) -> Any:
    if not is_printing_instance():
        return QuietBar(iterable)
    from progress_bar import progress as bar

    return bar(iterable, total=total)


class QuietBar:
    """The progress bar of the instances that do not print."""

    def __init__(self, iterable: Any) -> None:
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def set_description(self, desc: str) -> None:
        pass


def say(*args: Any) -> None:
    if is_printing_instance():
        print(*args, flush=True)


def train(train_session, training_data, opts, input_streams, loss_stream) -> list[float]:
    """The training loop; returns the mean loss of each step over every replica (those of
    the other instances too under mpirun)."""
    ir = train_session.ir
    nr_batches = len(training_data)
    if opts.max_steps is not None:
        nr_batches = min(nr_batches, opts.max_steps)
    step_losses = []
    with train_session, observe.StepProfiler(train_session, opts) as runner:
        for epoch in range(1, opts.epochs + 1):
            say(f"Epoch {epoch}/{opts.epochs}")
            bar = progress(training_data, total=nr_batches)
            for i, (data, labels) in enumerate(bar):
                if i >= nr_batches:
                    break
                # reshape data accounting for replication and num hosts transfers
                data = local_share(data, ir, opts.train_micro_batch_size)
                labels = local_share(labels, ir, opts.train_micro_batch_size)
                inputs: Mapping[popxl.HostToDeviceStream, np.ndarray] = dict(
                    zip(input_streams, [data.astype(np.float32), labels.astype(np.int32)])
                )
                loss = runner.run(inputs)
                # this instance's replicas: (num_host_transfers, instance_replication_factor)
                # without size-1 dims; every replica's: (num_host_transfers, replication_factor)
                losses_np = observe.replica_values(train_session, loss[loss_stream])
                avg_loss = float(np.mean(losses_np))
                step_losses.append(avg_loss)
                bar.set_description(f"Loss:{avg_loss:0.4f}")
    return step_losses


def evaluate_throughput(session, samples_per_step, epochs: int = 5):
    inputs = {
        stream: np.ones(session._full_input_shape(stream.shape), stream.dtype.as_numpy())
        for stream in session.expected_inputs()
    }

    durations = []
    with session:
        for _ in range(epochs):
            start = time()
            session.run(inputs)
            dur = time() - start
            durations.append(dur)

    duration = np.mean(durations)

    say(f"Mean duration: {duration} s Throughput: {samples_per_step / duration:6.1f} samples/s ")
    return samples_per_step / duration


def test(test_session, test_data, input_streams, out_stream) -> float:
    nr_batches = len(test_data)
    sum_acc = 0.0
    with test_session:
        for data, labels in progress(test_data, total=nr_batches):
            inputs: Mapping[popxl.HostToDeviceStream, np.ndarray] = dict(zip(input_streams, [data]))
            output = test_session.run(inputs)
            sum_acc += accuracy(output[out_stream], labels)
    test_set_accuracy = sum_acc / len(test_data)
    say(f"Accuracy on test set: {test_set_accuracy:0.2f}%")
    return test_set_accuracy


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--train-micro-batch-size", type=int, default=8, help="batch size for training (default: 8)")
    ap.add_argument("--test-batch-size", type=int, default=80, help="batch size for testing (default: 80)")
    ap.add_argument("--epochs", type=int, default=1, help="number of epochs to train (default: 1)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate (default: 1e-3)")
    ap.add_argument("--data-parallel", type=int, default=2, help="data parallelism (default: 2)")
    ap.add_argument("--gradient-accumulation", type=int, default=4, help="gradient accumulation (default: 4)")
    ap.add_argument("--data-dir", help="folder with MNIST IDX files (torchvision layout)")
    ap.add_argument("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    ap.add_argument("--seed", type=int, default=42, help="initial weights and shuffle")
    ap.add_argument("--throughput", action="store_true", help="also time the sessions (evaluate_throughput)")
    ap.add_argument("--save-weights", help="write the trained weights to this .npz (instance 0)")
    ap.add_argument("--device", default="ipu_hw", help="ipu_hw, ipu_model or cpu: all run on NumPy")
    observe.add_arguments(ap)
    opts = ap.parse_args(argv)
    for name in ("train_micro_batch_size", "test_batch_size", "epochs", "data_parallel", "gradient_accumulation"):
        if getattr(opts, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    observe.check_arguments(ap, opts)
    return opts


def main(argv: list[str] | None = None) -> dict:
    opts = parse_args(argv)
    popdist.init()
    # every instance draws the same initial weights and the same shuffle
    np.random.seed(opts.seed)

    train_global_batch_size = opts.train_micro_batch_size * opts.gradient_accumulation * opts.data_parallel
    train_x, train_y, test_x, test_y = load_mnist(opts.data_dir)
    training_data = batches(train_x, train_y, train_global_batch_size, shuffle=True, seed=opts.seed)
    test_data = batches(test_x, test_y, opts.test_batch_size, shuffle=False)

    train_session, train_input_streams, train_variables, loss_stream = train_program(opts)
    ir = train_session.ir
    say(
        f"train session: {ir.replication_factor} replicas, {popdist.getNumInstances()} instance(s) of "
        f"{ir.instance_replication_factor}; global batch {train_global_batch_size}"
    )
    observe.memory(train_session, opts)
    losses = train(train_session, training_data, opts, train_input_streams, loss_stream)

    # get weights data : dictionary { train_session variables : tensor data (numpy) }
    train_vars_to_data = train_session.get_tensors_data(train_variables.tensors)
    weights = {name: np.array(train_vars_to_data[t]) for name, t in train_variables.named_tensors.items()}
    if opts.save_weights and is_printing_instance():
        # numpy's stub types **kwds as if a key could be its `allow_pickle` parameter
        np.savez(opts.save_weights, **weights)  # pyright: ignore[reportArgumentType]

    # create test session
    test_session, test_input_streams, test_variables, out_stream = test_program(opts)

    # dictionary { train_session variables : test_session variables }
    train_vars_to_test_vars = train_variables.to_mapping(test_variables)
    # Create a dictionary { test_session variables : tensor data (numpy) }
    test_vars_to_data = {
        test_var: train_vars_to_data[train_var].copy() for train_var, test_var in train_vars_to_test_vars.items()
    }
    # Copy trained weights to the program, with a single host to device transfer at the end
    test_session.write_variables_data(test_vars_to_data)

    if opts.throughput:
        say("train session")
        evaluate_throughput(train_session, train_global_batch_size)

    say("test session")
    test_set_accuracy = test(test_session, test_data, test_input_streams, out_stream)
    if opts.throughput:
        evaluate_throughput(test_session, opts.test_batch_size)
    return {"accuracy": test_set_accuracy, "losses": losses, "weights": weights}


if __name__ == "__main__":
    main()
