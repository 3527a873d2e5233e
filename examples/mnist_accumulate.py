"""MNIST with gradient accumulation, Adam and optional recomputation (seed 003, without pipelining).

    python examples/mnist_accumulate.py                    # micro batch 5, accumulation 6, Adam lr 1e-3
    python examples/mnist_accumulate.py --recomputation    # backward graphs recompute the activations
    python examples/mnist_accumulate.py --addons-adam      # popxl_addons.optimizers.adam.AdamOptimizerStep
    python examples/mnist_accumulate.py --profile trace.json --memory-report   # see observe.py

The tutorial's helpers are used verbatim: `Linear` (with gelu), `Net`, the `Adam` module
(`Module(cache=True)`: one optimizer graph per variable shape), `Graphs` (per-layer forward and
backward graphs, `init_and_bind_fwd/bwd`, `recompute_graph`, `optimizer_step`, `reset_vars`)
and `create_graphs(..., require_input0)` built on `addons.transforms.autodiff_with_accumulation`.

Instead of `addons.pipelined_execution`, the three stages of the tutorial's pipeline run one
after another in the main graph, once per micro batch: stage 0 (fc1, fc2 forward, on IPU 0),
stage 1 (fc3, fc4 forward, loss, fc4 and fc3 backward, on IPU 1), stage 2 (fc2 and fc1 backward,
on IPU 0). The backward graphs average the gradients of the micro batches into their
accumulators; after `gradient_accumulation` micro batches (one `session.run`,
`ir.num_host_transfers = gradient_accumulation`) each layer takes one Adam step and resets its
accumulation counter. Data: the bundled MNIST digits (`mnist_data.py`), or full MNIST with
`--data-dir`.
"""

from __future__ import annotations

import argparse
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
from popxl_addons.graph import GraphWithNamedArgs  # noqa: E402
from popxl_addons.named_tensors import NamedTensors  # noqa: E402
from popxl_addons.variable_factory import NamedVariableFactories  # noqa: E402


def accuracy(predictions: np.ndarray, labels: np.ndarray):
    ind = np.argmax(predictions, axis=-1).flatten()
    labels = np.asarray(labels).flatten()
    return np.mean(ind == labels) * 100.0


# ------------------------------------------------------------------------------------------
# Seed 003, verbatim: layers, optimizer, Graphs, create_graphs
# ------------------------------------------------------------------------------------------


# include gelu
class Linear(addons.Module):
    def __init__(self, out_features: int, bias: bool = True, gelu: bool = True):
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.gelu = gelu

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
        if self.gelu:
            y = ops.gelu(y)
        return y


# gelu now included in the layers
class Net(addons.Module):
    def __init__(self, cache: addons.GraphCache | None = None):
        super().__init__(cache=cache)
        self.fc1 = Linear(512)
        self.fc2 = Linear(512)
        self.fc3 = Linear(512)
        self.fc4 = Linear(10, gelu=False)

    def build(self, x: popxl.Tensor):
        x = x.reshape((-1, 28 * 28))
        x = self.fc1(x)
        x = self.fc2(x)
        x = self.fc3(x)
        x = self.fc4(x)
        return x


"""
Adam optimizer.
Defines adam update step for a single variable
"""


class Adam(addons.Module):
    # we need to specify in_sequence because a lot of operations are in place and their order
    # shouldn't be rearranged
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


"""
Groups together the forward and backward graphs of a layer for easy access and handling.
"""


class Graphs:
    def __init__(
        self,
        layer_name: str,
        fwd: GraphWithNamedArgs,
        bwd: GraphWithNamedArgs,
        facts: NamedVariableFactories,
        optimizer: addons.Module,
    ):
        self.layer_name = layer_name
        self.fwd = fwd
        self.bwd = bwd
        self.facts = facts
        self.optimizer = optimizer
        self.vars = NamedTensors()

    def init_and_bind_fwd(self):
        self.vars.insert("fwd", self.facts.fwd.init(self.layer_name))
        return self.fwd.bind(self.vars.fwd)

    def init_and_bind_bwd(self):
        self.vars.insert("bwd", self.facts.bwd.init(self.layer_name))
        return self.bwd.bind(self.vars.bwd)

    def recompute_graph(self):
        self.bwd = addons.transforms.recompute_graph(self.bwd)

    def replicated_all_reduce(self):
        for g in self.vars.bwd.tensors[:-1]:
            g = ops.collectives.replicated_all_reduce_(g, op="mean")

    def optimizer_step(self, lr: float | popxl.Tensor):
        var_dict = self.vars.fwd.named_tensors
        grad_dict = self.vars.bwd.accum.to_dict()
        for name, var in var_dict.items():
            opt_facts, opt = self.optimizer.create_graph(var, var.spec, lr=lr, weight_decay=0.0, bias_correction=True)
            state = opt_facts.init()
            opt.bind(state).call(var, grad_dict[name])

        ops.var_updates.accumulator_scale_(self.vars.bwd.mean_accum_counter, 0.0)

    def reset_vars(self):
        self.vars._clear()


