"""rt functions and automatic outlining (issue 15, items 2-4).

- lowering: a graph called more than once is one `rt.func` (`functions=false`: expanded);
  call-once graphs, multi-IPU programs and graphs with host I/O stay expanded;
- the runtime: both plans run `rt.call`; the generated plan has one Python function per
  distinct body, buffer reuse works inside functions and across calls;
- outlined (+ functions) == inlined to 1e-6, forward and training over several steps, on
  the example programs, the seed's NetOutlined, deep addons models and random programs of
  the property test (made repetitive), and against independent NumPy references;
- `compile_module(outline=False / functions=False)`, `Session(outline=False)`, the size
  threshold (MNIST compiles exactly as without outlining).
"""

from __future__ import annotations

import re
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

import popxl
import popxl.ops as ops
import popxl_addons as addons
from tests.helpers.plan_tolerance import PLAN_TOL
from tests.helpers.property_programs import (
    Recipe,
    Rejected,
    build,
    popxl_source,
    recipes,
    reference,
    resolve,
    run_inputs,
    tolerance,
)
from tests.passes.test_outline import Linear  # the deep addons model's layer
from xl.compiler import compile_module
from xl.compiler.driver import DEFAULT_PIPELINE, OUTLINE_MIN_PROGRAM_OPS, compile_pipeline, lower
from xl.compiler.memory import lowered_program
from xl.dialects import rt
from xl.passes.outline import count_ops
from xl.runtime.errors import PlanError
from xl.tools.context import xl_context

ROOT = Path(__file__).resolve().parents[2]
# outline after inline, calls kept as functions: the default compile with no size threshold
OUTLINED = "pipeline,inline,outline,canonicalize,cse,dce,lower-to-rt"
FLAT = "pipeline,inline,canonicalize,cse,dce,lower-to-rt"


def parse(text: str) -> ModuleOp:
    return Parser(xl_context(), text).parse_module()


def funcs_and_calls(module: ModuleOp) -> tuple[int, int]:
    return (
        sum(isinstance(op, rt.FuncOp) for op in module.walk()),
        sum(isinstance(op, rt.CallOp) for op in module.walk()),
    )


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def gelu_grad(x: np.ndarray) -> np.ndarray:
    u = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    t = np.tanh(u)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x * x)


LAYER = """
graph.h2d_stream @x : tensor<2x4xf32>
graph.d2h_stream @y : tensor<2x4xf32>
graph.graph @layer(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>, %b: tensor<4xf32>) -> (tensor<2x4xf32>) {
  %m = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a = popxl.add %m, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %g = popxl.gelu %a : (tensor<2x4xf32>) -> tensor<2x4xf32>
  graph.output %g : tensor<2x4xf32>
}
graph.main {
  %x = graph.host_load @x : tensor<2x4xf32>
CALLS
  graph.host_store @y, %hLAST : tensor<2x4xf32>
}
"""


def layers_module(n: int, ipus: tuple[int, ...] = ()) -> tuple[ModuleOp, list[np.ndarray]]:
    """n calls of one Linear+gelu graph (ipus: `ipu.id` of each call's matmul... by call)."""
    rng = np.random.default_rng(1)
    ws = [np.round(rng.normal(0, 0.5, (4, 4)) * 8) / 8 for _ in range(n)]
    lines, prev = [], "%x"
    for i in range(n):
        w = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in ws[i])
        lines.append(f'  %w{i} = graph.variable "w{i}" = dense<[{w}]> : tensor<4x4xf32>')
        lines.append(f'  %b{i} = graph.variable "b{i}" = dense<{0.125 * i}> : tensor<4xf32>')
        attr = f" {{ipu.id = {ipus[i]} : i64}}" if ipus else ""
        lines.append(
            f"  %h{i} = call.call @layer({prev}, %w{i}, %b{i}){attr} : "
            "(tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>"
        )
        prev = f"%h{i}"
    text = LAYER.replace("CALLS", "\n".join(lines)).replace("%hLAST", prev)
    return parse(text), ws


