"""MNIST with remote variables and replicated tensor sharding (the PopXL tutorial 5 program).

    python examples/mnist_rts.py                      # 4 replicas x 8 micro batches of 8 = 256 images per step
    python examples/mnist_rts.py --memory-report      # also print the train program's memory report
    python examples/mnist_rts.py --profile trace.json # trace and op table of 5 steps (observe.py)
    mpirun -n 2 python examples/mnist_rts.py          # 2 processes of 2 replicas each

Data parallel over `--data-parallel` (4) replicas with `--gradient-accumulation` (8) micro
batches each. After accumulation the gradients of tensors with at least
`--sharded-threshold` (512) elements (their shard group: all replicas, `get_shard_groups`)
are reduce-scattered over the replicas
(`popxl_addons.rts.reduce_replica_sharded_graph`): each replica gets one quarter of the
mean gradient, takes the Adam step on its quarter of the weight (`replica_sharded_slice`)
with optimiser state that is itself sharded and kept in remote buffers
(`addons.named_variable_buffers(..., shard_over_dict=...)`, `load_remote_graph`, `store_remote_graph`,
`NamedVariableFactories.init_remote`), and the updated quarters are all-gathered back into
the full weight (`copy_var_update_`). Smaller tensors are all-reduced and updated whole.
Data: the bundled MNIST digits (`mnist_data.py`) or full MNIST with `--data-dir`.

Under `mpirun` the program is built with `popxl.Ir(replication="popdist")`, as
`mnist_data_parallel.py` does: each process runs `data_parallel / P` of the replicas and feeds
them its share of every batch; the printed loss is the mean over every replica of every
process (`observe.replica_values`), so one process and `mpirun -n 2` print the same numbers.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import observe  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402
from mnist_data_parallel import local_share, progress, replication, say  # noqa: E402

import popdist  # noqa: E402
import popxl  # noqa: E402
import popxl.ops as ops  # noqa: E402
import popxl_addons as addons  # noqa: E402
from popxl_addons.named_replica_grouping import NamedReplicaGrouping  # noqa: E402
from popxl_addons.named_tensors import NamedTensors  # noqa: E402
from popxl_addons.rts import reduce_replica_sharded_graph, replica_sharded_spec  # noqa: E402


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    ind = np.argmax(predictions, axis=-1).flatten()
    return float(np.mean(ind == np.asarray(labels).flatten()) * 100.0)


class Linear(addons.Module):
    def __init__(self, out_features: int, bias: bool = True):
        super().__init__()
        self.out_features = out_features
        self.bias = bias

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)), x.dtype
        )
        y = x @ w
        if self.bias:
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
        return self.fc4(x)


class Adam(addons.Module):
    """The tutorial's Adam: sharded state for a sharded variable (one with a meta shape)."""

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
        weight_decay: float | popxl.Tensor = 0.0,
        first_order_dtype: popxl.dtype = popxl.float16,
        bias_correction: bool = True,
    ):
        if var.meta_shape:  # sharded inputs are added with add_replica_sharded_variable_input
            first_order = self.add_replica_sharded_variable_input(
                "first_order", partial(np.zeros, var.meta_shape), first_order_dtype, by_ref=True
            )
            second_order = self.add_replica_sharded_variable_input(
                "second_order", partial(np.zeros, var.meta_shape), popxl.float32, by_ref=True
            )
        else:
            first_order = self.add_variable_input(
                "first_order", partial(np.zeros, var.shape), first_order_dtype, by_ref=True
            )
            second_order = self.add_variable_input(
                "second_order", partial(np.zeros, var.shape), popxl.float32, by_ref=True
            )
        ops.var_updates.accumulate_moving_average_(first_order, grad, f=beta1)
        ops.var_updates.accumulate_moving_average_square_(second_order, grad, f=beta2)
        step = None
        if bias_correction:
            step = self.add_variable_input("step", partial(np.zeros, ()), popxl.float32, by_ref=True)
        updater = ops.var_updates.adam_updater(
            first_order, second_order, weight=var, weight_decay=weight_decay, time_step=step,
            beta1=beta1, beta2=beta2, epsilon=eps,
        )  # fmt: skip
        ops.scaled_add_(var, updater, b=-lr)


def get_shard_groups(opts, facts: addons.NamedVariableFactories) -> dict[str, popxl.ReplicaGrouping]:
    """The replica grouping each variable is sharded over: its replica grouping when it has
    at least `--sharded-threshold` elements and they divide by the group size, else a group
    of one replica (not sharded); sorted by name."""
    ir = popxl.gcg().ir
    groups = {}
    for name, f in facts.to_dict().items():
        size = int(np.prod(f.shape))
        rg = f.replica_grouping
        if size >= opts.sharded_threshold and size % rg.group_size == 0:
            groups[name] = rg
        else:
            groups[name] = ir.replica_grouping(group_size=1)
    return dict(sorted(groups.items()))


