"""`popxl_addons.optimizers.adam.AdamOptimizerStep`: numerics against NumPy and
`torch.optim.AdamW`, graph caching, state and structure."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons.optimizers.adam import AdamOptimizerStep

SHAPE = (3, 4)
RNG = np.random.default_rng(7)
W0 = RNG.normal(size=SHAPE).astype(np.float32)
GRADS = RNG.normal(size=(4, *SHAPE)).astype(np.float32)


def run_adam(steps: int, grads=GRADS, w0=W0, **kwargs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`steps` Adam steps (one per run) on a variable; returns (weight, state data)."""
    ir = popxl.Ir()
    with ir.main_graph:
        gs = popxl.h2d_stream(w0.shape, popxl.float32, "grad")
        var = popxl.variable(w0, popxl.float32, "w")
        opt_facts, opt = AdamOptimizerStep().create_graph(var, var.spec, **kwargs)
        state = opt_facts.init("adam")
        g = ops.host_load(gs)
        opt.bind(state).call(var, g)
    with popxl.Session(ir, "cpu") as sess:
        for i in range(steps):
            sess.run({gs: grads[i]})
        w = sess.get_tensor_data(var)
        st = {k: sess.get_tensor_data(t) for k, t in state.to_dict().items()}
    return w, st


def numpy_adam(
    steps: int,
    grads=GRADS,
    w0=W0,
    *,
    lr,
    beta1=0.9,
    beta2=0.999,
    eps=1e-5,
    weight_decay=1e-2,
    first_order_dtype=popxl.float16,
    bias_correction=True,
    loss_scaling=1.0,
    clip=1.0,
):
    """The formula, with the first moment stored in `first_order_dtype`."""
    w = w0.astype(np.float32).copy()
    m = np.zeros(w.shape, first_order_dtype.as_numpy())
    v = np.zeros(w.shape, np.float32)
    for t in range(1, steps + 1):
        g = grads[t - 1].astype(np.float32) * np.float32(clip / loss_scaling)
        m = (m * beta1 + g * (1 - beta1)).astype(m.dtype)
        v = (v * beta2 + g * g * (1 - beta2)).astype(np.float32)
        if bias_correction:
            mc = m.astype(np.float64) / (1 - beta1**t)
            vc = v.astype(np.float64) / (1 - beta2**t)
        else:
            mc, vc = m.astype(np.float64), v.astype(np.float64)
        u = mc / (np.sqrt(vc) + eps) + weight_decay * w
        w = (w - lr * u).astype(np.float32)
    return w, {"first_order": m, "second_order": v, "step": np.float32(steps)}


@pytest.mark.parametrize("fo_dtype", [popxl.float16, popxl.float32])
@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_matches_numpy_reference(fo_dtype, bias_correction, weight_decay):
    kw: dict[str, Any] = dict(
        lr=0.01, weight_decay=weight_decay, first_order_dtype=fo_dtype, bias_correction=bias_correction
    )
    w, st = run_adam(3, **kw)
    w_ref, st_ref = numpy_adam(3, **kw)
    np.testing.assert_allclose(w, w_ref, rtol=1e-6, atol=1e-6)
    assert st["first_order"].dtype == fo_dtype.as_numpy()
    np.testing.assert_allclose(
        st["first_order"], st_ref["first_order"], rtol=1e-3 if fo_dtype == popxl.float16 else 1e-6
    )
    np.testing.assert_allclose(st["second_order"], st_ref["second_order"], rtol=1e-6)
    if bias_correction:
        assert float(st["step"]) == 3.0
    else:
        assert "step" not in st


def test_float16_first_order_is_rounded():
    """With float16 state the first moment is stored rounded; float32 state is not."""
    w16, st16 = run_adam(1, lr=0.01)
    w32, st32 = run_adam(1, lr=0.01, first_order_dtype=popxl.float32)
    np.testing.assert_array_equal(st16["first_order"], (0.1 * GRADS[0]).astype(np.float16))
    np.testing.assert_allclose(st32["first_order"], 0.1 * GRADS[0], rtol=1e-6)
    assert not np.array_equal(w16, w32)
    np.testing.assert_allclose(w16, w32, atol=0.01 * 2**-10)