def layers_reference(x: np.ndarray, ws: list[np.ndarray]) -> np.ndarray:
    h = x.astype(np.float64)
    for i, w in enumerate(ws):
        h = gelu(h @ w + 0.125 * i)
    return h


# -- lowering ---------------------------------------------------------------------------------


def test_repeated_graph_is_one_function_and_call_once_graphs_expand() -> None:
    m, _ = layers_module(3)
    assert funcs_and_calls(lower(m, "lower-to-rt")) == (1, 3)
    assert funcs_and_calls(lower(m, "lower-to-rt{functions=false}")) == (0, 0)
    one, _ = layers_module(1)
    assert funcs_and_calls(lower(one, "lower-to-rt")) == (0, 0)
    # the default pipeline inlines first: nothing left to keep
    assert funcs_and_calls(lower(m, DEFAULT_PIPELINE)) == (0, 0)


def test_multi_ipu_programs_expand_calls() -> None:
    m, _ = layers_module(3, ipus=(0, 1, 1))
    assert funcs_and_calls(lower(m, "lower-to-rt")) == (0, 0)


def test_functions_false_gives_the_expanded_program_exactly() -> None:
    m, _ = layers_module(3)
    flat = lower(m, "lower-to-rt{functions=false}")
    assert funcs_and_calls(flat) == (0, 0)
    # the same text as expanding by inlining first (every call becomes its body)
    inlined = lower(m, "inline,lower-to-rt")
    strip = partial(re.sub, r"%[\w.]+", "%v")
    assert strip(str(flat)) == strip(str(inlined))


ALIASED = """
graph.d2h_stream @y : tensor<3xf32>
graph.d2h_stream @z : tensor<3xf32>
graph.graph @upd(%acc: tensor<3xf32> {graph.by_ref, graph.name = "acc"}, %x: tensor<3xf32> {graph.name = "x"}) -> (tensor<3xf32>) {
  %t = popxl.tanh %x : (tensor<3xf32>) -> tensor<3xf32>
  popxl.scaled_add_ %acc, %t {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
  %m = popxl.mul %acc, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.output %m : tensor<3xf32>
}
graph.main {
  %a = graph.variable "a" = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %b = graph.variable "b" = dense<[-1.0, 0.5, 0.25]> : tensor<3xf32>
  %m1 = call.call @upd(%a, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %m2 = call.call @upd(%b, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @y, %m1 : tensor<3xf32>
  graph.host_store @z, %m2 : tensor<3xf32>
}
"""


def test_a_call_passing_an_updated_buffer_twice_is_expanded() -> None:
    m = parse(ALIASED)
    assert funcs_and_calls(lower(m, "lower-to-rt")) == (1, 1)  # the second call only
    a0, b = np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 0.25])
    a = a0 + 0.5 * np.tanh(a0)  # x (not by reference) is a copy of a made at the call:
    y = a * a0  # the update of acc (a itself) is not seen through x
    b = b + 0.5 * np.tanh(a)
    z = b * a
    for optimize in (True, False):
        out = compile_module(m, pipeline="lower-to-rt", optimize=optimize).run()
        np.testing.assert_allclose(out["y"], y, rtol=1e-6)
        np.testing.assert_allclose(out["z"], z, rtol=1e-6)


# -- the runtime --------------------------------------------------------------------------------


@pytest.mark.parametrize("optimize", [True, False])
def test_both_plans_run_calls_and_match_numpy(optimize: bool) -> None:
    m, ws = layers_module(4)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    exe = compile_module(m, pipeline="lower-to-rt", optimize=optimize)
    np.testing.assert_allclose(exe.run({"x": x})["y"], layers_reference(x, ws), rtol=1e-5, atol=1e-6)


def test_generated_plan_has_one_function_for_all_calls() -> None:
    m, _ = layers_module(6)
    src = compile_module(m, pipeline="lower-to-rt").sources[0]
    assert len(re.findall(r"^def _f\d+_layer\(", src, re.M)) == 1
    # six call sites: one line each, or one line over a table of their arguments
    sites = re.findall(r"# rt\.call @layer(?: \((\d+) sites\))?$", src, re.M)
    assert sum(int(n or 1) for n in sites) == 6
    flat = compile_module(m, pipeline="lower-to-rt{functions=false}").sources[0]
    assert "rt.call" not in flat and len(src.splitlines()) < len(flat.splitlines())


