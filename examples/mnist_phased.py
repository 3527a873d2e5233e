"""Phased execution of MNIST (the PopXL tutorial 6 program): layers loaded from remote buffers
phase by phase, batch serialisation, replica-sharded variables and optimiser state.

    python examples/mnist_phased.py                      # 2 replicas x 4 micro batches of 8 = 64 images per step
    python examples/mnist_phased.py --io-mode compute    # or io (default), io_overlapped
    python examples/mnist_phased.py --memory-report      # resident vs remote bytes, beside the unphased program
    python examples/mnist_phased.py --profile trace.json # trace and op table of 5 steps (observe.py)

Every variable and its Adam state live in remote buffers (`named_variable_buffers` with a
`shard_over_dict`: those with at least `--sharded-threshold` elements are sharded over the
replicas, `get_shard_groups`). A step runs seven
phases, each holding only one layer on chip:

    fc1 fwd, fc2 fwd, fc3 fwd                   load + all-gather the layer, batch-serialised fwd
    fc4 fwd + loss + bwd + Adam                 ... then reduce-scatter the gradients, Adam, store
    fc3 bwd + Adam, fc2 bwd + Adam, fc1 bwd + Adam

Each batch-serialised graph (`batch_serialise(_fwd_and_grad)`) loops over the
`--gradient-accumulation` micro batches: it loads its input (a stream for fc1, else the
previous layer's activations from `x_buffer`), computes, and stores its output and the
activations its backward needs in remote buffers (`dx_buffer` carries the gradients back).
fc2 and fc3 share one graph and one set of buffers (rows 0 and 1).
"""

from __future__ import annotations

import argparse
import json
import sys
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
from popxl_addons import batch_serial_buffer, batch_serialise, batch_serialise_fwd_and_grad  # noqa: E402
from popxl_addons.named_replica_grouping import NamedReplicaGrouping  # noqa: E402
from popxl_addons.named_tensors import NamedTensors  # noqa: E402
from popxl_addons.remote import (  # noqa: E402
    NamedRemoteBuffers,
    load_remote_graph,
    named_variable_buffers,
    store_remote_graph,
)
from popxl_addons.rts import all_gather_replica_sharded_graph, reduce_replica_sharded_graph, replica_sharded_spec  # noqa: E402
from popxl_addons.variable_factory import NamedVariableFactories  # noqa: E402


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    ind = np.argmax(predictions, axis=-1).flatten()
    return float(np.mean(ind == np.asarray(labels).flatten()) * 100.0)


class Linear(addons.Module):
    """x @ w + b, then gelu (unless gelu=False)."""

    def __init__(self, out_features: int, bias: bool = True, gelu: bool = True):
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.gelu = gelu

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)), x.dtype
        )
        y = x @ w
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype)
            y = y + b
        if self.gelu:
            y = ops.gelu(y)
        return y


class OutputLayerWithBwd(addons.Module):
    """The last layer's forward, the loss and its backward in one graph (one phase)."""

    def __init__(self, out_features: int, bias: bool = True, gelu: bool = True):
        super().__init__()
        self.linear = Linear(out_features=out_features, bias=bias, gelu=gelu)

    def build(self, x: popxl.Tensor, labels: popxl.Tensor):
        fwd_facts, fwd_graph = self.linear.create_graph(x.spec)
        bwd_facts, bwd_graph = addons.transforms.autodiff_with_accumulation(
            fwd_graph, tensors_to_accumulate_grads=fwd_graph.args.tensors, grads_required=[fwd_graph.graph.inputs[0]]
        )
        fwd_vars = self.add_variable_inputs("fwd", fwd_facts)
        fwd_info = fwd_graph.bind(fwd_vars).call_with_info(x)
        loss, dx = addons.ops.cross_entropy_with_grad(fwd_info.parent_output(0), labels)
        bwd_vars = self.add_variable_inputs("bwd", bwd_facts)
        (dx,) = bwd_graph.bind(bwd_vars).call(dx, args=bwd_graph.grad_graph_info.inputs_dict(fwd_info))
        return dx, loss


class Net(addons.Module):
    """The same network unphased (the test program)."""

    def __init__(self, cache: addons.GraphCache | None = None):
        super().__init__(cache=cache)
        self.fc1 = Linear(512)
        self.fc2 = Linear(512)
        self.fc3 = Linear(512)
        self.fc4 = Linear(10, gelu=False)

    def build(self, x: popxl.Tensor):
        x = x.reshape((-1, 28 * 28))
        return self.fc4(self.fc3(self.fc2(self.fc1(x))))


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
        if var.meta_shape:
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


