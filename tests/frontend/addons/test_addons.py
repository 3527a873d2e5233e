"""popxl_addons: Module naming and nesting, variable factories, bind/call, GraphCache,
print_schedule, ops (after ADDONS tests/unit/test_modules.py, test_variable_factory.py, ...)."""

import re
from functools import partial

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons import (
    BoundGraph,
    GraphCache,
    GraphWithNamedArgs,
    Module,
    NamedTensors,
    NamedVariableFactories,
    VariableFactory,
)
from tests.helpers.narrow import narrow


def need_session():
    if not hasattr(popxl, "Session"):
        pytest.skip("popxl.Session not available yet")


def run_ir(ir, outputs):
    """Host-store `outputs` (main-graph tensors) and run once: their values."""
    streams = []
    with ir.main_graph:
        for i, t in enumerate(outputs):
            s = popxl.d2h_stream(t.shape, t.dtype, f"out{i}")
            ops.host_store(s, t)
            streams.append(s)
    ir.num_host_transfers = 1
    session = popxl.Session(ir, "cpu")
    with session:
        res = session.run()
    return session, [res[s] for s in streams]


class Scale(Module):
    def build(self, x):
        w = self.add_variable_input("w", partial(np.full, x.shape, 2.0), x.dtype)
        return x * w


class Linear(Module):
    def __init__(self, out_features, bias=True):
        super().__init__()
        self.out_features = out_features
        self.bias = bias

    def build(self, x):
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)), x.dtype
        )
        y = x @ w
        if self.bias:
            b = self.add_variable_input("bias", partial(np.zeros, y.shape[-1]), x.dtype)
            y = y + b
        return y


class TwoLayers(Module):
    def __init__(self):
        super().__init__()
        self.linear1 = Linear(8)
        self.linear2 = Linear(4, bias=False)

    def build(self, x):
        return self.linear2(self.linear1(x))


SPEC = popxl.TensorSpec((2, 4), popxl.float32)


# ---------------------------------------------------------------------------------------
# namespace
# ---------------------------------------------------------------------------------------


def test_namespace():
    for name in [
        "Module",
        "NamedTensors",
        "NamedVariableFactories",
        "VariableFactory",
        "GraphWithNamedArgs",
        "BoundGraph",
        "GraphCache",
        "add_variable_input",
        "DotTree",
        "InputStreams",
        "OutputStreams",
        "ops",
        "transforms",
        "cross_entropy",
        "cross_entropy_with_grad",
    ]:
        assert hasattr(addons, name), name
    assert callable(addons.ops.cross_entropy_with_grad)
    assert callable(addons.ops.host_load) and callable(addons.ops.host_store)
    import popxl_addons.graph
    import popxl_addons.named_tensors
    import popxl_addons.variable_factory

    assert popxl_addons.graph.GraphWithNamedArgs is GraphWithNamedArgs
    assert popxl_addons.named_tensors.NamedTensors is NamedTensors
    assert popxl_addons.variable_factory.NamedVariableFactories is NamedVariableFactories
    assert addons.module.Module is Module
    assert issubclass(Module, popxl.Module)
    with pytest.raises(AttributeError):
        _ = addons.definitely_not_there


# ---------------------------------------------------------------------------------------
# Module
# ---------------------------------------------------------------------------------------


def test_create_graph_returns_factories_and_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = Linear(32).create_graph(SPEC)
    assert isinstance(facts, NamedVariableFactories)
    assert isinstance(graph, GraphWithNamedArgs)
    assert list(facts.to_dict()) == ["weight", "bias"]
    assert list(graph.args.to_dict()) == ["weight", "bias"]
    assert facts.weight.shape == (4, 32) and facts.bias.shape == (32,)
    assert facts.weight.dtype == popxl.float32
    assert graph.graph.name == "Linear_subgraph(0)"
    assert len(graph.graph.inputs) == 3
    assert graph.graph.inputs[1] is graph.args.weight
    assert graph.graph.inputs[2] is graph.args.bias
    assert tuple(graph.graph.outputs[0].shape) == (2, 32)