def create_graphs(
    layer_name: str, layer: addons.Module, optimizer: addons.Module, opts, require_input0: bool, *args, **kwargs
):
    facts, graph = layer.create_graph(*args)
    # tensors_to_accumulate_grads = graph.args.tensors : accumulate gradients of the weights
    # grads_required = (graph.graph.inputs[0],): we need to return the gradient of the first input of the
    # layer, since it will be starting value for backpropagation in the other layers
    req_grads = (graph.graph.inputs[0],) if require_input0 else ()
    bwd_facts, bwd_graph = addons.transforms.autodiff_with_accumulation(
        graph, tensors_to_accumulate_grads=graph.args.tensors, grads_required=req_grads
    )
    factories = NamedVariableFactories()
    factories.insert("fwd", facts)
    factories.insert("bwd", bwd_facts)

    return Graphs(layer_name, graph, bwd_graph, factories, optimizer)


# ------------------------------------------------------------------------------------------
# Options (seed 003's defaults)
# ------------------------------------------------------------------------------------------


class Train:
    micro_batch_size: int = 5
    lr: float = 1e-3
    epochs: int = 1
    gradient_accumulation: int = 6
    data_parallel: int = 1
    device = "ipu_hw"
    recomputation = False
    addons_adam = False


class Test:
    micro_batch_size: int = 80
    device = "ipu_hw"


class Options:
    def __init__(self) -> None:
        self.train = Train()
        self.test = Test()
        # Set from the command line by `parse_args`.
        self.data_dir: str | None = None
        self.max_steps: int | None = None
        self.seed: int = 42
        # --profile, --memory-report, --liveness, --json (observe.py)
        self.observe = argparse.Namespace(profile=None, profile_steps=5, memory_report=False, liveness=None, json=False)


# ------------------------------------------------------------------------------------------
# Programs
# ------------------------------------------------------------------------------------------


def train_program(opts):
    """The training program: `gradient_accumulation` micro batches per run, then Adam."""
    ir = popxl.Ir()
    ir.replication_factor = opts.train.data_parallel

    with ir.main_graph:
        # -----  Define input and output streams -----
        img_spec = popxl.TensorSpec((opts.train.micro_batch_size, 28 * 28), popxl.float32)
        inner_spec = popxl.TensorSpec((opts.train.micro_batch_size, 512), popxl.float32)

        img_stream = popxl.h2d_stream(img_spec.shape, popxl.float32, "image")
        label_stream = popxl.h2d_stream((opts.train.micro_batch_size,), popxl.int32, "labels")
        loss_stream = popxl.d2h_stream((), popxl.float32, "loss")

        if opts.train.addons_adam:
            from popxl_addons.optimizers.adam import AdamOptimizerStep

            optimizer = AdamOptimizerStep(cache=True)
        else:
            optimizer = Adam(cache=True)
        steps = opts.train.gradient_accumulation

        # ----- Create graphs -----
        with popxl.ipu(0):
            fc1 = create_graphs("fc1", Linear(512), optimizer, opts, False, img_spec)
            fc2 = create_graphs("fc2", Linear(512), optimizer, opts, True, inner_spec)
        with popxl.ipu(1):
            fc3 = create_graphs("fc3", Linear(512), optimizer, opts, True, inner_spec)
            fc4 = create_graphs("fc4", Linear(10, gelu=False), optimizer, opts, True, inner_spec)

        # ----- Transform graphs -----
        if opts.train.recomputation:
            fc1.recompute_graph()
            fc2.recompute_graph()
            fc3.recompute_graph()
            fc4.recompute_graph()

        # ----- Variables and bound graphs (created once, called for every micro batch) -----
        with popxl.ipu(0):
            fc1_fwd, fc2_fwd = fc1.init_and_bind_fwd(), fc2.init_and_bind_fwd()
            fc1_bwd, fc2_bwd = fc1.init_and_bind_bwd(), fc2.init_and_bind_bwd()
        with popxl.ipu(1):
            fc3_fwd, fc4_fwd = fc3.init_and_bind_fwd(), fc4.init_and_bind_fwd()
            fc3_bwd, fc4_bwd = fc3.init_and_bind_bwd(), fc4.init_and_bind_bwd()

        with popxl.in_sequence(True):
            # ----- The stages of seed 003's pipeline, one after another, per micro batch -----
            for _ in range(steps):
                with popxl.ipu(0):  # stage 0: fc1 fc2 forward
                    img_t = ops.host_load(img_stream)
                    fc1_info = fc1_fwd.call_with_info(img_t)
                    x = fc1_info.outputs[0]
                    fc2_info = fc2_fwd.call_with_info(x)
                    x = fc2_info.outputs[0]
                    x = x.copy_to_ipu(1)

                with popxl.ipu(1):  # stage 1: fc3 fc4 forward, loss, fc4 fc3 backward
                    labels = ops.host_load(label_stream, "labels")
                    fc3_info = fc3_fwd.call_with_info(x)
                    x = fc3_info.outputs[0]
                    fc4_info = fc4_fwd.call_with_info(x)
                    x = fc4_info.outputs[0]

                    loss, dx = addons.ops.cross_entropy_with_grad(x, labels)
                    ops.host_store(loss_stream, loss)

                    fc3_activations = fc3.bwd.grad_graph_info.inputs_dict(fc3_info)
                    fc4_activations = fc4.bwd.grad_graph_info.inputs_dict(fc4_info)
                    (dx,) = fc4_bwd.call(dx, args=fc4_activations)
                    (dx,) = fc3_bwd.call(dx, args=fc3_activations)
                    dx = dx.copy_to_ipu(0)

                with popxl.ipu(0):  # stage 2: fc2 fc1 backward
                    fc2_activ = fc2.bwd.grad_graph_info.inputs_dict(fc2_info)
                    (dx,) = fc2_bwd.call(dx, args=fc2_activ)
                    fc1_activ = fc1.bwd.grad_graph_info.inputs_dict(fc1_info)
                    fc1_bwd.call(dx, args=fc1_activ)

            # ----- Optimizer -----
            with popxl.ipu(0):
                fc1.optimizer_step(opts.train.lr)
                fc2.optimizer_step(opts.train.lr)

            with popxl.ipu(1):
                fc3.optimizer_step(opts.train.lr)
                fc4.optimizer_step(opts.train.lr)

    # one host transfer per micro batch
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


