"""`Module.build_grad` / `create_grad_graph`, `aux`, `var_grad` and `Module.call_module`:
user-defined gradient graphs, validated against autodiff and NumPy (as upstream's
tests/unit/test_modules_build_graph.py does)."""

from functools import partial

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons import GraphWithNamedArgs, Module

RNG = np.random.default_rng(42)
X = RNG.random((4, 3)).astype(np.float32)
DY = RNG.random((4, 3)).astype(np.float32)
W0 = RNG.random((3, 3)).astype(np.float32)
B0 = RNG.random((3,)).astype(np.float32)


class Linear(Module):
    def __init__(self, features: int):
        super().__init__()
        self.features = features

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.w = self.add_variable_input("w", lambda: W0[:, : self.features], popxl.float32)
        self.b = self.add_variable_input("b", lambda: B0[: self.features], popxl.float32)
        return (x @ self.w) + self.b


class LinearBuildGrad(Module):
    def __init__(self, features: int, grad_inlining_error: str = "error", cache: bool = False):
        super().__init__(grad_inlining_error=grad_inlining_error, cache=cache)
        self.features = features

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.w = self.add_variable_input("w", lambda: W0[:, : self.features], popxl.float32)
        self.b = self.add_variable_input("b", lambda: B0[: self.features], popxl.float32)
        self.aux["x"] = x
        self.aux["w"] = self.w
        return (x @ self.w) + self.b

    def build_grad(self, dLdy: popxl.Tensor) -> popxl.Tensor:
        dLdx = dLdy @ self.aux["w"].T
        dLdw = (dLdy.T @ self.aux["x"]).T
        dLdb = ops.sum(dLdy, 0)
        self.var_grad["b"] = dLdb
        self.var_grad["w"] = dLdw
        return dLdx


def _numpy_linear():
    y = X @ W0 + B0
    return y, DY @ W0.T, X.T @ DY, DY.sum(0)


def _run(module: Module, method: str = "auto", scale_input: bool = False):
    """Forward + gradient graph of `module`; returns (y, dx, dw, db, grad GraphWithNamedArgs)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        dy = popxl.variable(DY, popxl.float32)
        facts, fwd = module.create_graph(x)
        grad = fwd.autodiff(method=method)
        variables = facts.init()
        call = fwd.bind(variables).call_with_info(x)
        y = call.outputs[0]
        outs = grad.call(dy, args=grad.grad_graph_info.inputs_dict(call))
        streams = [addons.host_store(t) for t in (y, *outs)]
    with popxl.Session(ir, "cpu") as s:
        res = s.run()
    return [res[st] for st in streams], grad, fwd


def _connections(info):
    return {
        group: sorted(
            (c.fwd_tensor.name, str(c.fwd_tensor.dtype), tuple(c.fwd_tensor.shape), c.connection_type.name)
            for c in getattr(info, group)
        )
        for group in ("expected_inputs", "expected_outputs")
    }


def test_build_grad_equals_autodiff_and_numpy():
    auto, auto_grad, _ = _run(Linear(3))
    built, built_grad, fwd = _run(LinearBuildGrad(3), method="build_grad")
    for ref, a, b, name in zip(_numpy_linear(), auto, built, ("y", "dx", "dw", "db")):
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-6, err_msg=name)
    # the same connections as autodiff's gradient graph (by name, dtype, shape, type)
    assert _connections(built_grad.grad_graph_info) == _connections(auto_grad.grad_graph_info)
    info = built_grad.grad_graph_info
    assert len(built_grad.graph.outputs) == len(info.expected_outputs) == 3
    for g, e in zip(built_grad.graph.inputs, info.expected_inputs):
        assert g.spec == e.fwd_tensor.spec
    for g, e in zip(built_grad.graph.outputs, info.expected_outputs):
        assert g.spec == e.fwd_tensor.spec
    assert fwd.autodiff_applied


def test_force_autodiff_on_build_grad_module():
    got, _, _ = _run(LinearBuildGrad(3), method="autodiff")
    for ref, a in zip(_numpy_linear(), got):
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)


class Square(Module):
    """y = x * x with a deliberately different (tripled) gradient, and an aux activation
    that is not a forward input (it becomes a forward output)."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        t = x * 3.0
        self.aux["t"] = t
        return t * x / 3.0

    def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
        return dy * self.aux["t"] * 2.0


