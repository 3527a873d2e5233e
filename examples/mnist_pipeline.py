"""Pipelined MNIST training (seed 003 as written): 3 stages on 2 virtual IPUs.

    python examples/mnist_pipeline.py                    # micro batch 5, accumulation 6, Adam lr 1e-3
    python examples/mnist_pipeline.py --recomputation    # backward graphs recompute the activations
    python examples/mnist_pipeline.py --profile trace.json --memory-report --liveness live.svg   # observe.py

The tutorial's helpers (`Linear` with gelu, `Net`, the `Adam` module, `Graphs`,
`create_graphs`) come from `mnist_accumulate.py`, which has them verbatim. The training
program is the tutorial's `train_program`: the layer graphs are created on their IPU, and the
micro-batch loop is written once inside `addons.pipelined_execution(gradient_accumulation)`:

- stage 0 on IPU 0: fc1 and fc2 forward, the activation copied to IPU 1;
- stage 1 on IPU 1: fc3 and fc4 forward, loss, fc4 and fc3 backward, the gradient copied back;
- stage 2 on IPU 0: fc2 and fc1 backward, their activations restored from stashes
  (`stash_and_restore_activations`).

When the context closes, the `pipeline` pass turns it into ramp-up, a `call.repeat` main loop
and ramp-down; then each layer takes one Adam step on its accumulated gradients. The test
program is seed 003's (the whole `Net`, unpipelined). `evaluate_throughput` times both
sessions on synthetic data. Data: the bundled MNIST digits (`mnist_data.py`), or full MNIST
with `--data-dir`.

`--data-parallel 2` is the tutorial's `data_parallel = 2`: two replicas, each on its own
micro batches, whose accumulated gradients are averaged by `replicated_all_reduce_` (the
`Graphs.replicated_all_reduce` step) before Adam. It runs in one process, or as one process
per replica with the same numbers (the printed loss is the mean over every replica, gathered
from every process: `observe.replica_values`):

    python examples/mnist_pipeline.py --data-parallel 2
    mpirun -n 2 python examples/mnist_pipeline.py --data-parallel 2
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from time import time
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import observe  # noqa: E402
from mnist_accumulate import (  # noqa: E402  (seed 003's helpers, verbatim)
    Adam,
    Linear,
    Options,
    accuracy,
    create_graphs,
    test_program,
)
from mnist_data import batches, load_mnist  # noqa: E402
from mnist_data_parallel import QuietBar, local_share, replication, say  # noqa: E402

import popdist  # noqa: E402
import popxl  # noqa: E402
import popxl.ops as ops  # noqa: E402
import popxl_addons as addons  # noqa: E402
from popxl_addons.named_tensors import NamedTensors  # noqa: E402


def progress(iterable: Any, total: int | None = None) -> Any:
    if popdist.getInstanceIndex() != 0:  # under mpirun, instance 0 shows the bar
        return QuietBar(iterable)
    from progress_bar import progress as bar  # the examples' bounded progress bar

    return bar(iterable, total=total)


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

    result_str = f"Mean duration: {duration} s Throughput: {samples_per_step / duration:6.1f} samples/s "
    say(result_str)
    return samples_per_step / duration


def train_program(opts):
    """Seed 003's pipelined training program."""
    # under mpirun: the launch's replicas, split over its processes (`popdist`)
    ir = popxl.Ir(replication=replication(opts.train.data_parallel))
    if ir.replication_factor != opts.train.data_parallel:
        raise SystemExit(
            f"--data-parallel {opts.train.data_parallel} but the launch has {ir.replication_factor} "
            f"replicas (POPDIST_NUM_TOTAL_REPLICAS={os.environ.get(popdist.TOTAL_REPLICAS_VAR)})"
        )

    with ir.main_graph:
        # -----  Define input and output streams -----
        img_spec = popxl.TensorSpec((opts.train.micro_batch_size, 28 * 28), popxl.float32)
        inner_spec = popxl.TensorSpec((opts.train.micro_batch_size, 512), popxl.float32)

        img_stream = popxl.h2d_stream(img_spec.shape, popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.train.micro_batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")

        optimizer = Adam(cache=True)
        steps = opts.train.gradient_accumulation

        # ----- Create graphs -----

        # create graphs in the appropriate ipu context
        with popxl.ipu(0):
            fc1 = create_graphs("fc1", Linear(512), optimizer, opts, False, img_spec)
            fc2 = create_graphs("fc2", Linear(512), optimizer, opts, True, inner_spec)
        with popxl.ipu(1):
            fc3 = create_graphs("fc3", Linear(512), optimizer, opts, True, inner_spec)
            fc4 = create_graphs("fc4", Linear(10, gelu=False), optimizer, opts, True, inner_spec)

        # ----- Transform graphs -----
        # for example, add recomputation
        if opts.train.recomputation:
            fc1.recompute_graph()
            fc2.recompute_graph()
            fc3.recompute_graph()
            fc4.recompute_graph()

        # ----- Construct Execution Scheme -----
        #
        #  Pipeline
        #   stage0, ipu0: fc1 forward, fc2 forward
        #   stage1, ipu1: fc3 forward, fc4 forward, loss, fc4 backward, fc3 backward
        #   stage2, ipu0: fc2 backward, fc1 backward
        #
        #  Replica Reduction
        #  Optimizer
        #
        # --------------------------------------

        # ----- Pipeline -----
        with popxl.in_sequence(True):
            # context for pipeline: when the context closes the pipeline transformation is applied  to the graph
            with addons.pipelined_execution(steps) as pipeline:
                with pipeline.stage(0), popxl.ipu(0):
                    # fc1 fc2 forward
                    img_t = ops.host_load(img_stream)
                    x: popxl.Tensor
                    fc1_info = fc1.init_and_bind_fwd().call_with_info(img_t)
                    x = fc1_info.outputs[0]
                    fc2_info = fc2.init_and_bind_fwd().call_with_info(x)
                    x = fc2_info.outputs[0]
                    x = x.copy_to_ipu(1)

                with pipeline.stage(1), popxl.ipu(1):
                    # fc3 fc4 forward
                    labels = ops.host_load(label_stream, "labels")
                    fc3_info = fc3.init_and_bind_fwd().call_with_info(x)
                    x = fc3_info.outputs[0]
                    fc4_info = fc4.init_and_bind_fwd().call_with_info(x)
                    x = fc4_info.outputs[0]

                    # loss
                    loss, dx = addons.ops.cross_entropy_with_grad(x, labels)
                    ops.host_store(loss_stream, loss)

                    # grads
                    fc3_activations = fc3.bwd.grad_graph_info.inputs_dict(fc3_info)
                    fc4_activations = fc4.bwd.grad_graph_info.inputs_dict(fc4_info)
                    (dx,) = fc4.init_and_bind_bwd().call(dx, args=fc4_activations)  # provide fc4 activations
                    (dx,) = fc3.init_and_bind_bwd().call(dx, args=fc3_activations)  # provide fc3 activations

                    dx = dx.copy_to_ipu(0)

                with pipeline.stage(2), popxl.ipu(0):
                    # using stash_and_restore_activations ensure that when the pipeline graph is created
                    # activations are stashed during forward and retrieved from the FIFO stash during backward.
                    # Needs to be called inside a stage

                    # grads
                    fc2_activ = pipeline.stash_and_restore_activations(fc2_info, fc2.bwd.grad_graph_info)
                    (dx,) = fc2.init_and_bind_bwd().call(dx, args=fc2_activ)

                    fc1_activ = pipeline.stash_and_restore_activations(fc1_info, fc1.bwd.grad_graph_info)
                    fc1.init_and_bind_bwd().call(dx, args=fc1_activ)

            # -----/ Pipeline -----

            # ----- Replica Reduction -----
            if opts.train.data_parallel > 1:
                with popxl.ipu(0):
                    fc1.replicated_all_reduce()
                    fc2.replicated_all_reduce()

                with popxl.ipu(1):
                    fc3.replicated_all_reduce()
                    fc4.replicated_all_reduce()

            # ----- Optimizer -----
            with popxl.ipu(0):
                fc1.optimizer_step(opts.train.lr)
                fc2.optimizer_step(opts.train.lr)

            with popxl.ipu(1):
                fc3.optimizer_step(opts.train.lr)
                fc4.optimizer_step(opts.train.lr)

    # we have a for loop, the number of host loads is equal to gradient_accumulation
    ir.num_host_transfers = opts.train.gradient_accumulation

    # group all the variables to be able to copy weights to the test session.
    # Names need to match with the Net() names used for inference
    vars = NamedTensors()
    vars.insert("fc1", fc1.vars.fwd)
    vars.insert("fc2", fc2.vars.fwd)
    vars.insert("fc3", fc3.vars.fwd)
    vars.insert("fc4", fc4.vars.fwd)

    layers = {"fc1": fc1, "fc2": fc2, "fc3": fc3, "fc4": fc4}
    session = popxl.Session(ir, opts.train.device)
    return session, [img_stream, label_stream], vars, loss_stream, layers


class PipelineOptions(Options):
    """Seed 003's options plus this script's `--no-throughput` and `--save-weights`."""

    def __init__(self) -> None:
        super().__init__()
        self.throughput = True
        self.save_weights: str | None = None


def parse_args(argv: list[str] | None = None) -> PipelineOptions:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--data-dir", help="folder with MNIST IDX files (torchvision layout)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--micro-batch-size", type=int, default=5)
    ap.add_argument("--gradient-accumulation", type=int, default=6, help="pipeline steps per run (>= 2 x 3 stages)")
    ap.add_argument("--data-parallel", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--recomputation", action="store_true")
    ap.add_argument("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    ap.add_argument("--no-throughput", action="store_true", help="skip evaluate_throughput")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--device", default="ipu_hw", help="ipu_hw, ipu_model or cpu: all run on NumPy")
    ap.add_argument("--save-weights", help="write the trained weights to this .npz (instance 0)")
    observe.add_arguments(ap)
    args = ap.parse_args(argv)
    observe.check_arguments(ap, args)
    opts = PipelineOptions()
    opts.observe = args
    opts.train.micro_batch_size = args.micro_batch_size
    opts.train.gradient_accumulation = args.gradient_accumulation
    opts.train.data_parallel = args.data_parallel
    opts.train.lr = args.lr
    opts.train.epochs = args.epochs
    opts.train.recomputation = args.recomputation
    opts.train.device = opts.test.device = args.device
    opts.data_dir = args.data_dir
    opts.max_steps = args.max_steps
    opts.throughput = not args.no_throughput
    opts.seed = args.seed
    opts.save_weights = args.save_weights
    return opts


def main(argv: list[str] | None = None) -> float:
    opts = parse_args(argv)
    popdist.init()
    np.random.seed(opts.seed)

    global_batch_size = opts.train.micro_batch_size * opts.train.gradient_accumulation * opts.train.data_parallel
    train_x, train_y, test_x, test_y = load_mnist(opts.data_dir)
    training_data = batches(train_x, train_y, global_batch_size, shuffle=True, seed=opts.seed)
    test_data = batches(test_x, test_y, opts.test.micro_batch_size, shuffle=False)

    train_session, train_input_streams, train_variables, loss_stream, _ = train_program(opts)
    observe.memory(train_session, opts.observe)

    with train_session, observe.StepProfiler(train_session, opts.observe) as runner:
        nr_batches = len(training_data)
        if opts.max_steps is not None:
            nr_batches = min(nr_batches, opts.max_steps)
        for epoch in range(1, opts.train.epochs + 1):
            say(f"Epoch {epoch}/{opts.train.epochs}")
            bar = progress(training_data, total=nr_batches)
            for i, (data, labels) in enumerate(bar):
                if i >= nr_batches:
                    break
                # reshape data accounting for replication and num hosts transfers: this
                # process's replicas' share, [num_host_transfers, instance replicas, micro batch, ...]
                data = local_share(data.reshape(-1, 28 * 28), train_session.ir, opts.train.micro_batch_size)
                labels = local_share(labels, train_session.ir, opts.train.micro_batch_size)

                inputs: Mapping[popxl.HostToDeviceStream, np.ndarray] = dict(
                    zip(train_input_streams, [data.astype(np.float32), labels.astype(np.int32)])
                )
                loss = runner.run(inputs)
                # every replica's losses, [num_host_transfers, replication_factor], from every process
                losses_np = observe.replica_values(train_session, loss[loss_stream])
                avg_loss = np.mean(losses_np)
                bar.set_description(f"Loss:{avg_loss:0.4f}")

    # get weights data : dictionary { train_session variables : tensor data (numpy) }
    train_vars_to_data = train_session.get_tensors_data(train_variables.tensors)
    if opts.save_weights and popdist.getInstanceIndex() == 0:
        arrays = {n: train_vars_to_data[t] for n, t in train_variables.named_tensors.items()}
        # numpy's stub types **kwds as if a key could be its `allow_pickle` parameter
        np.savez(opts.save_weights, **arrays)  # pyright: ignore[reportArgumentType]

    # Create test program and test session
    test_session, test_input_streams, test_variables, out_stream = test_program(
        opts.test.micro_batch_size, opts.test.device
    )

    # dictionary { train_session variables : test_session variables }
    train_vars_to_test_vars = train_variables.to_mapping(test_variables)

    # Create a dictionary { test_session variables : tensor data (numpy) }
    # We want to copy the values before evaluating throughput on synthetic data, otherwise weights are changed
    test_vars_to_data = {
        test_var: train_vars_to_data[train_var].copy() for train_var, test_var in train_vars_to_test_vars.items()
    }

    # Copy trained weights to the program, with a single host to device transfer at the end
    test_session.write_variables_data(test_vars_to_data)

    if opts.throughput:
        # evaluate the ratio samples per step / time for train session
        say("train session")
        evaluate_throughput(train_session, global_batch_size)

    nr_batches = len(test_data)
    sum_acc = 0.0
    with test_session:
        for data, labels in progress(test_data, total=nr_batches):
            inputs = dict(zip(test_input_streams, [data, labels]))
            output = test_session.run(inputs)
            sum_acc += accuracy(output[out_stream], labels)
    test_set_accuracy = sum_acc / len(test_data)
    say(f"Accuracy on test set: {test_set_accuracy:0.2f}%")

    if opts.throughput:
        samples_per_step = opts.test.micro_batch_size
        # no data parallelism or gradient accumulation for inference in this program
        say("test session")
        evaluate_throughput(test_session, samples_per_step)
    return test_set_accuracy


if __name__ == "__main__":
    main()