def test_buffer_reuse_inside_functions_and_across_calls() -> None:
    m, _ = layers_module(6)
    low = lower(m, "lower-to-rt")
    opt = lower(m, "lower-to-rt,rt-optimize")

    def allocs(module: ModuleOp, parent: type) -> int:
        return sum(isinstance(op, rt.AllocOp) and isinstance(op.parent_op(), parent) for op in module.walk())

    # in the body: matmul + bias into one buffer, gelu into the destination
    assert allocs(low, rt.FuncOp) == 2 and allocs(opt, rt.FuncOp) == 1
    # across calls: h3 takes the storage of h1 (dead after the call computing h2), ...
    assert allocs(low, rt.ProgramOp) == 7 and allocs(opt, rt.ProgramOp) < 7
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    a = compile_module(m, pipeline="lower-to-rt").run({"x": x})["y"]
    b = compile_module(m, pipeline="lower-to-rt{functions=false}").run({"x": x})["y"]
    np.testing.assert_allclose(a, b, **PLAN_TOL)


RECURSIVE = """
rt.program {
  rt.func @f(%x: memref<2xf32>) -> () {
    rt.call @g(%x) -> () : (memref<2xf32>) -> ()
  }
  rt.func @g(%x: memref<2xf32>) -> () {
    rt.call @f(%x) -> () : (memref<2xf32>) -> ()
  }
  %x = rt.alloc : memref<2xf32>
  rt.call @f(%x) -> () : (memref<2xf32>) -> ()
}
"""


@pytest.mark.parametrize("optimize", [True, False])
def test_recursive_functions_are_refused(optimize: bool) -> None:
    with pytest.raises(PlanError, match=r"rt.func @f is recursive \(@f -> @g -> @f\)"):
        compile_module(parse(RECURSIVE), optimize=optimize)


def test_kernel_error_inside_a_function_names_the_op() -> None:
    text = """
graph.h2d_stream @i : tensor<1xui32>
graph.d2h_stream @y : tensor<2x3xf32>
graph.graph @pick(%t: tensor<4x3xf32>, %i: tensor<1xui32>) -> (tensor<2x3xf32>) {
  %g = popxl.dynamic_slice %t, %i {axes = array<i64: 0>, sizes = array<i64: 2>, no_overlap = false} : (tensor<4x3xf32>, tensor<1xui32>) -> tensor<2x3xf32>
  %r = popxl.relu %g : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.output %r : tensor<2x3xf32>
}
graph.main {
  %t = graph.constant dense<1.0> : tensor<4x3xf32>
  %i = graph.host_load @i : tensor<1xui32>
  %a = call.call @pick(%t, %i) : (tensor<4x3xf32>, tensor<1xui32>) -> tensor<2x3xf32>
  %b = call.call @pick(%t, %i) : (tensor<4x3xf32>, tensor<1xui32>) -> tensor<2x3xf32>
  %c = popxl.add %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %c : tensor<2x3xf32>
}
"""
    exe = compile_module(parse(text), pipeline="lower-to-rt")
    assert "rt.call @pick" in exe.sources[0]
    np.testing.assert_array_equal(exe.run({"i": np.array([2], np.uint32)})["y"], np.full((2, 3), 2.0))
    # the failing kernel runs in the shared function: its line maps to the op
    with pytest.raises(
        Exception, match=r"^DynamicSlice \(popxl\.dynamic_slice\) failed: popxl\.dynamic_slice: offset 3"
    ) as info:
        exe.run({"i": np.array([3], np.uint32)})
    assert getattr(info.value, "xl_kernel").name == "popxl.dynamic_slice"  # noqa: B009


# -- the default compile ------------------------------------------------------------------------


