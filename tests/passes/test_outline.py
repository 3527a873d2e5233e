"""The `outline` pass: outlined programs give the results of the original ones.

Every example program (forward and training step, autodiff included), a deep addons model
and random programs with repeated blocks are run before and after `outline` (and after
`outline` then `inline`), to 1e-6; a small case is checked against NumPy directly.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

import popxl
import popxl.ops as ops
import popxl_addons as addons
from tests.helpers.narrow import narrow
from tests.helpers.plan_tolerance import PLAN_TOL
from xl.compiler import compile_module
from xl.dialects.call import CallOp
from xl.dialects.graph import GraphOp
from xl.passes.inline import inline_all
from xl.passes.outline import OutlineError, outline
from xl.tools.context import xl_context

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import mnist as mnist_example  # noqa: E402
import mnist_accumulate as mnist_accumulate_example  # noqa: E402
import mnist_popxl as mnist_popxl_example  # noqa: E402


def outlined(module: ModuleOp, min_ops: int = 3) -> tuple[ModuleOp, list[str]]:
    m = module.clone()
    names = outline(m, min_ops)
    m.verify()
    return m, names


def calls_of(module: ModuleOp, name: str) -> int:
    return sum(isinstance(op, CallOp) and op.callee.root_reference.data == name for op in module.walk())


def inputs_for(module: ModuleOp, seed: int = 0):
    exe = compile_module(module, optimize=False)
    shapes = {k: (exe.full_shape(s), d) for k, (s, d) in exe.h2d_streams.items()}

    def make(step: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([seed, step])
        return {
            k: rng.normal(size=s).astype(d) if np.dtype(d).kind == "f" else rng.integers(0, 10, size=s).astype(d)
            for k, (s, d) in shapes.items()
        }

    return make


def trace(module: ModuleOp, make, steps: int, pipeline: str | None = None):
    exe = compile_module(module) if pipeline is None else compile_module(module, pipeline)
    outs = [exe.run(make(i)) for i in range(steps)]
    return outs, {k: v.copy() for k, v in exe.state.items()}


def assert_equivalent(module: ModuleOp, steps: int = 2, min_ops: int = 3) -> list[str]:
    """outline(module), outline+inline and, through plain lowering (calls expanded by
    lower-to-rt, no inline pass), the outlined module all give the original's results."""
    make = inputs_for(module)
    ref_outs, ref_state = trace(module, make, steps)
    out_mod, names = outlined(module, min_ops)
    back = out_mod.clone()
    inline_all(back)
    back.verify()
    for mod, pipeline in ((out_mod, None), (out_mod, "lower-to-rt"), (back, None)):
        outs, state = trace(mod, make, steps, pipeline)
        for a, b in zip(outs, ref_outs, strict=True):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_allclose(a[k], b[k], **PLAN_TOL, err_msg=k)
        assert state.keys() == ref_state.keys()
        for k in state:
            np.testing.assert_allclose(state[k], ref_state[k], **PLAN_TOL, err_msg=k)
    return names


# -- example programs ----------------------------------------------------------------------


def test_linear_ir_example():
    module = Parser(xl_context(), (EXAMPLES / "ir" / "linear.mlir").read_text()).parse_module()
    assert assert_equivalent(module, min_ops=1) == []  # nothing repeats


def test_mnist_training_step():
    np.random.seed(0)
    session, *_ = mnist_example.train_program(4, "cpu", 0.05)
    module = session.ir._module
    names = assert_equivalent(module)
    m, _ = outlined(module)
    # forward: fc2 and fc3 (matmul, add, gelu); gradient graph: their gradient blocks
    graphs = {op.graph_name: op for op in m.ops if isinstance(op, GraphOp)}
    assert len(names) == 2
    for name in names:
        assert calls_of(m, name) == 2
    fwd = [
        n
        for n in names
        if [o.name for o in graphs[n].body.block.ops][:3] == ["popxl.matmul", "popxl.add", "popxl.gelu"]
    ]
    assert len(fwd) == 1
    grad_ops = {o.name for n in names if n not in fwd for o in graphs[n].body.block.ops}
    assert {"popxl.gelu_grad", "popxl.matmul", "popxl.reduce_to_shape"} <= grad_ops


def test_mnist_inference():
    np.random.seed(0)
    session, *_ = mnist_example.test_program(8, "cpu")
    names = assert_equivalent(session.ir._module)
    assert len(names) == 1


