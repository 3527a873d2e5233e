"""Gradient rules against finite differences, through autodiff -> runtime.

For each op: a forward graph `@f` holding the op is differentiated by the
`autodiff` pass; a main graph loads the inputs and the output gradients, calls
`@f` and `@f_grad` and stores the outputs and the gradients. The program runs on
`xl.runtime`; the gradients must match central differences of
`L = sum_j <y_j, dy_j>` (float64 wherever the op allows it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Region, SSAValue

from tests.helpers.narrow import narrow
from xl.dialects import popxl as P
from xl.dialects.call import CallOp
from xl.dialects.graph import (
    ConstantOp,
    D2HStreamOp,
    GraphOp,
    H2DStreamOp,
    HostLoadOp,
    HostStoreOp,
    MainGraphOp,
    OutputOp,
)
from xl.dialects.utils import dense_attr, dtype_of, tensor_type
from xl.passes.autodiff import FWD_GRAD, FWD_INPUT, GradInfo, autodiff

RNG = np.random.default_rng(1234)

Body = Callable[..., Sequence[SSAValue]]


def op_cls(name: str) -> type:
    for c in P.Popxl.operations:
        if c.name == name:
            return c
    pytest.skip(f"{name} is not defined in xl.dialects.popxl yet")


def make_graph(name: str, in_types: Sequence[TensorType], body: Body) -> GraphOp:
    block = Block(arg_types=in_types)

    def emit(op_name: str, *operands: SSAValue, result_types=None, **props: Any):
        op = op_cls(op_name).make(list(operands), result_types, **props)
        block.add_op(op)
        return op.results[0] if len(op.results) == 1 else op.results

    def const(value: np.ndarray) -> SSAValue:
        c = ConstantOp(dense_attr(np.asarray(value)))
        block.add_op(c)
        return c.result

    outs = body(emit, const, *block.args)
    if isinstance(outs, SSAValue):
        outs = [outs]
    block.add_op(OutputOp(list(outs)))
    return GraphOp(
        name,
        list(in_types),
        [o.type for o in outs],
        Region(block),
        input_names=[f"x{i}" for i in range(len(in_types))],
    )


class GradProgram:
    """`@f`, its gradient graph and a main graph running both, compiled."""

    def __init__(
        self,
        graphs: Sequence[GraphOp],
        fwd: str,
        in_types: Sequence[TensorType],
        grads_provided: Sequence[int] | None = None,
        grads_required: Sequence[int] | None = None,
    ):
        from xl.compiler import compile_module

        module = ModuleOp(list(graphs))
        grad, _ = autodiff(module, fwd, grads_provided, grads_required)
        self.grad_name = grad.graph_name
        self.info = GradInfo.from_graph(grad)
        fwd_op = next(g for g in module.ops if isinstance(g, GraphOp) and g.graph_name == fwd)
        out_types = [narrow(t, TensorType) for t in fwd_op.function_type.outputs.data]  # xl graphs return tensors
        decls: list = []
        block = Block()
        ins = []
        for i, t in enumerate(in_types):
            decls.append(H2DStreamOp(f"in{i}", t))
            ld = HostLoadOp(f"in{i}", t)
            block.add_op(ld)
            ins.append(ld.result)
        call = CallOp(fwd, ins, out_types)
        block.add_op(call)
        self.provided = [i for k, i in self.info.expected_inputs if k == FWD_GRAD]
        grad_ins = []
        for k, idx in self.info.expected_inputs:
            if k == FWD_GRAD:
                t = out_types[idx]
                decls.append(H2DStreamOp(f"dy{idx}", t))
                ld = HostLoadOp(f"dy{idx}", t)
                block.add_op(ld)
                grad_ins.append(ld.result)
            elif k == FWD_INPUT:
                grad_ins.append(ins[idx])
            else:
                grad_ins.append(call.res[idx])
        gcall = CallOp(grad.graph_name, grad_ins, list(grad.function_type.outputs.data))
        block.add_op(gcall)
        for j in self.provided:
            decls.append(D2HStreamOp(f"y{j}", out_types[j]))
            block.add_op(HostStoreOp(f"y{j}", call.res[j]))
        for k, r in enumerate(gcall.res):
            decls.append(D2HStreamOp(f"g{k}", r.type))
            block.add_op(HostStoreOp(f"g{k}", r))
        module.body.block.add_ops([*decls, MainGraphOp(Region(block))])
        module.verify()
        self.module = module
        self.exe = compile_module(module)
        self.out_types = out_types

    def run(self, inputs: Sequence[np.ndarray], dys: dict[int, np.ndarray]):
        feed = {f"in{i}": x for i, x in enumerate(inputs)}
        feed.update({f"dy{j}": d for j, d in dys.items()})
        outs = self.exe.run(feed)
        ys = {j: outs[f"y{j}"] for j in self.provided}
        grads = [outs[f"g{k}"] for k in range(len(self.info.expected_outputs))]
        return ys, grads


def rand(shape: Sequence[int], dtype: Any = np.float64, low=-2.0, high=2.0) -> np.ndarray:
    return RNG.uniform(low, high, size=tuple(shape)).astype(dtype)


def check_grads(
    body: Body,
    inputs: Sequence[np.ndarray],
    *,
    grads_provided: Sequence[int] | None = None,
    grads_required: Sequence[int] | None = None,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    extra_graphs: Sequence[GraphOp] = (),
) -> GradProgram:
    inputs = [np.asarray(x) for x in inputs]
    in_types = [tensor_type(x.shape, x.dtype) for x in inputs]
    g = make_graph("f", in_types, body)
    prog = GradProgram([*extra_graphs, g], "f", in_types, grads_provided, grads_required)
    dys = {j: rand(prog.out_types[j].get_shape(), dtype_of(prog.out_types[j])) for j in prog.provided}
    _, grads = prog.run(inputs, dys)

    def loss(xs: list[np.ndarray]) -> float:
        ys, _ = prog.run(xs, dys)
        return float(sum(np.sum(ys[j].astype(np.float64) * dys[j]) for j in prog.provided))

    for g_arr, i in zip(grads, prog.info.expected_outputs):
        x = inputs[i]
        assert g_arr.shape == x.shape and g_arr.dtype == x.dtype, (g_arr.shape, g_arr.dtype)
        num = np.zeros(x.shape, np.float64)
        for idx in np.ndindex(x.shape):
            xp = [a.copy() for a in inputs]
            xm = [a.copy() for a in inputs]
            xp[i][idx] += eps
            xm[i][idx] -= eps
            num[idx] = (loss(xp) - loss(xm)) / (2 * eps)
        np.testing.assert_allclose(g_arr, num, rtol=rtol, atol=atol, err_msg=f"input {i}")
    return prog


# ------------------------------------------------------------------------------------
# elementwise binary (with broadcasting)
# ------------------------------------------------------------------------------------

BCAST = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2)), ((2, 3), ())]


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum"])
@pytest.mark.parametrize("shapes", BCAST)
def test_binary(name: str, shapes) -> None:
    a, b = rand(shapes[0]), rand(shapes[1])
    if name == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    if name == "maximum":  # keep away from ties
        b = a.mean() + rand(shapes[1])
    check_grads(lambda e, c, x, y: [e(f"popxl.{name}", x, y)], [a, b])


@pytest.mark.parametrize("shapes", BCAST[:3])
def test_pow(shapes) -> None:
    a = rand(shapes[0], low=0.5, high=2.0)
    b = rand(shapes[1], low=-1.5, high=1.5)
    check_grads(lambda e, c, x, y: [e("popxl.pow", x, y)], [a, b])


def test_minimum() -> None:
    a, b = rand((3, 4)), rand((4,))
    check_grads(lambda e, c, x, y: [e("popxl.minimum", x, y)], [a, b])


@pytest.mark.parametrize("ab", [(1.0, 1.0), (0.5, -2.0)])
def test_scaled_add(ab) -> None:
    a, b = ab
    check_grads(lambda e, c, x, y: [e("popxl.scaled_add", x, y, a=a, b=b)], [rand((2, 3)), rand((3,))])


def test_where() -> None:
    cond = RNG.uniform(size=(3, 4)) > 0.5

    def body(e, c, x, y):
        return [e("popxl.where", c(cond), x, y)]

    check_grads(body, [rand((3, 4)), rand((4,))])


# ------------------------------------------------------------------------------------
# elementwise unary
# ------------------------------------------------------------------------------------

UNARY = {
    "neg": (-2, 2),
    "abs": (0.2, 2),  # sign checked below on both sides
    "relu": (0.1, 2),
    "gelu": (-3, 3),
    "tanh": (-2, 2),
    "sigmoid": (-3, 3),
    "exp": (-2, 2),
    "log": (0.2, 3),
    "sqrt": (0.2, 3),
    "cos": (-3, 3),
    "sin": (-3, 3),
    "identity": (-2, 2),
    "swish": (-3, 3),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name: str) -> None:
    lo, hi = UNARY[name]
    x = rand((3, 4), low=lo, high=hi)
    if name in ("abs", "relu"):
        x = x * np.where(RNG.uniform(size=x.shape) > 0.5, 1.0, -1.0)
    check_grads(lambda e, c, v: [e(f"popxl.{name}", v)], [x])


def test_cast() -> None:
    x = rand((3, 4))

    def body(e, c, v):
        h = e("popxl.cast", v, result_types=[tensor_type((3, 4), np.float32)])
        return [e("popxl.cast", e("popxl.mul", h, h), result_types=[tensor_type((3, 4), np.float64)])]

    check_grads(body, [x], eps=1e-3, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------
# linear algebra, NN
# ------------------------------------------------------------------------------------

MATMUL = [
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (5, 3, 4)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((3,), (3,)),
    ((5, 2, 3), (3,)),
    ((3,), (5, 3, 2)),
]


@pytest.mark.parametrize("shapes", MATMUL)
def test_matmul(shapes) -> None:
    check_grads(lambda e, c, x, y: [e("popxl.matmul", x, y)], [rand(shapes[0]), rand(shapes[1])])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(axis: int) -> None:
    check_grads(lambda e, c, x: [e("popxl.softmax", x, axis=axis)], [rand((3, 4))])


# ------------------------------------------------------------------------------------
# shape ops
# ------------------------------------------------------------------------------------


def test_reshape() -> None:
    check_grads(
        lambda e, c, x: [e("popxl.reshape", x, result_types=[tensor_type((4, 3), np.float64)])],
        [rand((2, 6))],
    )


@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 0, 1), (0, 1, 2)])
def test_transpose(perm) -> None:
    check_grads(lambda e, c, x: [e("popxl.transpose", x, perm=perm)], [rand((2, 3, 4))])


@pytest.mark.parametrize("name", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min"])
@pytest.mark.parametrize("axis,keep", [(None, False), ((1,), False), ((0, 2), True), ((-1,), True)])
def test_reduce(name: str, axis, keep: bool) -> None:
    x = rand((2, 3, 4))
    props: dict[str, Any] = {}
    if axis is not None:
        props["axis"] = axis
    if keep:
        props["keepdims"] = True
    check_grads(lambda e, c, v: [e(f"popxl.{name}", v, **props)], [x])


def test_squeeze() -> None:
    cls = op_cls("popxl.squeeze")
    check_grads(
        lambda e, c, x: (
            [e("popxl.squeeze", x, result_types=[tensor_type((3, 4), np.float64)], axes=(0, 2))]
            if "axes" in cls.get_irdl_definition().properties
            else [e("popxl.squeeze", x, result_types=[tensor_type((3, 4), np.float64)])]
        ),
        [rand((1, 3, 1, 4))],
    )


def test_expand() -> None:
    op_cls("popxl.expand")
    check_grads(
        lambda e, c, x: [e("popxl.expand", x, result_types=[tensor_type((2, 3, 4), np.float64)])],
        [rand((3, 1))],
    )


def test_reduce_to_shape() -> None:
    op_cls("popxl.reduce_to_shape")
    check_grads(
        lambda e, c, x: [e("popxl.reduce_to_shape", x, result_types=[tensor_type((3, 1), np.float64)])],
        [rand((2, 3, 4))],
    )


def test_concat() -> None:
    op_cls("popxl.concat")
    check_grads(
        lambda e, c, x, y, z: [e("popxl.concat", x, y, z, axis=1)],
        [rand((2, 1)), rand((2, 3)), rand((2, 2))],
    )


def test_slice() -> None:
    op_cls("popxl.slice")
    check_grads(
        lambda e, c, x: [e("popxl.slice", x, start=(1, 0), stop=(3, 4), step=(1, 2), axes=(0, 1))],
        [rand((4, 5))],
    )


def test_gather() -> None:
    op_cls("popxl.gather")
    idx = np.array([[0, 2], [2, 1]], np.int32)
    check_grads(lambda e, c, x: [e("popxl.gather", x, c(idx), axis=0)], [rand((3, 4))])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction: str) -> None:
    op_cls("popxl.nll_loss")
    labels = np.array([1, 0, 3], np.int32)

    def body(e, c, x):
        p = e("popxl.softmax", x, axis=1)
        return [e("popxl.nll_loss", p, c(labels), reduction=reduction)]

    check_grads(body, [rand((3, 4))])


# ------------------------------------------------------------------------------------
# composites: sums of multiply-used tensors, constants, activations
# ------------------------------------------------------------------------------------


def test_multi_use_and_constants() -> None:
    def body(e, c, x, w):
        h = e("popxl.matmul", x, w)
        t = e("popxl.tanh", h)
        k = c(np.array(0.5))
        y = e("popxl.add", e("popxl.mul", t, k), e("popxl.mul", h, h))
        return [y, e("popxl.reduce_sum", e("popxl.mul", x, x))]

    check_grads(body, [rand((2, 3)), rand((3, 4))])


def test_mlp_float32() -> None:
    def body(e, c, x, w1, b1, w2):
        h = e("popxl.gelu", e("popxl.add", e("popxl.matmul", x, w1), b1))
        return [e("popxl.softmax", e("popxl.matmul", h, w2), axis=1)]

    ins = [rand((2, 3), np.float32), rand((3, 4), np.float32), rand((4,), np.float32), rand((4, 2), np.float32)]
    check_grads(body, ins, eps=1e-2, rtol=2e-2, atol=2e-3)


def test_dynamic_slice() -> None:
    op_cls("popxl.dynamic_slice")
    idx = np.array([1, 2], np.uint32)
    check_grads(
        lambda e, c, x: [e("popxl.dynamic_slice", x, c(idx), axes=(0, 1), sizes=(2, 2))],
        [rand((4, 5))],
    )


def test_dynamic_update() -> None:
    op_cls("popxl.dynamic_update")
    idx = np.array([1], np.uint32)
    check_grads(
        lambda e, c, x, u: [e("popxl.dynamic_update", x, c(idx), u, axes=(0,), sizes=(2,))],
        [rand((4, 3)), rand((2, 3))],
    )


def test_detach_stops_the_gradient():
    """y = x * detach(x): dy/dx is detach(x) only (the detached factor is a constant)."""
    import numpy as np

    import popxl
    import popxl.ops as ops
    from popxl import transforms

    ir = popxl.Ir()
    with ir.main_graph:

        def f(x: popxl.Tensor) -> popxl.Tensor:
            return x * ops.detach(x)

        g = ir.create_graph(f, popxl.TensorSpec((3,), popxl.float32))
        info = transforms.autodiff(g)
        x_data = np.array([1.0, -2.0, 3.0], np.float32)
        x = popxl.variable(x_data, name="x")
        call = ops.call_with_info(g, x)
        dy = popxl.constant(np.ones(3, np.float32))
        (dx,) = ops.call(info.graph, dy, inputs_dict=info.inputs_dict(call))
        s = popxl.d2h_stream((3,), popxl.float32, "dx")
        ops.host_store(s, dx)
    with popxl.Session(ir, "cpu") as sess:
        out = sess.run()[s]
    np.testing.assert_allclose(out, x_data)  # not 2 * x, as without detach
