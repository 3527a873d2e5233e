"""popxl.ops ceil, floor, fmod, erf, geluerf / geluerf_, clip / clamp, bitwise_* and
logical_xor, print_tensor: forward through a Session against NumPy / math / PyTorch,
gradients against central finite differences, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.deferred import refused_by_session
from tests.passes.test_grad_rules import check_grads, rand
from xl.compiler import compile_module


def run(build, feeds: dict[str, np.ndarray], optimize: bool = True) -> dict[str, np.ndarray]:
    ir = popxl.Ir()
    with ir.main_graph:
        ins = {
            k: ops.host_load(popxl.h2d_stream(v.shape, popxl.dtypes.dtype.as_dtype(v.dtype), k))
            for k, v in feeds.items()
        }
        for name, t in build(**ins).items():
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    return compile_module(ir._module, optimize=optimize).run(feeds)


X = np.array([[-2.5, -1.0, -0.3, 0.0], [0.4, 1.0, 2.7, 7.5]], np.float32)


@pytest.mark.parametrize("optimize", [True, False])
def test_forward_against_numpy(optimize: bool) -> None:
    y = np.array([1.5, -2.0, 0.7, 3.0], np.float32)
    out = run(
        lambda x, y: {
            "ceil": ops.ceil(x),
            "floor": ops.floor(x),
            "fmod": ops.fmod(x, y),
            "fmod_c": ops.fmod(x, 2.0),
            "mod_op": x % 2.0,
            "erf": ops.erf(x),
            "ge": ops.geluerf(x),
            "clip": ops.clip(x, -1.0, 2.0),
            "clamp": ops.clamp(x, min=0.0),
            # a chain the optimised plan fuses into one kernel
            "chain": ops.geluerf(ops.fmod(ops.floor(x * 3.0), 4.0)),
        },
        {"x": X, "y": y},
        optimize,
    )
    np.testing.assert_array_equal(out["ceil"], [[-2, -1, 0, 0], [1, 1, 3, 8]])
    np.testing.assert_array_equal(out["floor"], [[-3, -1, -1, 0], [0, 1, 2, 7]])
    # C fmod: the sign of the dividend (-2.5 fmod 1.5 = -1.0, 7.5 fmod 3 = 1.5)
    ref = np.array([[math.fmod(a, b) for a, b in zip(row, y)] for row in X.astype(np.float64)])
    np.testing.assert_allclose(out["fmod"], ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out["fmod_c"], [[-0.5, -1, -0.3, 0], [0.4, 1, 0.7, 1.5]], rtol=1e-6)
    np.testing.assert_array_equal(out["mod_op"], out["fmod_c"])  # Tensor.__mod__ is fmod, as upstream
    np.testing.assert_allclose(out["erf"], np.vectorize(math.erf)(X.astype(np.float64)), rtol=1e-6)
    ge = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))
    np.testing.assert_allclose(out["ge"], ge(X.astype(np.float64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out["clip"], np.clip(X, -1, 2))
    np.testing.assert_array_equal(out["clamp"], np.maximum(X, 0))
    chain = ge(np.fmod(np.floor(X.astype(np.float64) * 3), 4))
    np.testing.assert_allclose(out["chain"], chain, rtol=1e-6, atol=1e-7)


def test_geluerf_against_torch_and_inplace() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32) * 3
    ref = torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64), approximate="none").numpy()
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(x, name="v")
        ops.geluerf_(v)
    with popxl.Session(ir, "cpu") as s:
        s.run()
        got = s.get_tensor_data(v)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    # tanh gelu differs from the exact one by up to ~5e-4: geluerf is the exact one
    approx = torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64), approximate="tanh").numpy()
    assert np.abs(approx - ref).max() > 1e-4


def test_integer_fmod_clip_and_bitwise() -> None:
    a = np.array([7, -7, 7, -7, 5, 0xF0F0], np.int32)
    b = np.array([3, 3, -3, -3, 0, 0x0FF0], np.int32)
    out = run(
        lambda a, b: {
            "fmod": ops.fmod(a, b),
            "clip": ops.clip(a, -6.5, 6.5),
            "and": ops.bitwise_and(a, b),
            "or": ops.bitwise_or(a, b),
            "xor": ops.bitwise_xor(a, b),
            "xnor": ops.bitwise_xnor(a, b),
            "not": ops.bitwise_not(a),
            "and1": ops.bitwise_and(a, 1),
        },
        {"a": a, "b": b},
    )
    ia, ib = [int(v) for v in a], [int(v) for v in b]
    np.testing.assert_array_equal(out["fmod"], [1, -1, 1, -1, 0, int(math.fmod(0xF0F0, 0x0FF0))])
    np.testing.assert_array_equal(out["clip"], [6, -6, 6, -6, 5, 6])
    np.testing.assert_array_equal(out["and"], [x & y for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(out["or"], [x | y for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(out["xor"], [x ^ y for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(out["xnor"], [~(x ^ y) for x, y in zip(ia, ib)])
    np.testing.assert_array_equal(out["not"], [~x for x in ia])
    np.testing.assert_array_equal(out["and1"], [x & 1 for x in ia])
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    np.testing.assert_array_equal(
        run(lambda p, q: {"x": ops.logical_xor(p, q)}, {"p": p, "q": q})["x"], [False, True, True, False]
    )


# ------------------------------------------------------------------------------------
# gradients (float64, central differences)
# ------------------------------------------------------------------------------------


def test_gradients() -> None:
    check_grads(lambda e, c, x: [e("popxl.erf", x)], [rand((3, 4))])
    check_grads(lambda e, c, x: [e("popxl.geluerf", x)], [rand((3, 4), low=-4.0, high=4.0)])
    # fmod: d/dlhs = 1, d/drhs = -trunc(lhs / rhs); keep away from the jumps
    lhs = np.array([[5.3, -5.3, 2.2], [-7.9, 0.4, 3.1]])
    rhs = np.array([2.1, 1.7, -0.9])
    check_grads(lambda e, c, x, y: [e("popxl.fmod", x, y)], [lhs, rhs])
    # clip: the gradient passes inside [min, max] only
    x = np.array([-2.0, -0.6, 0.1, 0.45, 1.3])
    check_grads(lambda e, c, x: [e("popxl.clip", x, min=-0.5, max=0.5)], [x])
    check_grads(lambda e, c, x: [e("popxl.clip", x, max=0.2)], [x])
    # a chain through the new ops and an existing one
    check_grads(
        lambda e, c, x: [e("popxl.mul", e("popxl.geluerf", x), e("popxl.erf", x))],
        [rand((2, 5), low=-2.0, high=2.0)],
    )


def test_ceil_floor_have_no_gradient() -> None:
    # no gradient flows through them: d/dx (floor(x) + x) = 1
    prog = check_grads(lambda e, c, x: [e("popxl.add", e("popxl.floor", x), x)], [np.array([0.3, 1.6, -2.2])])
    _, (g,) = prog.run([np.array([0.3, 1.6, -2.2])], {0: np.ones(3)})
    np.testing.assert_array_equal(g, np.ones(3))


def test_clip_gradient_through_frontend_autodiff() -> None:
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xin = ops.host_load(popxl.h2d_stream((5,), popxl.float32, "x"))
        g = ir.create_graph(lambda t: ops.clip(t, -0.5, 0.5) * 2.0, xin)
        dg = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, xin)
        (dx,) = ops.call(dg.graph, popxl.constant(np.ones(5, np.float32)), inputs_dict=dg.inputs_dict(info))
        ops.host_store(popxl.d2h_stream((5,), popxl.float32, "dx"), dx)
    out = compile_module(ir._module).run({"x": x})
    # bounds included, as PyTorch's clamp
    np.testing.assert_array_equal(out["dx"], [0, 2, 2, 2, 0])


# ------------------------------------------------------------------------------------
# print_tensor
# ------------------------------------------------------------------------------------


def test_print_tensor_prints_at_run_time(capfd) -> None:
    ir = popxl.Ir()
    ir.num_host_transfers = 1
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.int32, "x")
        x = ops.host_load(xs, "a")
        y = ops.print_tensor(x + x, "Add:0")
        ops.print_tensor(y * 3, title="unused result")  # still printed
        ops.host_store(popxl.d2h_stream((3,), popxl.int32, "y"), y)
    assert capfd.readouterr().err == ""  # nothing printed while building
    with popxl.Session(ir, "cpu") as s:
        for v in ([1, 2, 3], [4, 5, 6]):
            out = s.run({xs: np.array(v, np.int32)})
    np.testing.assert_array_equal(next(iter(out.values())), [8, 10, 12])
    err = capfd.readouterr().err.splitlines()
    assert err == [
        "Add:0: [2 4 6]",
        "unused result: [ 6 12 18]",
        "Add:0: [ 8 10 12]",
        "unused result: [24 30 36]",
    ]


def test_print_tensor_gradient_and_default_title(capfd) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        xin = ops.host_load(popxl.h2d_stream((2,), popxl.float32, "x"), "x")

        def f(t: popxl.Tensor) -> popxl.Tensor:
            return ops.print_tensor(t * t, print_gradient=True, digits=3) * 2.0

        g = ir.create_graph(f, xin)
        dg = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, xin)
        (dx,) = ops.call(dg.graph, popxl.constant(np.array([1.0, 1.0], np.float32)), inputs_dict=dg.inputs_dict(info))
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "dx"), dx)
    out = compile_module(ir._module).run({"x": np.array([1.5, -2.0], np.float32)})
    np.testing.assert_array_equal(out["dx"], [6.0, -8.0])
    err = capfd.readouterr().err.splitlines()
    # forward value t*t, then the gradient reaching it (2.0 per element)
    assert len(err) == 2
    title, values = err[0].split(": ", 1)
    assert title.startswith("print_") and values == "[2.25 4.00]"
    assert err[1] == f"{title}_gradient: [2.00 2.00]"


def test_print_tensor_format_options(capfd) -> None:
    x = np.array([[1.0, -2.5], [1e-6, 3.0]], np.float32)
    run(
        lambda x: {
            "a": ops.print_tensor(x, "sci", float_format="scientific", digits=3),
            "b": ops.print_tensor(
                x, "fix", float_format="fixed", digits=4, separator=";", open_bracket="(", close_bracket=")"
            ),
            "c": ops.print_tensor(ops.cast(x, popxl.int32), "ints", max_line_width=0),
        },
        {"x": x},
    )
    err = capfd.readouterr().err
    assert "sci: [[ 1.00e+00 -2.50e+00]\n [ 1.00e-06  3.00e+00]]" in err
    assert "fix: (( 1.000;-2.500);\n ( 0.000; 3.000))" in err
    assert "ints: [[ 1 -2]\n [ 0  3]]" in err


def test_print_tensor_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(3, np.float32), name="x")
        with pytest.raises(ValueError, match="Parameter separator must be 1 character exactly"):
            ops.print_tensor(x, separator=", ")
        with pytest.raises(ValueError, match="Parameter open_bracket must be 1 character exactly"):
            ops.print_tensor(x, open_bracket="")
        with pytest.raises(KeyError):
            ops.print_tensor(x, float_format="pretty")
        with pytest.raises(ValueError, match="popxl.print_tensor: digits must be >= 0"):
            ops.print_tensor(x, digits=-1)


def test_errors_name_the_op() -> None:
    # operands of a dtype the op cannot compute: built, refused when compiled (as PopXL)
    refused_by_session(
        lambda: ops.ceil(popxl.variable(np.zeros(3, np.int32))), "popxl.ceil: input must be a floating point tensor"
    )
    refused_by_session(
        lambda: ops.geluerf(popxl.variable(np.zeros(3, np.int32))),
        "popxl.geluerf: input must be a floating point tensor",
    )
    f32 = np.zeros(3, np.float32)
    refused_by_session(
        lambda: ops.bitwise_and(popxl.variable(f32), popxl.variable(f32)),
        "popxl.bitwise_and: unsupported dtype float32",
    )
    refused_by_session(
        lambda: ops.bitwise_not(popxl.variable(f32)), "popxl.bitwise_not: input must be a supported tensor"
    )
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(3, np.float32), name="x")
        i = popxl.variable(np.zeros(3, np.int32), name="i")
        with pytest.raises(ValueError, match="popxl.fmod: operand dtypes differ"):
            ops.fmod(x, i)
        with pytest.raises(ValueError, match="popxl.clip: min 1.0 must not be greater than max -1.0"):
            ops.clip(x, 1.0, -1.0)
        with pytest.raises(TypeError, match="ops.clip: min must be a number"):
            ops.clip(x, "low")  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