def remote_step(
    var: popxl.Tensor, grad: popxl.Tensor, optimizer: addons.Module, opts, shard_group: popxl.ReplicaGrouping
) -> None:
    """One Adam step whose state lives off chip: load the state, update, store it back."""
    facts, opt_graph = optimizer.create_graph(
        replica_sharded_spec(var, shard_over=shard_group),
        replica_sharded_spec(grad, shard_over=shard_group),
        lr=opts.lr,
    )
    shard_over = {n: rg.group_size for n, rg in get_shard_groups(opts, facts).items()}
    buffers = addons.named_variable_buffers(facts, entries=1, shard_over_dict=shard_over)
    opt_load, names = addons.load_remote_graph(buffers, entries=1)
    opt_store = addons.store_remote_graph(buffers, entries=1)
    facts.init_remote(buffers)  # the state's initial values, in the buffers
    state = NamedTensors.pack(names, opt_load.call(0))  # remote -> device
    opt_graph.bind(state).call(var, grad)
    opt_store.bind(state).call(0)  # device -> remote


def optimizer_step(
    variables: NamedTensors, grads: dict[popxl.Tensor, popxl.Tensor], optimizer, counter, opts, shard_groups
) -> None:
    for name, var in variables.named_tensors.items():
        remote_step(var, grads[var], optimizer, opts, shard_groups[name])
    if counter is not None:
        ops.var_updates.accumulator_scale_(counter, 0.0)  # reset the accumulators


