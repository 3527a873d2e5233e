"""The optimised runtime (`rt-optimize` + generated plan) against the straightforward plan.

Every program is compiled twice, `compile_module(m, optimize=False)` (the lowered program
run kernel by kernel) and `compile_module(m)` (rt passes + generated step), run on the
same inputs for a few steps, and all outputs and variables must agree to `PLAN_TOL`
(`tests/helpers/plan_tolerance.py`: a few float32 ulps, what "the same results" means).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FloatAttr, ModuleOp, StringAttr

import popxl
import popxl_addons as addons
from popxl import ops
from tests.helpers.plan_tolerance import PLAN_TOL
from xl.compiler import DEFAULT_PIPELINE, compile_module, lower
from xl.dialects import rt
from xl.passes.rt_analysis import VIEW_ATTR
from xl.runtime.blas import gemm_acc
from xl.runtime.executable import compile_program
from xl.runtime.plan import build_replica
from xl.runtime.streams import StreamIn, StreamOut


def module(ir: popxl.Ir) -> ModuleOp:
    return ir._module


def compare(ir: popxl.Ir, feeds: list[dict[str, np.ndarray]] | None = None) -> tuple:
    """Run both plans on each feed in turn; assert equal outputs and state; return both."""
    m = module(ir)
    plain = compile_module(m, optimize=False)
    opt = compile_module(m)
    assert opt.sources and not plain.sources
    for feed in feeds or [{}]:
        a, b = plain.run(feed), opt.run(feed)
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_allclose(b[k], a[k], **PLAN_TOL, err_msg=f"stream {k}")
        for k in plain.state:
            np.testing.assert_allclose(opt.state[k], plain.state[k], **PLAN_TOL, err_msg=f"variable {k}")
    return plain, opt


def kernels(m: ModuleOp, pipeline: str) -> list[rt.KernelOp]:
    low = lower(m, pipeline)
    return [op for op in low.walk() if isinstance(op, rt.KernelOp)]


def program_of(low: ModuleOp) -> rt.ProgramOp:
    """The one rt.program of a lowered module."""
    (program,) = list(low.ops)
    assert isinstance(program, rt.ProgramOp), program.name
    return program


def names(ks: list[rt.KernelOp]) -> list[str]:
    return [k.kernel.data for k in ks]


# ------------------------------------------------------------------------------------
# Programs
# ------------------------------------------------------------------------------------


def linear_ir(batch: int = 4) -> popxl.Ir:
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((batch, 6), popxl.float32, "x")
        x = ops.host_load(xs)
        w = popxl.variable(rng.normal(size=(6, 5)).astype(np.float32), name="w")
        b = popxl.variable(rng.normal(size=(5,)).astype(np.float32), name="b")
        y = ops.relu(x @ w + b)
        z = ops.gelu(ops.tanh(y) * 2 - b)
        ys = popxl.d2h_stream(z.shape, z.dtype, "y")
        ops.host_store(ys, z)
    return ir


class Linear(addons.Module):
    def __init__(self, out_features: int):
        super().__init__()
        self.out_features = out_features

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.1, (x.shape[-1], self.out_features)), x.dtype
        )
        b = self.add_variable_input("bias", partial(np.zeros, self.out_features), x.dtype)
        return x @ w + b


class Net(addons.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = Linear(32), Linear(24), Linear(10)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = x.reshape((-1, 8 * 8))
        x = ops.gelu(self.fc1(x))
        x = ops.gelu(self.fc2(x))
        return self.fc3(x)


def mnist_like_ir(batch: int = 4, lr: float = 0.1) -> popxl.Ir:
    """The seed's training program (autodiff, cross entropy, SGD with scaled_add_), smaller."""
    np.random.seed(1)
    ir = popxl.Ir()
    with ir.main_graph:
        img_s = popxl.h2d_stream((batch, 8, 8), popxl.float32, "image")
        img = ops.host_load(img_s)
        lab_s = popxl.h2d_stream((batch,), popxl.int32, "labels")
        labels = ops.host_load(lab_s, "labels")
        facts, fwd = Net().create_graph(img)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        fwd_info = fwd.bind(variables).call_with_info(img)
        loss, dx = addons.ops.cross_entropy_with_grad(fwd_info.outputs[0], labels)
        loss_s = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_s, loss)
        acts = bwd.grad_graph_info.inputs_dict(fwd_info)
        bwd_info = bwd.call_with_info(dx, args=acts)
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        for t in variables.tensors:
            ops.scaled_add_(t, grads[t], b=-lr)
    return ir