def test_compile_pipeline_options() -> None:
    assert compile_pipeline(DEFAULT_PIPELINE, outline=False) == DEFAULT_PIPELINE
    assert "outline{" in compile_pipeline(DEFAULT_PIPELINE)
    assert compile_pipeline("inline,lower-to-rt") == "inline,lower-to-rt"  # explicit: as given
    assert compile_pipeline(DEFAULT_PIPELINE, functions=False).endswith("lower-to-rt{functions=false}")
    assert compile_pipeline("outline{min-ops=4},lower-to-rt", functions=False) == (
        "outline{min-ops=4},lower-to-rt{functions=false}"
    )


def _normalised(src: str) -> str:
    """Generated source with the names that depend on object ids numbered in order."""
    names: dict[str, str] = {}
    return re.sub(r"\bs_\d+\b", lambda m: names.setdefault(m.group(0), f"s_{len(names)}"), src)


def _example(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def test_mnist_is_below_the_threshold_and_compiles_exactly_as_before() -> None:
    mnist = _example("mnist")
    session, _, _, _ = mnist.train_program(8, "cpu", 0.05)
    module = session._ir._module
    assert count_ops(lower(module, "pipeline,inline")) < OUTLINE_MIN_PROGRAM_OPS
    on = compile_module(module).sources[0]
    off = compile_module(module, outline=False).sources[0]
    assert _normalised(on) == _normalised(off)
    assert "rt.call" not in on


def test_dead_repeats_are_removed_not_outlined() -> None:
    """A program over the threshold whose repeated layers are dead: `dce` runs before
    `outline`, so the default compile is the one without outlining (an outlined call would
    keep its dead body running)."""
    t = "tensor<2x4xf32>"
    lines = [f"graph.h2d_stream @x : {t}", f"graph.d2h_stream @y : {t}", "graph.main {",
             f"  %v0 = graph.host_load @x : {t}"]  # fmt: skip
    for i in range(100):
        lines.append(f'  %w{i} = graph.variable "w{i}" = dense<0.25> : tensor<4x4xf32>')
        lines.append(f"  %m{i} = popxl.matmul %v{i}, %w{i} : ({t}, tensor<4x4xf32>) -> {t}")
        lines.append(f"  %a{i} = popxl.add %m{i}, %v{i} : ({t}, {t}) -> {t}")
        lines.append(f"  %v{i + 1} = popxl.tanh %a{i} : ({t}) -> {t}")
    lines += [f"  %y = popxl.neg %v0 : ({t}) -> {t}", f"  graph.host_store @y, %y : {t}", "}"]
    m = parse("\n".join(lines))
    assert count_ops(lower(m, "pipeline,inline")) >= OUTLINE_MIN_PROGRAM_OPS
    on, off = compile_module(m), compile_module(m, outline=False)
    assert "rt.call" not in on.sources[0]
    assert _normalised(on.sources[0]) == _normalised(off.sources[0])
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(on.run({"x": x})["y"], -x)


def test_session_outline_option() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), np.float32))
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "y"), x + x)
    with pytest.raises(TypeError, match="Session: outline must be a bool, got str"):
        popxl.Session(ir, "cpu", outline="no")  # pyright: ignore[reportArgumentType]
    with popxl.Session(ir, "cpu", outline=False) as s:
        (y,) = s.run().values()
    np.testing.assert_array_equal(y, [2.0, 2.0])


# -- outlined == inlined: deep models, examples, seeds ---------------------------------------------


class Deep(addons.Module):
    def __init__(self, layers: int, width: int):
        super().__init__()
        self.hidden = [Linear(width) for _ in range(layers)]
        for i, m in enumerate(self.hidden):
            setattr(self, f"fc{i}", m)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        for m in self.hidden:
            x = ops.gelu(m(x))
        return x


