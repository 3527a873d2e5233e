"""User mistakes in the Python API (popxl and popxl_addons) end in a clear TypeError,
ValueError or KeyError naming the function and the object, never in an AttributeError /
KeyError from inside xl or in a silently wrong program."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from xdsl.parser import Parser

import popxl
import popxl_addons as addons
from popxl import ops
from popxl.context import NoGraphSelectedError
from popxl_addons import DotTree, GraphWithNamedArgs, NamedTensors
from xl.compiler import compile_module
from xl.dialects.graph import ConstantOp, VariableOp
from xl.tools.context import xl_context


def _two_irs_with_same_named_graphs():
    """Two Irs, each with a subgraph named `f_subgraph(0)`: the case where a cross-Ir call
    used to call the current Ir's graph of the same name."""

    def f(a):
        return a + 1

    def g(a):
        return a * 100

    ir1, ir2 = popxl.Ir(), popxl.Ir()
    with ir1.main_graph:
        x1 = popxl.variable(np.ones(3, np.float32), name="x")
        g1 = ir1.create_graph(f, x1)
    g.__qualname__ = f.__qualname__
    f_other = g
    with ir2.main_graph:
        x2 = popxl.variable(np.ones(3, np.float32), name="x")
        g2 = ir2.create_graph(f_other, x2)
    assert g1.name == g2.name
    assert g1.name.endswith("f_subgraph(0)")
    return ir1, x1, g1, ir2, x2, g2


# ---------------------------------------------------------------------------------------
# Graphs and tensors of another Ir
# ---------------------------------------------------------------------------------------


def test_call_of_a_graph_of_another_ir_is_refused():
    ir1, x1, g1, ir2, x2, g2 = _two_irs_with_same_named_graphs()
    with ir1.main_graph:
        for call in (
            lambda: ops.call(g2, x1),
            lambda: ops.call_with_info(g2, x1),
            lambda: ops.repeat(g2, 2, x1),
            lambda: ops.repeat_with_info(g2, 2, x1),
            lambda: ops.conditional(popxl.constant(True), g2, g1, [x1], [x1]),
            lambda: ops.conditional(popxl.constant(True), g1, g2, [x1], [x1]),
        ):
            with pytest.raises(ValueError, match=r"graph '\S*f_subgraph\(0\)' belongs to another Ir"):
                call()
        n_ops = len(list(ir1.main_graph._block.ops))
        # the graph of this Ir still works, and nothing was added by the refused calls
        (y,) = ops.call(g1, x1)
        assert len(list(ir1.main_graph._block.ops)) == n_ops + 1
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    with popxl.Session(ir1, "cpu") as s:
        np.testing.assert_array_equal(s.run()[out], np.full(3, 2, np.float32))


@pytest.mark.parametrize(
    "build",
    [
        lambda x: ops.add(x, x),
        lambda x: x + 1,
        lambda x: ops.relu(x),
        lambda x: ops.concat([x, x]),
        lambda x: ops.var_updates.accumulate_(x, x),
        lambda x: ops.var_updates.copy_var_update_(x, x),
        lambda x: ops.scaled_add_(x, x, 0.5, 2.0),
        lambda x: ops.host_store(popxl.d2h_stream((3,), popxl.float32, "s"), x),
        lambda x: ops.ipu_copy(x, 1, 0),
    ],
    ids=[
        "add",
        "operator",
        "relu",
        "concat",
        "accumulate_",
        "copy_var_update_",
        "scaled_add_",
        "host_store",
        "ipu_copy",
    ],
)
def test_tensor_of_another_ir_is_refused(build):
    ir1, x1, g1, ir2, x2, g2 = _two_irs_with_same_named_graphs()
    with ir1.main_graph:
        n_ops = len(list(ir1.main_graph._block.ops))
        with pytest.raises(ValueError, match=r"tensor x belongs to another Ir \(Ir\[id=\d+\]\)"):
            build(x2)
        # nothing half-built is left behind (a constant made for `x + 1` aside)
        added = list(ir1.main_graph._block.ops)[n_ops:]
        assert all(isinstance(op, ConstantOp) for op in added)


def test_tensor_of_another_ir_as_call_input_is_refused():
    ir1, x1, g1, ir2, x2, g2 = _two_irs_with_same_named_graphs()
    with ir1.main_graph:
        with pytest.raises(ValueError, match="tensor x belongs to another Ir"):
            ops.call(g1, x2)
        with pytest.raises(ValueError, match="tensor x belongs to another Ir"):
            ops.call(g1, inputs_dict={g1.inputs[0]: x2})
        with pytest.raises(ValueError, match="tensor x belongs to another Ir"):
            ops.repeat(g1, 3, x2)
        with pytest.raises(ValueError, match="belongs to another Ir"):
            ops.conditional(popxl.constant(True), g1, g1, [x2], [x1])