def test_mnist_popxl_example():
    np.random.seed(0)
    ir, *_ = mnist_popxl_example.build_train_ir(16, 0.1)
    assert_equivalent(ir._module)
    assert_equivalent(ir._module, min_ops=1)


@pytest.mark.parametrize("recomputation", [False, True])
def test_mnist_accumulate_example(recomputation):
    np.random.seed(0)
    opts = mnist_accumulate_example.parse_args(["--recomputation"] if recomputation else [])
    session, *_ = mnist_accumulate_example.train_program(opts)
    assert assert_equivalent(session.ir._module)


# -- a deep addons model, trained -----------------------------------------------------------


class Linear(addons.Module):
    def __init__(self, out_features: int):
        super().__init__()
        self.out_features = out_features

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.3, (x.shape[-1], self.out_features)), x.dtype
        )
        b = self.add_variable_input("bias", partial(np.random.normal, 0, 0.1, (self.out_features,)), x.dtype)
        return x @ w + b


class Deep(addons.Module):
    def __init__(self, layers: int, width: int):
        super().__init__()
        self.first = Linear(width)
        self.layers = [Linear(width) for _ in range(layers)]
        for i, layer in enumerate(self.layers):
            setattr(self, f"layer{i}", layer)
        self.last = Linear(10)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = ops.gelu(self.first(x))
        for layer in self.layers:
            x = ops.gelu(layer(x))
        return self.last(x)