def mnist_feeds(n: int, batch: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(2)
    return [
        {
            "image": rng.normal(size=(batch, 8, 8)).astype(np.float32),
            "labels": rng.integers(0, 10, batch).astype(np.int32),
        }
        for _ in range(n)
    ]


# ------------------------------------------------------------------------------------
# Equivalence
# ------------------------------------------------------------------------------------


def test_linear_layer():
    rng = np.random.default_rng(3)
    compare(linear_ir(), [{"x": rng.normal(size=(4, 6)).astype(np.float32)} for _ in range(2)])


def test_mnist_like_training_steps():
    plain, opt = compare(mnist_like_ir(), mnist_feeds(5))
    # the weights moved: it really trained
    assert not np.allclose(plain.state["fc1.weight"], compile_module(module(mnist_like_ir())).state["fc1.weight"])


def test_mnist_like_optimised_ir():
    ks = kernels(module(mnist_like_ir()), f"{DEFAULT_PIPELINE},rt-optimize")
    n = names(ks)
    gemms = [k for k in ks if k.kernel.data == "xl.gemm_acc"]
    # every weight update folded into its gradient gemm, every bias add into its matmul
    alphas = [k.attributes["alpha"] for k in gemms]
    assert all(isinstance(a, FloatAttr) for a in alphas), alphas
    assert sorted(float(a.value.data) for a in alphas if isinstance(a, FloatAttr)) == [-0.1] * 3 + [1.0] * 3
    assert "popxl.matmul" in n and "popxl.scaled_add_" in n  # dx matmuls, bias updates
    views = [k for k in ks if VIEW_ATTR in k.attributes]
    assert {k.kernel.data for k in views} == {"popxl.reshape", "popxl.transpose"}


def test_plan_calls_only_planned_kernels():
    low = lower(module(mnist_like_ir()), f"{DEFAULT_PIPELINE},rt-optimize")
    program = program_of(low)
    b, _ = build_replica(program, StreamIn, StreamOut)
    assert b.fallbacks == []  # every kernel has generated code (no factory closures)


def test_steady_state_step_allocates_no_arrays():
    """Every buffer is allocated at compile time: a step only makes transient allocations
    inside NumPy (iterator buffers for broadcasting ufuncs) and small Python objects."""
    import tracemalloc

    m = module(mnist_like_ir(batch=32))
    feed = mnist_feeds(1, 32)[0]
    peaks = {}
    for optimize in (False, True):
        exe = compile_module(m, optimize=optimize)
        rep = exe.replicas[0]
        exe.run(feed)

        def steps() -> None:  # called in this iteration only
            for s in (*rep.inputs.values(), *rep.outputs.values()):  # noqa: B023 (called within this iteration)
                s.index = 0
            for f in rep.steps:  # noqa: B023 (called within this iteration)
                f()

        steps()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            steps()
        peaks[optimize] = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
    # the straightforward kernels allocate temporaries (a 32x32 float32 array is 4 KB)
    assert peaks[True] < 4096 < peaks[False]


def test_repeat_loop_with_inplace_updates():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0, 3.0], np.float32), name="x")
        inc = popxl.variable(np.array([0.5, 0.25, 0.125], np.float32), name="inc")
        acc = popxl.variable(np.zeros(3, np.float32), name="acc")

        def body(a, d):
            t = ops.gelu(a * 2 + d)
            ops.scaled_add_(d, t, b=0.1)  # in-place on a by-value input: a copy per iteration
            return t - d

        g = ir.create_graph(body, x, inc)
        (r,) = ops.repeat(g, 4, x, inc)
        ops.scaled_add_(acc, r, a=0.5, b=2.0)
        ys = popxl.d2h_stream(r.shape, r.dtype, "r")
        ops.host_store(ys, r)
    assert "rt.loop" in str(lower(module(ir)))
    compare(ir, [{}, {}, {}])


