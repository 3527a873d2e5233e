"""The `popxl` frontend: IR structure, names, reprs, create_graph, contexts, ops and
calls (after POPART tests/unittests/python/popxl/test_{ir,graph,tensor,context,...}.py),
plus numerics of the built programs on the NumPy runtime."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest
from xdsl.dialects.builtin import IntegerAttr, TensorType
from xdsl.parser import Parser

import popxl
from popxl import ops
from popxl.errors import UndefinedValue
from xl.dialects import call as call_d
from xl.dialects import graph as graph_d
from xl.dialects import ipu as ipu_d
from xl.tools.context import xl_context


def op_names(g: popxl.Graph) -> list[str]:
    return [op.name for op in g._op.body.block.ops]


def reparse(ir: popxl.Ir):
    text = ir.to_mlir()
    module = Parser(xl_context(), text).parse_module()
    module.verify()
    return text, module


def need_runtime():
    pytest.importorskip("xl.compiler")


def run(ir: popxl.Ir, outputs, inputs=None):
    """Host-store `outputs` (main-graph tensors), run once, return their values."""
    need_runtime()
    streams = []
    with ir.main_graph:
        for i, t in enumerate(outputs):
            s = popxl.d2h_stream(t.shape, t.dtype, f"out{i}")
            ops.host_store(s, t)
            streams.append(s)
    session = popxl.Session(ir, "ipu_model")
    with session:
        res = session.run(inputs or {})
    return [res[s] for s in streams]


# ---------------------------------------------------------------------------------------
# dtypes, TensorSpec
# ---------------------------------------------------------------------------------------


def test_dtypes():
    assert repr(popxl.float32) == "popxl.dtypes.float32"
    assert popxl.float is popxl.float32 and popxl.half is popxl.float16
    assert popxl.double is popxl.float64
    assert popxl.float32.as_numpy() == np.float32
    assert popxl.int32.name == "int32"
    assert popxl.float16.is_floating_point and not popxl.float16.is_int
    assert popxl.uint8.is_int and not popxl.uint8.is_signed and popxl.int8.is_signed
    assert popxl.dtype.as_dtype(np.float16) is popxl.float16
    assert popxl.dtype.as_dtype(np.dtype("int32")) is popxl.int32
    assert popxl.dtype.as_dtype(float) is popxl.float32
    assert popxl.dtype.as_dtype(bool) is popxl.bool
    assert popxl.dtype.as_dtype(np.zeros(2, np.uint32)) is popxl.uint32
    assert popxl.dtype.from_name("float64") is popxl.float64
    assert popxl.dtypes.float32 is popxl.float32
    # complex types have NumPy types (as in PopXL) but no runtime support
    assert popxl.complex64.as_numpy() is np.complex64 and popxl.dtype.as_dtype(int) is popxl.int64
    with pytest.raises(ValueError, match="complex64 is not supported"):
        popxl.dtypes.checked_dtype(popxl.complex64, "test")
    # float8 is emulated with ml_dtypes (tests/runtime/test_ops_fp8.py)
    assert popxl.float8_143.as_numpy() == popxl.dtypes.np_dtype_float8_143


def test_tensor_spec():
    spec = popxl.TensorSpec((2, 3), popxl.float32)
    assert dict(**spec) == {"shape": (2, 3), "dtype": popxl.float32, "meta_shape": ()}
    assert spec == popxl.TensorSpec([2, 3], popxl.float32)
    assert hash(spec) == hash(popxl.TensorSpec((2, 3), popxl.float32))
    assert repr(spec) == "TensorSpec(shape=(2, 3), dtype=popxl.dtypes.float32, meta_shape=())"
    assert spec.to_tuple() == ((2, 3), popxl.float32, ())


# ---------------------------------------------------------------------------------------
# Ir, graphs
# ---------------------------------------------------------------------------------------


def test_ir_main_graph_and_attributes():
    ir = popxl.Ir(replication=2)
    assert re.fullmatch(r"Ir\[id=\d+\]", repr(ir))
    main = ir.main_graph
    assert main is ir.main_graph
    assert isinstance(main._op, graph_d.MainGraphOp)
    assert ir.replication_factor == 2 and ir.num_host_transfers == 1
    ir.num_host_transfers = 5
    ir.replication_factor = 4
    attrs = main._op.attributes
    nht, rf = attrs["num_host_transfers"], attrs["replication_factor"]
    assert isinstance(nht, IntegerAttr) and isinstance(rf, IntegerAttr)
    assert nht.value.data == 5
    assert rf.value.data == 4
    assert "num_host_transfers = 5" in ir.to_mlir()
    with pytest.raises(ValueError):
        ir.num_host_transfers = 0
    with pytest.raises(TypeError):
        popxl.Graph()
    with pytest.raises(TypeError):
        popxl.Tensor()


def test_graph_context_stack():
    ir = popxl.Ir()
    with pytest.raises(RuntimeError):
        popxl.gcg()
    with ir.main_graph as g:
        assert popxl.gcg() is g and popxl.gmg() is g and popxl.gir() is ir
        sub = ir.create_empty_graph("sub")
        with sub:
            assert popxl.gcg() is sub and popxl.get_main_graph() is g
        assert popxl.get_current_graph() is g


def test_create_graph_naming_and_inputs():
    ir = popxl.Ir()

    def linear(x, w: popxl.TensorByRef, b):
        return x @ w + b

    class Outer:
        def make(self):
            def inner(x):
                return x

            return inner

    with ir.main_graph:
        x = popxl.variable(np.ones((2, 4), np.float32), name="x")
        g0 = ir.create_graph(
            linear,
            x,  # a Tensor: only its spec is used
            popxl.TensorSpec((4, 3), popxl.float32),
            b=popxl.TensorSpec((3,), popxl.float32),
        )
        g1 = ir.create_graph(Outer().make(), popxl.TensorSpec((1,), popxl.int32))
    assert g0.name == "test_create_graph_naming_and_inputs.linear_subgraph(0)"
    assert g1.name == "test_create_graph_naming_and_inputs.Outer.make.inner_subgraph(1)"
    assert [t.name for t in g0.inputs] == ["x", "w", "b"]
    assert list(g0.inputs_by_name) == ["x", "w", "b"]
    assert [t.shape for t in g0.inputs] == [(2, 4), (4, 3), (3,)]
    assert [g0._input_by_ref(i) for i in range(3)] == [False, True, False]
    assert len(g0.outputs) == 1 and g0.outputs[0].shape == (2, 3)
    assert op_names(g0) == ["popxl.matmul", "popxl.add", "graph.output"]
    assert isinstance(g0._op, graph_d.GraphOp)
    assert g0._op.function_type.outputs.data[0] == g0.outputs[0]._value.type
    assert repr(g0) == f"Graph[id={g0.name} name={g0.name}]"
    assert repr(g0.inputs[0]) == f"Tensor[{g0.name}/x popxl.dtypes.float32 (2, 4)]"
    assert g0.inputs[0].id == f"{g0.name}/x" and g0.inputs[0].name == "x"
    # graph outputs identity as the same tensor g1.inputs[0]
    assert g1.outputs[0] is g1.inputs[0]
    assert g0 in {g0} and g0 == ir._graph_by_name(g0.name)
    assert g0.inputs[0] in g0 and x not in g0
    with pytest.raises(TypeError):
        _ = 1 in g0
    text, _ = reparse(ir)
    assert '@"test_create_graph_naming_and_inputs.linear_subgraph(0)"' in text
    assert "graph.by_ref" in text


def test_create_graph_module_and_seed_naming():
    class Linear(popxl.Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            w = popxl.graph_input((x.shape[-1], 2), x.dtype, "weight")
            return x @ w

    class NetOutlined(popxl.Module):
        def build(self, x: popxl.Tensor):
            g = popxl.gir().create_graph(Linear(), x)
            w = popxl.graph_input((4, 2), x.dtype, "fc2.weight")
            (y,) = ops.call(g, x, w)
            return y

    ir = popxl.Ir()
    with ir.main_graph:
        net = ir.create_graph(NetOutlined(), popxl.TensorSpec((1, 4), popxl.float32))
        lin = ir.create_graph(Linear(), popxl.TensorSpec((1, 4), popxl.float32))
    # names: class __qualname__ without .<locals>, one counter per Ir
    assert net.name == "test_create_graph_module_and_seed_naming.NetOutlined_subgraph(0)"
    names = sorted(op.sym_name.data for op in ir._module.ops if isinstance(op, graph_d.GraphOp))
    assert names == sorted(
        [
            "test_create_graph_module_and_seed_naming.NetOutlined_subgraph(0)",
            "test_create_graph_module_and_seed_naming.Linear_subgraph(1)",
            "test_create_graph_module_and_seed_naming.Linear_subgraph(2)",
        ]
    )
    # input order: signature first, then graph_input calls in the body
    assert [t.name for t in net.inputs] == ["x", "fc2.weight"]
    assert [t.name for t in lin.inputs] == ["x", "weight"]
    assert "call.call" in op_names(net)
    assert net.called_graphs[0].name.endswith("Linear_subgraph(1)")
    # Module.__call__ = build (inlined in the current graph)
    with ir.main_graph:
        g = ir.create_empty_graph()
        with g:
            x = popxl.graph_input((1, 4), popxl.float32, "x")
            w = popxl.graph_input((4, 2), popxl.float32, "weight")
            popxl.graph_output(x @ w)
    assert g.name.endswith("graph_subgraph(3)")
    assert op_names(g) == ["popxl.matmul", "graph.output"]
    assert isinstance(g._op, graph_d.GraphOp)
    out_type = g._op.function_type.outputs.data[0]
    assert isinstance(out_type, TensorType) and out_type.get_shape() == (1, 2)
    reparse(ir)


def test_create_graph_argument_kinds():
    ir = popxl.Ir()
    spec = popxl.TensorSpec((2,), popxl.float32)

    def f(xs, *rest, scale=2.0, ys: Sequence[popxl.TensorByRef] = (), **named):
        out = xs[0] * scale
        for t in (*xs[1:], *rest, *ys, *named.values()):
            out = out + t
        return out, xs[0]

    with ir.main_graph:
        g = ir.create_graph(f, [spec, spec], spec, scale=3.0, ys=[spec], extra=spec)
    assert [t.name for t in g.inputs] == ["xs_0", "xs_1", "rest_0", "ys_0", "extra"]
    assert [g._input_by_ref(i) for i in range(5)] == [False, False, False, True, False]
    assert len(g.outputs) == 2
    # the Python float `scale` was passed through: a constant of 3.0
    consts = [op for op in g._op.body.block.ops if isinstance(op, graph_d.ConstantOp)]
    assert len(consts) == 1

    def g_none(x):
        popxl.graph_output(x)  # explicit outputs come first

    with ir.main_graph:
        gn = ir.create_graph(g_none, spec)
    assert len(gn.outputs) == 1


def test_create_graph_errors():
    ir = popxl.Ir()
    spec = popxl.TensorSpec((2,), popxl.float32)
    with ir.main_graph:
        with pytest.raises(TypeError, match="mixes tensors and non-tensors"):
            ir.create_graph(lambda xs: xs[0], [spec, 1.0])
        with pytest.raises(ValueError, match="do not match the signature"):
            ir.create_graph(lambda x: x, spec, spec)
        with pytest.raises(ValueError, match="must return None, a Tensor or an iterable"):
            ir.create_graph(lambda x: 3, spec)
        with pytest.raises(ValueError, match="graph outputs must be Tensors"):
            ir.create_graph(lambda x: (x, 3), spec)
        outer = popxl.variable(np.ones(2, np.float32), name="outer")
        with pytest.raises(ValueError, match="not in graph"):
            ir.create_graph(lambda x: outer, spec)
        with pytest.raises(ValueError, match="cannot initialise a variable tensor within a graph"):
            ir.create_graph(lambda x: popxl.variable(np.ones(2)), spec)
        with pytest.raises(ValueError, match="not in the current graph"):
            ir.create_graph(lambda x: x + outer, spec)
        with pytest.raises(ValueError, match="main graph"):
            popxl.graph_input((1,), popxl.float32)
    _, module = reparse(ir)  # failed graphs are dropped from the module
    assert not [op for op in module.ops if isinstance(op, graph_d.GraphOp)]


# ---------------------------------------------------------------------------------------
# Variables, constants, names
# ---------------------------------------------------------------------------------------


def test_variable_dtypes_and_init():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2)))  # float64 -> float32
        b = popxl.variable(np.arange(3))  # int64 -> int32
        c = popxl.variable(np.ones(2), dtype=popxl.float16)
        d = popxl.variable(np.ones(2), downcast=False)
        e = popxl.variable(1.5)
        f = popxl.variable([True, False])
        k = popxl.constant(np.arange(3, dtype=np.int64))
    assert (a.dtype, b.dtype, c.dtype, d.dtype, e.dtype, f.dtype) == (
        popxl.float32,
        popxl.int32,
        popxl.float16,
        popxl.float64,
        popxl.float32,
        popxl.bool,
    )
    assert e.shape == () and k.dtype == popxl.int32
    assert isinstance(a, popxl.Variable) and isinstance(k, popxl.Constant)
    var_ops = [op for op in ir.main_graph._op.body.block.ops if isinstance(op, graph_d.VariableOp)]
    assert len(var_ops) == 6 and all(op.init is not None for op in var_ops)
    assert ir.main_graph.variables == (a, b, c, d, e, f)
    assert ir.main_graph.constants == (k,)
    reparse(ir)


def test_name_uniquifying_and_scopes():
    ir = popxl.Ir()
    with ir.main_graph:
        b0 = popxl.variable(np.zeros(32, np.float32), name="bias")
        w0 = popxl.variable(np.zeros((4, 32), np.float32), name="weight")
        b1 = popxl.variable(np.zeros(32, np.float32), name="bias")
        w1 = popxl.variable(np.zeros((4, 32), np.float32), name="weight")
        with popxl.name_scope("layer1"):
            s = popxl.variable(np.zeros(2, np.float32), name="w")
            with popxl.name_scope("inner"):
                s2 = popxl.constant(np.zeros(2, np.float32), name="c")
    assert [b0.name, w0.name, b1.name, w1.name] == ["bias", "weight", "bias__t0", "weight__t1"]
    assert repr(b0) == "Tensor[bias popxl.dtypes.float32 (32,)]"
    assert repr(b1) == "Tensor[bias__t0 popxl.dtypes.float32 (32,)]"
    assert s.name == "layer1/w" and s2.name == "layer1/inner/c"
    assert ir.main_graph.get_tensor("bias__t0") is b1
    text, _ = reparse(ir)
    assert 'graph.variable "weight__t1"' in text and 'graph.variable "layer1/w"' in text


def test_tensor_properties():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((2, 3, 4), np.float32), name="t")
        s = popxl.constant(1.0)
    assert (t.shape, t.rank, t.nelms, t.dtype) == ((2, 3, 4), 3, 24, popxl.float32)
    assert t.spec == popxl.TensorSpec((2, 3, 4), popxl.float32)
    assert t.strides() == (48, 16, 4) and t.strides((5, 2)) == (8, 4)  # bytes, as numpy's strides
    assert t.ir is ir and t.graph is ir.main_graph
    assert len(t) == 2
    with pytest.raises(ValueError):
        len(s)
    with pytest.raises(TypeError):
        iter(t)
    with pytest.raises(TypeError):
        list(t)
    # hash / eq by identity, never elementwise
    assert t == t and t != s and not (t == s)  # noqa: PLR0124, SIM201
    assert {t: 1}[t] == 1
    # no op computes or uses t yet: its IPU and tile set are undefined, as in PopXL
    with pytest.raises(UndefinedValue, match="ipu"):
        _ = t.ipu
    with pytest.raises(UndefinedValue, match="tile_set"):
        _ = t.tile_set
    with ir.main_graph:
        with popxl.ipu(1), popxl.io_tiles():
            _ = t + 1.0  # the first consumer places the variable
        _ = t * 2.0
    assert t.ipu == 1 and t.tile_set == "io"


# ---------------------------------------------------------------------------------------
# Operators and ops
# ---------------------------------------------------------------------------------------


def test_operators_emit_ops():
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        x = popxl.variable(np.ones((2, 2), np.float16), name="x")
        n0 = len(op_names(main))
        y = (x + 1) * 2 - x / 3
        y = -y
        z = 1.0 - x
        p = x**2
        m = x @ x
        r = np.ones((2, 2), np.float16) + x  # __array_ufunc__ = None -> __radd__
    names = op_names(main)[n0:]
    assert names == [
        "graph.constant",
        "popxl.add",
        "graph.constant",
        "popxl.mul",
        "graph.constant",
        "popxl.div",
        "popxl.sub",
        "popxl.neg",
        "graph.constant",
        "popxl.sub",
        "graph.constant",
        "popxl.pow",
        "popxl.matmul",
        "graph.constant",
        "popxl.add",
    ]
    # Python scalars become constants of the tensor's dtype
    assert all(t.dtype == popxl.float16 for t in (y, z, p, m, r))
    assert z.shape == (2, 2) and r.shape == (2, 2)
    first = main._op.body.block.first_op
    assert first is not None
    c = first.next_op
    assert isinstance(c, graph_d.ConstantOp) and c.result.type.get_shape() == ()


def test_op_errors_are_value_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 3), np.float32))
        b = popxl.variable(np.ones((2, 3), np.float32))
        i = popxl.variable(np.ones((2, 3), np.int32))
        with pytest.raises(ValueError, match=r"popxl\.matmul.*\(2, 3\).*\(2, 3\)"):
            _ = a @ b
        with pytest.raises(ValueError, match=r"popxl\.add.*differ"):
            _ = a + i
        with pytest.raises(ValueError, match="cannot reshape"):
            a.reshape((4, 2))
        g = ir.create_graph(lambda x: x, a)
    with g, pytest.raises(ValueError, match="not in the current graph"):
        ops.relu(a)


def test_shape_ops_structure():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 3, 4), np.float32))
        assert x.reshape((4, -1)).shape == (4, 6)
        assert x.reshape((-1,)).shape == (24,)
        assert x.flatten().shape == (24,)
        assert x.T.shape == (4, 3, 2)
        assert x.transpose((1, 0, 2)).shape == (3, 2, 4)
        assert ops.squeeze(x[0:1]).shape == (3, 4)
        assert x[0].shape == (3, 4)
        assert x[:, 1].shape == (2, 4)
        assert x[..., 1:3].shape == (2, 3, 2)
        assert x[None, 0, ::2].shape == (1, 2, 4)
        assert x[popxl.constant(np.array([1, 0, 1], np.int32))].shape == (3, 3, 4)
        assert x[np.array([0, 1])].shape == (2, 3, 4)
        mask = ops.greater(x, popxl.constant(0.0))
        assert x[mask].shape == (2, 3, 4)
        assert ops.concat([x, x], 2).shape == (2, 3, 8)
        assert [t.shape for t in ops.split(x, [1, 2], axis=1)] == [(2, 1, 4), (2, 2, 4)]
        assert ops.sum(x).shape == () and ops.mean(x, 1, keepdims=True).shape == (2, 1, 4)
        assert ops.max(x, axis=[0, 2]).shape == (3,)
        with pytest.raises(IndexError):
            x[0, 0, 0, 0]
        with pytest.raises(IndexError):
            x[5]
    reparse(ir)


def updated(r: popxl.Tensor, t: popxl.Tensor) -> bool:
    """`r`, returned by an in-place op on `t`, is a new tensor of `t`'s graph, spec and
    meta-shape (PopXL's in-place ops return a new tensor aliasing their input)."""
    return r is not t and r.graph is t.graph and r.spec == t.spec and r in r.graph.tensors


def test_all_ops_build_and_reparse():
    """Every popxl.ops wrapper that has a dialect op builds valid, re-parsable IR."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.random.rand(4, 3).astype(np.float32), name="x")
        w = popxl.variable(np.random.rand(4, 3).astype(np.float32), name="w")
        h = popxl.variable(np.zeros((4, 3), np.float16), name="h")
        step = popxl.variable(np.zeros((), np.float32), name="step")
        lbl = popxl.constant(np.array([0, 1, 2, 1], np.int32))
        b = ops.greater(x, popxl.constant(0.5))
        for fn in (
            ops.abs,
            ops.negate,
            ops.relu,
            ops.gelu,
            ops.tanh,
            ops.exp,
            ops.log,
            ops.sqrt,
            ops.sigmoid,
            ops.cos,
            ops.sin,
            ops.sign,
            ops.identity,
            ops.detach,
        ):
            assert fn(x).shape == (4, 3)
        assert ops.logical_not(b).dtype == popxl.bool
        assert ops.logical_and(b, b).dtype == popxl.bool and ops.logical_or(b, b).shape == (4, 3)
        assert ops.equal(x, w).dtype == popxl.bool
        assert ops.maximum(x, w, x).shape == (4, 3)
        assert ops.pow(x, 2.0).shape == (4, 3)
        assert ops.cast(x, popxl.float16).dtype == popxl.float16
        assert ops.where(b, x, w).shape == (4, 3)
        assert ops.gather(x, popxl.constant(np.array([[0, 1]], np.int32)), axis=1).shape == (4, 1, 2)
        assert ops.onehot(lbl, 3, popxl.constant(np.array([0.0, 1.0], np.float32))).shape == (4, 3)
        assert ops.argmax(x, 1).dtype == popxl.int32 and ops.argmin(x, 0, True).shape == (1, 3)
        assert ops.expand(popxl.constant(np.ones(3, np.float32)), (2, 3)).shape == (2, 3)
        assert ops.init((2, 2), popxl.float32, "z").name == "z"
        assert ops.init((2,), popxl.int32, init_type="undef").dtype == popxl.int32
        loss = ops.nll_loss(ops.softmax(x, 1), lbl)
        assert loss.shape == ()
        assert ops.nll_loss(x, lbl, reduction="none", ignore_index=1, log_prob=True).shape == (4,)
        l2, dx = ops.nll_loss_with_softmax_grad(ops.softmax(x, 1), lbl, loss_grad=2.0)
        assert l2.shape == () and dx.shape == (4, 3)
        _l3, dx3 = ops.nll_loss_with_softmax_grad(ops.softmax(x, 1), lbl, loss_grad=popxl.constant(0.5))
        assert dx3.shape == (4, 3)
        idx = popxl.constant(np.array([1], np.uint32))
        assert ops.dynamic_slice(x, idx, [0], [2]).shape == (2, 3)
        assert ops.dynamic_update(x, idx, ops.init((2, 3), popxl.float32), [0], [2]).shape == (4, 3)
        ops.dynamic_update_(w, idx, ops.init((2, 3), popxl.float32), [0], [2])
        assert ops.increment_mod(step, 1, 10).shape == ()
        assert updated(ops.increment_mod_(step, 1, 10), step)
        assert ops.scaled_add(x, w, 0.5, 2).shape == (4, 3)
        assert updated(ops.scaled_add_(x, w, a=popxl.constant(0.5), b=popxl.constant(2.0)), x)
        assert updated(ops.add_(x, 1.0), x)
        assert ops.clip(x, 0.1, 0.9).shape == (4, 3)
        vu = ops.var_updates
        assert updated(vu.accumulate_(w, x, f=0.5), w)
        assert updated(vu.accumulate_(w, x), w)
        assert updated(vu.accumulate_square_(w, x), w)
        assert updated(vu.accumulate_mean_(w, x, step), w)
        assert updated(vu.accumulate_mean_(w, x, 3), w)
        assert updated(vu.accumulate_moving_average_(h, x, f=0.9), h)
        assert updated(vu.accumulate_moving_average_square_(w, x, f=step), w)
        assert updated(vu.accumulator_scale_(w, 0.0), w)
        assert updated(vu.accumulator_zero_(w), w)
        assert updated(
            vu.sparse_accumulate_(w, ops.init((2, 3), popxl.float32), popxl.constant(np.array([0, 3], np.int32))), w
        )
        assert updated(vu.copy_var_update_(w, x), w)
        u = vu.adam_updater(h, w, weight=x, time_step=step, weight_decay=0.01, beta1=0.9, beta2=0.999)
        assert u.shape == (4, 3) and u.dtype == popxl.float32
        assert vu.adam_updater(h, w).shape == (4, 3)
        assert vu.lamb_updater(h, w, time_step=step, beta1=0.9, beta2=popxl.constant(0.99)).shape == (4, 3)
        assert vu.adamax_updater(h, w, time_step=step).shape == (4, 3)
        r = ops.sum(x * x)
        assert updated(vu.adam_var_update(w, x, r, r, learning_rate=0.1, max_weight_norm=10.0), w)
    reparse(ir)


def test_collectives_refuse_non_tensors():
    with pytest.raises(TypeError, match="replicated_all_reduce: t must be a popxl Tensor"):
        ops.collectives.replicated_all_reduce(None)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


# ---------------------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------------------


def test_ipu_io_tiles_in_sequence_contexts():
    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.ipu(1):
            a = popxl.variable(np.ones(2, np.float32), name="a")
            b = a + 1
            with popxl.io_tiles():
                c = b * 2
        d = ops.relu(c)
        with popxl.ipu(0):
            e = b.copy_to_ipu(0)
        with pytest.raises(ValueError, match="Could not infer the ipu of .*Please specify `source`"):
            d.copy_to_ipu(1)
        with pytest.raises(ValueError, match="Could not infer the ipu"):
            a.copy_to_ipu(0)  # a variable needs an explicit source
        f = a.copy_to_ipu(0, 1)
    assert b.ipu == 1 and c.ipu == 1 and c.tile_set == "io" and b.tile_set == "compute"
    assert d.ipu == 0 and d._ipu_or_none is None
    copy = e._value.owner
    assert isinstance(copy, ipu_d.CopyOp)
    assert (copy.source.value.data, copy.destination.value.data) == (1, 0)
    assert e.ipu == 0 and f.ipu == 0
    text, _ = reparse(ir)
    assert "ipu.id = 1 : i64" in text and 'ipu.tile_set = "io"' in text and "ipu.copy" in text

    with pytest.raises(TypeError):
        popxl.in_sequence(None)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    with pytest.raises(ValueError):
        popxl.in_sequence("sometimes")
    with ir.main_graph, popxl.in_sequence(True), popxl.in_sequence("pass"):
        pass

    class M(popxl.Module):
        @popxl.in_sequence()
        def build(self, v: popxl.TensorByRef, g: popxl.Tensor, *, lr: float = 0.1):
            ops.scaled_add_(v, g, b=-lr)

    with ir.main_graph:
        g = ir.create_graph(M(), a.spec, a.spec, lr=0.5)
    assert [t.name for t in g.inputs] == ["v", "g"] and g._input_by_ref(0)
    assert g.outputs == ()


def test_ipu_in_subgraph_inputs():
    ir = popxl.Ir()
    with ir.main_graph, popxl.ipu(1):
        g = ir.create_graph(lambda x: x * 2, popxl.TensorSpec((2,), popxl.float32))
    assert g.inputs[0].ipu == 1 and g.outputs[0].ipu == 1


# ---------------------------------------------------------------------------------------
# Streams, calls, repeat, conditional
# ---------------------------------------------------------------------------------------


def test_streams():
    ir = popxl.Ir()
    with ir.main_graph:
        s1 = popxl.h2d_stream((2,), popxl.float32, "x")
        s2 = popxl.h2d_stream((2,), popxl.float32, "x")
        s3 = popxl.h2d_stream((3,), popxl.int32)
        o = popxl.d2h_stream((2,), popxl.float32, "y")
        t = ops.host_load(s1)
        t2 = ops.host_load(s2, "named")
        ops.host_store(o, t + t2)
        with pytest.raises(ValueError, match="carries"):
            ops.host_store(o, ops.host_load(s3))
    assert (s1.tensor_id, s2.tensor_id, s3.tensor_id) == ("x", "x__t0", "h2d_stream")
    assert str(s1) == "HostToDeviceStream x"
    assert s1.shape == (2,) and s1.dtype == popxl.float32 and s1.spec == t.spec
    assert t.name == "x_hostload" and t2.name == "named_hostload"  # PopXL's names
    assert ir.get_all_h2d_streams() == {s1, s2, s3}
    assert ir.get_all_d2h_streams() == {o}
    _text, module = reparse(ir)
    decls = [op for op in module.ops if isinstance(op, graph_d.H2DStreamOp | graph_d.D2HStreamOp)]
    assert len(decls) == 4 and list(module.ops)[:4] == decls  # streams come first
    ir2 = popxl.Ir()
    with ir2.main_graph:
        unused = popxl.h2d_stream((1,), popxl.float32, "unused")
    assert ir2.get_all_h2d_streams() == set()
    assert isinstance(unused, popxl.HostToDeviceStream)


def test_call_with_info_and_errors():
    ir = popxl.Ir()

    def linear(x, w, b):
        y = x @ w
        y = y + b
        return ops.identity(y, "y")

    with ir.main_graph:
        x = popxl.variable(np.ones((2, 4), np.float32), name="x")
        w = popxl.variable(np.ones((4, 3), np.float32), name="w")
        b = popxl.variable(np.ones((3,), np.float32), name="b")
        g = ir.create_graph(linear, x, w, b)
        _gx, gw, gb = g.inputs
        info = ops.call_with_info(g, x, inputs_dict={gw: w, gb: b})
        (y,) = info.outputs
        assert y.name == "y"
        (y2,) = ops.call(g, x, w, b)
        assert y2.name == "y__t0"
        assert isinstance(info._op, call_d.CallOp)
        assert info._op.callee.root_reference.data == g.name
        assert info.called_graph is g
        assert info.inputs == (x, w, b)
        assert info.parent_input(1) is w and info.parent_output(0) is y
        assert info.graph_to_parent(gb) is b and info.graph_to_parent(g.outputs[0]) is y
        assert info.parent_to_graph(w) is gw and info.parent_to_graph(y) is g.outputs[0]
        assert info.graph_to_parent_input_index(2) == 2
        info.set_parent_input_modified(b)
        # this call site only: it calls a copy of g whose input 2 is by reference
        assert info.called_graph._input_by_ref(2) and not g._input_by_ref(2)
        assert info._op.callee.root_reference.data == info.called_graph.name != g.name

        with pytest.raises(ValueError, match="too many inputs"):
            ops.call(g, x, w, b, b)
        with pytest.raises(ValueError, match=r"missing inputs: b"):
            ops.call(g, x, w)
        with pytest.raises(ValueError, match="specified twice"):
            ops.call(g, x, w, b, inputs_dict={gw: w})
        with pytest.raises(ValueError, match="is not an input of graph"):
            ops.call(g, x, w, inputs_dict={x: b})
        with pytest.raises(ValueError, match="expects"):
            ops.call(g, w, w, b)
        with pytest.raises(TypeError):
            ops.call(lambda: 0, x)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
        with pytest.raises(ValueError, match="tensor w is in graph 'main_graph', not in the current"):
            ir.create_graph(lambda t: ops.call(g, t, w, b), x)
    reparse(ir)  # the failed graph was dropped


def test_call_errors_other_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), np.float32), name="x")
        g = ir.create_graph(lambda t: t * 2, x)
        with pytest.raises(ValueError, match="not in the current graph"):
            ir.create_graph(lambda t: ops.call(g, x)[0], x)


def test_repeat_and_conditional_structure():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), np.float32), name="x")
        c = popxl.variable(np.ones((2,), np.float32), name="c")
        body = ir.create_graph(lambda acc, inc: acc + inc, x, c)
        (r,) = ops.repeat(body, 5, x, c)
        info = ops.repeat_with_info(body, 0, x, inputs_dict={body.inputs[1]: c})
        assert isinstance(info._op, call_d.RepeatOp) and info._op.repeat_count.value.data == 0
        with pytest.raises(ValueError, match="repeat_count"):
            ops.repeat(body, -1, x, c)
        bad = ir.create_graph(lambda a: (a, a), x)
        with pytest.raises(ValueError, match="outputs but only"):
            ops.repeat(bad, 2, x)
        cast = ir.create_graph(lambda a: ops.cast(a, popxl.int32), x)
        with pytest.raises(ValueError, match="cannot be carried"):
            ops.repeat(cast, 2, x)

        then_g = ir.create_graph(lambda a: a * 2, x)
        else_g = ir.create_graph(lambda a: a - 1, x)
        flag = popxl.variable(True, name="flag")
        (z,) = ops.conditional(flag, then_g, else_g, [x], [x])
        with pytest.raises(ValueError, match="must match"):
            ops.conditional(flag, then_g, cast, [x], [x])
    assert r.shape == (2,) and z.shape == (2,)
    reparse(ir)


# ---------------------------------------------------------------------------------------
# Numerics on the NumPy runtime
# ---------------------------------------------------------------------------------------


def test_linear_layer_numerics():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 4)).astype(np.float32)
    W = rng.standard_normal((4, 3)).astype(np.float32)
    B = rng.standard_normal((3,)).astype(np.float32)

    class Linear(popxl.Module):
        def build(self, x, w, b):
            return ops.gelu(x @ w + b)

    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((2, 4), popxl.float32, "x")
        x = ops.host_load(s)
        w = popxl.variable(W, name="weight")
        b = popxl.variable(B, name="bias")
        g = ir.create_graph(Linear(), x, w, b)
        (y,) = ops.call(g, x, w, b)
        y_inline = Linear()(x, w, b)
    got, got_inline = run(ir, [y, y_inline], {s: X})
    z = X @ W + B
    expected = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_inline, expected, rtol=1e-5, atol=1e-6)


def test_nested_calls_repeat_conditional_numerics():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0], np.float32), name="x")
        inc = popxl.variable(np.array([0.5, 0.25], np.float32), name="inc")
        double = ir.create_graph(lambda a: a * 2, x)

        def body(acc, d):
            (twice,) = ops.call(double, acc)
            return twice + d

        bg = ir.create_graph(body, x, inc)
        (r,) = ops.repeat(bg, 3, x, inc)
        (r0,) = ops.repeat(bg, 0, x, inc)
        t_g = ir.create_graph(lambda a: a + 10, x)
        e_g = ir.create_graph(lambda a: a - 10, x)
        (ct,) = ops.conditional(popxl.constant(True), t_g, e_g, [x], [x])
        (ce,) = ops.conditional(popxl.constant(False), t_g, e_g, [x], [x])
    got_r, got_r0, got_ct, got_ce = run(ir, [r, r0, ct, ce])
    ref = np.array([1.0, 2.0], np.float32)
    for _ in range(3):
        ref = ref * 2 + np.array([0.5, 0.25], np.float32)
    np.testing.assert_allclose(got_r, ref)
    np.testing.assert_allclose(got_r0, [1.0, 2.0])
    np.testing.assert_allclose(got_ct, [11.0, 12.0])
    np.testing.assert_allclose(got_ce, [-9.0, -8.0])


def test_indexing_and_shape_numerics():
    X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        outs = [
            x[0],
            x[:, 1:3, ::2],
            x[..., -1],
            x[1, None, ::-1],
            x[popxl.constant(np.array([1, 0], np.int32))],
            x[ops.greater(x, popxl.constant(5.0))],
            x.reshape((4, -1)).T,
            ops.concat([x, x], axis=1),
            ops.split(x, 2, axis=2)[1],
            (2.0 - x) * 3 / (x + 1) ** 2,
            ops.sum(x, axis=(0, 2)),
            ops.mean(x, 1, keepdims=True),
            ops.argmax(x, 2),
            ops.onehot(popxl.constant(np.array([0, 2], np.int32)), 3, [0.0, 1.0]),
            ops.where(ops.greater(x, popxl.constant(3.0)), x, 0.0),
            ops.dynamic_slice(x, popxl.constant(np.array([1], np.uint32)), [1], [2]),
            ops.clip(x, 2, 5),
            ops.logsumexp(x, axis=1),
            ops.scaled_add(x, x, 2.0, popxl.constant(3.0)),
        ]
    expected = [
        X[0],
        X[:, 1:3, ::2],
        X[..., -1],
        X[1, None, ::-1],
        X[[1, 0]],
        np.where(X > 5, X, 0),
        X.reshape(4, -1).T,
        np.concatenate([X, X], 1),
        X[..., 2:],
        (2 - X) * 3 / (X + 1) ** 2,
        X.sum((0, 2)),
        X.mean(1, keepdims=True),
        X.argmax(2),
        np.eye(3)[[0, 2]],
        np.where(X > 3, X, 0),
        X[:, 1:3],
        np.clip(X, 2, 5),
        np.log(np.exp(X).sum(1)),
        5 * X,
    ]
    for got, exp in zip(run(ir, outs), expected):
        assert got.shape == exp.shape
        np.testing.assert_allclose(got, exp, rtol=1e-5)


def test_var_updates_numerics():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(4, np.float32), name="w")
        m = popxl.variable(np.ones(4, np.float16), name="m")
        g = popxl.constant(np.full(4, 2.0, np.float32))
        ops.var_updates.accumulate_(w, g, f=0.5)  # 2
        ops.scaled_add_(w, g, b=-popxl.constant(0.25))  # 1.5
        ops.scaled_add_(w, g, a=popxl.constant(2.0), b=1.0)  # 5
        ops.var_updates.accumulate_moving_average_(m, g, f=0.5)  # 1.5
        w2 = w * 1  # the value of w after the updates
    (got_w2,) = run(ir, [w2])
    np.testing.assert_allclose(got_w2, np.full(4, 5.0))


def test_printed_ir_is_runnable_text():
    """The IR text holds the variables' initial values: parse it back and compile it."""
    need_runtime()
    from xl.compiler import compile_module

    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
        s = popxl.h2d_stream((3,), popxl.float32, "x")
        o = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(o, w @ ops.host_load(s))
    _, module = reparse(ir)
    exe = compile_module(module)
    out = exe.run({"x": np.ones(3, np.float32)})
    np.testing.assert_allclose(out["y"], [3.0, 12.0])


def test_composite_ops_numerics():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2, 4, 3)).astype(np.float32)
    Wt = rng.standard_normal(4).astype(np.float32)
    Bs = rng.standard_normal(4).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        w = popxl.variable(Wt, name="w")
        b = popxl.variable(Bs, name="b")
        x2 = x.reshape((2, 12))
        outs = [
            ops.group_norm(x, w, b, 2, eps=1e-5),
            ops.layer_norm(x2, popxl.constant(np.ones(12, np.float32)), popxl.constant(np.zeros(12, np.float32))),
            ops.swish(x),
            ops.log2(ops.abs(x)),
            ops.isnan(ops.log(x)),
            ops.isfinite(ops.div(x, x - x)),
            ops.batch_norm_inference(x, w, b, b, ops.abs(w)),
            ops.lamb_square(ops.cast(x, popxl.float16)),
        ]
        y = x
        y += 1.0  # in place (ops.add_), as in PopXL: x itself is updated
        outs.append(y)
        assert y is x
    g = X.reshape(2, 2, -1)
    gn = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5)).reshape(X.shape)
    r = X.reshape(2, 12)
    expected = [
        gn * Wt[:, None] + Bs[:, None],
        (r - r.mean(1, keepdims=True)) / np.sqrt(r.var(1, keepdims=True) + 1e-5),
        X / (1 + np.exp(-X)),
        np.log2(np.abs(X)),
        X < 0,
        np.zeros_like(X, bool),
        (X - Bs[:, None]) / np.sqrt(np.abs(Wt)[:, None] + 1e-5) * Wt[:, None] + Bs[:, None],
        np.sum(X.astype(np.float16).astype(np.float32) ** 2),
        X + 1,
    ]
    with np.errstate(all="ignore"):
        got = run(ir, outs)
    for i, (a, e) in enumerate(zip(got, expected)):
        assert a.shape == np.shape(e), i
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5, err_msg=str(i))


def test_replica_grouping():
    ir = popxl.Ir(replication=8)
    cases = {
        (1, 8): [0] * 8,
        (1, 1): list(range(8)),
        (1, 2): [0, 0, 1, 1, 2, 2, 3, 3],
        (2, 2): [0, 1, 0, 1, 2, 3, 2, 3],
        (2, 4): [0, 1, 0, 1, 0, 1, 0, 1],
    }
    for (stride, size), assign in cases.items():
        rg = ir.replica_grouping(stride, size)
        assert rg.assignment == assign
        assert rg.num_groups == 8 // size
    rg = ir.replica_grouping(2, 4)
    assert repr(rg) == "ReplicaGrouping(num_replicas=8, stride=2, group_size=4, num_groups=2)"
    assert ir.replica_grouping(1, 2) == ir.replica_grouping_from_assignments([0, 0, 1, 1, 2, 2, 3, 3])
    with pytest.raises(ValueError):
        ir.replica_grouping(3)
