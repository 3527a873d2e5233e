"""`accumulate` pass and `addons.autodiff_with_accumulation`: IR structure, errors, and
accumulated gradients == the mean of the per-micro-batch gradients."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons.named_tensors import NamedTensors
from xl.dialects.graph import GraphOp
from xl.passes.accumulate import AccumulateError, accumulate
from xl.passes.autodiff import GradInfo
from xl.passes.autodiff import autodiff as autodiff_pass

B, I, H, O = 4, 5, 3, 2
RNG = np.random.default_rng(0)
W1 = RNG.normal(size=(I, H)).astype(np.float32)
B1 = RNG.normal(size=(H,)).astype(np.float32)
W2 = RNG.normal(size=(H, O)).astype(np.float32)


class Layer(addons.Module):
    """gelu(x @ w1 + b1) @ w2, weights from constants."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w1 = self.add_variable_input("w1", lambda: W1, popxl.float32)
        b1 = self.add_variable_input("b1", lambda: B1, popxl.float32)
        w2 = self.add_variable_input("w2", lambda: W2, popxl.float32)
        return ops.gelu(x @ w1 + b1) @ w2


class Outer(addons.Module):
    """A nested module: named args `inner.w1`, ... (graph input names `inner/w1`)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Layer()

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return self.inner(x)


X_SPEC = popxl.TensorSpec((B, I), popxl.float32)


def _input_names(g: popxl.Graph) -> list[str]:
    op = g._op
    assert isinstance(op, GraphOp)  # a subgraph (the main graph has no inputs)
    return [op.input_name(i) for i in range(len(op.body.block.args))]


# ------------------------------------------------------------------------------------------
# Structure
# ------------------------------------------------------------------------------------------


def test_named_inputs_factories_and_connections():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Layer().create_graph(X_SPEC)
        bwd_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
    g = bwd.graph
    op = g._op
    names = _input_names(g)
    # counter then accumulators, all by reference, at the end
    # (accumulators in the order given: graph.args.tensors is sorted by name)
    assert names[-4:] == ["mean_accum_counter", "accum.b1", "accum.w1", "accum.w2"]
    n = len(names)
    assert [op.input_is_by_ref(i) for i in range(n - 4, n)] == [True] * 4
    assert not any(op.input_is_by_ref(i) for i in range(n - 4))
    # every weight gradient accumulated: no outputs left (no grads_required)
    assert g.outputs == ()
    info = bwd.grad_graph_info
    assert info.expected_outputs == ()
    # expected inputs still describe the leading inputs only
    assert len(info.expected_inputs) == n - 4
    assert all(ec.connection_type.name in ("Fwd", "FwdGrad") for ec in info.expected_inputs)
    # factories: zeros, shapes/dtypes of the forward inputs, by reference
    d = bwd_facts.to_dict()
    assert set(d) == {"mean_accum_counter", "accum.w1", "accum.b1", "accum.w2"}
    assert d["mean_accum_counter"].shape == () and d["mean_accum_counter"].dtype == popxl.float32
    assert d["accum.w1"].shape == (I, H) and d["accum.b1"].shape == (H,)
    assert all(f.by_ref for f in d.values())
    assert not d["accum.w2"].next_data().any()
    # named args of the gradient graph
    args = bwd.args.to_dict()
    assert set(args) == set(d)
    assert args["accum.w1"] is g.inputs[n - 2]
    with ir.main_graph:
        accum = bwd_facts.init("layer")
    # seed 003's access patterns
    assert list(accum.accum.to_dict()) == ["b1", "w1", "w2"]
    assert [t.name for t in accum.tensors[:-1]] == ["layer.accum.b1", "layer.accum.w1", "layer.accum.w2"]
    assert accum.tensors[-1].name == "layer.mean_accum_counter"
    # the running mean ops then the counter increment, in program order
    ops_ = [o.name for o in op.body.block.ops]
    tail = ops_[-6:]
    assert tail == ["popxl.accumulate_mean_"] * 3 + ["graph.constant", "popxl.accumulate_", "graph.output"]
    ir._module.verify()


def test_grads_required_are_returned():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        x = fwd.graph.inputs[0]
        _, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors, grads_required=[x])
    info = bwd.grad_graph_info
    assert [ec.fwd_tensor for ec in info.expected_outputs] == [x]
    assert len(bwd.graph.outputs) == 1 and bwd.graph.outputs[0].shape == (B, I)


def test_accumulated_and_required_is_kept_once():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        w2 = fwd.args.w2
        facts, bwd = addons.autodiff_with_accumulation(fwd, [fwd.args.w1, w2, w2], grads_required=[w2])
    assert set(facts.to_dict()) == {"mean_accum_counter", "accum.w1", "accum.w2"}
    assert [ec.fwd_tensor for ec in bwd.grad_graph_info.expected_outputs] == [w2]
    names = [o.name for o in bwd.graph._op.body.block.ops]
    assert names.count("popxl.accumulate_mean_") == 2


def test_subset_and_grads_provided():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        facts, bwd = addons.autodiff_with_accumulation(fwd, [fwd.args.w2], grads_provided=fwd.graph.outputs)
    assert set(facts.to_dict()) == {"mean_accum_counter", "accum.w2"}
    assert _input_names(bwd.graph)[-2:] == ["mean_accum_counter", "accum.w2"]


def test_nested_module_names_use_the_arg_keys():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Outer().create_graph(X_SPEC)
        facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
    assert "inner.w1" in fwd.args.to_dict()
    assert set(facts.accum.inner.to_dict()) == {"w1", "b1", "w2"}
    assert "accum.inner.w1" in _input_names(bwd.graph)
    assert bwd.args.accum.inner.w1 is not None


def test_unnamed_input_gets_a_sanitised_name():
    ir = popxl.Ir()
    with ir.main_graph:

        def f(x, y):
            return x * y

        g = ir.create_graph(f, X_SPEC, X_SPEC)
        facts, bwd = addons.autodiff_with_accumulation(g, [g.inputs[1]])
    assert set(facts.to_dict()) == {"mean_accum_counter", "accum.y"}
    assert isinstance(bwd, addons.GraphWithNamedArgs)
    from popxl_addons.transforms.accumulate import sanitise

    assert sanitise("a/b c.1x") == "a_b_c._1x"


def test_autodiff_applied_and_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        assert fwd.autodiff_applied
        with pytest.raises(ValueError, match="already been applied"):
            addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        _, fwd2 = Layer().create_graph(X_SPEC)
        with pytest.raises(ValueError, match="not an input"):
            addons.autodiff_with_accumulation(fwd2, [fwd.args.w1])
        with pytest.raises(TypeError):
            addons.autodiff_with_accumulation(fwd2, [1.0])
        with pytest.raises(TypeError):
            addons.autodiff_with_accumulation("graph", [])


# ------------------------------------------------------------------------------------------
# The pass on its own
# ------------------------------------------------------------------------------------------


def _linear_module() -> ModuleOp:
    ir = popxl.Ir()
    with ir.main_graph:
        g = ir.create_graph(lambda x, w: x @ w, X_SPEC, popxl.TensorSpec((I, H), popxl.float32))
    autodiff_pass(ir._module, g.name, grad_graph="lin_grad")
    return ir._module


def _graph(m: ModuleOp, name: str) -> GraphOp:
    return next(o for o in m.ops if isinstance(o, GraphOp) and o.graph_name == name)


def test_pass_result_and_attributes():
    m = _linear_module()
    res = accumulate(m, "lin_grad", [1], names=["w"])
    g = _graph(m, "lin_grad")
    assert res.graph is g
    assert res.names == {1: "accum.w"}
    assert res.counter is g.body.block.args[-2] and res.accumulators[1] is g.body.block.args[-1]
    info = GradInfo.from_graph(g)
    assert info.expected_outputs == (0,)
    assert len(g.function_type.outputs.data) == 1
    m.verify()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"graph": "nope"}, "no graph @nope"),
        ({"inputs": [5]}, "not an input of the forward graph"),
        ({"inputs": [0, 0]}, "repeated forward input"),
        ({"inputs": [0], "names": ["a", "b"]}, "2 names for 1"),
        ({"inputs": [0], "keep": [1]}, "keep: forward input 1 is not accumulated"),
        ({"inputs": [0, 1], "names": ["a", "a"]}, "collide"),
        ({"counter": "arg0"}, None),
    ],
)
def test_pass_errors(kwargs, match):
    m = _linear_module()
    g = _graph(m, "lin_grad")
    kwargs = dict(kwargs)
    name = kwargs.pop("graph", "lin_grad")
    if match is None:  # a counter name that clashes with an existing input name
        clash = g.input_name(1)
        with pytest.raises(AccumulateError, match=f"already has an input named '{clash}'"):
            accumulate(m, name, counter=clash)
        return
    with pytest.raises(AccumulateError, match=match):
        accumulate(m, name, **kwargs)


def test_pass_refuses_forward_graph_and_missing_gradient_and_called_graph():
    m = _linear_module()
    fwd = next(o for o in m.ops if isinstance(o, GraphOp) and o.graph_name != "lin_grad")
    with pytest.raises(AccumulateError, match="not a gradient graph"):
        accumulate(m, fwd.graph_name)
    accumulate(m, "lin_grad", [1])
    with pytest.raises(AccumulateError, match="does not output the gradient of forward input 1"):
        accumulate(m, "lin_grad", [1], counter="c2", names=["w2"])
    # a gradient graph that is already called cannot get new inputs
    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd2 = Layer().create_graph(X_SPEC)
        bwd = addons.autodiff(fwd2)
        dy = popxl.variable(np.zeros((B, O), np.float32))
        args = {t: popxl.variable(np.zeros(t.shape, np.float32)) for t in bwd.graph.inputs[1:]}
        bwd.call(dy, args=args)
    with pytest.raises(AccumulateError, match="already called"):
        accumulate(ir._module, bwd.graph.name)


# ------------------------------------------------------------------------------------------
# Numerics: accumulated == mean of the micro-batch gradients
# ------------------------------------------------------------------------------------------

N = 5
XS = RNG.normal(size=(N, B, I)).astype(np.float32)
DYS = RNG.normal(size=(N, B, O)).astype(np.float32)


def _reference_grads() -> list[dict[str, np.ndarray]]:
    """Per micro batch: {name: gradient} from plain autodiff (dx under 'x')."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        xs = popxl.h2d_stream((B, I), popxl.float32, "x")
        dys = popxl.h2d_stream((B, O), popxl.float32, "dy")
        facts, fwd = Layer().create_graph(X_SPEC)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        x = ops.host_load(xs)
        dy = ops.host_load(dys)
        info = fwd.bind(variables).call_with_info(x)
        binfo = bwd.call_with_info(dy, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, binfo)
        streams = {}
        for name, t in [("x", x), *variables.to_dict().items()]:
            s = popxl.d2h_stream(t.shape, t.dtype, f"d_{name}")
            ops.host_store(s, grads[t])
            streams[name] = s
    out = []
    with popxl.Session(ir, "cpu") as sess:
        for i in range(N):  # one micro batch per run (one host transfer)
            res = sess.run({xs: XS[i], dys: DYS[i]})
            out.append({k: res[s] for k, s in streams.items()})
    return out