def parse_args(argv: list[str] | None = None) -> Options:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--data-dir", help="folder with MNIST IDX files (torchvision layout)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--micro-batch-size", type=int, default=5)
    ap.add_argument("--gradient-accumulation", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--recomputation", action="store_true")
    ap.add_argument(
        "--addons-adam",
        action="store_true",
        help="use popxl_addons.optimizers.adam.AdamOptimizerStep instead of the seed's Adam",
    )
    ap.add_argument("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--device", default="ipu_hw", help="ipu_hw, ipu_model or cpu: all run on NumPy")
    observe.add_arguments(ap)
    args = ap.parse_args(argv)
    observe.check_arguments(ap, args)
    opts = Options()
    opts.observe = args
    opts.train.micro_batch_size = args.micro_batch_size
    opts.train.gradient_accumulation = args.gradient_accumulation
    opts.train.lr = args.lr
    opts.train.epochs = args.epochs
    opts.train.recomputation = args.recomputation
    opts.train.addons_adam = args.addons_adam
    opts.train.device = opts.test.device = args.device
    opts.data_dir = args.data_dir
    opts.max_steps = args.max_steps
    opts.seed = args.seed
    return opts


def main(argv: list[str] | None = None) -> float:
    opts = parse_args(argv)
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
            print(f"Epoch {epoch}/{opts.train.epochs}")
            bar = progress(training_data, total=nr_batches)
            for i, (data, labels) in enumerate(bar):
                if i >= nr_batches:
                    break
                # reshape data accounting for replication and num hosts transfers
                data = data.reshape(
                    train_session.ir.num_host_transfers,
                    train_session.ir.replication_factor,
                    opts.train.micro_batch_size,
                    28 * 28,
                ).squeeze()
                labels = labels.reshape(
                    train_session.ir.num_host_transfers,
                    train_session.ir.replication_factor,
                    opts.train.micro_batch_size,
                ).squeeze()
                inputs: Mapping[popxl.HostToDeviceStream, np.ndarray] = dict(
                    zip(train_input_streams, [data.astype(np.float32), labels.astype(np.int32)])
                )
                loss = runner.run(inputs)
                losses_np = loss[loss_stream]  # shape (ir.num_host_transfers,)
                avg_loss = np.mean(losses_np)
                bar.set_description(f"Loss:{avg_loss:0.4f}")

    # get weights data : dictionary { train_session variables : tensor data (numpy) }
    train_vars_to_data = train_session.get_tensors_data(train_variables.tensors)

    # Create test program and test session
    test_session, test_input_streams, test_variables, out_stream = test_program(
        opts.test.micro_batch_size, opts.test.device
    )
    # dictionary { train_session variables : test_session variables }
    train_vars_to_test_vars = train_variables.to_mapping(test_variables)
    # Create a dictionary { test_session variables : tensor data (numpy) }
    test_vars_to_data = {
        test_var: train_vars_to_data[train_var].copy() for train_var, test_var in train_vars_to_test_vars.items()
    }
    # Copy trained weights to the program, with a single host to device transfer at the end
    test_session.write_variables_data(test_vars_to_data)

    nr_batches = len(test_data)
    sum_acc = 0.0
    with test_session:
        for data, labels in progress(test_data, total=nr_batches):
            inputs = dict(zip(test_input_streams, [data, labels]))
            output = test_session.run(inputs)
            sum_acc += accuracy(output[out_stream], labels)
    test_set_accuracy = sum_acc / len(test_data)
    print(f"Accuracy on test set: {test_set_accuracy:0.2f}%")
    return test_set_accuracy


if __name__ == "__main__":
    main()