def deep_training(layers: int, width: int, batch: int, lr: float) -> tuple[popxl.Ir, list[popxl.Tensor]]:
    """Forward, loss sum(y^2)/2 (gradient y), backward with addons.autodiff, SGD."""
    np.random.seed(3)
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((batch, width), popxl.float32, "x"))
        facts, fwd = Deep(layers, width).create_graph(x)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        y = info.outputs[0]
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        binfo = bwd.call_with_info(y, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, binfo)
        for t in variables.tensors:
            ops.scaled_add_(t, grads[t], b=-lr)
    return ir, list(variables.tensors)


def deep_numpy_step(x: np.ndarray, ws: list[np.ndarray], bs: list[np.ndarray], lr: float) -> np.ndarray:
    """One training step in float64 NumPy (updates ws, bs); returns the forward output."""
    hs, pre = [x], []
    for w, b in zip(ws, bs, strict=True):
        pre.append(hs[-1] @ w + b)
        hs.append(gelu(pre[-1]))
    dy = hs[-1]
    for i in reversed(range(len(ws))):
        da = dy * gelu_grad(pre[i])
        dw, db = hs[i].T @ da, da.sum(0)
        dy = da @ ws[i].T
        ws[i] -= lr * dw
        bs[i] -= lr * db
    return hs[-1]


