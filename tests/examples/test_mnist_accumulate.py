"""examples/mnist_accumulate.py: seed 003's helpers (gradient accumulation, recomputation,
cached Adam) with the pipeline stages run one after another in the main graph."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import popxl
from tests.helpers.narrow import narrow
from xl.dialects.graph import GraphOp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import mnist_accumulate as ex  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402


def test_trains_to_88_percent(capsys):
    acc = ex.main([])
    out = capsys.readouterr().out
    assert f"Accuracy on test set: {acc:0.2f}%" in out
    assert acc >= 88.0


def _opts(**kw) -> ex.Options:
    opts = ex.Options()
    opts.train.device = "cpu"
    for k, v in kw.items():
        setattr(opts.train, k, v)
    return opts


def test_program_structure():
    np.random.seed(0)
    session, streams, variables, loss_stream, layers = ex.train_program(_opts())
    ir = session.ir
    assert ir.num_host_transfers == 6
    # seed 003's bookkeeping
    fc2 = layers["fc2"]
    assert list(fc2.vars.bwd.accum.to_dict()) == ["bias", "weight"]
    assert [t.name for t in fc2.vars.bwd.tensors] == ["fc2.accum.bias", "fc2.accum.weight", "fc2.mean_accum_counter"]
    assert set(variables.to_dict()) == {f"fc{i}.{n}" for i in range(1, 5) for n in ("weight", "bias")}
    # gradient of the layer input returned by fc2..fc4 only (require_input0)
    assert len(layers["fc1"].bwd.graph.outputs) == 0
    assert all(len(layers[k].bwd.graph.outputs) == 1 for k in ("fc2", "fc3", "fc4"))
    # the cached optimizer: one graph per (shape, dtype, virtual IPU), 7 for 8 variables
    names = [popxl.Graph._from_op(ir, op).name for op in ir._module.ops if isinstance(op, GraphOp)]
    assert sum(n.startswith("Adam_subgraph(") for n in names) == 7
    text = ir.to_mlir()
    assert text.count("graph.host_load @image") == 6
    assert text.count("popxl.accumulate_mean_") == 8
    assert text.count("popxl.accumulator_scale_") == 4


def _train(opts, data, init=None):
    np.random.seed(0)
    session, streams, variables, loss_stream, _ = ex.train_program(opts)
    if init is not None:
        session.write_variables_data({narrow(t, popxl.Variable): init[k] for k, t in variables.to_dict().items()})
    losses = []
    with session:
        start = {k: session.get_tensor_data(t).copy() for k, t in variables.to_dict().items()}
        for x, y in data:
            x = x.reshape(6, 5, 28 * 28)
            y = y.reshape(6, 5)
            losses.append(session.run(dict(zip(streams, [x, y])))[loss_stream])
    weights = {k: session.get_tensor_data(t) for k, t in variables.to_dict().items()}
    return start, np.stack(losses), weights


@pytest.mark.parametrize("variant", ["recomputation", "addons_adam"])
def test_variants_train_identically(variant):
    train_x, train_y, _, _ = load_mnist()
    data = list(batches(train_x, train_y, 30, shuffle=True, seed=3))[:4]
    start, base_losses, base = _train(_opts(), data)
    _, losses, weights = _train(_opts(**{variant: True}), data, init=start)
    assert base_losses.shape == (4, 6)
    np.testing.assert_allclose(losses, base_losses, rtol=1e-6, atol=1e-6)
    for k in base:
        np.testing.assert_allclose(weights[k], base[k], rtol=1e-6, atol=1e-6)
        assert not np.array_equal(base[k], start[k])  # Adam moved every variable


def _mean_gradient(weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """The gradient of the mean loss over all of `x` (one batch), by plain autodiff."""
    import popxl.ops as ops
    import popxl_addons as addons

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        xs = popxl.h2d_stream(x.shape, popxl.float32, "x")
        ys = popxl.h2d_stream(y.shape, popxl.int32, "y")
        img, lab = ops.host_load(xs), ops.host_load(ys)
        facts, fwd = ex.Net().create_graph(img)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(img)
        _, dlogits = addons.ops.cross_entropy_with_grad(info.outputs[0], lab)
        binfo = bwd.call_with_info(dlogits, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, binfo)
        streams = {}
        for k, t in variables.to_dict().items():
            streams[k] = popxl.d2h_stream(t.shape, t.dtype, k)
            ops.host_store(streams[k], grads[t])
    with popxl.Session(ir, "cpu") as sess:
        sess.write_variables_data({narrow(t, popxl.Variable): weights[k] for k, t in variables.to_dict().items()})
        out = sess.run({xs: x, ys: y})
    return {k: out[s] for k, s in streams.items()}


def test_accumulated_step_equals_adam_on_the_big_batch_gradient():
    """6 micro batches of 5 accumulated, then Adam == one Adam step on the gradient of the
    mean loss over the 30 samples (the mean of the 6 micro-batch gradients)."""
    train_x, train_y, _, _ = load_mnist()
    ((x, y),) = list(batches(train_x, train_y, 30, shuffle=False))[:1]
    start, _, after = _train(_opts(), [(x, y)])
    grads = _mean_gradient(start, x, y)
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-5
    for k, g in grads.items():
        g = g.astype(np.float32)
        m = (g * (1 - b1)).astype(np.float16).astype(np.float64)  # float16 first moment
        v = (g * g * (1 - b2)).astype(np.float32).astype(np.float64)
        expect = start[k] - lr * (m / (1 - b1)) / (np.sqrt(v / (1 - b2)) + eps)
        # The gradients at initialisation are tiny: 0.1 * g is mostly a float16 subnormal,
        # whose rounding amplifies float32 summation-order differences between the two
        # gradient computations for a few elements.
        close = np.abs(after[k] - expect) <= lr * 2**-9
        assert close.mean() > 0.999, (k, close.mean())
        np.testing.assert_allclose(after[k], expect, rtol=0, atol=lr * 0.05, err_msg=k)
        assert np.abs(after[k] - start[k]).max() > 0.5 * lr