def test_loss_scaling_and_global_norm_clipping():
    gn = np.float32(np.sqrt((GRADS[0] ** 2).sum()))
    ir = popxl.Ir()
    with ir.main_graph:
        var = popxl.variable(W0, popxl.float32, "w")
        grad = popxl.variable(GRADS[0] * 8, popxl.float32, "g")
        norm = popxl.variable(gn * 8, popxl.float32, "norm")
        facts, opt = AdamOptimizerStep().create_graph(
            var,
            grad.spec,
            lr=0.1,
            loss_scaling=8,
            global_norm=norm,
            global_norm_max=gn / 4,
            first_order_dtype=popxl.float32,
        )
        # the norm is a tensor argument: a graph input bound at the call
        norm_in = [t for t in opt.graph.inputs if t.name == "global_norm"][0]
        opt.bind(facts.init()).call(var, grad, args={norm_in: norm})
    with popxl.Session(ir, "cpu") as sess:
        sess.run()
        w = sess.get_tensor_data(var)
    # g = 8 g0 / 8 * (gn/4) / max(8 gn, gn/4) = g0 / 32
    clip = (gn / 4) / max(gn * 8, gn / 4)
    w_ref, _ = numpy_adam(1, grads=GRADS * 8, lr=0.1, loss_scaling=8, clip=float(clip), first_order_dtype=popxl.float32)
    np.testing.assert_allclose(w, w_ref, rtol=1e-6, atol=1e-6)
    with ir.main_graph, pytest.raises(ValueError, match="together"):
        AdamOptimizerStep().create_graph(var, grad.spec, lr=0.1, global_norm=norm)


@pytest.mark.parametrize("fo_dtype", [popxl.float32, popxl.float16])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_matches_torch_adamw(fo_dtype, weight_decay):
    torch = pytest.importorskip("torch")
    steps = 2
    lr = 0.05
    w, _ = run_adam(steps, lr=lr, weight_decay=weight_decay, first_order_dtype=fo_dtype)
    p = torch.nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = torch.optim.AdamW([p], lr=lr, betas=(0.9, 0.999), eps=1e-5, weight_decay=weight_decay)
    for i in range(steps):
        p.grad = torch.tensor(GRADS[i], dtype=torch.float64)
        opt.step()
    ref = p.detach().numpy()
    # float16 first moment: relative error 2^-11 per rounding, on updates of size ~lr
    atol = 1e-6 if fo_dtype == popxl.float32 else steps * lr * 2**-10
    np.testing.assert_allclose(w, ref, rtol=1e-6, atol=atol)


def test_torch_adamw_upstream_settings():
    """ADDONS tests/unit/test_adam.py: one step, lr=2, eps=1e-5, no weight decay, 4 decimals."""
    torch = pytest.importorskip("torch")
    w, _ = run_adam(1, lr=2.0, weight_decay=0.0, first_order_dtype=popxl.float32)
    p = torch.nn.Parameter(torch.tensor(W0))
    opt = torch.optim.AdamW([p], lr=2.0, eps=1e-5, weight_decay=0.0)
    p.grad = torch.tensor(GRADS[0])
    opt.step()
    np.testing.assert_almost_equal(w, p.detach().numpy(), decimal=4)


# ------------------------------------------------------------------------------------------
# Graph caching and structure
# ------------------------------------------------------------------------------------------


