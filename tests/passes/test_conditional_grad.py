"""Autodiff through `ops.conditional` (`call.conditional`): the gradient is a conditional
of the two branches' gradients selected by the same condition (as PopART's If op), checked
against central finite differences of the forward program for both conditions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import popxl
from popxl import ops

X0 = np.array([0.5, -1.0, 2.0], np.float64)
Z0 = np.array([1.5, 0.25, -0.5], np.float64)
DY = np.array([0.3, -1.2, 0.7], np.float64)

Branch = Callable[[popxl.Tensor, popxl.Tensor], popxl.Tensor]


def _branches() -> dict[str, tuple[Branch, Branch, bool]]:
    """(then, else, whether the branches take the same inputs)."""
    return {
        "both-inputs": (lambda a, b: ops.sin(a) * b, lambda a, b: a * a + b, True),
        "one-branch-ignores-b": (lambda a, b: ops.exp(a) * 2.0, lambda a, b: a * b * b, True),
        "own-inputs": (lambda a, b: ops.tanh(a * b), lambda a, b: ops.log(a * a + 1.0) - b, False),
    }


def _program(then_fn: Branch, else_fn: Branch, same: bool, cond: bool, x: np.ndarray, z: np.ndarray):
    """Forward value and (dx, dz) of sum(conditional(...) * DY) through autodiff."""
    ir = popxl.Ir()
    with ir.main_graph:
        xv = popxl.variable(x, popxl.float64, name="x")
        zv = popxl.variable(z, popxl.float64, name="z")
        cv = popxl.variable(np.bool_(cond), name="c")
        tg = ir.create_graph(then_fn, xv, zv)
        eg = ir.create_graph(else_fn, xv, zv)

        def f(c: popxl.Tensor, a: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
            # with own inputs, the else branch gets (b, a): other tensors at each position
            else_inputs = [a, b] if same else [b, a]
            (y,) = ops.conditional(c, tg, eg, then_inputs=[a, b], else_inputs=else_inputs)
            return y

        fg = ir.create_graph(f, cv, xv, zv)
        info = popxl.transforms.autodiff(fg, grads_required=fg.inputs[1:])
        call = ops.call_with_info(fg, cv, xv, zv)
        (y,) = call.outputs
        dy = popxl.constant(DY, popxl.float64)
        grads = ops.call(info.graph, dy, inputs_dict=info.inputs_dict(call))
        streams = []
        for t in (y, *grads):
            s = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    y, dx, dz = (out[s] for s in streams)
    return y, dx, dz


def _loss(then_fn: Branch, else_fn: Branch, same: bool, cond: bool, x: np.ndarray, z: np.ndarray) -> float:
    y, _, _ = _program(then_fn, else_fn, same, cond, x, z)
    return float(np.sum(y * DY))


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("name", list(_branches()))
def test_conditional_gradient_vs_finite_differences(name: str, cond: bool) -> None:
    then_fn, else_fn, same = _branches()[name]
    _, dx, dz = _program(then_fn, else_fn, same, cond, X0, Z0)
    eps = 1e-6
    for got, which in ((dx, 0), (dz, 1)):
        fd = np.zeros(3)
        for k in range(3):
            args = [X0.copy(), Z0.copy()]
            args[which][k] += eps
            up = _loss(then_fn, else_fn, same, cond, *args)
            args[which][k] -= 2 * eps
            down = _loss(then_fn, else_fn, same, cond, *args)
            fd[k] = (up - down) / (2 * eps)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def test_conditional_gradient_ir() -> None:
    """The gradient graph holds a call.conditional on the forward condition; each branch
    recomputes a copy of its forward branch and calls the copy's gradient graph."""
    then_fn, else_fn, same = _branches()["both-inputs"]
    ir = popxl.Ir()
    with ir.main_graph:
        xv = popxl.variable(X0, popxl.float64)
        cv = popxl.variable(np.bool_(True))
        tg = ir.create_graph(then_fn, xv, xv)
        eg = ir.create_graph(else_fn, xv, xv)
        fg = ir.create_graph(lambda c, a: ops.conditional(c, tg, eg, [a, a], [a, a])[0], cv, xv)
        popxl.transforms.autodiff(fg)
    text = ir.to_mlir()
    assert text.count("call.conditional") == 2
    assert '_cond_grad"' in text and '_cond_fwd_grad"' in text
    # the forward branches are unchanged (no extra outputs)
    assert (
        f'@"{tg.name}"(%a: tensor<3xf64> {{graph.name = "a"}}, %b: tensor<3xf64> {{graph.name = "b"}}) -> tensor<3xf64>'
        in text
    )
