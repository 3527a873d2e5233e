"""`recompute` pass and `addons.transforms.recompute_graph`: structure, errors, and
recomputed gradients == plain gradients."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import IntegerAttr

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl.transforms.autodiff import ExpectedConnectionType
from tests.helpers.narrow import narrow
from tests.helpers.plan_tolerance import PLAN_TOL
from xl.dialects.call import CallOp
from xl.dialects.graph import GraphOp
from xl.dialects.ipu import IPU_ATTR
from xl.passes.recompute import RecomputeError, recompute

B, I, H, O = 4, 6, 5, 3
RNG = np.random.default_rng(1)
W1 = RNG.normal(size=(I, H)).astype(np.float32)
B1 = RNG.normal(size=(H,)).astype(np.float32)
W2 = RNG.normal(size=(H, O)).astype(np.float32)
N = 3
XS = RNG.normal(size=(N, B, I)).astype(np.float32)
DYS = RNG.normal(size=(N, B, max(H, O))).astype(np.float32)
X_SPEC = popxl.TensorSpec((B, I), popxl.float32)


class Layer(addons.Module):
    """softmax(gelu(x @ w1 + b1) @ w2): several activations for the gradient."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w1 = self.add_variable_input("w1", lambda: W1, popxl.float32)
        b1 = self.add_variable_input("b1", lambda: B1, popxl.float32)
        w2 = self.add_variable_input("w2", lambda: W2, popxl.float32)
        return ops.softmax(ops.gelu(x @ w1 + b1) @ w2, axis=1)


def _scale(x: popxl.Tensor) -> popxl.Tensor:
    return ops.gelu(x) * x


