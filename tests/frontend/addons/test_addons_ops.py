"""popxl_addons.ops: cross_entropy / cross_entropy_with_grad (reductions, ignore_index,
loss scaling, N-d logits) and the layer_norm helpers, against torch (loss, dlogits, layer
norm forward and gradients)."""

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(11)


def _ce_run(logits, labels, reduction, ignore_index, with_grad, loss_scaling=1.0):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(logits, name="logits")
        t = popxl.variable(labels, popxl.int32, name="labels")
        if with_grad:
            loss, dx = addons.cross_entropy_with_grad(
                x, t, loss_scaling=loss_scaling, ignore_index=ignore_index, reduction=reduction
            )
            streams = [addons.host_store(loss), addons.host_store(dx)]
        else:

            def f(x, t):
                return addons.cross_entropy(x, t, ignore_index, reduction)

            g = ir.create_graph(f, x, t)
            grad = popxl.transforms.autodiff(g, grads_required=[g.inputs[0]])
            call = ops.call_with_info(g, x, t)
            (loss,) = call.outputs[:1]
            ones = popxl.constant(np.ones(loss.shape, np.float32))
            (dx,) = ops.call(grad.graph, ones, inputs_dict=grad.inputs_dict(call))
            streams = [addons.host_store(loss), addons.host_store(dx)]
    with popxl.Session(ir, "cpu") as s:
        out = s.run()
    return [out[st] for st in streams]


def _torch_ce(logits, labels, reduction, ignore_index):
    xt = torch.tensor(logits, requires_grad=True)
    kw = {} if ignore_index is None else {"ignore_index": ignore_index}
    c = logits.shape[-1]
    loss = F.cross_entropy(
        xt.reshape(-1, c), torch.tensor(labels, dtype=torch.long).reshape(-1), reduction=reduction, **kw
    )
    loss.backward(torch.ones_like(loss))
    return loss.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [None, 2, -100])
@pytest.mark.parametrize("with_grad", [False, True])
def test_cross_entropy_vs_torch(reduction, ignore_index, with_grad):
    if with_grad and reduction == "none":
        pytest.skip("nll_loss_with_softmax_grad reduces (as upstream)")
    logits = RNG.standard_normal((6, 5)).astype(np.float32)
    labels = np.array([0, 2, 4, 2, 1, 3], np.int32)
    if ignore_index == -100:
        labels[[1, 4]] = -100
    loss, dx = _ce_run(logits, labels, reduction, ignore_index, with_grad)
    ref_loss, ref_dx = _torch_ce(logits, labels, reduction, ignore_index)
    np.testing.assert_allclose(loss, ref_loss.reshape(np.shape(loss)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, ref_dx, rtol=1e-5, atol=1e-6)
    if ignore_index is not None:
        ignored = labels == ignore_index
        assert ignored.any()
        np.testing.assert_array_equal(dx[ignored], 0)


def test_cross_entropy_nd_logits_and_loss_scaling():
    logits = RNG.standard_normal((2, 3, 7)).astype(np.float32)
    labels = RNG.integers(0, 7, size=(2, 3)).astype(np.int32)
    labels[0, 1] = 0
    loss, dx = _ce_run(logits, labels, "mean", 0, True, loss_scaling=128.0)
    ref_loss, ref_dx = _torch_ce(logits, labels, "mean", 0)
    assert dx.shape == logits.shape
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)  # the loss is not scaled
    np.testing.assert_allclose(dx, 128.0 * ref_dx, rtol=1e-5, atol=1e-5)
    loss2, dx2 = _ce_run(logits, labels, "mean", None, False)
    ref2, ref_dx2 = _torch_ce(logits, labels, "mean", None)
    np.testing.assert_allclose(loss2, ref2, rtol=1e-5)
    np.testing.assert_allclose(dx2, ref_dx2, rtol=1e-5, atol=1e-6)


def test_cross_entropy_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 3), np.float32))
        with pytest.raises(TypeError, match="cross_entropy"):
            addons.cross_entropy(np.zeros((2, 3)), x)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
        with pytest.raises(ValueError):
            addons.cross_entropy(x, popxl.variable(np.zeros(2, np.int32)), reduction="avg")


def test_layer_norm_helper_vs_torch():
    x_np = RNG.standard_normal((2, 3, 6)).astype(np.float32) * 2 + 0.5
    w_np = RNG.standard_normal(6).astype(np.float32)
    b_np = RNG.standard_normal(6).astype(np.float32)
    dy_np = RNG.standard_normal((2, 3, 6)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        args = [popxl.variable(a) for a in (x_np, w_np, b_np)]
        g = ir.create_graph(lambda x, w, b: addons.ops.layer_norm(x, w, b, eps=1e-5), *args)
        grad = popxl.transforms.autodiff(g)
        call = ops.call_with_info(g, *args)
        dxs = ops.call(grad.graph, popxl.variable(dy_np), inputs_dict=grad.inputs_dict(call))
        streams = [addons.host_store(t) for t in (call.outputs[0], *dxs)]
        y2 = addons.ops.layer_norm_no_affine(args[0])
        s2 = addons.host_store(y2)
        with pytest.raises(ValueError, match="weight must have shape"):
            addons.ops.layer_norm(args[0], args[1][:3], args[2])
    with popxl.Session(ir, "cpu") as s:
        out = s.run()
    ts = [torch.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np)]
    yt = F.layer_norm(ts[0], (6,), ts[1], ts[2], eps=1e-5)
    yt.backward(torch.tensor(dy_np))
    refs = [yt.detach().numpy()] + [t.grad.numpy() for t in ts]
    for got_s, ref in zip(streams, refs):
        np.testing.assert_allclose(out[got_s], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[s2], F.layer_norm(torch.tensor(x_np), (6,)).numpy(), rtol=1e-4, atol=1e-5)
