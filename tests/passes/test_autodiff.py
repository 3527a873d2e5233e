"""The `autodiff` pass (IR level) and the Python APIs built on it
(`popxl.transforms.autodiff`, `GradGraphInfo`, `popxl_addons.autodiff`)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.printer import Printer

from tests.passes.test_grad_rules import GradProgram, check_grads, make_graph, rand
from xl.dialects.call import CallOp
from xl.dialects.graph import GraphOp
from xl.dialects.utils import tensor_type
from xl.passes.autodiff import (
    AutodiffError,
    AutodiffPass,
    GradInfo,
    autodiff,
    is_grad_graph,
)
from xl.tools.context import xl_context


def parse(text: str) -> ModuleOp:
    module = Parser(xl_context(), text).parse_module()
    module.verify()
    return module


def to_text(module: ModuleOp) -> str:
    import io

    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


def graph(module: ModuleOp, name: str) -> GraphOp:
    return next(g for g in module.ops if isinstance(g, GraphOp) and g.graph_name == name)


LINEAR = """
graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "w"}, %b: tensor<3xf32> {graph.name = "b"}) -> (tensor<2x3xf32>) {
  %h = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = popxl.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %z = popxl.gelu %y : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.output %z : tensor<2x3xf32>
}
graph.main {
  %x = graph.constant dense<1.0> : tensor<2x4xf32>
  %w = graph.variable "w" : tensor<4x3xf32>
  %b = graph.variable "b" : tensor<3xf32>
  %y = call.call @linear(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
}
"""

NET = """
graph.graph @layer(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x4xf32> {graph.name = "w"}) -> (tensor<2x4xf32>) {
  %h = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %y = popxl.gelu %h : (tensor<2x4xf32>) -> tensor<2x4xf32>
  graph.output %y : tensor<2x4xf32>
}
graph.graph @net(%x: tensor<2x4xf32> {graph.name = "x"}, %w1: tensor<4x4xf32> {graph.name = "w1"}, %w2: tensor<4x4xf32> {graph.name = "w2"}) -> (tensor<2x4xf32>) {
  %a = call.call @layer(%x, %w1) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %b = call.call @layer(%a, %w2) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  graph.output %b : tensor<2x4xf32>
}
graph.main {
  %x = graph.constant dense<1.0> : tensor<2x4xf32>
  %w1 = graph.variable "w1" : tensor<4x4xf32>
  %w2 = graph.variable "w2" : tensor<4x4xf32>
  %y = call.call @net(%x, %w1, %w2) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
}
"""


# ------------------------------------------------------------------------------------
# IR structure
# ------------------------------------------------------------------------------------


def test_linear_structure() -> None:
    m = parse(LINEAR)
    main_call = next(op for op in m.walk() if isinstance(op, CallOp))
    old_result = main_call.res[0]
    grad, created = autodiff(m, "linear")
    m.verify()
    assert grad.graph_name == "linear_grad"
    assert list(created) == ["linear"]
    info = GradInfo.from_graph(grad)
    assert info.forward == "linear"
    # FwdGrad first, then the forward tensors the gradient needs
    assert info.expected_inputs[0] == ("fwd_grad", 0)
    kinds = {k for k, _ in info.expected_inputs[1:]}
    assert "fwd_grad" not in kinds
    assert info.expected_outputs == (0, 1, 2)
    # outputs: the grads of x, w, b with their types
    fwd = graph(m, "linear")
    assert grad.function_type.outputs.data == fwd.function_type.inputs.data
    # gelu needs its input %y, an intermediate: it became a forward output
    assert ("fwd_output", 1) in info.expected_inputs
    assert len(fwd.function_type.outputs.data) == 2
    # the existing call site got the new result in place
    assert main_call.parent is not None and len(main_call.res) == 2
    assert main_call.res[0] is old_result
    # names of the gradient graph inputs
    assert grad.input_name(0) == "Gradient___z"
    assert is_grad_graph(grad) and not is_grad_graph(fwd)


def test_attributes_round_trip() -> None:
    m = parse(LINEAR)
    grad, _ = autodiff(m, "linear")
    text = to_text(m)
    assert "autodiff.forward = @linear" in text
    assert 'autodiff.expected_inputs = [["fwd_grad", 0 : i64]' in text
    assert "autodiff.expected_outputs = array<i64: 0, 1, 2>" in text
    m2 = parse(text)
    assert GradInfo.from_graph(graph(m2, "linear_grad")) == GradInfo.from_graph(grad)
    assert to_text(m2) == text


def test_grads_required_subset_and_order() -> None:
    m = parse(LINEAR)
    grad, _ = autodiff(m, "linear", grads_required=[2, 1])
    info = GradInfo.from_graph(grad)
    assert info.expected_outputs == (2, 1)
    types = graph(m, "linear").function_type.inputs.data
    assert grad.function_type.outputs.data == (types[2], types[1])
    # x's gradient is not needed: w is not a gradient input (only x is, for dW)
    assert ("fwd_input", 1) not in info.expected_inputs
    assert ("fwd_input", 0) in info.expected_inputs


def test_grads_provided_order() -> None:
    def body(e, c, x, y):
        return [e("popxl.mul", x, y), e("popxl.tanh", x)]

    in_t = [tensor_type((3,), np.float64)] * 2
    m = ModuleOp([make_graph("f", in_t, body)])
    grad, _ = autodiff(m, "f", grads_provided=[1, 0])
    info = GradInfo.from_graph(grad)
    assert info.expected_inputs[:2] == (("fwd_grad", 1), ("fwd_grad", 0))


def test_unique_names_and_explicit_name() -> None:
    m = parse(LINEAR)
    g1, _ = autodiff(m, "linear")
    g2, _ = autodiff(m, "linear", grads_required=[1])
    g3, _ = autodiff(m, "linear", grad_graph="my_grad")
    assert [g1.graph_name, g2.graph_name, g3.graph_name] == [
        "linear_grad",
        "linear_grad_1",
        "my_grad",
    ]
    with pytest.raises(AutodiffError, match="already exists"):
        autodiff(m, "linear", grad_graph="my_grad")
    m.verify()


def test_pass_options() -> None:
    m = parse(LINEAR)
    AutodiffPass(graph="linear", grads_required=(1,), grad_graph="dw").apply(xl_context(), m)
    g = graph(m, "dw")
    assert GradInfo.from_graph(g).expected_outputs == (1,)
    with pytest.raises(AutodiffError, match="'graph' option"):
        AutodiffPass().apply(xl_context(), parse(LINEAR))


def test_call_into_subgraph() -> None:
    m = parse(NET)
    grad, created = autodiff(m, "net", grads_required=[1, 2])
    m.verify()
    assert set(created) == {"net", "layer"}
    assert is_grad_graph(created["layer"])
    calls = [op for op in grad.body.walk() if isinstance(op, CallOp)]
    assert {c.callee.root_reference.data for c in calls} <= {
        g.graph_name for g in m.ops if isinstance(g, GraphOp) and is_grad_graph(g)
    }
    assert len(calls) == 2
    # layer's activation (its gelu input) became a layer output; both calls of @layer
    # in @net got the new result
    layer = graph(m, "layer")
    assert len(layer.function_type.outputs.data) == 2
    net = graph(m, "net")
    for c in net.body.walk():
        if isinstance(c, CallOp):
            assert len(c.res) == 2


def test_unused_and_int_inputs() -> None:
    def body(e, c, x, unused, labels):
        return [e("popxl.mul", x, x)]

    in_t = [
        tensor_type((3,), np.float64),
        tensor_type((2,), np.float64),
        tensor_type((3,), np.int32),
    ]
    m = ModuleOp([make_graph("f", in_t, body)])
    grad, _ = autodiff(m, "f")
    info = GradInfo.from_graph(grad)
    assert info.expected_outputs == (0, 1)  # int labels: no gradient
    zero = grad.output_op.outs[1].owner
    assert isinstance(zero, Operation)
    assert zero.name in ("popxl.init", "graph.constant")
    with pytest.raises(AutodiffError, match="only floating point"):
        autodiff(m, "f", grads_required=[2])


# ------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------

MODIFYING = """
graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}, %y: tensor<2xf32> {graph.name = "y"}) -> (tensor<2xf32>) {
  popxl.scaled_add_ %x, %y {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  %z = popxl.mul %x, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %z : tensor<2xf32>
}
"""

BY_REF = """
graph.graph @acc(%a: tensor<2xf32> {graph.by_ref, graph.name = "a"}, %y: tensor<2xf32> {graph.name = "y"}) -> () {
  popxl.scaled_add_ %a, %y {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.output
}
graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}, %y: tensor<2xf32> {graph.name = "y"}) -> (tensor<2xf32>) {
  call.call @acc(%x, %y) : (tensor<2xf32>, tensor<2xf32>) -> ()
  %z = popxl.mul %x, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %z : tensor<2xf32>
}
"""


@pytest.mark.parametrize("text,op", [(MODIFYING, "popxl.scaled_add_"), (BY_REF, "call.call")])
def test_modifying_op_refused(text: str, op: str) -> None:
    m = parse(text)
    with pytest.raises(AutodiffError, match=f"The graph g contains a modifying op: {op} modifies its input 'x'"):
        autodiff(m, "g")
    assert not any(is_grad_graph(g) for g in m.ops)


def test_bad_indices_and_names() -> None:
    m = parse(LINEAR)
    with pytest.raises(AutodiffError, match="grads_required index 3 is not an input of graph @linear"):
        autodiff(m, "linear", grads_required=[3])
    with pytest.raises(AutodiffError, match="grads_provided index 1 is not an output"):
        autodiff(m, "linear", grads_provided=[1])
    with pytest.raises(AutodiffError, match="no graph @nope"):
        autodiff(m, "nope")


def test_no_rule() -> None:
    def body(e, c, x):
        labels = c(np.array([0, 1], np.int32))
        loss, _ = e("popxl.nll_loss_with_softmax_grad", x, labels, reduction="mean")
        return [loss]

    m = ModuleOp([make_graph("f", [tensor_type((2, 3), np.float64)], body)])
    with pytest.raises(AutodiffError, match="no gradient rule for 'popxl.nll_loss_with_softmax_grad'"):
        autodiff(m, "f")


def test_repeat_body_cannot_grow() -> None:
    text = """