def get_shard_groups(opts, facts: NamedVariableFactories) -> dict[str, popxl.ReplicaGrouping]:
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


class Graphs:
    """A layer's forward, gradient and optimiser graphs, its remote buffers (variables and
    optimiser state) and the load / store / gather / reduce graphs of its phases."""

    def __init__(self, opts, layer: addons.Module, optimizer: addons.Module, entries: int, require_dx_0: bool, *args):
        fwd_facts, self.fwd = layer.create_graph(*args)
        self.shard_groups = get_shard_groups(opts, fwd_facts)
        required = (self.fwd.graph.inputs[0],) if require_dx_0 else ()
        grad_facts, self.bwd = addons.autodiff_with_accumulation(
            self.fwd, tensors_to_accumulate_grads=self.fwd.args.tensors, grads_required=required
        )
        optim_facts = self._setup_optim(optimizer, self.fwd.args, opts)
        self._set_factories(fwd_facts, optim_facts, grad_facts)
        self._setup_graphs(opts, entries)

    @classmethod
    def from_fwd_and_bwd(cls, opts, fwd_and_bwd: addons.Module, optimizer: addons.Module, entries: int, *args):
        graphs = cls.__new__(cls)
        graphs.bwd = None
        facts, graphs.fwd = fwd_and_bwd.create_graph(*args)
        graphs.shard_groups = get_shard_groups(opts, facts.fwd)
        optim_facts = graphs._setup_optim(optimizer, graphs.fwd.args.fwd, opts)
        graphs._set_factories(facts.fwd, optim_facts, facts.pop("bwd"))
        graphs._setup_graphs(opts, entries)
        return graphs

    def _setup_optim(self, optimizer: addons.Module, fwd_vars: NamedTensors, opts) -> dict:
        optim_facts = {}
        self.optim = {}
        for name, var in fwd_vars.to_dict().items():
            spec = replica_sharded_spec(var, shard_over=self.shard_groups[name])
            optim_facts[name], self.optim[name] = optimizer.create_graph(spec, spec, lr=opts.lr, bias_correction=False)
        return optim_facts

    def _set_factories(self, fwd_facts, optim_facts, grad_facts) -> None:
        self.facts = NamedVariableFactories(fwd=fwd_facts, optim=NamedVariableFactories.from_dict(optim_facts))
        self.grad_facts = grad_facts

    def _setup_graphs(self, opts, entries: int) -> None:
        shard_over = {n: g.group_size for n, g in self.shard_groups.items()}
        optim_shard_over = {n: g.group_size for n, g in get_shard_groups(opts, self.facts.optim).items()}
        self.buffers = NamedRemoteBuffers(
            fwd=named_variable_buffers(self.facts.fwd, entries, shard_over_dict=shard_over),
            optim=named_variable_buffers(self.facts.optim, entries, shard_over_dict=optim_shard_over),
        )
        self._fwd_load, self._fwd_load_names = load_remote_graph(self.buffers.fwd, entries)
        self._optim_fwd_load, self._optim_fwd_load_names = load_remote_graph(self.buffers, entries)
        self._optim_fwd_store = store_remote_graph(self.buffers, entries)
        self._fwd_all_gather, self._fwd_all_gather_names = all_gather_replica_sharded_graph(
            NamedTensors.pack(self._fwd_load_names, self._fwd_load.graph.outputs),
            replica_groups=NamedReplicaGrouping.from_dict(self.shard_groups),
        )
        grad_accums = self.bwd.args.copy() if self.bwd else self.fwd.args.bwd.copy()
        grad_accums.pop("mean_accum_counter")
        self._grad_reduce, self._grad_reduce_names = reduce_replica_sharded_graph(
            grad_accums, "mean", shard_groups=NamedReplicaGrouping.from_dict(get_shard_groups(opts, self.grad_facts))
        )

    def fwd_load(self, i: int | popxl.Tensor) -> NamedTensors:
        return NamedTensors.pack(self._fwd_load_names, self._fwd_load.call(i))

    def optim_fwd_load(self, i: int | popxl.Tensor) -> NamedTensors:
        return NamedTensors.pack(self._optim_fwd_load_names, self._optim_fwd_load.call(i))

    def optim_fwd_store(self, args: NamedTensors, i: int | popxl.Tensor) -> None:
        self._optim_fwd_store.bind(args).call(i)

    def fwd_all_gather(self, args: NamedTensors) -> NamedTensors:
        return NamedTensors.pack(self._fwd_all_gather_names, self._fwd_all_gather.bind(args).call())

    def grad_reduce(self, args: NamedTensors) -> NamedTensors:
        return NamedTensors.pack(self._grad_reduce_names, self._grad_reduce.bind(args).call())

    def optimizer_remote_step(self, vars_and_state: NamedTensors, grads: NamedTensors, counter: popxl.Tensor) -> None:
        variables = vars_and_state.fwd.to_dict()
        grads_d = grads.accum.to_dict()
        for name, graph in self.optim.items():
            state = vars_and_state.optim
            for attr in name.split("."):
                state = getattr(state, attr)
            graph.bind(state).call(variables[name], grads_d[name])
        ops.var_updates.accumulator_scale_(counter, 0.0)