def test_module_is_reusable_after_create_graph():
    ir = popxl.Ir()
    m = Linear(3)
    with ir.main_graph:
        f1, g1 = m.create_graph(SPEC)
        f2, g2 = m.create_graph(popxl.TensorSpec((5, 4), popxl.float32))
    assert g1.graph != g2.graph
    assert list(f1.to_dict()) == list(f2.to_dict()) == ["weight", "bias"]
    assert f1.weight is not f2.weight
    assert m._variable_factories.len_flat() == 0  # module holds no state


def test_nested_module_names():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = TwoLayers().create_graph(SPEC)
    assert list(facts.to_dict()) == ["linear1.weight", "linear1.bias", "linear2.weight"]
    assert list(graph.args.to_dict()) == ["linear1.weight", "linear1.bias", "linear2.weight"]
    assert isinstance(facts.linear1, NamedVariableFactories)
    assert facts.linear2.weight.shape == (8, 4)
    # inlined: one graph, no calls
    sched = graph.print_schedule()
    assert "Call" not in sched
    assert "linear1.weight=%2" in sched


def test_nested_module_twice():
    ir = popxl.Ir()
    m = TwoLayers()
    with ir.main_graph:
        f1, _ = m.create_graph(SPEC)
        f2, _ = m.create_graph(SPEC)
    assert list(f1.to_dict()) == list(f2.to_dict())


def test_submodule_attribute_reassignment_and_deletion():
    m = TwoLayers()
    m.linear2 = Linear(2)
    assert m.get("linear2").out_features == 2
    assert m["linear1"] is m.linear1
    del m.linear2
    with pytest.raises(KeyError):
        m.get("linear2")
    ir = popxl.Ir()
    with ir.main_graph:

        class OnlyFirst(TwoLayers):
            def build(self, x):
                return self.linear1(x)

        facts, _ = OnlyFirst().create_graph(SPEC)
    assert list(facts.to_dict()) == ["linear1.weight", "linear1.bias"]


def test_duplicate_variable_input_name():
    class Dup(Module):
        def build(self, x):
            self.add_variable_input("w", partial(np.zeros, x.shape), x.dtype)
            self.add_variable_input("w", partial(np.zeros, x.shape), x.dtype)
            return x

    class Over(Module):
        def build(self, x):
            self.add_variable_input("w", partial(np.zeros, x.shape), x.dtype)
            w = self.add_variable_input("w", partial(np.ones, x.shape), x.dtype, overwrite=True)
            return x + w

    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError):
            Dup().create_graph(SPEC)
        facts, graph = Over().create_graph(SPEC)
    assert list(facts.to_dict()) == ["w"]
    assert np.all(facts.w.next_data() == 1)


def test_dotted_variable_names_nest():
    class Dotted(Module):
        def build(self, x):
            a = self.add_variable_input("a.b", partial(np.zeros, x.shape), x.dtype)
            return x + a

    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = Dotted().create_graph(SPEC)
        v = facts.init()
    assert facts.a.b.shape == (2, 4)
    assert v.a.b.name == "a.b"


def test_add_variable_inputs_outlining():
    class Outlined(Module):
        def build(self, x):
            facts, sub = Linear(4).create_graph(x)
            l1 = sub.bind(self.add_variable_inputs("l1", facts))
            l2 = sub.bind(self.add_variable_inputs(2, facts))
            (x,) = l1.call(x)
            (x,) = l2.call(x)
            return x

    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = Outlined().create_graph(SPEC)
    assert list(facts.to_dict()) == ["l1.weight", "l1.bias", "2.weight", "2.bias"]
    assert [t.shape for t in narrow(graph.args["2"], NamedTensors).tensors] == [(4,), (4, 4)]
    sched = graph.print_schedule()
    calls = [l for l in sched.splitlines() if l.strip().startswith("Call.")]
    assert len(calls) == 2
    assert all("(Linear_subgraph(1))" in c for c in calls)


def test_from_list():
    layers = Module.from_list([Scale(), Scale(), Scale()])
    assert len(list(layers)) == 3
    assert layers[0] is layers.get("0")
    assert layers[-1] is layers.get(2)
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = layers.create_graph(SPEC)
    assert list(facts.to_dict()) == ["0.w", "1.w", "2.w"]


