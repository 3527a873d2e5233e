"""Pipelined training equals serial training.

A chain of Linear layers (tanh between them) trained with `autodiff_with_accumulation`,
the loss gradient `y - target` (loss 0.5 * |y - target|^2 per micro-batch), and one SGD
step on the averaged gradients. The same code builds the program twice: the micro-batch
loop written once inside `addons.pipelined_execution(steps)` with stages, IPU copies and
activation stashes, and the loop unrolled `steps` times in the main graph. For 2, 3 and 4
stages, with and without `recompute_graph`, the accumulated gradients and the weights after
the step agree to 1e-6; a NumPy computation of the same gradients checks the numbers
independently.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from tests.helpers.plan_tolerance import PLAN_TOL

# stage of each layer's forward / backward, and the IPU of each stage
LAYOUTS: dict[int, dict[str, list[int]]] = {
    2: {"fwd": [0, 1], "bwd": [1, 1], "ipu": [0, 1]},
    3: {"fwd": [0, 1], "bwd": [2, 1], "ipu": [0, 1, 0]},  # seed 003's layout
    4: {"fwd": [0, 1, 2], "bwd": [3, 2, 2], "ipu": [0, 1, 2, 0]},
}
BATCH = 3
STEPS = 8
LR = 0.1


class Layer(addons.Module):
    def __init__(self, out_features: int, tanh: bool):
        super().__init__()
        self.out_features = out_features
        self.tanh = tanh

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.5, (x.shape[-1], self.out_features)), x.dtype
        )
        b = self.add_variable_input("bias", partial(np.random.normal, 0, 0.5, (self.out_features,)), x.dtype)
        y = x @ w + b
        return ops.tanh(y) if self.tanh else y


def dims_for(num_layers: int) -> list[int]:
    return [4, 5, 6, 3][:num_layers] + [3]


def build(num_stages: int, pipelined: bool, recompute: bool) -> dict[str, Any]:
    layout = LAYOUTS[num_stages]
    fwd_stage, bwd_stage, ipus = layout["fwd"], layout["bwd"], layout["ipu"]
    n = len(fwd_stage)
    dims = dims_for(n)
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((BATCH, dims[0]), popxl.float32, "x")
        t_stream = popxl.h2d_stream((BATCH, dims[-1]), popxl.float32, "target")
        layers = []
        for i in range(n):
            with popxl.ipu(ipus[fwd_stage[i]]):
                facts, graph = Layer(dims[i + 1], tanh=i < n - 1).create_graph(
                    popxl.TensorSpec((BATCH, dims[i]), popxl.float32)
                )
                req = (graph.graph.inputs[0],) if i > 0 else ()
                bwd_facts, bwd = addons.autodiff_with_accumulation(
                    graph, tensors_to_accumulate_grads=graph.args.tensors, grads_required=req
                )
            if recompute:
                bwd = addons.transforms.recompute_graph(bwd)
            layers.append((facts, graph, bwd_facts, bwd))
        fwd_vars = [facts.init(f"fc{i}") for i, (facts, _, _, _) in enumerate(layers)]
        bwd_vars = [bf.init(f"fc{i}") for i, (_, _, bf, _) in enumerate(layers)]

        def body(stage: Any, stash: Any) -> None:
            @contextmanager
            def at(s: int) -> Iterator[None]:
                with stage(s), popxl.ipu(ipus[s]):
                    yield

            def move(t: popxl.Tensor, src: int, dst: int) -> popxl.Tensor:
                if src == dst:
                    return t
                assert dst == src + 1
                with at(src):
                    return t.copy_to_ipu(ipus[dst])

            with at(0):
                x = ops.host_load(x_stream)
            s = 0
            infos = []
            for i, (_, graph, _, _) in enumerate(layers):
                x = move(x, s, fwd_stage[i])
                s = fwd_stage[i]
                with at(s):
                    info = graph.bind(fwd_vars[i]).call_with_info(x)
                    infos.append(info)
                    x = info.outputs[0]
            with at(s):
                target = ops.host_load(t_stream)
                dx = x - target
            for i in reversed(range(n)):
                _, _, _, bwd = layers[i]
                dx = move(dx, s, bwd_stage[i])
                s = bwd_stage[i]
                with at(s):
                    acts = stash(infos[i], bwd.grad_graph_info)
                    outs = bwd.bind(bwd_vars[i]).call(dx, args=acts)
                    if i > 0:
                        (dx,) = outs

        with popxl.in_sequence(True):
            if pipelined:
                with addons.pipelined_execution(STEPS) as p:
                    body(p.stage, p.stash_and_restore_activations)
            else:
                for _ in range(STEPS):
                    body(lambda s: nullcontext(), lambda info, gi: gi.inputs_dict(info))
            for i in range(n):
                with popxl.ipu(ipus[fwd_stage[i]]):
                    accum = bwd_vars[i].accum.to_dict()
                    for name, w in fwd_vars[i].named_tensors.items():
                        ops.scaled_add_(w, accum[name], b=-LR)
                    ops.var_updates.accumulator_scale_(bwd_vars[i].mean_accum_counter, 0.0)
    ir.num_host_transfers = STEPS
    return {"ir": ir, "x": x_stream, "t": t_stream, "fwd": fwd_vars, "bwd": bwd_vars, "dims": dims}


def data(dims: list[int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(STEPS, BATCH, dims[0])).astype(np.float32)
    t = rng.normal(size=(STEPS, BATCH, dims[-1])).astype(np.float32)
    return x, t


def run(
    prog: dict[str, Any],
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """Initial weights, accumulated gradients and weights after one run."""
    x, t = data(prog["dims"])
    with popxl.Session(prog["ir"], "ipu_hw") as session:
        init = [{k: session.get_tensor_data(v).copy() for k, v in fv.named_tensors.items()} for fv in prog["fwd"]]
        session.run({prog["x"]: x, prog["t"]: t})
        grads = [{k: session.get_tensor_data(v).copy() for k, v in bv.accum.to_dict().items()} for bv in prog["bwd"]]
        weights = [{k: session.get_tensor_data(v).copy() for k, v in fv.named_tensors.items()} for fv in prog["fwd"]]
    return init, grads, weights


_serial_cache: dict[int, Any] = {}


def serial(num_stages: int) -> Any:
    if num_stages not in _serial_cache:
        _serial_cache[num_stages] = run(build(num_stages, pipelined=False, recompute=False))
    return _serial_cache[num_stages]


@pytest.mark.parametrize("recompute", [False, True], ids=["stash", "recompute"])
@pytest.mark.parametrize("num_stages", [2, 3, 4])
def test_pipelined_equals_serial(num_stages: int, recompute: bool) -> None:
    prog = build(num_stages, pipelined=True, recompute=recompute)
    text = prog["ir"].to_mlir()
    assert "call.repeat @main_repeat" in text and "pipeline.region" not in text
    init, grads, weights = run(prog)
    s_init, s_grads, s_weights = serial(num_stages)
    for i in range(len(init)):
        for k in init[i]:
            np.testing.assert_array_equal(init[i][k], s_init[i][k])
            np.testing.assert_allclose(grads[i][k], s_grads[i][k], **PLAN_TOL, err_msg=f"fc{i}.{k} gradient")
            np.testing.assert_allclose(weights[i][k], s_weights[i][k], **PLAN_TOL, err_msg=f"fc{i}.{k} weight")
            assert np.abs(grads[i][k]).max() > 1e-3  # a real gradient, not zeros


def numpy_grads(dims: list[int], init: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    x_all, t_all = data(dims)
    n = len(init)
    sums = [{k: np.zeros_like(v, dtype=np.float64) for k, v in layer.items()} for layer in init]
    for x, t in zip(x_all.astype(np.float64), t_all.astype(np.float64)):
        acts = [x]
        for i in range(n):
            z = acts[-1] @ init[i]["weight"] + init[i]["bias"]
            acts.append(np.tanh(z) if i < n - 1 else z)
        d = acts[-1] - t
        for i in reversed(range(n)):
            if i < n - 1:
                d = d * (1 - acts[i + 1] ** 2)  # through tanh
            sums[i]["weight"] += acts[i].T @ d
            sums[i]["bias"] += d.sum(0)
            d = d @ init[i]["weight"].T
    return [{k: v / len(x_all) for k, v in layer.items()} for layer in sums]


@pytest.mark.parametrize("num_stages", [3, 4])
def test_pipelined_gradients_match_numpy(num_stages: int) -> None:
    prog = build(num_stages, pipelined=True, recompute=False)
    init, grads, weights = run(prog)
    expected = numpy_grads(prog["dims"], init)
    for i in range(len(init)):
        for k in init[i]:
            np.testing.assert_allclose(grads[i][k], expected[i][k], rtol=1e-4, atol=1e-5, err_msg=f"fc{i}.{k}")
            np.testing.assert_allclose(
                weights[i][k], init[i][k] - LR * expected[i][k], rtol=1e-4, atol=1e-5, err_msg=f"fc{i}.{k}"
            )


def test_stash_depths_follow_the_stage_distance() -> None:
    """4 stages: fc0's activations (its input, its tanh output) wait from stage 0 to 3
    (depth 4), fc1's from stage 1 to 2 (depth 2); with recomputation only the layer inputs
    are stashed."""
    prog = build(4, pipelined=True, recompute=False)
    text = prog["ir"].to_mlir()
    depths = sorted(
        int(line.split("tensor<")[1].split("x")[0])
        for line in text.splitlines()
        if "graph.variable" in line and ".buffer" in line
    )
    assert depths == [2, 2, 4, 4]
    prog = build(4, pipelined=True, recompute=True)
    text = prog["ir"].to_mlir()
    assert text.count('.buffer" = dense') == 2


class PlusOneLinear(addons.Module):
    def __init__(self, out_features: int):
        super().__init__()
        self.out_features = out_features

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = x + 1
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)), x.dtype
        )
        return x @ w


def test_upstream_pipeline_training_graphs_built_inside_a_stage() -> None:
    """popxl-addons' test_pipeline_training: the graphs, their autodiff and the variables are
    created inside stage 0; the accumulated gradient equals `steps` serial runs."""
    steps = 6

    def serial() -> np.ndarray:
        np.random.seed(42)
        ir = popxl.Ir()
        data = np.random.normal(0, 1, (steps, 1, 4)).astype(np.float32)
        with ir.main_graph:
            with popxl.ipu(0):
                _, x_stream, x = addons.host_load(data[0], popxl.float32, "x")
                args, linear_graph = PlusOneLinear(4).create_graph(x)
                dargs, dlinear_graph = addons.autodiff_with_accumulation(linear_graph, [linear_graph.args.weight])
                linear = args.init()
                dlinear = dargs.init()
                call_info = linear_graph.bind(linear).call_with_info(x)
                x, *_ = call_info.outputs
                x = x.copy_to_ipu(1)
            with popxl.ipu(1):
                x = x + 1
                x = x.copy_to_ipu(0)
            with popxl.ipu(0):
                dlinear_graph.bind(dlinear).call(x, args=dlinear_graph.grad_graph_info.inputs_dict(call_info))
        ir.num_host_transfers = 1
        with popxl.Session(ir, "ipu_hw") as session:
            for n in range(steps):
                session.run({x_stream: data[n]})
            return session.get_tensor_data(dlinear.accum.weight).copy()

    def pipelined() -> np.ndarray:
        np.random.seed(42)
        ir = popxl.Ir()
        data = np.random.normal(0, 1, (steps, 1, 4)).astype(np.float32)
        with ir.main_graph:
            with addons.pipelined_execution(steps) as p:
                with p.stage(0), popxl.ipu(0):
                    _, x_stream, x = addons.host_load(data[0], popxl.float32, "x")
                    args, linear_graph = PlusOneLinear(4).create_graph(x)
                    dargs, dlinear_graph = addons.autodiff_with_accumulation(linear_graph, [linear_graph.args.weight])
                    linear = args.init()
                    dlinear = dargs.init()
                    call_info = linear_graph.bind(linear).call_with_info(x)
                    x, _ = call_info.outputs
                    x = x.copy_to_ipu(1)
                with p.stage(1), popxl.ipu(1):
                    x = x + 1
                    x = x.copy_to_ipu(0)
                with p.stage(2), popxl.ipu(0):
                    dlinear_graph.bind(dlinear).call(
                        x, args=p.stash_and_restore_activations(call_info, dlinear_graph.grad_graph_info)
                    )
        ir.num_host_transfers = steps
        with popxl.Session(ir, "ipu_hw") as session:
            session.run({x_stream: data})
            return session.get_tensor_data(dlinear.accum.weight).copy()

    normal = serial()
    piped = pipelined()
    assert np.abs(normal).max() > 1e-3
    np.testing.assert_allclose(piped, normal, **PLAN_TOL)
