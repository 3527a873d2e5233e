"""popxl_addons.layers (Linear, LayerNorm, GroupNorm, Embedding, Conv2D) against the torch.nn
layers: weights loaded with each layer's torch_mapping, forward output and the gradients of
the input and of every parameter (addons.autodiff) compared with torch's autograd."""

import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl_addons.layers import Conv2D, Embedding, GroupNorm, LayerNorm, Linear
from popxl_addons.testing_utils import TensorInput, run_module

torch = pytest.importorskip("torch")


def _fwd_bwd(layer, torch_layer, x_np, x_dtype=popxl.float32, grad_input=True, **build_kwargs):
    """Run `layer` (weights from torch_layer) forward and backward with a random output
    gradient; returns (y, {name: grad}) and the same from torch."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np, x_dtype, name="x")
        facts, fwd = layer.create_graph(x, **build_kwargs)
        grad = addons.autodiff(fwd)
        variables = facts.init()
        call = fwd.bind(variables).call_with_info(x)
        y = call.outputs[0]
        rng = np.random.default_rng(7)
        dy_np = rng.standard_normal(y.shape).astype(np.float32)
        dy = popxl.variable(dy_np, name="dy")
        gcall = grad.call_with_info(dy, args=grad.grad_graph_info.inputs_dict(call))
        grads = grad.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(call, gcall)
        names = {t: k for k, t in variables.to_dict().items()}
        streams = {"y": addons.host_store(y)}
        for parent_in, g in grads.items():
            key = names.get(parent_in, "x" if parent_in is x else None)
            if key is not None:
                streams[key] = addons.host_store(g)
    with popxl.Session(ir, "cpu") as s:
        s.write_variables_data(type(layer).torch_mapping(variables, torch_layer))
        out = s.run()
    got = {k: out[st] for k, st in streams.items()}

    xt = torch.tensor(x_np, requires_grad=grad_input)
    yt = torch_layer(xt)
    yt.backward(torch.tensor(dy_np))
    ref = {"y": yt.detach().numpy()}
    if grad_input:
        ref["x"] = xt.grad.numpy()
    for name, p in torch_layer.named_parameters():
        ref[name] = p.grad.numpy()
    return got, ref


def _check(got, ref, mapping, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(got["y"], ref["y"], rtol=rtol, atol=atol, err_msg="forward")
    if "x" in ref:
        np.testing.assert_allclose(got["x"], ref["x"], rtol=rtol, atol=atol, err_msg="dx")
    for ours, theirs, fn in mapping:
        np.testing.assert_allclose(got[ours], fn(ref[theirs]), rtol=rtol, atol=atol, err_msg=ours)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_vs_torch(bias):
    torch.manual_seed(0)
    tl = torch.nn.Linear(5, 3, bias=bias)
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    got, ref = _fwd_bwd(Linear(3, bias=bias), tl, x)
    mapping = [("weight", "weight", lambda g: g.T)] + ([("bias", "bias", lambda g: g)] if bias else [])
    _check(got, ref, mapping)
    assert ("bias" in got) == bias


def test_linear_batched_input_and_default_init():
    torch.manual_seed(1)
    tl = torch.nn.Linear(6, 4)
    x = np.random.default_rng(1).standard_normal((2, 3, 6)).astype(np.float32)
    got, ref = _fwd_bwd(Linear(4), tl, x)
    _check(got, ref, [("weight", "weight", lambda g: g.T), ("bias", "bias", lambda g: g)])
    # default initialisation: truncated normal, std 0.02, within 2 std; bias zeros
    np.random.seed(3)
    ir = popxl.Ir()
    with ir.main_graph:
        facts, _ = Linear(400).create_graph(popxl.TensorSpec((2, 50), popxl.float32))
        w = facts.weight.next_data()
    assert w.shape == (50, 400) and np.abs(w).max() <= 0.04 + 1e-9
    assert abs(w.std() - 0.88 * 0.02) < 0.0005  # a normal truncated at 2 std: std 0.880 * 0.02
    np.testing.assert_array_equal(facts.bias.next_data(), np.zeros(400))


def test_layer_norm_vs_torch():
    torch.manual_seed(2)
    tl = torch.nn.LayerNorm(6, eps=1e-5)
    with torch.no_grad():
        tl.weight.copy_(torch.randn(6))
        tl.bias.copy_(torch.randn(6))
    x = np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32) * 3 + 1
    got, ref = _fwd_bwd(LayerNorm(), tl, x)
    _check(got, ref, [("weight", "weight", lambda g: g), ("bias", "bias", lambda g: g)], rtol=1e-4, atol=1e-5)
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(ValueError, match="must be of shape N x C"):
        LayerNorm().create_graph(popxl.TensorSpec((2, 3, 4), popxl.float32))


@pytest.mark.parametrize("groups,shape", [(2, (3, 4, 5)), (1, (2, 6, 3, 3)), (6, (2, 6, 4))])
def test_group_norm_vs_torch(groups, shape):
    torch.manual_seed(3)
    c = shape[1]
    tl = torch.nn.GroupNorm(groups, c, eps=1e-5)
    with torch.no_grad():
        tl.weight.copy_(torch.randn(c))
        tl.bias.copy_(torch.randn(c))
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    got, ref = _fwd_bwd(GroupNorm(groups), tl, x)
    _check(got, ref, [("weight", "weight", lambda g: g), ("bias", "bias", lambda g: g)], rtol=1e-4, atol=1e-5)


def test_embedding_vs_torch():
    torch.manual_seed(4)
    vocab, hidden = 20, 5
    te = torch.nn.Embedding(vocab, hidden)
    idx = np.array([[0, 3, 19, 3], [7, 7, 1, 0]], np.int32)
    layer = Embedding(popxl.float32, vocab, hidden)
    assert layer.vocab_shard_size == 32  # rounded up to a multiple of 16
    assert Embedding.get_vocab_shard_size(100, 4) == 32
    np.testing.assert_array_equal(Embedding.get_offsets(100, 4), [0, 32, 64, 96])
    ir = popxl.Ir()
    with ir.main_graph:
        i = popxl.variable(idx, popxl.int32, name="idx")
        facts, fwd = layer.create_graph(i)
        grad = addons.autodiff(fwd, grads_required=[fwd.args.weight])
        variables = facts.init()
        call = fwd.bind(variables).call_with_info(i)
        dy_np = np.random.default_rng(4).standard_normal((2, 4, hidden)).astype(np.float32)
        (dw,) = grad.call(popxl.variable(dy_np), args=grad.grad_graph_info.inputs_dict(call))
        y_s, dw_s = addons.host_store(call.outputs[0]), addons.host_store(dw)
    with popxl.Session(ir, "cpu") as s:
        s.write_variables_data(Embedding.torch_mapping(variables, te))
        out = s.run()
    yt = te(torch.tensor(idx, dtype=torch.long))
    yt.backward(torch.tensor(dy_np))
    np.testing.assert_allclose(out[y_s], yt.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(out[dw_s][:vocab], te.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out[dw_s][vocab:], 0)


@pytest.mark.parametrize(
    "kwargs,torch_kwargs",
    [
        (dict(kernel_size=3), dict(kernel_size=3)),
        (
            dict(kernel_size=(3, 2), strides=(2, 1), paddings=(1, 0, 1, 0)),
            dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
        ),
        (
            dict(kernel_size=3, dilations=(2, 2), groups=2, bias=False),
            dict(kernel_size=3, dilation=2, groups=2, bias=False),
        ),
        (dict(kernel_size=3, paddings="same_upper"), dict(kernel_size=3, padding="same")),
    ],
)
def test_conv2d_vs_torch(kwargs, torch_kwargs):
    torch.manual_seed(5)
    tl = torch.nn.Conv2d(4, 6, **torch_kwargs)
    x = np.random.default_rng(5).standard_normal((2, 4, 9, 8)).astype(np.float32)
    got, ref = _fwd_bwd(Conv2D(6, **kwargs), tl, x)
    mapping = [("weight", "weight", lambda g: g)]
    if kwargs.get("bias", True):
        mapping.append(("bias", "bias", lambda g: g.reshape(1, -1, 1, 1)))
    _check(got, ref, mapping, rtol=1e-4, atol=1e-5)


def test_layer_errors():
    with pytest.raises(ValueError, match="out_features"):
        Linear(0)
    with pytest.raises(ValueError, match="num_groups"):
        GroupNorm(0)
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
            Conv2D(3, 3).create_graph(popxl.TensorSpec((2, 3, 4), popxl.float32))
        facts, fwd = Linear(3).create_graph(popxl.TensorSpec((2, 4), popxl.float32))
        variables = facts.init()
    with pytest.raises(ValueError, match="Linear.torch_mapping"):
        Linear.torch_mapping(variables, torch.nn.Linear(5, 3))


def test_run_module_vs_torch_and_in_place():
    rng = np.random.default_rng(8)
    x = rng.random(4)
    tl = torch.nn.Linear(4, 2)
    (y,) = run_module(
        Linear(2),
        TensorInput(x, popxl.float32),
        weights=lambda v: {v.weight: tl.weight.detach().numpy().T, v.bias: tl.bias.detach().numpy()},
    )
    np.testing.assert_allclose(y, tl(torch.tensor(x, dtype=torch.float32)).detach().numpy(), rtol=1e-5)

    class InPlaceAdd(addons.Module):
        def build(self, x: popxl.TensorByRef, a: popxl.Tensor):
            popxl.ops.var_updates.accumulate_(x, a)
            return x + 0

    (z,) = run_module(InPlaceAdd(), TensorInput(x, popxl.float32), TensorInput(np.ones(4), popxl.float32))
    np.testing.assert_allclose(z, x + 1, rtol=1e-6)
    with pytest.raises(TypeError, match="addons.Module"):
        run_module(lambda x: x, TensorInput(x))  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