def test_conditional():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, -2.0], np.float32), name="x")
        flag = popxl.variable(True, name="flag")
        t_g = ir.create_graph(lambda a: ops.relu(a * 3 + 1), x)
        e_g = ir.create_graph(lambda a: ops.tanh(a) - 1, x)
        (z,) = ops.conditional(flag, t_g, e_g, [x], [x])
        ops.scaled_add_(x, z, b=0.5)
        ys = popxl.d2h_stream(z.shape, z.dtype, "z")
        ops.host_store(ys, z)
    plain, opt = compare(ir, [{}, {}])
    for exe in (plain, opt):
        exe.set_state("flag", np.array(False))
    for _ in range(2):
        np.testing.assert_allclose(opt.run()["z"], plain.run()["z"], **PLAN_TOL)
        np.testing.assert_allclose(opt.state["x"], plain.state["x"], **PLAN_TOL)


def test_transpose_of_updated_variable_is_not_a_view():
    """`wt` is taken before `w` changes and read after: it must stay a copy."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        x = ops.host_load(xs)
        w = popxl.variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, name="w")
        wt = ops.transpose(w)
        ops.scaled_add_(w, popxl.constant(np.ones((4, 3), np.float32)), b=-1.0)
        y = x @ wt
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    ks = kernels(module(ir), f"{DEFAULT_PIPELINE},rt-optimize")
    assert not any(VIEW_ATTR in k.attributes for k in ks if k.kernel.data == "popxl.transpose")
    compare(ir, [{"x": np.ones((2, 3), np.float32)}] * 2)


def test_update_folded_on_the_copy_when_operand_changes_in_between():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="a")
        d = popxl.variable(np.ones((2, 4), np.float32), name="d")
        w = popxl.variable(np.zeros((3, 4), np.float32), name="w")
        g = ops.transpose(a) @ d
        ops.scaled_add_(a, popxl.constant(np.ones((2, 3), np.float32)))  # a changes
        ops.scaled_add_(w, g, b=-0.5)
    ks = kernels(module(ir), f"{DEFAULT_PIPELINE},rt-optimize")
    # still folded, but reading the transposed copy taken before `a` changed
    (t,) = [k for k in ks if k.kernel.data == "popxl.transpose"]
    (gemm,) = [k for k in ks if k.kernel.data == "xl.gemm_acc"]
    assert VIEW_ATTR not in t.attributes and gemm.ins[0] is t.outs[0]
    compare(ir, [{}, {}])


def test_update_folded_with_scale():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.arange(6, dtype=np.float32).reshape(3, 2) / 7, name="a")
        d = popxl.variable(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), name="d")
        w = popxl.variable(np.ones((3, 4), np.float32), name="w")
        ops.scaled_add_(w, a @ d, a=0.9, b=-0.5)
        ops.scaled_add_(d, popxl.constant(np.full((2, 4), 0.1, np.float32)))
    assert "xl.gemm_acc" in names(kernels(module(ir), f"{DEFAULT_PIPELINE},rt-optimize"))
    compare(ir, [{}, {}, {}])


def test_host_transfers_and_replicas():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        w = popxl.variable(np.ones((3, 3), np.float32), name="w")

        def step(wt):
            h = ops.host_load(xs)
            y = ops.gelu(h @ wt) + h
            ops.host_store(ys, y)

        g = ir.create_graph(step, w)
        ops.repeat(g, 3, w)
    ir.num_host_transfers = 3
    data = np.arange(36, dtype=np.float32).reshape(3, 2, 2, 3) / 10
    compare(ir, [{"x": data}, {"x": data + 1}])


def test_inference_fuses_elementwise_chains():
    ir = popxl.Ir()
    rng = np.random.default_rng(4)
    with ir.main_graph:
        xs = popxl.h2d_stream((3, 5), popxl.float32, "x")
        x = ops.host_load(xs)
        w = popxl.variable(rng.normal(size=(5, 5)).astype(np.float32), name="w")
        b = popxl.variable(rng.normal(size=(5,)).astype(np.float32), name="b")
        h = ops.gelu(x @ w + b)
        y = ops.sqrt(ops.exp(h * h) + 1) - h  # h has two readers: the chain starts after it
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    ks = kernels(module(ir), f"{DEFAULT_PIPELINE},rt-optimize")
    (fused,) = [k for k in ks if k.kernel.data == "xl.fused"]
    steps_attr = fused.attributes["steps"]
    assert isinstance(steps_attr, ArrayAttr)
    steps = []
    for d in steps_attr.data:
        assert isinstance(d, DictionaryAttr), d
        kernel = d.data["kernel"]
        assert isinstance(kernel, StringAttr), d
        steps.append(kernel.data)
    assert steps == ["popxl.mul", "popxl.exp", "popxl.add", "popxl.sqrt", "popxl.sub"]
    compare(ir, [{"x": rng.normal(size=(3, 5)).astype(np.float32)}])


def test_pow_by_small_constants():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.linspace(-2, 2, 7, dtype=np.float32), name="x")
        outs = [x**2, x**3, x**1, ops.pow(x, 3.0)]
        for i, t in enumerate(outs):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, f"p{i}"), t)
    compare(ir)


# ------------------------------------------------------------------------------------
# Each pass on its own, and the straightforward plan on optimised IR
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "passes", ["rt-fold-update", "rt-fuse-elementwise", "rt-views", "rt-reuse-buffers", "rt-optimize"]
)
def test_each_pass_keeps_results(passes):
    m = module(mnist_like_ir())
    low = lower(m, f"{DEFAULT_PIPELINE},{passes}")
    program = program_of(low)
    ref = compile_module(m, optimize=False)
    closure = compile_program(program, optimize=False)  # runs xl.* kernels by their factories
    generated = compile_program(program, optimize=True)
    for feed in mnist_feeds(3):
        r = ref.run(feed)["loss"]
        np.testing.assert_allclose(closure.run(feed)["loss"], r, **PLAN_TOL)
        np.testing.assert_allclose(generated.run(feed)["loss"], r, **PLAN_TOL)
    for k in ref.state:
        np.testing.assert_allclose(closure.state[k], ref.state[k], **PLAN_TOL)
        np.testing.assert_allclose(generated.state[k], ref.state[k], **PLAN_TOL)


def test_reuse_shrinks_allocations():
    m = module(mnist_like_ir())
    before = lower(m, DEFAULT_PIPELINE)
    after = lower(before, "rt-reuse-buffers")

    def count(mod: ModuleOp) -> int:
        return sum(isinstance(op, rt.AllocOp) for op in mod.walk())

    assert count(after) < count(before) - 5


def test_compile_module_leaves_input_untouched():
    m = module(linear_ir())
    low = lower(m, DEFAULT_PIPELINE)
    text = str(low)
    compile_module(low)
    assert str(low) == text


@pytest.mark.parametrize("ta,tb,fa,fb", [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 1, 0), (1, 1, 1, 1), (1, 0, 0, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_acc_layouts(ta, tb, fa, fb, dtype):
    rng = np.random.default_rng(5)
    m, k, n = 5, 7, 3
    a = rng.normal(size=(k, m) if ta else (m, k)).astype(dtype)
    b = rng.normal(size=(n, k) if tb else (k, n)).astype(dtype)
    a = np.asfortranarray(a) if fa else a
    b = np.asfortranarray(b) if fb else b
    c = rng.normal(size=(m, n)).astype(dtype)
    want = -0.5 * ((a.T if ta else a) @ (b.T if tb else b)) + 0.75 * c
    gemm_acc(a, b, c, -0.5, 0.75, bool(ta), bool(tb))()
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