def test_every_op_inserted_checks_its_operands():
    """The shared insertion path refuses an op whose operand lives in another Ir or graph,
    whichever function built it."""
    from popxl.ops._utils import insert
    from xl.dialects.popxl import NegOp

    ir1, x1, g1, ir2, x2, g2 = _two_irs_with_same_named_graphs()
    with pytest.raises(ValueError, match="operand 0 of popxl.neg is a value of another Ir"):
        insert(ir1.main_graph, NegOp.make([x2._value], None), "popxl.neg")
    with pytest.raises(ValueError, match="operand 0 of popxl.neg is a value of another graph"):
        insert(ir1.main_graph, NegOp.make([g1.inputs[0]._value], None), "popxl.neg")


def test_host_load_of_a_stream_of_another_ir_is_refused():
    ir1, x1, g1, ir2, x2, g2 = _two_irs_with_same_named_graphs()
    with ir2.main_graph:
        s = popxl.h2d_stream((3,), popxl.float32, "s")
    with ir1.main_graph:
        with pytest.raises(ValueError, match="stream 's' belongs to another Ir"):
            ops.host_load(s)


# ---------------------------------------------------------------------------------------
# Shapes and dtypes of streams, variables, constants, graph inputs
# ---------------------------------------------------------------------------------------

BAD_SHAPES = [
    ((2.5, 3), TypeError, r"shape \(2\.5, 3\) has a non-integer dim 2\.5 \(float\)"),
    ((2, -1), ValueError, r"shape \(2, -1\) has a negative dim -1"),
    ((2, "3"), TypeError, r"shape \(2, '3'\) has a non-integer dim '3' \(str\)"),
    ((True, 2), TypeError, r"shape \(True, 2\) has a non-integer dim True \(bool\)"),
    (None, TypeError, r"shape must be a tuple of ints, got None"),
    ("23", TypeError, r"shape must be a tuple of ints, got '23'"),
    (2.0, TypeError, r"shape must be a tuple of ints, got 2\.0"),
]
BAD_DTYPES = [
    (5, TypeError, r"dtype must be a popxl dtype \(e\.g\. popxl\.float32\), got 5 \(int\)"),
    (2.5, TypeError, r"dtype must be a popxl dtype"),
    (None, TypeError, r"dtype must be a popxl dtype"),
    (np.ones(2), TypeError, r"dtype must be a popxl dtype"),
    ("floaty", ValueError, r"'floaty' is not a popxl dtype"),
    (popxl.complex64, ValueError, r"dtype complex64 is not supported by xl \(no NumPy equivalent\)"),
    (popxl.complex128, ValueError, r"dtype complex128 is not supported by xl"),
]


@pytest.mark.parametrize("make", [popxl.h2d_stream, popxl.d2h_stream], ids=["h2d", "d2h"])
@pytest.mark.parametrize("shape,exc,msg", BAD_SHAPES)
def test_stream_bad_shape_names_the_stream(make, shape, exc, msg):
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(exc, match=rf"popxl\.{make.__name__} 'data': " + msg):
            make(shape, popxl.float32, "data")
    assert "data" not in ir.to_mlir()  # nothing declared


@pytest.mark.parametrize("make", [popxl.h2d_stream, popxl.d2h_stream], ids=["h2d", "d2h"])
@pytest.mark.parametrize("dt,exc,msg", BAD_DTYPES)
def test_stream_bad_dtype_names_the_stream(make, dt, exc, msg):
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(exc, match=rf"popxl\.{make.__name__} 'data': " + msg):
            make((2,), dt, "data")


def test_stream_good_arguments_still_accepted():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.h2d_stream(np.array([2, 3]), np.float32, "a")  # NumPy ints and types
        b = popxl.h2d_stream(4, "int32", "b")  # an int is a 1-D shape, dtype by name
        c = popxl.d2h_stream((), float, "c")  # Python type, scalar shape
        d = popxl.d2h_stream([0, 2], np.dtype("float16"))
    assert (a.shape, a.dtype) == ((2, 3), popxl.float32)
    assert (b.shape, b.dtype) == ((4,), popxl.int32)
    assert (c.shape, c.dtype) == ((), popxl.float32)
    assert (d.shape, d.dtype) == ((0, 2), popxl.float16)


def test_stream_bad_name():
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(TypeError, match=r"popxl\.h2d_stream: name must be a str, got 5 \(int\)"):
            popxl.h2d_stream((2,), popxl.float32, 5)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
        with pytest.raises(ValueError, match=r"popxl\.d2h_stream: name must not be empty"):
            popxl.d2h_stream((2,), popxl.float32, "")


@pytest.mark.parametrize("shape,exc,msg", BAD_SHAPES)
def test_graph_input_and_init_bad_shape(shape, exc, msg):
    ir = popxl.Ir()
    g = ir.create_empty_graph("g")
    with g:
        with pytest.raises(exc, match=r"popxl\.graph_input of graph 'g_subgraph\(0\)' \('w'\): " + msg):
            popxl.graph_input(shape, popxl.float32, "w")
    assert g.inputs == ()
    with ir.main_graph:
        with pytest.raises(exc, match=r"ops\.init \(shape\): " + msg):
            ops.init(shape, popxl.float32)