class Chain(Module):
    """Three weights from `Module.from_variable_factories`, indexed inside the build."""

    def build(self, x):
        self.weights = Module.from_variable_factories(
            [addons.VariableFactory(partial(np.full, (4, 4), 0.5 * (i + 1), np.float32)) for i in range(3)]
        )
        for i in range(3):
            x = x @ self.weights[i]
        return x


def test_from_variable_factories_indexed():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(8, dtype=np.float32).reshape(2, 4))
        facts, graph = Chain().create_graph(x)
        assert list(facts.to_dict()) == ["weights.0", "weights.1", "weights.2"]
        assert all(graph.args.weights[i] in graph.graph for i in range(3))
        with pytest.raises(KeyError):
            graph.args.weights[3]
        (y,) = graph.bind(facts.init()).call(x)
    _, (got,) = run_ir(ir, [y])
    want = np.arange(8, dtype=np.float32).reshape(2, 4)
    for i in range(3):
        want = want @ np.full((4, 4), 0.5 * (i + 1), np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_build_not_implemented():
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(NotImplementedError):
            Module().create_graph(SPEC)


def test_module_call_inlines_into_current_graph():
    class Outer(Module):
        def __init__(self):
            super().__init__()
            self.inner = Scale()

        def build(self, x):
            return self.inner(self.inner(x))

    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError):  # same named input twice
            Outer().create_graph(SPEC)


def test_cache_argument_validation():
    with pytest.raises(TypeError):
        Scale(cache="yes")  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    assert Scale(cache=None)._graph_cache is None
    assert isinstance(Scale(cache=True)._graph_cache, GraphCache)
    c = GraphCache()
    assert Scale(cache=c)._graph_cache is c


# ---------------------------------------------------------------------------------------
# VariableFactory
# ---------------------------------------------------------------------------------------


def test_variable_factory_basics():
    f = VariableFactory(partial(np.zeros, (2, 3)))
    assert f.shape == (2, 3)
    assert f.dtype == popxl.float32  # float64 downcast
    assert VariableFactory(lambda: np.zeros(2, np.int64)).dtype == popxl.int32
    assert VariableFactory(lambda: np.zeros(2), popxl.float16).dtype == popxl.float16
    assert VariableFactory(partial(np.zeros, ())).shape == ()
    assert re.fullmatch(r"<popxl_addons\.variable_factory\.VariableFactory object at 0x[0-9a-f]+>", repr(f))


def test_variable_factory_bad_callable():
    # ValueError as upstream (its tests/unit/test_input_factory.py: a callable that raises)
    with pytest.raises(ValueError, match="calling data_iter failed"):
        VariableFactory(lambda: sum(1))  # pyright: ignore[reportCallIssue, reportArgumentType]  # raises: the test checks the error
    with pytest.raises(ValueError, match="calling data_iter failed"):
        VariableFactory(lambda x: x)  # pyright: ignore[reportArgumentType]  # needs an argument: the test checks the error
    with pytest.raises(ValueError, match="must be a callable, an iterable or an array"):
        VariableFactory(object())  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


def test_variable_factory_calls_once_to_validate():
    calls = []

    def data():
        calls.append(1)
        return np.ones(3)

    f = VariableFactory(data)
    assert len(calls) == 1
    assert np.all(f.next_data() == 1) and len(calls) == 2


def test_variable_factory_iterable_and_constant():
    f = VariableFactory(iter([np.zeros(2), np.ones(2)]))
    assert f.shape == (2,)
    assert np.all(f.next_data() == 0)  # the first element is not lost
    assert np.all(f.next_data() == 1)
    c = VariableFactory(np.arange(3, dtype=np.float32))
    assert c.shape == (3,) and np.all(c.next_data() == [0, 1, 2])


def test_init_alphabetical_and_prefix():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, _ = Linear(3).create_graph(SPEC)
        v = facts.init()
        v2 = facts.init("layer")
    assert list(v.to_dict()) == ["bias", "weight"]
    assert v.weight.name == "weight" and v.bias.name == "bias"
    assert v2.weight.name == "layer.weight"
    assert isinstance(v.weight, popxl.Variable)
    assert v.weight.shape == (4, 3)
    assert [t.name for t in v.tensors] == ["bias", "weight"]