REF = None


def reference() -> list[dict[str, np.ndarray]]:
    global REF
    if REF is None:
        REF = _reference_grads()
    return REF


def _check(sess, accum: NamedTensors, n: int, offset: int = 0):
    ref = reference()[offset : offset + n]
    for k in ("w1", "b1", "w2"):
        got = sess.get_tensor_data(accum.accum.get(k))
        expect = np.mean([r[k].astype(np.float64) for r in ref], axis=0)
        np.testing.assert_allclose(got, expect, rtol=1e-6, atol=1e-6)
    assert float(sess.get_tensor_data(accum.mean_accum_counter)) == n


def _accum_program(recompute: bool = False):
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((B, I), popxl.float32, "x")
        dys = popxl.h2d_stream((B, O), popxl.float32, "dy")
        dxs = popxl.d2h_stream((B, I), popxl.float32, "dx")
        facts, fwd = Layer().create_graph(X_SPEC)
        bwd_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors, grads_required=[fwd.graph.inputs[0]])
        if recompute:
            bwd = addons.transforms.recompute_graph(bwd)
        variables = facts.init()
        accum = bwd_facts.init()
    return ir, (xs, dys, dxs), fwd, bwd, variables, accum


@pytest.mark.parametrize("recompute", [False, True])
def test_accumulated_over_runs_equals_mean(recompute):
    ir, (xs, dys, dxs), fwd, bwd, variables, accum = _accum_program(recompute)
    with ir.main_graph, popxl.in_sequence(True):
        x = ops.host_load(xs)
        dy = ops.host_load(dys)
        info = fwd.bind(variables).call_with_info(x)
        (dx,) = bwd.bind(accum).call(dy, args=bwd.grad_graph_info.inputs_dict(info))
        ops.host_store(dxs, dx)
    with popxl.Session(ir, "cpu") as sess:
        for i in range(N):
            out = sess.run({xs: XS[i], dys: DYS[i]})
            # grads_required still returned per micro batch
            np.testing.assert_allclose(out[dxs], reference()[i]["x"], rtol=1e-6, atol=1e-6)
        _check(sess, accum, N)