def test_cache_one_graph_per_shape_and_dtype():
    ir = popxl.Ir()
    opt = AdamOptimizerStep(cache=True)
    with ir.main_graph:
        a = popxl.variable(np.zeros((3, 4), np.float32), name="a")
        b = popxl.variable(np.ones((3, 4), np.float32), name="b")
        c = popxl.variable(np.zeros((4,), np.float32), name="c")
        h = popxl.variable(np.zeros((3, 4), np.float16), popxl.float16, name="h")
        graphs = {}
        for v in (a, b, c, h):
            facts, g = opt.create_graph(v, v.spec, lr=1e-3)
            graphs[v.name] = g
            state = facts.init(v.name)
            g.bind(state).call(v, v)
        _, g_lr = opt.create_graph(a, a.spec, lr=1e-2)
        with popxl.ipu(1):
            _, g_ipu = opt.create_graph(a, a.spec, lr=1e-3)
    assert graphs["a"].graph == graphs["b"].graph
    assert graphs["c"].graph != graphs["a"].graph
    assert graphs["h"].graph != graphs["a"].graph
    assert g_lr.graph != graphs["a"].graph  # other hyper-parameters: another graph
    assert g_ipu.graph != graphs["a"].graph  # another virtual IPU: another graph
    # every hit is an independent copy (own args tree)
    assert graphs["a"] is not graphs["b"] and graphs["a"].args is not graphs["b"].args
    n_graphs = len({g.graph for g in (*graphs.values(), g_lr, g_ipu)})
    assert n_graphs == 5
    # without the cache, a new graph every time
    plain = AdamOptimizerStep()
    with ir.main_graph:
        _, g1 = plain.create_graph(a, a.spec, lr=1e-3)
        _, g2 = plain.create_graph(a, a.spec, lr=1e-3)
    assert g1.graph != g2.graph
    with popxl.Session(ir, "cpu") as sess:
        sess.run()


def test_state_factories_and_schedule():
    ir = popxl.Ir()
    with ir.main_graph:
        var = popxl.variable(W0, popxl.float32, "w")
        facts, g = AdamOptimizerStep().create_graph(var, var.spec, lr=1e-3)
        facts_nb, _ = AdamOptimizerStep().create_graph(var, var.spec, lr=1e-3, bias_correction=False)
    d = facts.to_dict()
    assert list(d) == ["first_order", "second_order", "step"]
    assert d["first_order"].dtype == popxl.float16 and d["first_order"].shape == SHAPE
    assert d["second_order"].dtype == popxl.float32
    assert d["step"].shape == () and d["step"].dtype == popxl.float32
    assert all(f.by_ref for f in d.values())
    assert list(facts_nb.to_dict()) == ["first_order", "second_order"]
    op = g.graph._op
    assert op.input_is_by_ref(0)  # var: TensorByRef
    assert not op.input_is_by_ref(1)
    assert [op.input_is_by_ref(i) for i in range(2, 5)] == [True] * 3
    names = [o.name for o in op.body.block.ops if o.name.startswith("popxl.")]
    assert names == [
        "popxl.accumulate_moving_average_",
        "popxl.accumulate_moving_average_square_",
        "popxl.adam_updater",
        "popxl.scaled_add_",
    ]
    assert g.graph.name.startswith("AdamOptimizerStep_subgraph(")


def test_replica_sharded_state():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        spec = popxl.TensorSpec((6,), popxl.float32, meta_shape=(3, 4))
        facts, g = AdamOptimizerStep().create_graph(spec, spec, lr=1e-3)
    fo = facts.first_order
    assert fo.shape == (6,) and fo.meta_shape == (3, 4) and fo.shard_over == 2
    assert facts.second_order.shape == (6,)
    assert facts.step.shape == ()


def test_seed_003_adam_equals_addons_adam():
    """Seed 003's hand-written Adam module and AdamOptimizerStep give the same step."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
    import mnist_accumulate as ex

    results = []
    for cls in (ex.Adam, AdamOptimizerStep):
        ir = popxl.Ir()
        with ir.main_graph:
            var = popxl.variable(W0, popxl.float32, "w")
            grad = popxl.variable(GRADS[0], popxl.float32, "g")
            facts, opt = cls(cache=True).create_graph(var, var.spec, lr=1e-3, weight_decay=0.0, bias_correction=True)
            opt.bind(facts.init()).call(var, grad)
        with popxl.Session(ir, "cpu") as sess:
            sess.run()
            sess.run()
            results.append(sess.get_tensor_data(var))
    np.testing.assert_array_equal(results[0], results[1])
    assert isinstance(addons.optimizers.AdamOptimizerStep, type)