def test_init_twice_unique_names():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, _ = Linear(3).create_graph(SPEC)
        v1 = facts.init()
        v2 = facts.init()
    assert v1.weight is not v2.weight
    assert v1.weight.name != v2.weight.name


def test_init_zero_and_undef_in_subgraph():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, _ = Linear(3).create_graph(SPEC)

    def body(x):
        z = facts.init_zero()
        u = facts.init_undef()
        assert list(z.to_dict()) == ["bias", "weight"]
        assert z.weight.shape == (4, 3) and u.bias.shape == (3,)
        return x @ z.weight + z.bias

    with ir.main_graph:
        g = ir.create_graph(body, SPEC)
    assert "Init" in GraphWithNamedArgs(g).print_schedule()


# ---------------------------------------------------------------------------------------
# bind / call
# ---------------------------------------------------------------------------------------


def test_bind_and_call():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = Linear(3).create_graph(SPEC)
        v = facts.init()
        bound = graph.bind(v)
        assert isinstance(bound, BoundGraph)
        assert bound.args == {graph.args.weight: v.weight, graph.args.bias: v.bias}
        x = popxl.variable(np.ones((2, 4), np.float32), name="x")
        (y,) = bound.call(x)
        info = bound.call_with_info(x)
        assert tuple(y.shape) == (2, 3)
        assert info.called_graph == graph.graph
        # unbound call, positional
        (y2,) = graph.call(x, v.weight, v.bias)
        # args override / partial binding
        half = graph.bind(NamedTensors(weight=v.weight))
        (y3,) = half.call(x, args={graph.args.bias: v.bias})
        (y4,) = half.bind({graph.args.bias: v.bias}).call(x)
        # args given as a NamedTensors tree
        (y5,) = graph.call(x, args=v)
        io = bound.subgraph_io_map(x, outs=y)
        assert io[graph.graph.inputs[0]] is x
        assert io[graph.graph.outputs[0]] is y
        assert io[graph.args.weight] is v.weight
    if hasattr(popxl, "Session"):
        session, outs = run_ir(ir, [y, y2, y3, y4, y5])
        w = session.get_tensor_data(v.weight)
        for o in outs:
            np.testing.assert_allclose(o, np.ones((2, 4)) @ w, rtol=1e-6, atol=1e-6)


def test_two_bindings_share_graph():
    need_session()
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = Scale().create_graph(SPEC)
        v1 = facts.init()
        v2 = facts.init()
        x = popxl.variable(np.full((2, 4), 3.0, np.float32), name="x")
        (a,) = graph.bind(v1).call(x)
        (b,) = graph.bind(v2).call(x)
    session, (ra, rb) = run_ir(ir, [a, b])
    assert np.all(ra == 6) and np.all(rb == 6)
    session.write_variable_data(v2.w, np.full((2, 4), 5.0, np.float32))
    with session:
        res = list(session.run().values())
    np.testing.assert_allclose(sorted(float(r.flat[0]) for r in res), [6.0, 15.0])


def test_grad_graph_info_absent():
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = Scale().create_graph(SPEC)
    with pytest.raises(AttributeError):
        _ = graph.grad_graph_info
    sentinel = object()
    g2 = GraphWithNamedArgs(graph.graph, graph.args, grad_graph_info=sentinel)
    assert g2.grad_graph_info is sentinel
    assert GraphWithNamedArgs.from_grad_graph(type("G", (), {"graph": graph.graph})()).graph == graph.graph


def test_copy():
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = TwoLayers().create_graph(SPEC)
    c = graph.copy()
    assert c.graph == graph.graph
    assert c.args is not graph.args and c.args.to_dict() == graph.args.to_dict()
    assert c.args.linear1 is not graph.args.linear1


# ---------------------------------------------------------------------------------------
# GraphCache
# ---------------------------------------------------------------------------------------