def input_layer_batch_serialise(opts, g: Graphs, x_buffer, dx_buffer, input_stream) -> None:
    fwd_bs, bwd_bs = batch_serialise_fwd_and_grad(
        g.fwd, g.bwd, g.fwd.args, opts.gradient_accumulation,
        load_handles={g.fwd.graph.inputs[0]: input_stream, g.bwd.graph.inputs[0]: (dx_buffer, 0)},
        store_streams={},
        store_buffers={g.fwd.graph.outputs[0]: (x_buffer, 0)},
        rows=1, io_mode=opts.io_mode,
    )  # fmt: skip
    g.fwd, g.bwd = fwd_bs.graph, bwd_bs.graph


def layer_batch_serialise(opts, g: Graphs, x_buffer, dx_buffer, rows: int) -> None:
    fwd_bs, bwd_bs = batch_serialise_fwd_and_grad(
        g.fwd, g.bwd, g.fwd.args, opts.gradient_accumulation,
        load_handles={g.fwd.graph.inputs[0]: (x_buffer, 0),
                      g.bwd.graph.inputs[0]: (dx_buffer, 1)},   # dx from the next layer's row
        store_streams={},
        store_buffers={g.fwd.graph.outputs[0]: (x_buffer, 1),   # x into the next layer's row
                       g.bwd.graph.outputs[0]: (dx_buffer, 0)},  # dx into the previous layer's row
        rows=rows, io_mode=opts.io_mode,
    )  # fmt: skip
    g.fwd, g.bwd = fwd_bs.graph, bwd_bs.graph


def output_layer_batch_serialise(opts, g: Graphs, x_buffer, dx_buffer, label_stream, loss_stream) -> None:
    fwd_bs = batch_serialise(
        g.fwd, opts.gradient_accumulation,
        load_handles={g.fwd.graph.inputs[0]: (x_buffer, 2), g.fwd.graph.inputs[1]: label_stream},
        store_streams={g.fwd.graph.outputs[1]: loss_stream},
        store_buffers={g.fwd.graph.outputs[0]: (dx_buffer, 2)},
        rows=1, io_mode=opts.io_mode,
    )  # fmt: skip
    g.fwd = fwd_bs.graph