def train_program(opts):
    ir = popxl.Ir(replication=replication(opts.data_parallel))
    with ir.main_graph:
        img_spec = popxl.TensorSpec((opts.train_micro_batch_size, 28, 28), popxl.float32)
        img_stream = popxl.h2d_stream(img_spec.shape, popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.train_micro_batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")

        facts, fwd_graph = Net().create_graph(img_spec)
        variables = facts.init()
        bound_fwd = fwd_graph.bind(variables)
        shard_groups = get_shard_groups(opts, facts)
        bwd_facts, bwd_graph = addons.autodiff_with_accumulation(fwd_graph, fwd_graph.args.tensors)
        accumulated = bwd_facts.init()
        counter = accumulated.mean_accum_counter
        bound_bwd = bwd_graph.bind(accumulated)

        with popxl.in_sequence(True):
            for _ in range(opts.gradient_accumulation):
                img_t = ops.host_load(img_stream)
                labels = ops.host_load(label_stream, "labels")
                fwd_info = bound_fwd.call_with_info(img_t)  # full weights in the forward
                loss, dx = addons.ops.cross_entropy_with_grad(fwd_info.outputs[0], labels)
                ops.host_store(loss_stream, loss)
                bound_bwd.call(dx, args=bwd_graph.grad_graph_info.inputs_dict(fwd_info))
            grads = accumulated.accum  # keyed like the variables

            if opts.data_parallel > 1:
                # large gradients are reduce-scattered (sharded), small ones all-reduced
                grad_reduce, names = reduce_replica_sharded_graph(
                    grads, "mean", shard_groups=NamedReplicaGrouping.from_dict(shard_groups)
                )
                grads = NamedTensors.pack(names, grad_reduce.bind(grads).call())
                # the replica's shard of each large variable
                shards = {}
                for name, v in variables.named_tensors.items():
                    if shard_groups[name].group_size > 1:
                        shards[name] = ops.collectives.replica_sharded_slice(v, group=shard_groups[name])
                    else:
                        shards[name] = v
                sharded_vars = NamedTensors.from_dict(shards)
            else:
                sharded_vars = variables

            grad_of = grads.named_tensors
            grads_dict = {v: grad_of[k] for k, v in sharded_vars.named_tensors.items()}
            optimizer_step(sharded_vars, grads_dict, Adam(cache=True), counter, opts, shard_groups)

            # gather the updated shards into the full variables
            full_vars = variables.named_tensors
            for name, v in sharded_vars.named_tensors.items():
                if v.meta_shape:
                    full = ops.collectives.replicated_all_gather(v, group=shard_groups[name])
                    ops.var_updates.copy_var_update_(full_vars[name], full)

    ir.num_host_transfers = opts.gradient_accumulation
    return popxl.Session(ir, opts.device), [img_stream, label_stream], variables, loss_stream


def test_program(opts):
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        in_stream = popxl.h2d_stream((opts.test_batch_size, 28, 28), popxl.float32, "image")
        in_t = ops.host_load(in_stream)
        facts, graph = Net().create_graph(in_t)
        variables = facts.init()
        (outputs,) = graph.bind(variables).call(in_t)
        out_stream = popxl.d2h_stream(outputs.shape, outputs.dtype, "outputs")
        ops.host_store(out_stream, outputs)
    ir.num_host_transfers = 1
    return popxl.Session(ir, opts.device), [in_stream], variables, out_stream


def train(train_session, training_data, opts, input_streams, loss_stream) -> list[float]:
    """The training loop; returns the mean loss of each step over every replica."""
    ir = train_session.ir
    steps = len(training_data) if opts.max_steps is None else min(len(training_data), opts.max_steps)
    losses = []
    with train_session, observe.StepProfiler(train_session, opts) as runner:
        for epoch in range(1, opts.epochs + 1):
            say(f"Epoch {epoch}/{opts.epochs}")
            bar = progress(training_data, total=steps)
            for i, (data, labels) in enumerate(bar):
                if i >= steps:
                    break
                # this process's replicas' share: [num_host_transfers, replicas, micro batch, ...]
                data = local_share(data, ir, opts.train_micro_batch_size)
                labels = local_share(labels, ir, opts.train_micro_batch_size)
                out = runner.run(dict(zip(input_streams, [data.astype(np.float32), labels.astype(np.int32)])))
                losses.append(float(np.mean(observe.replica_values(train_session, out[loss_stream]))))
                bar.set_description(f"Loss:{losses[-1]:0.4f}")
    return losses


def test(test_session, test_data, input_streams, out_stream) -> float:
    total = 0.0
    with test_session:
        for data, labels in progress(test_data, total=len(test_data)):
            output = test_session.run(dict(zip(input_streams, [data])))
            total += accuracy(output[out_stream], labels)
    acc = total / len(test_data)
    say(f"Accuracy on test set: {acc:0.2f}%")
    return acc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--train-micro-batch-size", type=int, default=8, help="batch size for training (default: 8)")
    ap.add_argument("--test-batch-size", type=int, default=80, help="batch size for testing (default: 80)")
    ap.add_argument("--epochs", type=int, default=1, help="number of epochs to train (default: 1)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate (default: 1e-3)")
    ap.add_argument("--data-parallel", type=int, default=4, help="data parallelism (default: 4)")
    ap.add_argument("--gradient-accumulation", type=int, default=8, help="gradient accumulation (default: 8)")
    ap.add_argument("--sharded-threshold", type=int, default=512,
                    help="tensors with at least this many elements are sharded (default: 512)")  # fmt: skip
    ap.add_argument("--data-dir", help="folder with MNIST IDX files (torchvision layout)")
    ap.add_argument("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    ap.add_argument("--seed", type=int, default=42, help="initial weights and shuffle")
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
    global_batch = opts.train_micro_batch_size * opts.gradient_accumulation * opts.data_parallel
    train_x, train_y, test_x, test_y = load_mnist(opts.data_dir)
    training_data = batches(train_x, train_y, global_batch, shuffle=True, seed=opts.seed)
    test_data = batches(test_x, test_y, opts.test_batch_size, shuffle=False)

    train_session, train_streams, train_variables, loss_stream = train_program(opts)
    observe.memory(train_session, opts)
    ir = train_session.ir
    say(
        f"train session: {ir.replication_factor} replicas, {popdist.getNumInstances()} instance(s) of "
        f"{ir.instance_replication_factor}; global batch {global_batch}"
    )
    losses = train(train_session, training_data, opts, train_streams, loss_stream)
    trained = train_session.get_tensors_data(train_variables.tensors)
    weights = {name: np.array(trained[t]) for name, t in train_variables.named_tensors.items()}
    if opts.save_weights and popdist.getInstanceIndex() == 0:
        # numpy's stub types **kwds as if a key could be its `allow_pickle` parameter
        np.savez(opts.save_weights, **weights)  # pyright: ignore[reportArgumentType]

    test_session, test_streams, test_variables, out_stream = test_program(opts)
    test_session.write_variables_data(
        {
            test_var: trained[train_var].copy()
            for train_var, test_var in train_variables.to_mapping(test_variables).items()
        }
    )
    say("test session")
    acc = test(test_session, test_data, test_streams, out_stream)
    return {"accuracy": acc, "losses": losses, "weights": weights}


if __name__ == "__main__":
    main()