class Adam(Module):
    @popxl.in_sequence()
    def build(self, var: popxl.TensorByRef, grad: popxl.Tensor, *, lr, beta1=0.9):
        m = self.add_variable_input("first_order", partial(np.zeros, var.shape), var.dtype, by_ref=True)
        ops.scaled_add_(var, grad, b=-lr)
        ops.scaled_add_(m, grad, a=beta1, b=1 - beta1)


def test_graph_cache_reuses_module_graph():
    ir = popxl.Ir()
    opt = Adam(cache=True)
    with ir.main_graph:
        w1 = popxl.variable(np.zeros((3, 2), np.float32), name="w1")
        w2 = popxl.variable(np.zeros((3, 2), np.float32), name="w2")
        w3 = popxl.variable(np.zeros((5,), np.float32), name="w3")
        f1, g1 = opt.create_graph(w1, w1.spec, lr=0.1)
        f2, g2 = opt.create_graph(w2, w2.spec, lr=0.1)
        f3, g3 = opt.create_graph(w3, w3.spec, lr=0.1)
        f4, g4 = opt.create_graph(w1, w1.spec, lr=0.2)
        s1, s2 = f1.init(), f2.init()
        g1.bind(s1).call(w1, w1)
        g2.bind(s2).call(w2, w2)
    assert g1.graph == g2.graph
    assert g3.graph != g1.graph and g4.graph != g1.graph
    assert f1 is not f2 and list(f1.to_dict()) == list(f2.to_dict()) == ["first_order"]
    assert g1 is not g2 and g1.args.first_order is g2.args.first_order
    assert s1.first_order is not s2.first_order
    assert g1.graph.inputs[0] is not None
    # by_ref annotation honoured
    assert g1.graph._input_by_ref(0)


def test_graph_cache_per_ir_and_plain_functions():
    cache = GraphCache()

    def fn(x, y):
        return x + y

    ir1 = popxl.Ir()
    with ir1.main_graph:
        a = cache.create_graph(fn, SPEC, SPEC)
        b = cache.create_graph(fn, SPEC, SPEC)
        c = cache.create_graph(fn, popxl.TensorSpec((3, 4), popxl.float32), popxl.TensorSpec((3, 4), popxl.float32))
    ir2 = popxl.Ir()
    with ir2.main_graph:
        d = cache.create_graph(fn, SPEC, SPEC)
    assert a == b and a != c
    assert d != a and d.ir is ir2


def test_cache_shared_between_modules():
    cache = GraphCache()
    ir = popxl.Ir()
    m = Scale(cache=cache)
    with ir.main_graph:
        _, g1 = m.create_graph(SPEC)
        _, g2 = m.create_graph(SPEC)
        _, g3 = Scale(cache=cache).create_graph(SPEC)
    assert g1.graph == g2.graph
    assert g3.graph != g1.graph  # a different module instance