@pytest.mark.parametrize("dt,exc,msg", BAD_DTYPES)
def test_graph_input_variable_constant_cast_bad_dtype(dt, exc, msg):
    ir = popxl.Ir()
    g = ir.create_empty_graph("g")
    with g:
        with pytest.raises(exc, match=r"popxl\.graph_input of graph 'g_subgraph\(0\)' \('w'\): " + msg):
            popxl.graph_input((2,), dt, "w")
    with ir.main_graph:
        if dt is not None:  # dtype=None means "from the data" for variable/constant
            with pytest.raises(exc, match=r"popxl\.variable 'v': " + msg):
                popxl.variable(np.ones(2), dt, name="v")
            with pytest.raises(exc, match=r"popxl\.constant 'c': " + msg):
                popxl.constant(np.ones(2), dt, name="c")
        x = popxl.variable(np.ones(2, np.float32), name="x")
        with pytest.raises(exc, match=r"ops\.cast \(dtype\): " + msg):
            ops.cast(x, dt)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    assert '"v"' not in ir.to_mlir()


@pytest.mark.parametrize(
    "data,exc,msg",
    [
        (None, TypeError, r"expected host data \(array, scalar\), got None"),
        ("abc", TypeError, r"expected host data \(array, scalar\), got 'abc' \(str\)"),
        ([[1, 2], [3]], ValueError, r"cannot convert \[\[1, 2\], \[3\]\] \(list\) to an array"),
        ([1, object()], TypeError, r"cannot convert .* to a tensor"),
        (np.array(["a"]), TypeError, r"cannot convert .* to a tensor"),
    ],
)
def test_variable_and_constant_bad_data(data, exc, msg):
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(exc, match=r"popxl\.variable 'v': " + msg):
            popxl.variable(data, name="v")
        with pytest.raises(exc, match=r"popxl\.constant: " + msg):
            popxl.constant(data)


# ---------------------------------------------------------------------------------------
# ir.to_mlir and the session's variable values
# ---------------------------------------------------------------------------------------


def _variable_values(text: str) -> dict[str, np.ndarray]:
    from xl.dialects.utils import dense_to_numpy

    module = Parser(xl_context(), text).parse_module()
    values: dict[str, np.ndarray] = {}
    for op in module.walk():
        if isinstance(op, VariableOp):
            assert op.init is not None, op.var_name.data  # every variable here has its initial value
            values[op.var_name.data] = dense_to_numpy(op.init)
    return values


def _counter_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.array([1.0, 2.0], np.float32), name="w")
        v = popxl.variable(np.array([10, 20], np.int32), name="v")
        ops.var_updates.accumulate_(w, popxl.constant(np.array([0.5, 0.25], np.float32)))
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(out, w)
    return ir, w, v, out


def test_to_mlir_prints_current_values_after_write_and_run():
    ir, w, v, out = _counter_ir()
    initial = {"w": np.array([1.0, 2.0], np.float32), "v": np.array([10, 20], np.int32)}
    vals = _variable_values(ir.to_mlir())
    assert vals.keys() == initial.keys()
    for k in initial:
        np.testing.assert_array_equal(vals[k], initial[k])

    session = popxl.Session(ir, "cpu")
    session.write_variables_data({w: np.array([3.0, 4.0], np.float32), v: np.array([7, 8], np.int32)})
    cur = _variable_values(ir.to_mlir())
    np.testing.assert_array_equal(cur["w"], [3.0, 4.0])
    np.testing.assert_array_equal(cur["v"], [7, 8])
    assert cur["v"].dtype == np.int32
    with session:
        session.run()
        session.run()
        # while attached, after runs: the device values
        np.testing.assert_array_equal(_variable_values(ir.to_mlir())["w"], [4.0, 4.5])
    np.testing.assert_array_equal(_variable_values(ir.to_mlir(values="current"))["w"], [4.0, 4.5])
    ini = _variable_values(ir.to_mlir(values="initial"))
    for k in initial:
        np.testing.assert_array_equal(ini[k], initial[k])

    # the printed program continues from the current values: one more run adds 0.5, 0.25
    exe = compile_module(Parser(xl_context(), ir.to_mlir()).parse_module())
    np.testing.assert_array_equal(exe.run({})["out"], [4.5, 4.75])
    exe = compile_module(Parser(xl_context(), ir.to_mlir("initial")).parse_module())
    np.testing.assert_array_equal(exe.run({})["out"], [1.5, 2.25])


def test_to_mlir_values_argument_checked():
    ir, *_ = _counter_ir()
    with pytest.raises(ValueError, match=r"Ir\.to_mlir: values must be 'current' or 'initial', got 'latest'"):
        ir.to_mlir(values="latest")


# ---------------------------------------------------------------------------------------
# Session.write_variables_data: all or nothing
# ---------------------------------------------------------------------------------------