def test_aux_activation_becomes_forward_output_and_gradient_is_the_users():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        dy = popxl.variable(DY, popxl.float32)
        facts, fwd = Square().create_graph(x)
        n_before = len(fwd.graph.outputs)
        grad = fwd.autodiff()
        assert len(fwd.graph.outputs) == n_before + 1
        call = fwd.bind(facts.init()).call_with_info(x)
        (dx,) = grad.call(dy, args=grad.grad_graph_info.inputs_dict(call))
        streams = [addons.host_store(t) for t in (call.outputs[0], dx)]
    with popxl.Session(ir, "cpu") as s:
        res = s.run()
    np.testing.assert_allclose(res[streams[0]], X * X, rtol=1e-6)
    np.testing.assert_allclose(res[streams[1]], DY * X * 6.0, rtol=1e-5)  # the user's rule, not 2x


class LinearOutlined(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = 1 * x
        (y,) = self.call_module(LinearBuildGrad(x.shape[-1]))(x)
        return y


def _outlined_run(module: Module, method: str = "auto", clear_first: bool = True):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        dy = popxl.variable(DY, popxl.float32)
        facts, fwd = module.create_graph(x)
        assert len(fwd.called_graphs_grad_info) > 0
        if clear_first:
            saved = fwd.called_graphs_grad_info
            fwd.called_graphs_grad_info = {}
            with pytest.raises(ValueError, match="marked as unsafe to autodiff"):
                fwd.autodiff(method=method)
            fwd.called_graphs_grad_info = saved
        grad = fwd.autodiff(method=method)
        call = fwd.bind(facts.init()).call_with_info(x)
        outs = grad.call(dy, args=grad.grad_graph_info.inputs_dict(call))
        assert len(outs) == len(grad.grad_graph_info.expected_outputs)
        for g, e in zip(outs, grad.grad_graph_info.expected_outputs):
            assert g.spec == e.fwd_tensor.spec
        streams = [addons.host_store(t) for t in (call.outputs[0], *outs)]
    with popxl.Session(ir, "cpu") as s:
        res = s.run()
    return [res[st] for st in streams], facts


def test_call_module_outlines_and_uses_build_grad():
    got, facts = _outlined_run(LinearOutlined())
    assert sorted(facts.to_dict()) == ["LinearBuildGrad.b", "LinearBuildGrad.w"]
    for ref, a in zip(_numpy_linear(), got):
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)


def test_call_module_inline_nesting():
    class LinearOutlinedInlined(Module):
        def __init__(self):
            super().__init__()
            self.linear = LinearOutlined()

        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            return self.linear(x * 1)

    got, facts = _outlined_run(LinearOutlinedInlined(), method="autodiff")
    assert sorted(facts.to_dict()) == ["linear.LinearBuildGrad.b", "linear.LinearBuildGrad.w"]
    for ref, a in zip(_numpy_linear(), got):
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)


def test_call_module_outlined_nesting():
    class LinearOutlinedOutlined(Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            (y,) = self.call_module(LinearOutlined(), name="outer")(x * 1)
            return y

    got, facts = _outlined_run(LinearOutlinedOutlined(), method="autodiff")
    assert sorted(facts.to_dict()) == ["outer.LinearBuildGrad.b", "outer.LinearBuildGrad.w"]
    for ref, a in zip(_numpy_linear(), got):
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)


def test_call_module_without_build_grad_and_modes():
    class Outer(Module):
        def __init__(self, mode):
            super().__init__()
            self.mode = mode

        def build(self, x):
            (y,) = self.call_module(Linear(3), name="lin", autodiff=self.mode)(x)
            return y

    for mode, n_called in (("auto", 0), ("none", 0), ("autodiff", 1)):
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(X, popxl.float32)
            facts, fwd = Outer(mode).create_graph(x)
            assert len(fwd.called_graphs_grad_info) == n_called, mode
            assert sorted(facts.to_dict()) == ["lin.b", "lin.w"]
            grad = fwd.autodiff()
            dy = popxl.variable(DY, popxl.float32)
            call = fwd.bind(facts.init()).call_with_info(x)
            outs = grad.call(dy, args=grad.grad_graph_info.inputs_dict(call))
            streams = [addons.host_store(t) for t in (call.outputs[0], *outs)]
        with popxl.Session(ir, "cpu") as s:
            res = s.run()
        for ref, st in zip(_numpy_linear(), streams):
            np.testing.assert_allclose(res[st], ref, rtol=1e-5, atol=1e-6, err_msg=mode)
    with pytest.raises(ValueError, match="autodiff must be"):
        Module().call_module(Linear(3), autodiff="bogus")