class _Configured(Module):
    """A module whose `__hash__` says which graph it builds (upstream's GraphCache keys by it)."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return x * self.factor

    def __hash__(self) -> int:
        return hash(self.factor)


def test_graph_cache_keys_by_module_hash():
    cache = GraphCache()
    ir = popxl.Ir()
    with ir.main_graph:
        a = cache.create_graph(_Configured(2.0), SPEC)
        b = cache.create_graph(_Configured(2.0), SPEC)  # another instance, the same hash
        c = cache.create_graph(_Configured(3.0), SPEC)
        d = cache.create_graph(_Configured(2.0), popxl.TensorSpec((3, 4), popxl.float32))
        m = _Configured(5.0)
        e = cache.create_graph(m.build, SPEC)  # a bound method: a new object each time
        f = cache.create_graph(m.build, SPEC)
        x = popxl.variable(np.ones((2, 4), np.float32))
        y = ops.call(b, x)[0] + ops.call(f, x)[0]
    assert a is b and a is not c and a is not d and e is f and e is not a
    _, (got,) = run_ir(ir, [y])
    np.testing.assert_array_equal(got, np.full((2, 4), 7.0))


# ---------------------------------------------------------------------------------------
# print_schedule
# ---------------------------------------------------------------------------------------

LINE = re.compile(r"^    (\w+)\.(\d+)(\([^)]*\)\))? \((.*)\) -> \((.*)\)$")


def test_print_schedule_format():
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = Linear(32).create_graph(SPEC)
    text = graph.print_schedule()
    lines = text.split("\n")
    assert lines[0] == "Graph : Linear_subgraph(0)"
    assert lines[1] == "  (%1, weight=%2, bias=%3) -> (%5) {"
    assert re.fullmatch(
        r"    MatMul\.\d+ \(%1 \[\(2, 4\) float32\], %2 \[\(4, 32\) float32\]\) -> \(%4 \[\(2, 32\) float32\]\)",
        lines[2],
    )
    assert re.fullmatch(
        r"    Add\.\d+ \(%4 \[\(2, 32\) float32\], %3 \[\(32,\) float32\]\) -> \(%5 \[\(2, 32\) float32\]\)",
        lines[3],
    )
    assert lines[4] == "  }" and len(lines) == 5
    ids = [int(narrow(LINE.match(l), re.Match).group(2)) for l in lines[2:4]]
    assert ids[0] >= 100 and ids[1] > ids[0]
    assert graph.print_schedule() == text  # stable


def test_print_schedule_inplace_and_main_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = Adam().create_graph(SPEC, SPEC, lr=0.1)
    text = graph.print_schedule()
    assert "first_order=%3" in text
    assert "ScaledAddLhsInplace" in text
    with ir.main_graph:
        w = popxl.variable(np.zeros((2, 4), np.float32), name="w")
        graph.bind(facts.init()).call(w, w)
    main = GraphWithNamedArgs(ir.main_graph).print_schedule()
    assert main.split("\n")[0] == f"Graph : {ir.main_graph.name}"
    assert main.split("\n")[1] == "  () -> () {"
    assert re.search(r"Call\.\d+\(Adam_subgraph\(0\)\) \(%1 \[\(2, 4\) float32\]", main)


def test_op_type_names():
    """print_schedule's op types come from the op classes (`popxl.printing.op_type_name`)."""
    from popxl.printing import op_type_name
    from xl.dialects.call import CallOp, RepeatOp
    from xl.dialects.graph import HostLoadOp
    from xl.dialects.ipu import CopyOp
    from xl.dialects.popxl import (
        AccumulateMeanOp,
        GeluGradOp,
        GeluOp,
        MatmulOp,
        ReduceSumOp,
        ReshapeOp,
        ScaledAddInplaceOp,
        SoftmaxOp,
    )  # fmt: skip

    assert op_type_name(MatmulOp) == "MatMul"
    assert op_type_name(GeluOp) == "Gelu"
    assert op_type_name(ReshapeOp) == "Reshape"
    assert op_type_name(CallOp) == "Call"
    assert op_type_name(RepeatOp) == "Loop"
    assert op_type_name(SoftmaxOp) == "Softmax"
    assert op_type_name(ScaledAddInplaceOp) == "ScaledAddLhsInplace"
    assert op_type_name(ReduceSumOp) == "ReduceSum"
    assert op_type_name(AccumulateMeanOp) == "Accumulate"
    assert op_type_name(GeluGradOp) == "GeluGrad"
    assert op_type_name(HostLoadOp) == "HostLoad"
    assert op_type_name(CopyOp) == "IpuCopy"


def test_print_schedule_names_every_op_class():
    """Every op print_schedule can meet has a PopART type name (no table to keep in sync)."""
    from popxl.printing import op_type_name
    from xl.dialects import get_all_dialects

    for factory in get_all_dialects().values():
        for cls in factory().operations:
            name = op_type_name(cls)
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", name), (cls.name, name)


# ---------------------------------------------------------------------------------------
# ops / streams
# ---------------------------------------------------------------------------------------