def test_deep_mlp_training_outlined_equals_inlined_and_numpy() -> None:
    layers, width, batch, lr = 12, 8, 4, 0.05
    ir, tensors = deep_training(layers, width, batch, lr)
    module = ir._module
    low = lower(module, OUTLINED)
    n_funcs, n_calls = funcs_and_calls(low)
    assert n_funcs >= 1 and n_calls >= 2 * n_funcs
    runs = {
        "outlined": compile_module(module, pipeline=OUTLINED),
        "outlined, straightforward": compile_module(module, pipeline=OUTLINED, optimize=False),
        "inlined": compile_module(module, outline=False),
    }
    names = sorted(runs["inlined"].state)
    ws = [runs["inlined"].get_state(f"fc{i}.weight").astype(np.float64) for i in range(layers)]
    bs = [runs["inlined"].get_state(f"fc{i}.bias").astype(np.float64) for i in range(layers)]
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.normal(size=(batch, width)).astype(np.float32)
        want = deep_numpy_step(x.astype(np.float64), ws, bs, lr)
        outs = {k: exe.run({"x": x})["y"] for k, exe in runs.items()}
        for k, y in outs.items():
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5, err_msg=k)
            np.testing.assert_allclose(y, outs["inlined"], **PLAN_TOL, err_msg=k)
        for n in names:
            for k, exe in runs.items():
                np.testing.assert_allclose(
                    exe.get_state(n), runs["inlined"].get_state(n), **PLAN_TOL, err_msg=f"{k}: {n}"
                )
    for i in range(layers):
        np.testing.assert_allclose(runs["outlined"].get_state(f"fc{i}.weight"), ws[i], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(runs["outlined"].get_state(f"fc{i}.bias"), bs[i], rtol=1e-4, atol=1e-5)
    assert len(tensors) == 2 * layers


def _bench_models() -> Any:
    """benchmarks/outline.py (its models)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_outline", ROOT / "benchmarks" / "outline.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_benchmark_models_train_the_same_outlined_and_inlined(model: str) -> None:
    bench = _bench_models()
    m = (
        bench.training_module(bench.MLP(48, 16, 10), 4, 8, 10)
        if model == "mlp"
        else bench.training_module(bench.Transformer(12, 8, 10), 4, 8, 10)
    )
    assert count_ops(lower(m, "pipeline,inline")) >= OUTLINE_MIN_PROGRAM_OPS
    on, off = compile_module(m), compile_module(m, outline=False)
    assert "rt.call" in on.sources[0] and "rt.call" not in off.sources[0]
    assert len(on.sources[0].splitlines()) * 2 < len(off.sources[0].splitlines())
    rng = np.random.default_rng(0)
    for _ in range(3):
        inputs = {"x": rng.normal(size=(4, 8)).astype(np.float32), "labels": rng.integers(0, 10, 4).astype(np.int32)}
        a, b = on.run(inputs)["loss"], off.run(inputs)["loss"]
        np.testing.assert_allclose(a, b, **PLAN_TOL)
    for n in off.state:
        np.testing.assert_allclose(on.get_state(n), off.get_state(n), **PLAN_TOL, err_msg=n)


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_outlining_keeps_weight_gradients_inside_the_layer_graphs(model: str) -> None:
    """With `hoist-updates` before `outline`, each layer's SGD step is outlined with its
    backward: no weight gradient is a call output (alive until the end of the step), so
    the activation peak stays that of the expanded program, far below the size of all
    weight gradients together."""
    from xl.compiler.memory import module_memory_report

    bench = _bench_models()
    m = (
        bench.training_module(bench.MLP(48, 64, 10), 8, 32, 10)
        if model == "mlp"
        else bench.training_module(bench.Transformer(12, 32, 10), 8, 32, 10)
    )
    weights = sum(4 * int(np.prod(op.result.type.get_shape())) for op in m.walk() if op.name == "graph.variable")
    on = module_memory_report(m).ipu(0)
    off = module_memory_report(m, outline=False).ipu(0)
    assert on.variables == off.variables == weights
    assert on.activations_peak <= 1.1 * off.activations_peak, (on, off)
    assert on.activations_peak * 2 < weights  # the gradients are never all alive
    # outlined: the SGD steps are inside the layer functions, folded into their gemms
    program = lowered_program(m)
    bodies = [op for op in program.walk() if isinstance(op, rt.FuncOp)]
    assert any(isinstance(k, rt.KernelOp) and k.kernel.data == "xl.gemm_acc" for f in bodies for k in f.body.walk())


def test_gpt_char_example_trains_the_same_outlined_and_inlined() -> None:
    gpt = _example("gpt_char")
    cfg = gpt.Config(vocab_size=12, seq_len=8, hidden=16, heads=2, layers=2, batch=2, dropout=0.0)
    session, _, _, _ = gpt.train_program(cfg)
    module = session._ir._module
    assert count_ops(lower(module, "pipeline,inline")) >= OUTLINE_MIN_PROGRAM_OPS
    on, off = compile_module(module), compile_module(module, outline=False)
    assert "rt.call" in on.sources[0] and "rt.call" not in off.sources[0]
    rng = np.random.default_rng(0)
    for _ in range(3):
        tok = rng.integers(0, 12, (cfg.batch, cfg.seq_len)).astype(np.int32)
        inputs = {name: tok for name in on.h2d_streams}
        a, b = on.run(inputs), off.run(inputs)
        for k in b:
            np.testing.assert_allclose(a[k], b[k], **PLAN_TOL, err_msg=k)
    for n in off.state:
        np.testing.assert_allclose(on.get_state(n), off.get_state(n), **PLAN_TOL, err_msg=n)


@pytest.mark.parametrize(
    ("name", "args"),
    [("mnist_accumulate", []), ("mnist_rts", ["--train-micro-batch-size", "1"])],
)
def test_examples_above_the_threshold_train_the_same_outlined_and_inlined(name: str, args: list[str]) -> None:
    """The examples whose programs reach the threshold (the others compile exactly as
    without outlining, as MNIST's does): two training steps, outputs and every variable."""
    example = _example(name)
    session = example.train_program(example.parse_args(args))[0]
    module = session._ir._module
    assert count_ops(lower(module, "pipeline,inline")) >= OUTLINE_MIN_PROGRAM_OPS
    on, off = compile_module(module), compile_module(module, outline=False)
    rng = np.random.default_rng(0)
    for _ in range(2):
        inputs = {
            n: rng.normal(size=off.full_shape(s)).astype(d)
            if np.dtype(d).kind == "f"
            else rng.integers(0, 10, size=off.full_shape(s)).astype(d)
            for n, (s, d) in off.h2d_streams.items()
        }
        a, b = on.run(inputs), off.run(inputs)
        for k in b:
            np.testing.assert_allclose(a[k], b[k], **PLAN_TOL, err_msg=k)
    for n in off.state:
        np.testing.assert_allclose(on.get_state(n), off.get_state(n), **PLAN_TOL, err_msg=n)


def test_seed_net_outlined_user_graph_is_one_function() -> None:
    """The seed's NetOutlined: fc2 and fc3 call one user graph; lowered without `inline`,
    it is one rt.func called twice, with the numbers of NumPy."""
    from tests.frontend.popxl.test_seed_basics import NET, new_ns, run
    from tests.frontend.popxl.test_seed_basics import OUTLINED as OUTLINED_SRC

    ns = new_ns()  # the seed's imports and Linear
    run(NET, ns)
    run(OUTLINED_SRC, ns)
    x_data = np.random.default_rng(0).normal(size=(28, 28)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = ns["NetOutlined"]().create_graph(popxl.TensorSpec((28, 28), popxl.float32))
        variables = facts.init()
        x = popxl.variable(x_data, name="x")
        (y,) = graph.bind(variables).call(x)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    keep_calls = "pipeline,canonicalize,cse,dce,lower-to-rt"
    assert funcs_and_calls(lower(ir._module, keep_calls)) == (1, 2)
    results = []
    for pipe, optimize in ((keep_calls, True), (keep_calls, False), (DEFAULT_PIPELINE, True)):
        exe = compile_module(ir._module, pipeline=pipe, optimize=optimize)
        results.append(exe.run()["y"])
        w = {
            k: exe.get_state(k)
            for k in (
                "fc1.weight",
                "fc1.bias",
                "fc2.weight",
                "fc2.bias",
                "fc3.weight",
                "fc3.bias",
                "fc4.weight",
                "fc4.bias",
            )
        }
    h = x_data.reshape(1, 784).astype(np.float64)
    for i in (1, 2, 3):
        h = gelu(h @ w[f"fc{i}.weight"] + w[f"fc{i}.bias"])
    want = h @ w["fc4.weight"] + w["fc4.bias"]
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(r, results[-1], **PLAN_TOL)


# -- random programs of the property test, repeated ------------------------------------------------


REPEATING = Recipe(
    ((2, 3),), ((2, 3),), (("tanh", 0, 0, 0, 1.0), ("mul", 0, 1, 0, 1.0), ("scaled_add_", 0, 0, 6, 0.5)), 2, 0
)


def test_a_repeated_random_program_gets_a_function() -> None:
    from dataclasses import replace

    p = resolve(replace(REPEATING, ops=REPEATING.ops * 3))
    built = build(p, popxl_source(p))
    pipe = "pipeline,inline,outline{min-ops=2},canonicalize,cse,dce,lower-to-rt"
    assert funcs_and_calls(lower(built.ir._module, pipe)) == (1, 3)


@example(REPEATING)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(recipes(max_ops=10))
def test_repeated_random_programs_outlined_match_numpy(recipe: Any) -> None:
    """A random program with its op list repeated three times (so that it repeats), outlined
    with runs of 2+ ops and lowered with functions, on both plans, against the property
    test's independent NumPy reference."""
    from dataclasses import replace

    from hypothesis import reject

    recipe = replace(recipe, ops=recipe.ops * 3)
    try:
        p = resolve(recipe)
        want_outs, want_vars, out_errs, var_errs = reference(p)
    except Rejected:
        reject()
    built = build(p, popxl_source(p))
    pipe = "pipeline,inline,outline{min-ops=2},canonicalize,cse,dce,lower-to-rt"
    for optimize in (True, False):
        exe = compile_module(built.ir._module, pipeline=pipe, optimize=optimize)
        for run in range(recipe.runs):
            outs = exe.run({f"x{n}": x for n, x in enumerate(run_inputs(p, run))})
            for n in range(len(built.d2h)):
                got, want = outs[f"o{n}"].astype(np.float64), want_outs[run][n]
                assert np.all(np.abs(got - want) <= tolerance(want, out_errs[run][n])), (optimize, run, n)
            for n in range(len(built.variables)):
                got, want = exe.get_state(f"w{n}").astype(np.float64), want_vars[run][n]
                assert np.all(np.abs(got - want) <= tolerance(want, var_errs[run][n])), (optimize, run, n)