def test_inlining_behaviour():
    class LinearInlined(Module):
        def __init__(self, features: int, grad_inlining_error: str = "error"):
            super().__init__()
            self.linear = LinearBuildGrad(features, grad_inlining_error=grad_inlining_error)

        def build(self, x):
            return self.linear(2 * x)

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        with pytest.raises(ValueError, match="grad_inlining_error should be one of"):
            LinearInlined(3, grad_inlining_error="").create_graph(x)
        with pytest.raises(RuntimeError, match="`build_grad` has been implemented"):
            LinearInlined(3, grad_inlining_error="error").create_graph(x)
        with pytest.warns(UserWarning, match="`build_grad` has been implemented"):
            LinearInlined(3, grad_inlining_error="warning").create_graph(x)
        LinearInlined(3, grad_inlining_error="none").create_graph(x)


def test_error_with_no_from_module():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        _, fwd = LinearBuildGrad(3).create_graph(x)
        manual = GraphWithNamedArgs(fwd.graph, args=fwd.args)
        with pytest.raises(ValueError, match="`from_module` is specified"):
            manual.autodiff(method="build_grad")


def test_inline_module_into_build_grad_module_nested_var_grads():
    class LinearWithLinearInlined(Module):
        def __init__(self, features):
            super().__init__()
            self.linear = Linear(features)

        def build(self, x):
            y = self.linear(x)
            self.aux["x"] = x
            self.aux["w"] = self.linear.w
            return y

        def build_grad(self, dLdy):
            self.var_grad["linear.b"] = ops.sum(dLdy, 0)
            self.var_grad["linear.w"] = (dLdy.T @ self.aux["x"]).T
            return dLdy @ self.aux["w"].T

    got, _, _ = _run(LinearWithLinearInlined(3))
    for ref, a in zip(_numpy_linear(), got):
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)


def test_var_grad_and_aux_guards():
    seen = {}

    class L(Module):
        missing_w = False  # set per test below

        def build(self, x):
            w = self.add_variable_input("w", partial(np.zeros, (3, 3)), popxl.float32)
            b = self.add_variable_input("b", partial(np.zeros, (3,)), popxl.float32)
            self.aux["x"] = x
            self.aux["w"] = w
            self.aux["string"] = "string"
            with pytest.raises(RuntimeError, match="within the `build_grad` method"):
                self.aux["w"]
            with pytest.raises(RuntimeError, match="within the `build_grad` method"):
                self.var_grad["q"] = 0
            return (x @ w) + b

        def build_grad(self, dLdy):
            assert self.aux["string"] == "string"
            assert "w" in self.aux and "h" not in self.aux
            assert self.aux["w"] is self.aux["w"]  # one gradient graph input per key
            self.var_grad["b"] = ops.sum(dLdy, 0)
            with pytest.raises(TypeError, match="Not a tensor"):
                self.var_grad["q"] = 0
            with pytest.raises(KeyError, match="Not a variable"):
                self.var_grad["Z"] = ops.sum(dLdy, 0)
            with pytest.raises(ValueError, match="Shape or meta-shape of Tensor does not match variable"):
                self.var_grad["w"] = ops.sum(dLdy, 0)
            assert "b" in self.var_grad and "w" not in self.var_grad
            if self.missing_w:
                return dLdy @ self.aux["w"].T
            self.var_grad["w"] = (dLdy.T @ self.aux["x"]).T
            dx = dLdy @ self.aux["w"].T
            seen["n_inputs"] = len(popxl.gcg().inputs)
            return dx

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        m = L()
        m.missing_w = True
        _, fwd = m.create_graph(x)
        with pytest.raises(ValueError, match="Not all variable gradients have been specified"):
            fwd.autodiff(method="build_grad")
        with pytest.raises(RuntimeError, match="within the `build_grad` method"):
            m.var_grad["q"] = 0
        with pytest.raises(RuntimeError, match="within the `build_grad` method"):
            m.var_grad["q"]
        m.missing_w = False
        _, fwd = m.create_graph(x)
        grad = fwd.autodiff(method="build_grad")
        assert seen["n_inputs"] == 3  # dLdy, aux x, aux w
        assert len(grad.graph.outputs) == 3


@pytest.mark.parametrize(
    "ret, msg",
    [
        ("wrong_shape", "Shape or meta-shape of output Tensor at position 0"),
        ("too_many", "Too many outputs in the grad graph"),
        ("none", "Not all forward graph inputs have been specified"),
    ],
)
def test_output_checks(ret, msg):
    class L(Module):
        def build(self, x):
            w = self.add_variable_input("w", partial(np.zeros, (3, 3)), popxl.float32)
            b = self.add_variable_input("b", partial(np.zeros, (3,)), popxl.float32)
            self.aux["x"] = x
            self.aux["w"] = w
            return (x @ w) + b

        def build_grad(self, dLdy):
            dLdx = dLdy @ self.aux["w"].T
            db = ops.sum(dLdy, 0)
            self.var_grad["b"] = db
            self.var_grad["w"] = (dLdy.T @ self.aux["x"]).T
            if ret == "wrong_shape":
                return db
            if ret == "too_many":
                return dLdx, dLdx
            return None

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        _, fwd = L().create_graph(x)
        with pytest.raises(ValueError, match=msg):
            fwd.autodiff(method="build_grad")