graph.graph @body(%x: tensor<2xf32> {graph.name = "x"}) -> (tensor<2xf32>) {
  %h = popxl.gelu %x : (tensor<2xf32>) -> tensor<2xf32>
  %y = popxl.gelu %h : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %y : tensor<2xf32>
}
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %r = call.repeat @body 3 (%x) : (tensor<2xf32>) -> tensor<2xf32>
}
"""
    m = parse(text)
    with pytest.raises(AutodiffError, match="body of a call.repeat"):
        autodiff(m, "body")


# ------------------------------------------------------------------------------------
# Numerics (through xl.runtime)
# ------------------------------------------------------------------------------------


def test_subgraph_grads_numeric() -> None:
    def layer(e, c, x, w):
        return [e("popxl.gelu", e("popxl.matmul", x, w))]

    in_l = [tensor_type((2, 3), np.float64), tensor_type((3, 3), np.float64)]
    sub = make_graph("layer", in_l, layer)

    # @f calls @layer twice and outputs both results
    from xdsl.ir import Block, Region

    from xl.dialects.graph import OutputOp

    ins = [in_l[0], in_l[1], in_l[1]]
    block = Block(arg_types=ins)
    c1 = CallOp("layer", [block.args[0], block.args[1]], [in_l[0]])
    c2 = CallOp("layer", [c1.res[0], block.args[2]], [in_l[0]])
    block.add_ops([c1, c2, OutputOp([c2.res[0], c1.res[0]])])
    f = GraphOp("f", ins, [in_l[0], in_l[0]], Region(block), input_names=["x", "w1", "w2"])
    xs = [rand((2, 3)), rand((3, 3)), rand((3, 3))]
    _check_program([sub, f], "f", xs)


def _check_program(graphs, fwd, xs, **kw) -> GradProgram:
    """check_grads for a prebuilt set of graphs."""
    in_types = [tensor_type(x.shape, x.dtype) for x in xs]
    prog = GradProgram(graphs, fwd, in_types, kw.get("grads_provided"), kw.get("grads_required"))
    dys = {j: rand(prog.out_types[j].get_shape()) for j in prog.provided}
    _, grads = prog.run(xs, dys)

    def loss(v):
        ys, _ = prog.run(v, dys)
        return float(sum(np.sum(ys[j] * dys[j]) for j in prog.provided))

    eps = 1e-6
    for g, i in zip(grads, prog.info.expected_outputs):
        num = np.zeros(xs[i].shape)
        for idx in np.ndindex(xs[i].shape):
            p = [a.copy() for a in xs]
            q = [a.copy() for a in xs]
            p[i][idx] += eps
            q[i][idx] -= eps
            num[idx] = (loss(p) - loss(q)) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)
    return prog


def test_grads_required_subset_numeric() -> None:
    def body(e, c, x, w, b):
        return [e("popxl.tanh", e("popxl.add", e("popxl.matmul", x, w), b))]

    check_grads(body, [rand((2, 3)), rand((3, 4)), rand((4,))], grads_required=[2, 1])


def test_grads_provided_subset_numeric() -> None:
    def body(e, c, x, y):
        return [e("popxl.mul", x, y), e("popxl.sin", x), e("popxl.exp", y)]

    check_grads(body, [rand((3,)), rand((3,))], grads_provided=[2, 0])


def test_functionalized_inplace() -> None:
    # an in-place update of an intermediate becomes out of place before differentiation
    def body(e, c, x, y):
        from xl.dialects.popxl import ScaledAddInplaceOp

        h = e("popxl.mul", x, y)
        blk = h.owner.parent
        blk.add_op(ScaledAddInplaceOp.make([h, x], a=2.0, b=-1.0))
        return [e("popxl.tanh", h)]

    prog = check_grads(body, [rand((3,)), rand((3,))])
    fwd = graph(prog.module, "f")
    names = [op.name for op in fwd.body.block.ops]
    assert "popxl.scaled_add_" not in names and "popxl.scaled_add" in names


def test_inplace_without_functional_form_on_path_refused() -> None:
    def body(e, c, x, y):
        from xl.dialects.popxl import AccumulateMeanOp

        h = e("popxl.mul", x, y)
        h.owner.parent.add_op(AccumulateMeanOp.make([h, x], step=1.0))
        return [e("popxl.tanh", h)]

    in_t = [tensor_type((3,), np.float64)] * 2
    m = ModuleOp([make_graph("f", in_t, body)])
    with pytest.raises(AutodiffError, match="accumulate_mean_ updates"):
        autodiff(m, "f")


def test_called_grad_graph_reused() -> None:
    m = parse(NET)
    lg, _ = autodiff(m, "layer")  # all inputs, all outputs
    grad, created = autodiff(m, "net", called_grad_graphs={"layer": lg.graph_name})
    assert "layer" not in created
    callees = {op.callee.root_reference.data for op in grad.body.walk() if isinstance(op, CallOp)}
    assert callees == {lg.graph_name}
    m.verify()


# ------------------------------------------------------------------------------------
# popxl.transforms.autodiff / GradGraphInfo (Python API)
# ------------------------------------------------------------------------------------

popxl = pytest.importorskip("popxl")


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _gelu_grad(x):
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


class _Linear(popxl.Module):
    """The Linear of the PopXL MNIST example (docs/popxl/files/mnist.py)."""

    def __init__(self) -> None:
        self.W = None
        self.b = None

    def build(self, x, out_features: int, bias: bool = True):
        import popxl.ops as ops

        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        y = x @ self.W
        if bias:
            self.b = popxl.graph_input((out_features,), popxl.float32, "b")
            y = y + self.b
        return ops.gelu(y)


def _two_layer_program():
    """Seed 004: two linear graphs, autodiff applied after the forward calls,
    grads of layer 1 for all inputs, of layer 0 for (W, b) only."""
    import popxl.ops as ops
    from popxl import transforms

    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    data = {
        "x": rng.normal(size=(2, 4)).astype(np.float32),
        "W0": rng.normal(size=(4, 5)).astype(np.float32),
        "b0": rng.normal(size=(5,)).astype(np.float32),
        "W1": rng.normal(size=(5, 3)).astype(np.float32),
        "b1": rng.normal(size=(3,)).astype(np.float32),
        "dy": rng.normal(size=(2, 3)).astype(np.float32),
    }
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 4), popxl.float32, "x")
        x = ops.host_load(xs, "x")
        W0 = popxl.variable(data["W0"], name="W0")
        b0 = popxl.variable(data["b0"], name="b0")
        W1 = popxl.variable(data["W1"], name="W1")
        b1 = popxl.variable(data["b1"], name="b1")
        l0, l1 = _Linear(), _Linear()
        g0 = ir.create_graph(l0, x, 5)
        assert l0.W is not None and l0.b is not None  # set by build
        i0 = ops.call_with_info(g0, x, inputs_dict={l0.W: W0, l0.b: b0})
        x1 = i0.outputs[0]
        g1 = ir.create_graph(l1, x1, 3)
        assert l1.W is not None and l1.b is not None
        i1 = ops.call_with_info(g1, x1, inputs_dict={l1.W: W1, l1.b: b1})
        dy = popxl.constant(data["dy"], name="dy")

        info1 = transforms.autodiff(g1)
        act1 = info1.inputs_dict(i1)
        gi1 = ops.call_with_info(info1.graph, dy, inputs_dict=act1)
        grads1 = info1.fwd_parent_ins_to_grad_parent_outs(i1, gi1)
        info0 = transforms.autodiff(g0, grads_required=[l0.W, l0.b])
        act0 = info0.inputs_dict(i0)
        dW0, db0 = ops.call(info0.graph, grads1[x1], inputs_dict=act0)
        outs = {}
        for name, t in [("dW0", dW0), ("db0", db0), ("dW1", grads1[W1]), ("db1", grads1[b1]), ("dx1", grads1[x1])]:
            s = popxl.d2h_stream(t.shape, t.dtype, name)
            ops.host_store(s, t)
            outs[name] = s
    return ir, data, xs, outs, (g0, g1, l0, l1, i0, i1, info0, info1, gi1)


def _two_layer_reference(d):
    h0 = d["x"] @ d["W0"] + d["b0"]
    x1 = _gelu(h0)
    h1 = x1 @ d["W1"] + d["b1"]
    dh1 = d["dy"] * _gelu_grad(h1)
    dx1 = dh1 @ d["W1"].T
    dh0 = dx1 * _gelu_grad(h0)
    return {
        "dW1": x1.T @ dh1,
        "db1": dh1.sum(0),
        "dx1": dx1,
        "dW0": d["x"].T @ dh0,
        "db0": dh0.sum(0),
    }


def test_popxl_two_layers_structure() -> None:
    from popxl.transforms import ExpectedConnectionType, GradGraphInfo

    ir, _, _, _, (g0, g1, l0, l1, i0, i1, info0, info1, gi1) = _two_layer_program()
    assert isinstance(info1, GradGraphInfo)
    assert info1.forward_graph == g1
    assert info1.graph.name == f"{g1.name}_grad"
    ec = info1.expected_inputs
    assert ec[0].connection_type == ExpectedConnectionType.FwdGrad
    assert ec[0].fwd_tensor == g1.outputs[0]
    assert all(e.connection_type == ExpectedConnectionType.Fwd for e in ec[1:])
    assert info1.inputs == tuple(e.fwd_tensor for e in ec)
    # outputs: exactly the required inputs, in order
    assert info1.outputs == g1.inputs
    assert info0.outputs == (l0.W, l0.b)
    assert all(e.connection_type == ExpectedConnectionType.FwdGrad for e in info0.expected_outputs)
    # the forward graphs gained the activations as outputs; the existing call sites see them
    assert len(g1.outputs) == 2 and len(i1.outputs) == 2
    assert len(g0.outputs) == 2 and len(i0.outputs) == 2
    # inputs_dict: one entry per Fwd connection, keyed by gradient graph inputs
    d = info1.inputs_dict(i1)
    assert set(d) == {info1.graph.inputs[k] for k in range(1, len(ec))}
    assert all(t.graph == ir.main_graph for t in d.values())
    # the connections live in the IR
    text = str(ir._module)
    assert "autodiff.expected_inputs" in text
    r = repr(info1)
    assert r.startswith(
        f"GradGraphInfo[\n  graph={info1.graph.id}\n  expected_inputs=[\n    (ExpectedConnectionType.FwdGrad, Tensor["
    )
    assert r.endswith("  ]\n]")


def test_popxl_two_layers_numeric() -> None:
    ir, data, xs, outs, _ = _two_layer_program()
    with popxl.Session(ir, "cpu") as sess:
        r = sess.run({xs: data["x"]})
    ref = _two_layer_reference(data)
    for name, s in outs.items():
        np.testing.assert_allclose(r[s], ref[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_popxl_autodiff_errors() -> None:
    import popxl.ops as ops
    from popxl import transforms

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 4), np.float32), name="x")
        l0, l1 = _Linear(), _Linear()
        g0 = ir.create_graph(l0, x, 3)
        g1 = ir.create_graph(l1, x, 3)
        assert l1.W is not None and l1.b is not None
        i1 = ops.call_with_info(
            g1,
            x,
            inputs_dict={
                l1.W: popxl.variable(np.ones((4, 3), np.float32)),
                l1.b: popxl.variable(np.ones(3, np.float32)),
            },
        )
        with pytest.raises(ValueError, match=r"grads_required: tensor .*W.* is not in graph"):
            transforms.autodiff(g0, grads_required=[l1.W])
        with pytest.raises(ValueError, match=r"grads_required: tensor .* is not an input of graph"):
            transforms.autodiff(g0, grads_required=[g0.outputs[0]])
        info0 = transforms.autodiff(g0)
        with pytest.raises(TypeError, match="calls graph"):
            info0.inputs_dict(i1)

        def modifies(a, b):
            ops.var_updates.accumulate_(a, b)
            return a * b

        spec = popxl.TensorSpec((2,), popxl.float32)
        gm = ir.create_graph(modifies, spec, spec)
        with pytest.raises(ValueError, match=re.escape(f"The graph {gm.name} contains a modifying op")):
            transforms.autodiff(gm)


def test_popxl_return_all_grad_graphs() -> None:
    import popxl.ops as ops
    from popxl import transforms

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 4), np.float32), name="x")
        lin = _Linear()
        inner = ir.create_graph(lin, x, 4)
        lin_w, lin_b = lin.W, lin.b
        assert lin_w is not None and lin_b is not None  # set by build

        def outer(t, w, b):
            y = ops.call(inner, t, inputs_dict={lin_w: w, lin_b: b})[0]
            return ops.tanh(y)

        spec = lambda s: popxl.TensorSpec(s, popxl.float32)  # noqa: E731
        g = ir.create_graph(outer, spec((2, 4)), spec((4, 4)), spec((4,)))
        all_infos = transforms.autodiff(g, return_all_grad_graphs=True)
        assert set(all_infos) == {g, inner}
        assert all_infos[inner].forward_graph == inner
        # reuse it for another graph calling `inner`
        g2 = ir.create_graph(outer, spec((2, 4)), spec((4, 4)), spec((4,)))
        info2 = transforms.autodiff(g2, called_graphs_grad_info={inner: all_infos[inner]})
        callees = {op.callee.root_reference.data for op in info2.graph._op.body.walk() if isinstance(op, CallOp)}
        assert callees == {all_infos[inner].graph.name}


# ------------------------------------------------------------------------------------
# addons.autodiff
# ------------------------------------------------------------------------------------


def test_addons_autodiff_mnist_like() -> None:
    addons = pytest.importorskip("popxl_addons")
    import popxl.ops as ops

    class Linear(addons.Module):
        def __init__(self, n: int):
            super().__init__()
            self.n = n

        def build(self, x):
            w = self.add_variable_input("weight", lambda: np.full((x.shape[-1], self.n), 0.1, np.float32), x.dtype)
            b = self.add_variable_input("bias", lambda: np.zeros(self.n, np.float32), x.dtype)
            return ops.gelu(x @ w + b)

    class Net(addons.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = Linear(5)
            self.fc2 = Linear(3)

        def build(self, x):
            return self.fc2(self.fc1(x.reshape((x.shape[0], -1))))

    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((2, 2, 2), popxl.float32, "image")
        img = ops.host_load(s)
        facts, fwd = Net().create_graph(img)
        bwd = addons.autodiff(fwd)
        assert addons.transforms.autodiff is addons.autodiff
        assert isinstance(bwd, addons.GraphWithNamedArgs)
        assert bwd.grad_graph_info.forward_graph == fwd.graph
        assert fwd.autodiff_applied
        with pytest.raises(ValueError, match="already been applied"):
            addons.autodiff(fwd)
        variables = facts.init()
        fwd_info = fwd.bind(variables).call_with_info(img)
        dx = popxl.constant(np.ones((2, 3), np.float32))
        acts = bwd.grad_graph_info.inputs_dict(fwd_info)
        bwd_info = bwd.call_with_info(dx, args=acts)
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        assert set(variables.tensors) <= set(grads)
        streams = {}
        for name, t in variables.named_tensors.items():
            st = popxl.d2h_stream(t.shape, t.dtype, f"d_{name}")
            ops.host_store(st, grads[t])
            streams[name] = st
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 2, 2)
    with popxl.Session(ir, "cpu") as sess:
        r = sess.run({s: x})
    # NumPy reference
    xf = x.reshape(2, 4)
    w1, b1 = np.full((4, 5), 0.1, np.float32), np.zeros(5, np.float32)
    w2, b2 = np.full((5, 3), 0.1, np.float32), np.zeros(3, np.float32)
    h1 = xf @ w1 + b1
    a1 = _gelu(h1)
    h2 = a1 @ w2 + b2
    d2 = _gelu_grad(h2)
    d1 = (d2 @ w2.T) * _gelu_grad(h1)
    ref = {"fc1.weight": xf.T @ d1, "fc1.bias": d1.sum(0), "fc2.weight": a1.T @ d2, "fc2.bias": d2.sum(0)}
    for name, st in streams.items():
        np.testing.assert_allclose(r[st], ref[name], rtol=1e-4, atol=1e-6, err_msg=name)