def test_accumulated_in_one_run_unrolled_and_reset():
    ir, (xs, dys, dxs), fwd, bwd, variables, accum = _accum_program()
    with ir.main_graph, popxl.in_sequence(True):
        # restart the mean at the start of every run (as seed 003's optimizer_step does after)
        ops.var_updates.accumulator_scale_(accum.mean_accum_counter, 0.0)
        for _ in range(N):
            x = ops.host_load(xs)
            dy = ops.host_load(dys)
            info = fwd.bind(variables).call_with_info(x)
            bwd.bind(accum).call(dy, args=bwd.grad_graph_info.inputs_dict(info))
    ir.num_host_transfers = N
    with popxl.Session(ir, "cpu") as sess:
        sess.run({xs: XS, dys: DYS})
        _check(sess, accum, N)
        # second run: the counter restarts, so the accumulators hold this run's mean only
        sess.run({xs: XS[::-1].copy(), dys: DYS[::-1].copy()})
        _check(sess, accum, N)


def test_accumulated_in_a_repeat_loop():
    ir, (xs, dys, dxs), fwd, bwd, variables, accum = _accum_program()
    with ir.main_graph:
        body = ir.create_empty_graph("micro_batch")
        with body, popxl.in_sequence(True):
            w_in = NamedTensors.from_dict(
                {k: popxl.graph_input(t.shape, t.dtype, k) for k, t in variables.to_dict().items()}
            )
            a_in = NamedTensors.from_dict(
                {
                    k: popxl.graph_input(t.shape, t.dtype, k.replace(".", "_"), by_ref=True)
                    for k, t in accum.to_dict().items()
                }
            )
            x = ops.host_load(xs)
            dy = ops.host_load(dys)
            info = fwd.bind(w_in).call_with_info(x)
            (dx,) = bwd.bind(a_in).call(dy, args=bwd.grad_graph_info.inputs_dict(info))
            ops.host_store(dxs, dx)
        inputs = {**w_in.to_mapping(variables), **a_in.to_mapping(accum)}
        ops.repeat(body, N, inputs_dict=inputs)
    ir.num_host_transfers = N  # one host_load per iteration
    with popxl.Session(ir, "cpu") as sess:
        out = sess.run({xs: XS, dys: DYS})
        _check(sess, accum, N)
    np.testing.assert_allclose(out[dxs], np.stack([r["x"] for r in reference()]), rtol=1e-6, atol=1e-6)