def test_cross_entropy_with_grad_numerics():
    need_session()
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 10)).astype(np.float32)
    labels = np.array([1, 0, 9, 3], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(logits, name="x")
        l = popxl.variable(labels, name="labels")
        loss, dx = addons.ops.cross_entropy_with_grad(x, l)
        loss2, dx2 = addons.ops.cross_entropy_with_grad(x, l, loss_scaling=4)
        loss3 = addons.ops.cross_entropy(x, l)
    _, (rl, rdx, rl2, rdx2, rl3) = run_ir(ir, [loss, dx, loss2, dx2, loss3])
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expect = -np.mean(np.log(p[np.arange(4), labels]))
    onehot = np.eye(10, dtype=np.float32)[labels]
    np.testing.assert_allclose(rl, expect, rtol=1e-5)
    np.testing.assert_allclose(rl2, expect, rtol=1e-5)  # loss not scaled
    np.testing.assert_allclose(rl3, expect, rtol=1e-5)
    np.testing.assert_allclose(rdx, (p - onehot) / 4, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rdx2, (p - onehot), rtol=1e-5, atol=1e-6)


def test_host_load_store_helpers():
    ir = popxl.Ir()
    with ir.main_graph:
        data, stream, t = addons.ops.host_load(np.ones((2, 2)), popxl.float32, "x")
        out = addons.ops.host_store(t + 1)
    assert data.dtype == np.float32
    assert tuple(stream.shape) == (2, 2) and tuple(t.shape) == (2, 2)
    if hasattr(popxl, "Session"):
        ir.num_host_transfers = 1
        with popxl.Session(ir, "cpu") as s:
            res = s.run({stream: data})
        np.testing.assert_allclose(res[out], 2 * np.ones((2, 2)))


def test_input_output_streams():
    ir = popxl.Ir()
    with ir.main_graph:
        ins = addons.InputStreams(x=((2, 4), popxl.float32), labels=((2,), popxl.int32))
        outs = addons.OutputStreams(loss=((), popxl.float32))
    assert len(ins) == 2
    assert ins.x is ins["x"] is ins[0]
    assert ins[-1] is ins.labels
    assert [tuple(s.shape) for s in ins] == [(2, 4), (2,)]
    assert list(outs.keys()) == ["loss"]
    assert isinstance(ins.x, popxl.HostToDeviceStream)
    assert isinstance(outs.loss, popxl.DeviceToHostStream)
    again = addons.InputStreams.from_streams({"a": ins.x})
    assert again.a is ins.x


def test_named_tensors_tensors_sorted_by_name_and_remap():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(1, np.float32), name="b_second")
        b = popxl.variable(np.zeros(1, np.float32), name="a_first")
        nt = NamedTensors.from_dict({"x": a, "y": b})
        assert nt.tensors == (b, a)
        assert nt.named_tensors == {"x": a, "y": b}
        r = nt.remap({a: b, b: a})
        assert r.x is b and r.y is a


def test_graph_cache_key_includes_ipu():
    ir = popxl.Ir()
    m = Scale(cache=True)
    with ir.main_graph:
        with popxl.ipu(0):
            _, g0 = m.create_graph(SPEC)
            _, g0b = m.create_graph(SPEC)
        with popxl.ipu(1):
            _, g1 = m.create_graph(SPEC)
    assert g0.graph == g0b.graph
    assert g1.graph != g0.graph


# Seed 003's optimizer module, verbatim (a cached Module with by-ref state and in_sequence)
SEED_003_ADAM = """
class Adam(addons.Module):
    # we need to specify in_sequence because a lot of operations are in place and their order
    # shouldn't be rearranged
    @popxl.in_sequence()
    def build(
        self,
        var: popxl.TensorByRef,
        grad: popxl.Tensor,
        *,
        lr: Union[float, popxl.Tensor],
        beta1: Union[float, popxl.Tensor] = 0.9,
        beta2: Union[float, popxl.Tensor] = 0.999,
        eps: Union[float, popxl.Tensor] = 1e-5,
        weight_decay: Union[float, popxl.Tensor] = 1e-2,
        first_order_dtype: popxl.dtype = popxl.float16,
        bias_correction: bool = True
    ):

        # gradient estimators for the variable var - same shape as the variable
        first_order = self.add_variable_input(
            "first_order", partial(np.zeros, var.shape), first_order_dtype, by_ref=True
        )
        ops.var_updates.accumulate_moving_average_(first_order, grad, f=beta1)

        # variance estimators for the variable var - same shape as the variable
        second_order = self.add_variable_input(
            "second_order", partial(np.zeros, var.shape), popxl.float32, by_ref=True
        )
        ops.var_updates.accumulate_moving_average_square_(second_order, grad, f=beta2)

        # adam is a biased estimator: provide the step to correct bias
        step = None
        if bias_correction:
            step = self.add_variable_input(
                "step", partial(np.zeros, ()), popxl.float32, by_ref=True
            )

        # calculate the weight increment with adam heuristic
        updater = ops.var_updates.adam_updater(
            first_order,
            second_order,
            weight=var,
            weight_decay=weight_decay,
            time_step=step,
            beta1=beta1,
            beta2=beta2,
            epsilon=eps,
        )

        # in place weight update: w += (-lr)*dw
        ops.scaled_add_(var, updater, b=-lr)
"""