def test_signature_and_grads_provided_required():
    class VarArgs(LinearBuildGrad):
        def build_grad(self, *args):  # pyright: ignore[reportIncompatibleMethodOverride]  # the signature the test refuses
            return None

    class TwoOut(Module):
        def build(self, x, x2):
            w = self.add_variable_input("w", lambda: W0, popxl.float32)
            b = self.add_variable_input("b", lambda: B0, popxl.float32)
            self.aux["x"] = x
            self.aux["w"] = w
            y = (x * x2 @ w) + b
            return y, 0.5 * y

        def build_grad(self, dLdy):
            self.var_grad["b"] = ops.sum(dLdy, 0)
            return dLdy @ self.aux["w"].T

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        dy = popxl.variable(DY, popxl.float32)
        _, fwd = VarArgs(3).create_graph(x)
        with pytest.raises(TypeError, match="fixed number of positional parameters"):
            fwd.autodiff(method="build_grad")
        m = TwoOut()
        _, fwd = m.create_graph(x, x)
        with pytest.raises(ValueError, match="is not a output of `fwd_graph`"):
            fwd.autodiff(method="build_grad", grads_provided=[dy])
        with pytest.raises(ValueError, match="do not match the signature"):
            fwd.autodiff(method="build_grad")  # two outputs, build_grad takes one
        with pytest.raises(ValueError, match="is not a input of `fwd_graph`"):
            fwd.autodiff(method="build_grad", grads_provided=fwd.graph.outputs[:1], grads_required=[dy])
        with pytest.raises(ValueError, match="Too many outputs in the grad graph"):
            fwd.autodiff(method="build_grad", grads_provided=fwd.graph.outputs[:1], grads_required=[fwd.args.b])
        g = fwd.autodiff(
            method="build_grad",
            grads_provided=fwd.graph.outputs[:1],
            grads_required=[fwd.args.b, fwd.graph.inputs[1]],
        )
        # non-variable gradients first, then the variables'
        outs = g.grad_graph_info.expected_outputs
        assert [o.fwd_tensor for o in outs] == [fwd.graph.inputs[1], fwd.args.b]
        assert len(g.graph.outputs) == 2
        with pytest.raises(ValueError, match="already been applied"):
            fwd.autodiff(method="build_grad")


def test_graph_caching_refused():
    with pytest.raises(ValueError, match="cannot use graph caching"):
        LinearBuildGrad(3, cache=True)


def test_build_grad_inside_accumulation_and_training_step():
    """A build_grad module called with call_module inside a model trained with
    autodiff_with_accumulation: the accumulated gradient is NumPy's."""

    class Model(Module):
        def build(self, x):
            (y,) = self.call_module(LinearBuildGrad(3), name="fc")(x)
            return y

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        dy = popxl.variable(DY, popxl.float32)
        facts, fwd = Model().create_graph(x)
        accum_facts, grad = addons.autodiff_with_accumulation(fwd, [fwd.args.fc.w, fwd.args.fc.b])
        variables = facts.init()
        accums = accum_facts.init()
        call = fwd.bind(variables).call_with_info(x)
        grad.bind(accums).call(dy, args=grad.grad_graph_info.inputs_dict(call))
    with popxl.Session(ir, "cpu") as s:
        s.run()
        w = s.get_tensor_data(accums.accum.fc.w)
        b = s.get_tensor_data(accums.accum.fc.b)
    np.testing.assert_allclose(w, X.T @ DY, rtol=1e-5)
    np.testing.assert_allclose(b, DY.sum(0), rtol=1e-5)


def test_module_without_super_init_builds():
    class NoInit(Module):
        def __init__(self):
            self.k = 3.0

        def build(self, x):
            w = self.add_variable_input("w", lambda: np.full((3,), 2.0, np.float32))
            return x * w * self.k

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, popxl.float32)
        facts, fwd = NoInit().create_graph(x)
        (y,) = fwd.bind(facts.init()).call(x)
        s = addons.host_store(y)
    with popxl.Session(ir, "cpu") as sess:
        np.testing.assert_allclose(sess.run()[s], X * 6.0, rtol=1e-6)