def test_mean_accumulation_float16_accumulator():
    """accumulate_mean_ with a float16 accumulator of a float32 gradient (mixed dtypes)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        acc = popxl.variable(np.zeros(3, np.float16), popxl.float16, "acc")
        cnt = popxl.variable(np.zeros((), np.float32), popxl.float32, "cnt")
        for v in (1.0, 2.0, 6.0):
            g = popxl.constant(np.full(3, v, np.float32))
            ops.var_updates.accumulate_mean_(acc, ops.cast(g, popxl.float16), cnt)
            ops.var_updates.accumulate_(cnt, popxl.constant(np.float32(1.0)))
    with popxl.Session(ir, "cpu") as sess:
        sess.run()
        np.testing.assert_allclose(sess.get_tensor_data(acc), np.full(3, 3.0, np.float16))
        assert float(sess.get_tensor_data(cnt)) == 3.0


def test_factories_partial_zeros_are_fresh():
    f = addons.VariableFactory(partial(np.zeros, (2,)), popxl.float32, by_ref=True)
    a, b = f.next_data(), f.next_data()
    a[0] = 1
    assert b[0] == 0


def test_remap_grad_info_on_an_accumulating_grad_graph():
    """Connections cover the leading inputs; the accumulators after them are other args."""
    from popxl_addons.transforms.autodiff import remap_grad_info

    ir = popxl.Ir()
    with ir.main_graph:
        _, fwd = Layer().create_graph(X_SPEC)
        _, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
    info = bwd.grad_graph_info
    remapped = remap_grad_info(info, fwd.graph, bwd.graph)
    assert remapped.expected_inputs == info.expected_inputs
    assert len(remapped.expected_inputs) < len(bwd.graph.inputs)


def test_accumulating_grad_graph_cannot_be_called_from_another_grad_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        inner = ir.create_graph(lambda x, w: x @ w, X_SPEC, popxl.TensorSpec((I, H), popxl.float32))

        def outer(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            (y,) = ops.call(inner, x, w)
            return y

        outer_g = ir.create_graph(outer, X_SPEC, popxl.TensorSpec((I, H), popxl.float32))
    m = ir._module
    autodiff_pass(m, inner.name, grad_graph="inner_grad")
    accumulate(m, "inner_grad", inputs=(1,))
    with pytest.raises(Exception, match="not forward connections .*cannot be called from another"):
        autodiff_pass(m, outer_g.name, called_grad_graphs={inner.name: "inner_grad"})