def deep_training_ir(layers: int = 5, width: int = 6, batch: int = 4, lr: float = 0.1) -> popxl.Ir:
    np.random.seed(1)
    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((batch, 5), popxl.float32, "x")
        l_stream = popxl.h2d_stream((batch,), popxl.int32, "labels")
        x = ops.host_load(x_stream)
        labels = ops.host_load(l_stream)
        facts, fwd = Deep(layers, width).create_graph(x)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        fwd_info = fwd.bind(variables).call_with_info(x)
        loss, dx = addons.ops.cross_entropy_with_grad(fwd_info.outputs[0], labels)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
        bwd_info = bwd.call_with_info(dx, args=bwd.grad_graph_info.inputs_dict(fwd_info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        for t in variables.tensors:
            ops.scaled_add_(t, grads[t], b=-lr)
    return ir


def test_deep_model_training():
    ir = deep_training_ir()
    names = assert_equivalent(ir._module, steps=3)
    m, _ = outlined(ir._module)
    # one graph for the identical forward layers, one for their gradient blocks
    # (the first layer differs in input width; its gelu/add may join a neighbour's run)
    counts = sorted(calls_of(m, n) for n in names)
    assert counts[-1] >= 4 and counts[-2] >= 4, counts
    # inlined then outlined again: the same number of ops
    inl = ir._module.clone()
    inline_all(inl)
    m2, names2 = outlined(inl)
    assert len(names2) >= 1
    n_before = sum(1 for _ in inl.walk())
    n_after = sum(1 for _ in m2.walk())
    assert n_after < n_before


# -- an independent NumPy check ---------------------------------------------------------------


def test_numpy_reference_inplace_and_host_io():
    """Two identical blocks (host_load, matmul, tanh, in-place SGD-like update of the block's
    variable, host_store) outlined into one graph: the variable is updated through a
    by-reference input, the streams are read and written in program order."""
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=(3, 3)).astype(np.float32)
    w1 = rng.normal(size=(3, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        ws = [popxl.variable(w0, name="w0"), popxl.variable(w1, name="w1")]
        h = None
        for w in ws:
            x = ops.host_load(xs)
            if h is not None:
                x = x + h
            h = ops.tanh(x @ w)
            ops.scaled_add_(w, x.T @ h, b=-0.5)
            ops.host_store(ys, h)
    ir.num_host_transfers = 2
    m, names = outlined(ir._module)
    assert len(names) == 1 and calls_of(m, names[0]) == 2
    graph = next(op for op in m.ops if isinstance(op, GraphOp))
    assert [graph.input_is_by_ref(i) for i in range(len(graph.body.block.args))].count(True) == 1
    xin = rng.normal(size=(2, 2, 3)).astype(np.float32)  # two transfers
    exe = compile_module(m, "lower-to-rt")
    y = exe.run({"x": xin})["y"]
    # NumPy
    w = [w0.astype(np.float64), w1.astype(np.float64)]
    x = xin[0].astype(np.float64)
    h0 = np.tanh(x @ w[0])
    w[0] = w[0] - 0.5 * (x.T @ h0)
    x1 = xin[1] + h0
    h1 = np.tanh(x1 @ w[1])
    w[1] = w[1] - 0.5 * (x1.T @ h1)
    np.testing.assert_allclose(y, np.stack([h0, h1]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exe.state["w0"], w[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exe.state["w1"], w[1], rtol=1e-5, atol=1e-6)


# -- random programs with repeated blocks --------------------------------------------------

N = 3
KINDS = ("add", "mul", "gelu", "tanh", "matmul", "transpose", "softmax", "scaled_add_", "store", "load")


def build_repeated(block: list[tuple[str, int, int, float]], repeats: int) -> tuple[popxl.Ir, int, int]:
    """`block` repeated `repeats` times; each repeat has its own variable and reads the
    previous repeat's last value, so repeats are isomorphic unless the block reaches back
    further (then the wiring differs and fewer runs are outlined)."""
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((N, N), popxl.float32, "x")
        ys = popxl.d2h_stream((N, N), popxl.float32, "y")
        pool = [ops.host_load(xs)]
        for r in range(repeats):
            w = popxl.variable(rng.normal(size=(N, N)).astype(np.float32) * 0.5, name=f"w{r}")
            local = [pool[-1], w]
            for kind, i, j, c in block:
                a, b = local[i % len(local)], local[j % len(local)]
                if kind == "add":
                    local.append(a + b)
                elif kind == "mul":
                    local.append(a * c)
                elif kind in ("gelu", "tanh"):
                    local.append(getattr(ops, kind)(a))
                elif kind == "matmul":
                    local.append(a @ b)
                elif kind == "transpose":
                    local.append(a.T)
                elif kind == "softmax":
                    local.append(ops.softmax(a, axis=-1))
                elif kind == "scaled_add_":
                    ops.scaled_add_(w, b, b=-c)
                elif kind == "store":
                    ops.host_store(ys, a)
                else:
                    local.append(ops.host_load(xs) * c)
            pool.append(local[-1])
        ops.host_store(ys, pool[-1])
    n_stores = 1 + repeats * sum(k == "store" for k, *_ in block)
    n_loads = 1 + repeats * sum(k == "load" for k, *_ in block)
    return ir, n_loads, n_stores


blocks = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 8), st.integers(0, 8), st.floats(0.1, 1.0)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks, st.integers(2, 4), st.integers(1, 4))
def test_random_repeated_programs(block, repeats, min_ops):
    ir, n_loads, n_stores = build_repeated(block, repeats)
    # each access of a stream takes one transfer: loads and stores must agree
    if n_loads != n_stores:
        ops_list = [b for b in block if b[0] not in ("load", "store")]
        ir, n_loads, n_stores = build_repeated(ops_list or [("gelu", 0, 0, 1.0)], repeats)
    ir.num_host_transfers = n_loads
    names = assert_equivalent(ir._module, steps=2, min_ops=min_ops)
    m, _ = outlined(ir._module, min_ops)
    for name in names:
        assert calls_of(m, name) >= 2


# -- options ----------------------------------------------------------------------------------


def test_bad_options():
    module = Parser(xl_context(), (EXAMPLES / "ir" / "linear.mlir").read_text()).parse_module()
    with pytest.raises(OutlineError, match="min-ops must be >= 1, got 0"):
        outline(module, 0)
    with pytest.raises(OutlineError, match="no graph @nope in the module"):
        outline(module, 3, "nope")


def test_graph_option_restricts_to_one_graph():
    np.random.seed(0)
    session, *_ = mnist_example.train_program(4, "cpu", 0.05)
    module = session.ir._module.clone()
    grad = next(op.graph_name for op in module.ops if isinstance(op, GraphOp) and op.graph_name.endswith("_grad"))
    names = outline(module, 3, grad)
    assert len(names) == 1
    calls = [op for op in module.walk() if isinstance(op, CallOp) and op.callee.root_reference.data == names[0]]
    assert len(calls) == 2 and all(narrow(c.parent_op(), GraphOp).graph_name == grad for c in calls)