def test_seed_003_adam_cached_optimizer():
    from typing import Union

    ns = {
        "addons": addons,
        "popxl": popxl,
        "ops": ops,
        "np": np,
        "partial": partial,
        "Union": Union,
        "__name__": "seed003",
    }
    exec(SEED_003_ADAM, ns)
    rng = np.random.default_rng(1)
    data = {n: rng.normal(size=s).astype(np.float32) for n, s in [("w1", (3, 2)), ("w2", (3, 2)), ("b", (2,))]}
    grads = {n: rng.normal(size=d.shape).astype(np.float32) for n, d in data.items()}
    ir = popxl.Ir()
    optimizer = ns["Adam"](cache=True)
    graphs = {}
    with ir.main_graph, popxl.in_sequence(True):
        variables = {n: popxl.variable(d, name=n) for n, d in data.items()}
        for name, var in variables.items():
            g = popxl.variable(grads[name], name=f"grad_{name}")
            opt_facts, opt = optimizer.create_graph(var, var.spec, lr=1e-3, weight_decay=0.0, bias_correction=True)
            graphs[name] = opt
            assert list(opt_facts.to_dict()) == ["first_order", "second_order", "step"]
            assert opt_facts.first_order.dtype == popxl.float16
            state = opt_facts.init()
            opt.bind(state).call(var, g)
    assert graphs["w1"].graph == graphs["w2"].graph  # same shape: one graph
    assert graphs["b"].graph != graphs["w1"].graph
    assert graphs["w1"].graph.name.startswith("Adam_subgraph(")
    if not hasattr(popxl, "Session"):
        return
    ir.num_host_transfers = 1
    session = popxl.Session(ir, "cpu")
    with session:
        session.run()
    for name, var in variables.items():
        g = grads[name].astype(np.float64)
        m = 0.1 * g
        v = 0.001 * g * g
        mc, vc = m / (1 - 0.9), v / (1 - 0.999)
        expect = data[name] - 1e-3 * mc / (np.sqrt(vc) + 1e-5)
        np.testing.assert_allclose(session.get_tensor_data(var), expect, rtol=1e-4, atol=2e-5)


def test_grouped_variable_factory():
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping(group_size=2)
    counter = iter(range(100))
    f = VariableFactory(lambda: np.full((3,), next(counter), np.float32), replica_grouping=rg)
    assert f.shape == (3,)
    data = f.next_data()
    assert data.shape == (2, 3) and data[0, 0] != data[1, 0]
    with ir.main_graph:
        v = f.create_tensor("v")
    assert tuple(v.shape) == (3,)
    assert v.replica_grouping == rg


def test_replica_sharded_factory_shape():
    f = VariableFactory(partial(np.zeros, (4, 5)), shard_over=4)
    assert f.shape == (5,) and f.meta_shape == (4, 5)


def test_graph_autodiff_method_and_guard():
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = Linear(3).create_graph(SPEC)
        bwd = graph.autodiff()
        assert isinstance(bwd, GraphWithNamedArgs)
        info = bwd.grad_graph_info
        assert info.forward_graph == graph.graph
        assert len(bwd.graph.outputs) == 3  # dx, dweight, dbias
        with pytest.raises(ValueError):
            graph.autodiff()
        again = graph.autodiff(force=True)
        assert again.graph != bwd.graph
        with pytest.raises(ValueError):
            graph.autodiff(method="nope")