class Calling(addons.Module):
    """A forward graph that calls another graph (recursive autodiff)."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w1 = self.add_variable_input("w1", lambda: W1, popxl.float32)
        g = popxl.gir().create_graph(_scale, popxl.TensorSpec((B, H), popxl.float32))
        (y,) = ops.call(g, x @ w1)
        return ops.tanh(y)


def _grads(module_cls, recompute_: bool, accumulate: bool = False):
    """Per micro batch {name: gradient}; with `accumulate`, the accumulated means at the end."""
    ir = popxl.Ir()
    bwd_facts = accum = None  # the accumulators, with `accumulate`
    with ir.main_graph, popxl.in_sequence(True):
        xs = popxl.h2d_stream((B, I), popxl.float32, "x")
        facts, fwd = module_cls().create_graph(X_SPEC)
        out_t = fwd.graph.outputs[0]
        dys = popxl.h2d_stream(out_t.shape, popxl.float32, "dy")
        if accumulate:
            bwd_facts, bwd = addons.autodiff_with_accumulation(
                fwd, fwd.args.tensors, grads_required=[fwd.graph.inputs[0]]
            )
        else:
            bwd = addons.autodiff(fwd)
        if recompute_:
            bwd = addons.transforms.recompute_graph(bwd)
        variables = facts.init()
        x = ops.host_load(xs)
        dy = ops.host_load(dys)
        info = fwd.bind(variables).call_with_info(x)
        streams = {}
        if accumulate:
            assert bwd_facts is not None
            accum = bwd_facts.init()
            (dx,) = bwd.bind(accum).call(dy, args=bwd.grad_graph_info.inputs_dict(info))
            grads = {x: dx}
        else:
            binfo = bwd.call_with_info(dy, args=bwd.grad_graph_info.inputs_dict(info))
            grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, binfo)
        for name, t in [("x", x), *variables.to_dict().items()]:
            if t in grads:
                s = popxl.d2h_stream(t.shape, t.dtype, f"d_{name}")
                ops.host_store(s, grads[t])
                streams[name] = s
    out = []
    with popxl.Session(ir, "cpu") as sess:
        for i in range(N):
            res = sess.run({xs: XS[i], dys: DYS[i, :, : out_t.shape[1]].copy()})
            out.append({k: res[s] for k, s in streams.items()})
        if accumulate:
            assert accum is not None
            out.append({k: sess.get_tensor_data(t) for k, t in accum.accum.to_dict().items()})
    return out


@pytest.mark.parametrize("module_cls", [Layer, Calling])
def test_recomputed_gradients_equal_plain(module_cls):
    plain = _grads(module_cls, False)
    recomp = _grads(module_cls, True)
    assert set(plain[0]) == {"x", *(k for k in ("w1", "b1", "w2") if k in plain[0])}
    for p, r in zip(plain, recomp):
        assert p.keys() == r.keys()
        for k in p:
            np.testing.assert_allclose(r[k], p[k], **PLAN_TOL)
            assert np.abs(p[k]).max() > 0


def test_recomputed_accumulated_gradients_equal_plain():
    plain = _grads(Layer, False)
    recomp = _grads(Layer, True, accumulate=True)
    for i in range(N):
        np.testing.assert_allclose(recomp[i]["x"], plain[i]["x"], rtol=1e-6, atol=1e-6)
    for k, v in recomp[N].items():
        expect = np.mean([plain[i][k] for i in range(N)], axis=0)
        np.testing.assert_allclose(v, expect, rtol=1e-6, atol=1e-6)


def test_grad_graph_info_expects_only_forward_inputs():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        bwd = addons.autodiff(fwd)
        old_info = bwd.grad_graph_info
        assert any(
            ec.connection_type == ExpectedConnectionType.Fwd and ec.fwd_tensor in fwd.graph.outputs
            for ec in old_info.expected_inputs
        )  # activations before
        rec = addons.transforms.recompute_graph(bwd)
    info = rec.grad_graph_info
    assert rec.graph.name == f"{bwd.graph.name}_recomp"
    assert info.forward_graph == fwd.graph
    assert info.graph == rec.graph
    kinds = [(ec.connection_type, ec.fwd_tensor) for ec in info.expected_inputs]
    assert kinds[0] == (ExpectedConnectionType.FwdGrad, fwd.graph.outputs[0])
    fwd_inputs = [t for k, t in kinds[1:]]
    assert all(k == ExpectedConnectionType.Fwd for k, _ in kinds[1:])
    assert sorted(t.name for t in fwd_inputs) == sorted(t.name for t in fwd.graph.inputs)
    assert len(set(map(id, fwd_inputs))) == len(fwd.graph.inputs)
    assert len(info.expected_inputs) == len(rec.graph.inputs)
    assert [ec.fwd_tensor for ec in info.expected_outputs] == [ec.fwd_tensor for ec in old_info.expected_outputs]
    # graphs: forward, gradient, recomputed (upstream counts 4 with the main graph)
    assert sum(isinstance(o, GraphOp) for o in ir._module.ops) == 3
    # the new graph calls the forward graph, then the gradient graph
    calls = [o for o in rec.graph._op.body.block.ops if isinstance(o, CallOp)]
    assert [c.callee.root_reference.data for c in calls] == [fwd.graph.name, bwd.graph.name]
    ir._module.verify()


def test_input_order_and_remapped_args():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        rec = addons.transforms.recompute_graph(bwd)
    op = rec.graph._op
    names = [op.input_name(i) for i in range(len(op.body.block.args))]
    old = bwd.graph._op
    old_names = [old.input_name(i) for i in range(len(old.body.block.args))]
    # FwdGrad, the gradient graph's forward inputs, other forward inputs by name, then its own
    n_conn = len(bwd.grad_graph_info.expected_inputs)
    fwd_in_names = [
        old_names[p]
        for p, ec in enumerate(bwd.grad_graph_info.expected_inputs)
        if ec.connection_type == ExpectedConnectionType.Fwd and ec.fwd_tensor in fwd.graph.inputs
    ]
    rest = sorted(t.name for t in fwd.graph.inputs if t.name not in fwd_in_names)
    assert names == [old_names[0], *fwd_in_names, *rest, *old_names[n_conn:]]
    assert names[-4:] == ["mean_accum_counter", "accum.b1", "accum.w1", "accum.w2"]
    assert [op.input_is_by_ref(i) for i in range(len(names))] == [False] * (len(names) - 4) + [True] * 4
    # named args remapped to the new graph's inputs
    assert set(rec.args.to_dict()) == set(bwd.args.to_dict()) == set(facts.to_dict())
    for k, t in rec.args.to_dict().items():
        assert t.graph == rec.graph
        assert t.name == bwd.args.to_dict()[k].name
    # no activations expected any more: a fresh forward call supplies every Fwd input
    with ir.main_graph:
        variables = fwd_facts_init(fwd)
        x = popxl.variable(np.zeros((B, I), np.float32))
        info = fwd.bind(variables).call_with_info(x)
        d = rec.grad_graph_info.inputs_dict(info)
        assert set(d) == set(rec.graph.inputs[1 : n_conn_new(rec)])
        assert all(v in info.inputs for v in d.values())


def fwd_facts_init(fwd):
    return addons.NamedTensors.from_dict(
        {k: popxl.variable(np.zeros(t.shape, np.float32), name=k) for k, t in fwd.args.to_dict().items()}
    )


def n_conn_new(rec) -> int:
    return len(rec.grad_graph_info.expected_inputs)


def test_placement_is_kept():
    ir = popxl.Ir()
    with ir.main_graph, popxl.ipu(1):
        _, fwd = Layer().create_graph(X_SPEC)
        _, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        rec = addons.transforms.recompute_graph(bwd)
    calls = [o for o in rec.graph._op.body.block.ops if isinstance(o, CallOp)]
    assert [narrow(c.attributes[IPU_ATTR], IntegerAttr).value.data for c in calls] == [1, 1]


def test_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        with pytest.raises(ValueError, match="not a gradient graph"):
            addons.transforms.recompute_graph(fwd)
        with pytest.raises(TypeError):
            addons.transforms.recompute_graph(fwd.graph)
        bwd = addons.autodiff(fwd)
    with pytest.raises(RecomputeError, match="no graph @nope"):
        recompute(ir._module, "nope")
    with pytest.raises(RecomputeError, match="not a gradient graph"):
        recompute(ir._module, fwd.graph.name)
    with pytest.raises(RecomputeError, match="already exists"):
        recompute(ir._module, bwd.graph.name, name=fwd.graph.name)
    # twice: unique names
    a = recompute(ir._module, bwd.graph.name).graph.graph_name
    b = recompute(ir._module, bwd.graph.name).graph.graph_name
    assert a != b and a.endswith("_recomp") and b.startswith(a)
    ir._module.verify()