def train_program(opts):
    if opts.gradient_accumulation < 2 or opts.data_parallel < 2:
        raise SystemExit("mnist_phased: --gradient-accumulation and --data-parallel must be at least 2")
    ir = popxl.Ir(replication=opts.data_parallel)
    num_inner_layers = 2
    with ir.main_graph:
        img_spec = popxl.TensorSpec((opts.train_micro_batch_size, 28 * 28), popxl.float32)
        inner_spec = popxl.TensorSpec((opts.train_micro_batch_size, 512), popxl.float32)
        img_stream = popxl.h2d_stream(img_spec.shape, popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.train_micro_batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
        optimizer = Adam(cache=True)

        # ----- graphs -----
        fc1 = Graphs(opts, Linear(512), optimizer, 1, False, img_spec)
        inner = Graphs(opts, Linear(512), optimizer, num_inner_layers, True, inner_spec)
        fc4 = Graphs.from_fwd_and_bwd(
            opts, OutputLayerWithBwd(10, gelu=False), optimizer, 1, inner_spec, label_stream.spec
        )
        x_buffer = batch_serial_buffer(
            fc1.fwd.graph.outputs[0], steps=opts.gradient_accumulation, rows=num_inner_layers + 1
        )
        dx_buffer = batch_serial_buffer(
            fc1.bwd.graph.inputs[0], steps=opts.gradient_accumulation, rows=num_inner_layers + 1
        )

        # ----- batch serialisation -----
        input_layer_batch_serialise(opts, fc1, x_buffer, dx_buffer, img_stream)
        layer_batch_serialise(opts, inner, x_buffer, dx_buffer, num_inner_layers)  # fc2: row 0, fc3: row 1
        output_layer_batch_serialise(opts, fc4, x_buffer, dx_buffer, label_stream, loss_stream)

        # ----- remote variables -----
        variables = NamedTensors()
        variables.insert("fc1", fc1.facts.init_remote(fc1.buffers, 0, "fc1"))
        variables.insert("fc2", inner.facts.init_remote(inner.buffers, 0, "fc2"))
        variables.insert("fc3", inner.facts.init_remote(inner.buffers, 1, "fc3"))
        variables.insert("fc4", fc4.facts.init_remote(fc4.buffers, 0, "fc4"))

        # ----- phased execution -----
        with popxl.in_sequence(True):

            def forward_phase(graphs: Graphs, row: int) -> None:
                vs = graphs.fwd_all_gather(graphs.fwd_load(row))  # load the layer, gather its shards
                graphs.fwd.bind(vs).call(row)  # the micro batch loop: load x, fwd, store

            def backward_phase(graphs: Graphs, row: int) -> None:
                vars_and_state = graphs.optim_fwd_load(row)  # layer and optimiser state (sharded)
                if graphs.bwd is None:  # the output layer: fwd + loss + bwd in one graph
                    vs = NamedTensors(fwd=graphs.fwd_all_gather(vars_and_state.fwd), bwd=graphs.grad_facts.init_zero())
                    graphs.fwd.bind(vs).call(row)
                    reduced = graphs.grad_reduce(vs.bwd)
                    counter = vs.bwd.mean_accum_counter
                else:
                    vs = graphs.fwd_all_gather(vars_and_state.fwd)
                    accums = graphs.grad_facts.init_zero()
                    vs.update(accums.copy())
                    graphs.bwd.bind(vs).call(row)
                    reduced = graphs.grad_reduce(accums)
                    counter = vs.mean_accum_counter
                graphs.optimizer_remote_step(vars_and_state, reduced, counter)
                graphs.optim_fwd_store(vars_and_state, row)  # updated layer and state back to remote

            forward_phase(fc1, 0)
            forward_phase(inner, 0)  # fc2
            forward_phase(inner, 1)  # fc3
            backward_phase(fc4, 0)
            backward_phase(inner, 1)  # fc3
            backward_phase(inner, 0)  # fc2
            backward_phase(fc1, 0)

    ir.num_host_transfers = opts.gradient_accumulation
    trained = NamedTensors(fc1=variables.fc1.fwd, fc2=variables.fc2.fwd, fc3=variables.fc3.fwd, fc4=variables.fc4.fwd)
    return popxl.Session(ir, opts.device), [img_stream, label_stream], trained, loss_stream


def unphased_program(opts):
    """The same training step with every layer, gradient and Adam state resident (for the
    memory comparison): data parallel, accumulation, all-reduced gradients."""
    ir = popxl.Ir(replication=opts.data_parallel)
    with ir.main_graph:
        img_spec = popxl.TensorSpec((opts.train_micro_batch_size, 28, 28), popxl.float32)
        img_stream = popxl.h2d_stream(img_spec.shape, popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.train_micro_batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
        facts, fwd = Net().create_graph(img_spec)
        variables = facts.init()
        bwd_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        accum = bwd_facts.init()
        with popxl.in_sequence(True):
            for _ in range(opts.gradient_accumulation):
                info = fwd.bind(variables).call_with_info(ops.host_load(img_stream))
                loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], ops.host_load(label_stream))
                ops.host_store(loss_stream, loss)
                bwd.bind(accum).call(dx, args=bwd.grad_graph_info.inputs_dict(info))
            opt = Adam(cache=True)
            for name, var in variables.named_tensors.items():
                g = ops.collectives.replicated_all_reduce_(accum.accum[name], op="mean")
                opt_facts, opt_graph = opt.create_graph(var, var.spec, lr=opts.lr, bias_correction=False)
                opt_graph.bind(opt_facts.init()).call(var, g)
            ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)
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
    steps = len(training_data) if opts.max_steps is None else min(len(training_data), opts.max_steps)
    losses = []
    with train_session, observe.StepProfiler(train_session, opts) as runner:
        for epoch in range(1, opts.epochs + 1):
            print(f"Epoch {epoch}/{opts.epochs}")
            bar = progress(training_data, total=steps)
            for i, (data, labels) in enumerate(bar):
                if i >= steps:
                    break
                shape = (opts.gradient_accumulation, opts.data_parallel, opts.train_micro_batch_size)
                data = data.reshape(*shape, 28 * 28)
                labels = labels.reshape(shape)
                out = runner.run(dict(zip(input_streams, [data.astype(np.float32), labels.astype(np.int32)])))
                losses.append(float(np.mean(out[loss_stream])))
                bar.set_description(f"Loss:{losses[-1]:0.4f}")
    return losses