def _bad_second_entries(ir, w, v):
    ir2 = popxl.Ir()
    with ir2.main_graph:
        other = popxl.variable(np.zeros(2, np.float32), name="other")
    with ir.main_graph:
        c = popxl.constant(np.zeros(2, np.float32), name="c")
    return [
        ({v: np.zeros(3, np.int32)}, ValueError, r"shape of the data \(3,\) does not match variable v \(2,\)"),
        ({v: np.zeros(2, np.float64)}, TypeError, r"dtype of the data \(float64\) does not match variable v \(int32\)"),
        ({other: np.zeros(2, np.float32)}, ValueError, r"variable other is not part of this session's Ir"),
        ({c: np.zeros(2, np.float32)}, TypeError, r"Tensor\[c .*\] is not a Variable \(constants are read-only\)"),
        ({"v": np.zeros(2, np.int32)}, TypeError, r"'v' is not a Variable"),
        ({v: w}, TypeError, r"the data for variable v must be host data \(an array\), got the popxl Tensor Tensor\[w"),
    ]


@pytest.mark.parametrize("attached", [False, True])
@pytest.mark.parametrize("case", range(6))
def test_write_variables_data_is_all_or_nothing(attached, case):
    ir, w, v, out = _counter_ir()
    bad, exc, msg = _bad_second_entries(ir, w, v)[case]
    session = popxl.Session(ir, "cpu")
    with session:
        session.run()  # w = [1.5, 2.25] on the device
        if not attached:
            session.__exit__(None, None, None)
            session._ctx_stack.append(False)  # keep the outer `with` balanced
        entries = {w: np.array([9.0, 9.0], np.float32), **bad}
        with pytest.raises(exc, match=r"Session\.write_variables_data: " + msg):
            session.write_variables_data(entries)
        np.testing.assert_array_equal(session.get_tensor_data(w), [1.5, 2.25])
        np.testing.assert_array_equal(session.get_tensor_data(v), [10, 20])
        if not attached:
            session.__enter__()
        # the device was not written either: the next run continues from [1.5, 2.25]
        np.testing.assert_array_equal(session.run()[out], [2.0, 2.5])


def test_write_variables_data_needs_a_mapping():
    ir, w, v, out = _counter_ir()
    session = popxl.Session(ir, "cpu")
    with pytest.raises(
        TypeError, match=r"Session\.write_variables_data: expected a mapping of variables to data, got list"
    ):
        session.write_variables_data([(w, np.zeros(2, np.float32))])  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


# ---------------------------------------------------------------------------------------
# A survey of the public API: each mistake gets a clear TypeError / ValueError / KeyError
# ---------------------------------------------------------------------------------------


class Env:
    """A small program to make mistakes with."""

    def __init__(self) -> None:
        self.ir = popxl.Ir()
        with self.ir.main_graph:
            self.x = popxl.variable(np.ones((2, 3), np.float32), name="x")
            self.i = popxl.variable(np.zeros((2,), np.int32), name="i")
            self.g = self.ir.create_graph(lambda a: a * 2, self.x)
            self.load = popxl.h2d_stream((2, 3), popxl.float32, "load")
            self.store = popxl.d2h_stream((2, 3), popxl.float32, "store")
            ops.host_store(self.store, ops.host_load(self.load) + self.x)
        self.nt = NamedTensors.from_dict({"a.w": self.x})


def _in_main(fn: Callable[[Env], Any]) -> Callable[[Env], Any]:
    def run(env: Env) -> Any:
        with env.ir.main_graph:
            return fn(env)

    return run


def _session(fn: Callable[[Env, popxl.Session], Any]) -> Callable[[Env], Any]:
    def run(env: Env) -> Any:
        s = popxl.Session(env.ir, "cpu")
        with s:
            return fn(env, s)

    return run


