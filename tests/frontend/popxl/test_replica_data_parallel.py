"""Data parallelism: R replicas each on a slice of a batch, the gradients all-reduced (mean)
with `ops.collectives.replicated_all_reduce_`, give the same weights as one replica on the
whole batch (to 1e-6), for a small MLP trained with SGD over several steps.
"""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl import transforms
from tests.helpers.replica_harness import runtime_has_collectives

pytestmark = pytest.mark.skipif(not runtime_has_collectives(), reason="the runtime has no replica collective kernels")

BATCH, IN, HIDDEN, OUT, LR, STEPS = 8, 5, 6, 3, 0.1, 4


def _init() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "W1": rng.normal(scale=0.5, size=(IN, HIDDEN)).astype(np.float32),
        "b1": rng.normal(scale=0.1, size=(HIDDEN,)).astype(np.float32),
        "W2": rng.normal(scale=0.5, size=(HIDDEN, OUT)).astype(np.float32),
        "b2": rng.normal(scale=0.1, size=(OUT,)).astype(np.float32),
    }


def _mlp_loss(x: popxl.Tensor, y: popxl.Tensor, W1: popxl.Tensor, b1: popxl.Tensor,
              W2: popxl.Tensor, b2: popxl.Tensor) -> popxl.Tensor:  # fmt: skip
    h = ops.tanh(x @ W1 + b1)
    d = h @ W2 + b2 - y
    return ops.mean(d * d)


def _train(replicas: int, xs_data: np.ndarray, ys_data: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Trains for `STEPS` steps on `replicas` replicas, each on its slice of every batch;
    returns the final weights (all replicas agree) and the per-step mean loss."""
    ir = popxl.Ir(replication=replicas)
    per = BATCH // replicas
    with ir.main_graph:
        weights = {k: popxl.variable(v, name=k) for k, v in _init().items()}
        xs = popxl.h2d_stream((per, IN), popxl.float32, "x")
        ys = popxl.h2d_stream((per, OUT), popxl.float32, "y")
        x, y = ops.host_load(xs), ops.host_load(ys)
        names = list(weights)
        g = ir.create_graph(_mlp_loss, x, y, *weights.values())
        info = transforms.autodiff(g, grads_required=g.inputs[2:])
        call = ops.call_with_info(g, x, y, *weights.values())
        loss = call.outputs[0]
        grads = ops.call(info.graph, popxl.constant(np.float32(1.0)), inputs_dict=info.inputs_dict(call))
        for name, grad in zip(names, grads, strict=True):
            if replicas > 1:
                ops.collectives.replicated_all_reduce_(grad, "mean")
            ops.scaled_add_(weights[name], grad, b=-LR)
        mean_loss = ops.collectives.replicated_all_reduce(loss, "mean") if replicas > 1 else loss
        ls = popxl.d2h_stream(mean_loss.shape, mean_loss.dtype, "loss")
        ops.host_store(ls, mean_loss)
    losses = []
    with popxl.Session(ir, "ipu_model") as session:
        for step in range(STEPS):
            bx = xs_data[step].reshape(replicas, per, IN) if replicas > 1 else xs_data[step]
            by = ys_data[step].reshape(replicas, per, OUT) if replicas > 1 else ys_data[step]
            out = session.run({xs: bx, ys: by})[ls]
            losses.append(np.asarray(out).reshape(-1)[0])
            if replicas > 1:  # every replica reports the same mean loss
                np.testing.assert_array_equal(out, np.full(replicas, out[0]))
        final = {k: session.get_tensor_data(v) for k, v in weights.items()}
    return final, np.array(losses)


def _numpy_reference(xs_data: np.ndarray, ys_data: np.ndarray) -> dict[str, np.ndarray]:
    """SGD on the whole batch, gradients derived by hand (float64)."""
    w = {k: v.astype(np.float64) for k, v in _init().items()}
    for step in range(STEPS):
        x, y = xs_data[step].astype(np.float64), ys_data[step].astype(np.float64)
        a = x @ w["W1"] + w["b1"]
        h = np.tanh(a)
        d = h @ w["W2"] + w["b2"] - y
        dd = 2 * d / d.size
        gW2, gb2 = h.T @ dd, dd.sum(0)
        da = (dd @ w["W2"].T) * (1 - h * h)
        gW1, gb1 = x.T @ da, da.sum(0)
        for k, gk in (("W1", gW1), ("b1", gb1), ("W2", gW2), ("b2", gb2)):
            w[k] = w[k] - LR * gk
    return w


@pytest.mark.parametrize("replicas", [2, 4])
def test_replicas_on_batch_slices_equal_one_replica_on_the_whole_batch(replicas: int) -> None:
    rng = np.random.default_rng(11)
    xs_data = rng.normal(size=(STEPS, BATCH, IN)).astype(np.float32)
    ys_data = rng.normal(size=(STEPS, BATCH, OUT)).astype(np.float32)
    one, one_losses = _train(1, xs_data, ys_data)
    many, many_losses = _train(replicas, xs_data, ys_data)
    reference = _numpy_reference(xs_data, ys_data)
    for k in one:
        assert many[k].shape == one[k].shape  # one value: all replicas hold the same weights
        np.testing.assert_allclose(many[k], one[k], rtol=1e-6, atol=1e-6, err_msg=k)
        np.testing.assert_allclose(one[k], reference[k], rtol=1e-5, atol=1e-6, err_msg=k)
        assert not np.allclose(one[k], _init()[k], atol=1e-3), f"{k} did not train"
    np.testing.assert_allclose(many_losses, one_losses, rtol=1e-6)


def test_without_the_all_reduce_replicas_diverge() -> None:
    """The check above can fail: replicas that skip the all-reduce end with other weights."""
    rng = np.random.default_rng(11)
    xs_data = rng.normal(size=(STEPS, BATCH, IN)).astype(np.float32)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        w = popxl.variable(_init()["W1"], name="W1")
        xs = popxl.h2d_stream((BATCH // 2, IN), popxl.float32, "x")
        x = ops.host_load(xs)
        g = ir.create_graph(lambda x, w: ops.mean(ops.tanh(x @ w)), x, w)
        info = transforms.autodiff(g, grads_required=[g.inputs[1]])
        call = ops.call_with_info(g, x, w)
        (dw,) = ops.call(info.graph, popxl.constant(np.float32(1.0)), inputs_dict=info.inputs_dict(call))
        ops.scaled_add_(w, dw, b=-LR)
    with popxl.Session(ir, "ipu_model") as session:
        session.run({xs: xs_data[0].reshape(2, BATCH // 2, IN)})
        exe = session._exe  # noqa: SLF001  (per-replica state of the runtime)
        r0, r1 = exe.get_state("W1", replica=0), exe.get_state("W1", replica=1)
    assert not np.allclose(r0, r1)