def test(test_session, test_data, input_streams, out_stream) -> float:
    total = 0.0
    with test_session:
        for data, labels in progress(test_data, total=len(test_data)):
            output = test_session.run(dict(zip(input_streams, [data])))
            total += accuracy(output[out_stream], labels)
    acc = total / len(test_data)
    print(f"Accuracy on test set: {acc:0.2f}%")
    return acc


def memory_reports(opts) -> dict:
    """Resident and remote bytes per IPU of the phased program and of the unphased one
    (as JSON with `--json`)."""
    as_json = getattr(opts, "json", False)
    phased_report = train_program(opts)[0].memory_report(print_table=not as_json)
    plain_report = unphased_program(opts)[0].memory_report(print_table=not as_json)
    phased, plain = phased_report.ipu(0), plain_report.ipu(0)
    if as_json:
        print(json.dumps({"memory": {"phased": phased_report.as_dict(), "unphased": plain_report.as_dict()}}))
    else:
        remote = phased.remote_staging
        print(f"phased: resident {phased.total} B, remote {remote} B; unphased: resident {plain.total} B")
    return {"phased": phased, "unphased": plain}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--train-micro-batch-size", type=int, default=8, help="batch size for training (default: 8)")
    ap.add_argument("--test-batch-size", type=int, default=80, help="batch size for testing (default: 80)")
    ap.add_argument("--epochs", type=int, default=1, help="number of epochs to train (default: 1)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate (default: 1e-3)")
    ap.add_argument("--data-parallel", type=int, default=2, help="data parallelism (default: 2)")
    ap.add_argument("--gradient-accumulation", type=int, default=4, help="gradient accumulation (default: 4)")
    ap.add_argument("--io-mode", default="io", choices=["compute", "io", "io_overlapped"],
                    help="how the batch serialisation loops load and store (default: io)")  # fmt: skip
    ap.add_argument("--sharded-threshold", type=int, default=512,
                    help="tensors with at least this many elements are sharded (default: 512)")  # fmt: skip
    ap.add_argument("--data-dir", help="folder with MNIST IDX files (torchvision layout)")
    ap.add_argument("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    ap.add_argument("--seed", type=int, default=42, help="initial weights and shuffle")
    ap.add_argument(
        "--memory-report", action="store_true", help="print the memory reports of the phased and unphased programs"
    )
    ap.add_argument("--device", default="ipu_hw", help="ipu_hw, ipu_model or cpu: all run on NumPy")
    observe.add_arguments(ap, memory_report=False)
    opts = ap.parse_args(argv)
    observe.check_arguments(ap, opts)
    return opts


def main(argv: list[str] | None = None) -> dict:
    opts = parse_args(argv)
    np.random.seed(opts.seed)
    if opts.memory_report:
        memory_reports(opts)
        np.random.seed(opts.seed)
    global_batch = opts.train_micro_batch_size * opts.gradient_accumulation * opts.data_parallel
    train_x, train_y, test_x, test_y = load_mnist(opts.data_dir)
    training_data = batches(train_x, train_y, global_batch, shuffle=True, seed=opts.seed)
    test_data = batches(test_x, test_y, opts.test_batch_size, shuffle=False)

    train_session, train_streams, train_variables, loss_stream = train_program(opts)
    observe.memory(train_session, opts, report=False)  # --liveness (--memory-report: above)
    print(f"train session: {opts.data_parallel} replicas, global batch {global_batch}, io mode {opts.io_mode}")
    losses = train(train_session, training_data, opts, train_streams, loss_stream)
    trained = train_session.get_tensors_data(train_variables.tensors)

    test_session, test_streams, test_variables, out_stream = test_program(opts)
    test_session.write_variables_data(
        {
            test_var: trained[train_var].copy()
            for train_var, test_var in train_variables.to_mapping(test_variables).items()
        }
    )
    print("test session")
    acc = test(test_session, test_data, test_streams, out_stream)
    weights = {name: np.array(trained[t]) for name, t in train_variables.named_tensors.items()}
    return {"accuracy": acc, "losses": losses, "weights": weights}


if __name__ == "__main__":
    main()