# Each entry makes one mistake on purpose; where the mistake is an argument of the wrong type, the line
# carries a `# pyright: ignore[...]` for it (the error raised is what the test checks). The table is left unformatted
# (`fmt: off`) so that each ignore stays on its entry's line.
# fmt: off
MISTAKES: list[tuple[str, Callable[[Env], Any], type, str]] = [
    # -- ops: wrong argument types
    ("add None", _in_main(lambda e: ops.add(e.x, None)), TypeError, r"ops\.add: expected host data \(array, scalar\), got None"),  # pyright: ignore[reportArgumentType]  # bad input
    ("add str", _in_main(lambda e: ops.add(e.x, "a")), TypeError, r"ops\.add: expected host data .* got 'a' \(str\)"),  # pyright: ignore[reportArgumentType]  # bad input
    ("matmul list of tensors", _in_main(lambda e: ops.matmul(e.x, [e.x])), TypeError, r"ops\.matmul: .* got a list containing popxl Tensors; use ops\.concat"),  # pyright: ignore[reportArgumentType]  # bad input
    ("relu list", _in_main(lambda e: ops.relu([e.x])), TypeError, r"ops\.relu: expected a popxl Tensor, got \[Tensor\[x"),  # pyright: ignore[reportArgumentType]  # bad input
    ("relu ndarray", _in_main(lambda e: ops.relu(np.ones(3))), TypeError, r"ops\.relu: expected a popxl Tensor, got array"),  # pyright: ignore[reportArgumentType]  # bad input
    ("gelu None", _in_main(lambda e: ops.gelu(None)), TypeError, r"ops\.gelu: expected a popxl Tensor, got None"),  # pyright: ignore[reportArgumentType]  # bad input
    ("concat a tensor", _in_main(lambda e: ops.concat(e.x)), TypeError, r"ops\.concat: expected a sequence of tensors, got a single Tensor"),
    ("concat list item", _in_main(lambda e: ops.concat([e.x, [1]])), TypeError, r"ops\.concat: expected a popxl Tensor, got \[1\] \(list\)"),  # pyright: ignore[reportArgumentType]  # bad input
    ("reshape float dim", _in_main(lambda e: ops.reshape(e.x, (3.0, 2))), TypeError, r"ops\.reshape: each dim of shape must be an int, got 3\.0 \(float\)"),  # pyright: ignore[reportArgumentType]  # bad input
    ("reshape None", _in_main(lambda e: ops.reshape(e.x, None)), TypeError, r"ops\.reshape: shape must be a tuple of ints, got None"),  # pyright: ignore[reportArgumentType]  # bad input
    ("Tensor.reshape str", _in_main(lambda e: e.x.reshape("6")), TypeError, r"ops\.reshape: shape must be a tuple of ints, got '6'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("softmax str axis", _in_main(lambda e: ops.softmax(e.x, "a")), TypeError, r"ops\.softmax: axis must be an int, got 'a' \(str\)"),  # pyright: ignore[reportArgumentType]  # bad input
    ("sum float axis", _in_main(lambda e: ops.sum(e.x, 1.0)), TypeError, r"ops\.sum: axis must be an int or a sequence of ints, got 1\.0"),  # pyright: ignore[reportArgumentType]  # bad input
    ("transpose perm", _in_main(lambda e: ops.transpose(e.x, (0.0, 1))), TypeError, r"ops\.transpose: permutation must be an int, got 0\.0"),  # pyright: ignore[reportArgumentType]  # bad input
    ("slice str", _in_main(lambda e: ops.slice(e.x, start="a")), TypeError, r"ops\.slice: start/stop/step/axis must be an int, got 'a'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("scaled_add str", _in_main(lambda e: ops.scaled_add(e.x, e.x, a="z")), TypeError, r"ops\.scaled_add: a/b must be a number or a Tensor, got 'z'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("accumulate_ factor", _in_main(lambda e: ops.var_updates.accumulate_(e.x, e.x, f="2")), TypeError, r"ops\.var_updates\.accumulate_: factor must be a number or a Tensor, got '2'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("accumulate_ list of tensors", _in_main(lambda e: ops.var_updates.accumulate_(e.x, [e.x])), TypeError, r"ops\.var_updates\.accumulate_: .* containing popxl Tensors"),  # pyright: ignore[reportArgumentType]  # bad input
    ("gather str axis", _in_main(lambda e: ops.gather(e.x, [0], axis="0")), TypeError, r"ops\.gather: axis must be an int, got '0'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("onehot float classes", _in_main(lambda e: ops.onehot(e.i, 2.5, [0.0, 1.0])), TypeError, r"ops\.onehot: num_classes must be an int, got 2\.5"),
    ("init bad dtype", _in_main(lambda e: ops.init((2,), "nope")), ValueError, r"ops\.init \(dtype\): 'nope' is not a popxl dtype"),  # pyright: ignore[reportArgumentType]  # bad input
    ("dynamic_slice sizes", _in_main(lambda e: ops.dynamic_slice(e.x, e.i, [0], ["1"])), TypeError, r"ops\.dynamic_slice: sizes must be an int, got '1'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("increment_mod str", _in_main(lambda e: ops.increment_mod(e.x, "1", 3)), TypeError, r"ops\.increment_mod: increment must be a number or a Tensor, got '1'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("ipu_copy str", _in_main(lambda e: ops.ipu_copy(e.x, "1", 0)), TypeError, r"ops\.ipu_copy: destination must be an int, got '1'"),  # pyright: ignore[reportArgumentType]  # bad input
    ("host_load str", _in_main(lambda e: ops.host_load("load")), TypeError, r"ops\.host_load expects a HostToDeviceStream, got str"),  # pyright: ignore[reportArgumentType]  # bad input
    ("host_store None", _in_main(lambda e: ops.host_store(None, e.x)), TypeError, r"ops\.host_store expects a DeviceToHostStream, got NoneType"),  # pyright: ignore[reportArgumentType]  # bad input
    ("host_store list", _in_main(lambda e: ops.host_store(e.store, [e.x])), TypeError, r"ops\.host_store: expected a popxl Tensor, got \[Tensor"),  # pyright: ignore[reportArgumentType]  # bad input
    ("call function", _in_main(lambda e: ops.call(lambda a: a, e.x)), TypeError, r"ops\.call: expected a popxl\.Graph, got function"),  # pyright: ignore[reportArgumentType]  # bad input
    ("call inputs_dict list", _in_main(lambda e: ops.call(e.g, inputs_dict=[e.x])), TypeError, r"ops\.call: inputs_dict must map inputs of graph .* got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("conditional then_inputs int", _in_main(lambda e: ops.conditional(popxl.constant(True), e.g, e.g, 5, [e.x])), TypeError, r"ops\.conditional: the inputs of graph '\S+' must be a sequence of tensors, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("conditional then_inputs tensor", _in_main(lambda e: ops.conditional(popxl.constant(True), e.g, e.g, e.x, [e.x])), TypeError, r"ops\.conditional: the inputs of graph '\S+' must be a sequence of tensors, got Variable"),
    ("call main graph", _in_main(lambda e: ops.call(e.ir.main_graph)), ValueError, r"ops\.call: the main graph cannot be called"),
    ("repeat float count", _in_main(lambda e: ops.repeat(e.g, 2.0, e.x)), ValueError, r"ops\.repeat: repeat_count must be an int >= 0, got 2\.0"),  # pyright: ignore[reportArgumentType]  # bad input
    # -- ops outside any graph
    ("op outside a graph", lambda e: ops.add(e.x, e.x), NoGraphSelectedError, r"ops\.add: Trying to access a graph, but no graph has been selected"),
    ("variable outside a graph", lambda e: popxl.variable(1), NoGraphSelectedError, r"no graph has been selected"),
    ("stream outside a graph", lambda e: popxl.h2d_stream((1,), popxl.float32), NoGraphSelectedError, r"no graph has been selected"),
    # -- graphs
    ("create_graph not callable", lambda e: e.ir.create_graph(5), TypeError, r"create_graph expects a callable or popxl\.Module, got int"),
    ("create_graph wrong args", lambda e: e.ir.create_graph(lambda a: a, e.x, e.x), ValueError, r"create_graph: the arguments do not match the signature"),
    ("graph_input in main", _in_main(lambda e: popxl.graph_input((2,), popxl.float32)), ValueError, r"popxl\.graph_input cannot be used in the main graph"),
    ("graph_output non-tensor", lambda e: _with(e.ir.create_empty_graph(), lambda: popxl.graph_output(5)), TypeError, r"popxl\.graph_output expects a Tensor, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("Graph()", lambda e: popxl.Graph(), TypeError, r"Graph cannot be constructed directly"),
    ("Tensor()", lambda e: popxl.Tensor(), TypeError, r"Tensor cannot be constructed directly"),
    ("get_tensor missing", lambda e: e.ir.main_graph.get_tensor("nope"), ValueError, r"Graph 'main_graph' has no tensor 'nope'"),
    # -- Session
    ("Session non-Ir", lambda e: popxl.Session(5), TypeError, r"Session expects a popxl\.Ir, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("Session device int", lambda e: popxl.Session(e.ir, 5), TypeError, r"Session: device_desc must be one of cpu, ipu_model, ipu_hw, got int"),
    ("Session device name", lambda e: popxl.Session(e.ir, "gpu"), ValueError, r"Session: unknown device_desc 'gpu'"),
    ("run detached", lambda e: popxl.Session(e.ir, "cpu").run(), ValueError, r"Must be attached to device before calling run"),
    ("run list", _session(lambda e, s: s.run([np.ones((2, 3))])), TypeError, r"Session\.run: inputs must map HostToDeviceStreams to arrays, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("run by name", _session(lambda e, s: s.run({"load": np.ones((2, 3))})), ValueError, r"Session\.run: the inputs do not match the streams the program loads\.\nUnexpected: 'load'\nMissing: load \(2, 3\) float32"),  # pyright: ignore[reportArgumentType]  # bad input
    ("run bad shape", _session(lambda e, s: s.run({e.load: np.ones((3, 2), np.float32)})), ValueError, r"Session\.run: input for stream 'load' has shape \(3, 2\), expected \(2, 3\)"),
    ("run_with_outputs list", _session(lambda e, s: s.run_with_outputs({e.load: np.ones((2, 3), np.float32)}, [1])), TypeError, r"Session\.run_with_outputs: outputs must map DeviceToHostStreams to arrays, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("get_tensor_data name", _session(lambda e, s: s.get_tensor_data("x")), TypeError, r"Session\.get_tensor_data: 'x' is not of type Constant or Variable"),  # pyright: ignore[reportArgumentType]  # bad input
    ("get_tensors_data int", _session(lambda e, s: s.get_tensors_data(5)), TypeError, r"Session\.get_tensors_data: expected an iterable of tensors, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("get_tensors_data tensor", _session(lambda e, s: s.get_tensors_data(e.x)), TypeError, r"Session\.get_tensors_data: expected an iterable of tensors, got Variable"),
    ("write_variable_data str", _session(lambda e, s: s.write_variable_data(e.x, "a")), TypeError, r"Session\.write_variable_data: dtype of the data \(<U1\) does not match variable x"),
    ("write_variables_data list", _session(lambda e, s: s.write_variables_data([e.x])), TypeError, r"Session\.write_variables_data: expected a mapping"),  # pyright: ignore[reportArgumentType]  # bad input
    # -- DotTree / NamedTensors
    ("NamedTensors.from_dict ints", lambda e: NamedTensors.from_dict({"a": 1}), TypeError, r"NamedTensors: the value for key 'a' must be a popxl\.Tensor, got int"),
    ("NamedTensors.from_dict nested", lambda e: NamedTensors.from_dict({"a.b": np.ones(2)}), TypeError, r"the value for key 'a\.b' must be a popxl\.Tensor, got ndarray"),
    ("NamedTensors insert", lambda e: e.nt.insert("b", "w"), TypeError, r"the value for key 'b' must be a popxl\.Tensor, got str"),  # pyright: ignore[reportArgumentType]  # bad input
    ("NamedTensors.pack", lambda e: NamedTensors.pack(["a"], [None]), TypeError, r"the value for key 'a' must be a popxl\.Tensor, got NoneType"),
    ("from_dict list", lambda e: NamedTensors.from_dict([e.x]), TypeError, r"NamedTensors\.from_dict: expected a DotTree or a mapping of dotted keys, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("remap missing key", lambda e: e.nt.remap({}), KeyError, r"NamedTensors\.remap: the mapping has no entry for 'a\.w' \(Tensor\[x"),
    ("remap list", lambda e: e.nt.remap([e.x]), TypeError, r"NamedTensors\.remap: expected a mapping of tensors, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("update int", lambda e: e.nt.update(5), TypeError, r"NamedTensors\.update: expected a DotTree or a mapping of dotted keys, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("to_mapping int", lambda e: e.nt.to_mapping(5), TypeError, r"NamedTensors\.to_mapping: expected a DotTree or a mapping"),  # pyright: ignore[reportArgumentType]  # bad input
    ("filter_keys missing", lambda e: e.nt.filter_keys(["a.q"]), KeyError, r"NamedTensors\.filter_keys: no key 'a\.q' \(keys: a\.w\)"),
    ("filter_keys str", lambda e: e.nt.filter_keys("a"), TypeError, r"NamedTensors\.filter_keys: expected an iterable of keys, got str"),
    ("pack int", lambda e: DotTree.pack(5, [1]), TypeError, r"DotTree\.pack: keys must be an iterable, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("pack lengths", lambda e: DotTree.pack(["a"], [1, 2]), ValueError, r"pack: 1 keys but 2 values"),
    ("DotTree float key", lambda e: DotTree().insert(1.5, 1), TypeError, r"DotTree keys are str or int, not float"),  # pyright: ignore[reportArgumentType]  # bad input
    ("DotTree bad key", lambda e: DotTree().insert("a b", 1), ValueError, r"invalid DotTree key 'a b'"),
    ("DotTree missing key", lambda e: e.nt["zz"], KeyError, r"zz"),
    ("DotTree duplicate", lambda e: e.nt.insert("a.w", e.x), ValueError, r"'a' already exists in NamedTensors \(inserting 'a\.w'\); pass overwrite=True"),
    # -- GraphWithNamedArgs / BoundGraph
    ("GraphWithNamedArgs int", lambda e: GraphWithNamedArgs(5), TypeError, r"GraphWithNamedArgs: graph must be a popxl\.Graph, got int"),
    ("GraphWithNamedArgs args dict", lambda e: GraphWithNamedArgs(e.g, {"a": e.x}), TypeError, r"GraphWithNamedArgs: args must be a NamedTensors, got dict"),  # pyright: ignore[reportArgumentType]  # bad input
    ("GraphWithNamedArgs aux", lambda e: GraphWithNamedArgs(e.g, aux=[e.x]), TypeError, r"GraphWithNamedArgs: aux must be a NamedTensors, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("GraphWithNamedArgs bind list", lambda e: GraphWithNamedArgs(e.g).bind([e.x]), TypeError, r"GraphWithNamedArgs\.bind: args must be a NamedTensors or a mapping of graph inputs to tensors, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("BoundGraph int", lambda e: addons.BoundGraph(5), TypeError, r"BoundGraph: graph must be a popxl\.Graph, got int"),
    ("BoundGraph args list", lambda e: addons.BoundGraph(e.g, [e.x]), TypeError, r"BoundGraph: args must be a mapping of graph inputs to tensors, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    # -- transforms
    ("popxl autodiff int", lambda e: popxl.transforms.autodiff(5), TypeError, r"autodiff: expected a popxl\.Graph, got int"),  # pyright: ignore[reportArgumentType, reportCallIssue]  # bad input
    ("popxl autodiff main", lambda e: popxl.transforms.autodiff(e.ir.main_graph), ValueError, r"autodiff: the main graph cannot be differentiated"),
    ("popxl autodiff grads_required int", lambda e: popxl.transforms.autodiff(e.g, grads_required=[5]), TypeError, r"autodiff: grads_required must contain Tensors, got int"),  # pyright: ignore[reportArgumentType, reportCallIssue]  # bad input
    ("popxl autodiff grads_required other graph", lambda e: popxl.transforms.autodiff(e.g, grads_required=[e.x]), ValueError, r"autodiff: grads_required: tensor x is not in graph"),
    ("addons autodiff int", lambda e: addons.autodiff(5), TypeError, r"addons\.autodiff: expected a GraphWithNamedArgs or popxl\.Graph, got int"),
    ("popxl autodiff grads_provided int", lambda e: popxl.transforms.autodiff(e.g, grads_provided=5), TypeError, r"autodiff: grads_provided must be an iterable of Tensors, got int"),  # pyright: ignore[reportArgumentType, reportCallIssue]  # bad input
    ("popxl autodiff called_graphs int", lambda e: popxl.transforms.autodiff(e.g, called_graphs_grad_info=5), TypeError, r"autodiff: called_graphs_grad_info must map graphs to GradGraphInfo, got int"),  # pyright: ignore[reportArgumentType, reportCallIssue]  # bad input
    ("autodiff_with_accumulation int", _in_main(lambda e: addons.autodiff_with_accumulation(_linear(e), 5)), TypeError, r"autodiff_with_accumulation: tensors_to_accumulate_grads must be an iterable of Tensors, got int"),
    ("recompute_graph of a forward graph", _in_main(lambda e: addons.transforms.recompute_graph(_linear(e))), ValueError, r"recompute_graph: graph 'Linear_subgraph\(\d+\)' is not a gradient graph"),
    # -- addons helpers
    ("VariableFactory dtype", lambda e: addons.VariableFactory(np.ones(2), "zz"), ValueError, r"VariableFactory: 'zz' is not a popxl dtype"),
    ("InputStreams int", _in_main(lambda e: addons.InputStreams(a=5)), TypeError, r"InputStreams: stream 'a' must be given as \(shape, dtype\), got 5"),  # pyright: ignore[reportArgumentType]  # bad input
    ("InputStreams shape", _in_main(lambda e: addons.InputStreams(a=((2.5,), popxl.float32))), TypeError, r"popxl\.h2d_stream 'a': shape \(2\.5,\) has a non-integer dim 2\.5"),  # pyright: ignore[reportArgumentType]  # bad input
    ("addons.function int", lambda e: addons.function(5), TypeError, r"addons\.function: expected a callable, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("create_empty_graph int", lambda e: e.ir.create_empty_graph(5), TypeError, r"Ir\.create_empty_graph: name must be a str, got int"),  # pyright: ignore[reportArgumentType]  # bad input
    ("TensorSpec float dim", lambda e: popxl.TensorSpec((2.5,), popxl.float32), TypeError, r"popxl\.TensorSpec: shape \(2\.5,\) has a non-integer dim 2\.5"),  # pyright: ignore[reportArgumentType]  # bad input
    ("TensorSpec dtype", lambda e: popxl.TensorSpec((2,), 5), TypeError, r"popxl\.TensorSpec: dtype must be a popxl dtype"),  # pyright: ignore[reportArgumentType]  # bad input
    # -- addons ops
    ("cross_entropy list", _in_main(lambda e: addons.cross_entropy([e.x], e.i)), TypeError, r"addons\.cross_entropy: expected a popxl Tensor for x, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("cross_entropy labels", _in_main(lambda e: addons.cross_entropy(e.x, None)), TypeError, r"addons\.cross_entropy: expected a popxl Tensor for labels, got NoneType"),  # pyright: ignore[reportArgumentType]  # bad input
    ("addons host_store list", _in_main(lambda e: addons.host_store([e.x])), TypeError, r"addons\.host_store: expected a popxl Tensor, got list"),  # pyright: ignore[reportArgumentType]  # bad input
    ("addons host_load dtype", _in_main(lambda e: addons.host_load(np.ones(2), "nope")), ValueError, r"addons\.host_load: 'nope' is not a popxl dtype"),
]
# fmt: on


class Linear(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.ones((x.shape[-1], 2), np.float32), x.dtype)
        return x @ w


def _linear(e: Env) -> GraphWithNamedArgs:
    return Linear().create_graph(e.x)[1]


def _with(graph: popxl.Graph, fn: Callable[[], Any]) -> Any:
    with graph:
        return fn()


def test_no_graph_selected_is_a_runtime_and_a_value_error():
    """PopXL raises RuntimeError; xl's error is also a ValueError (a user mistake)."""
    assert issubclass(NoGraphSelectedError, RuntimeError)
    assert issubclass(NoGraphSelectedError, ValueError)


@pytest.mark.parametrize("label,mistake,exc,msg", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_user_mistake_gets_a_clear_error(label, mistake, exc, msg):
    env = Env()
    with pytest.raises(Exception) as info:
        mistake(env)
    assert type(info.value) is exc or (exc is KeyError and isinstance(info.value, KeyError)), (
        f"{label}: expected {exc.__name__}, got {type(info.value).__name__}: {info.value}"
    )
    text = info.value.args[0] if isinstance(info.value, KeyError) else str(info.value)
    assert re.search(msg, str(text)), f"{label}: message {text!r} does not match {msg!r}"
    # the graph-context stack is left as it was
    from popxl import context

    assert context._state.graphs == [] and context._state.calls == []
