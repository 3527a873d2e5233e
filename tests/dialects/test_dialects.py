"""The graph, call, ipu and rt dialects built from Python: verification, round trips,
verifier errors, and how DCE / CSE treat their ops (and the popxl in-place ops)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from xdsl.builder import ImplicitBuilder
from xdsl.context import Context
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    TensorType,
    f16,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.transforms.common_subexpression_elimination import (
    CommonSubexpressionElimination,
)
from xdsl.transforms.dead_code_elimination import DeadCodeElimination, region_dce
from xdsl.utils.exceptions import VerifyException

from xl.dialects import call, graph, ipu, popxl, rt
from xl.dialects.utils import dense_attr
from xl.tools.context import xl_context

T2 = TensorType(f32, [2])
T3 = TensorType(f32, [3])
TB = TensorType(i1, [])
M4 = MemRefType(f32, [4])


# ------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ctx() -> Context:
    return xl_context()


def text(op: Operation, generic: bool = False) -> str:
    s = io.StringIO()
    Printer(stream=s, print_generic_format=generic).print_op(op)
    return s.getvalue()


def parse(ctx: Context, source: str) -> ModuleOp:
    return Parser(ctx, source, "test.mlir").parse_module()


def assert_round_trip(ctx: Context, module: ModuleOp) -> str:
    """Verifies, then checks custom -> parse -> custom and generic -> parse -> custom."""
    module.verify()
    custom = text(module)
    again = parse(ctx, custom)
    again.verify()
    assert text(again) == custom
    from_generic = parse(ctx, text(module, generic=True))
    from_generic.verify()
    assert text(from_generic) == custom
    assert module.is_structurally_equivalent(again)
    return custom


def module_with(*ops: Operation) -> ModuleOp:
    return ModuleOp(list(ops))


def main_with(build) -> tuple[ModuleOp, graph.MainGraphOp]:
    """A module whose graph.main body is filled by `build()` (an ImplicitBuilder block)."""
    main = graph.MainGraphOp()
    with ImplicitBuilder(main.body.block):
        build()
    return ModuleOp([main]), main


def const(value, dtype=np.float32) -> graph.ConstantOp:
    return graph.ConstantOp(dense_attr(np.asarray(value, dtype=dtype)))


def identity_graph(name: str, types=(T2,), names=None, by_ref=None) -> graph.GraphOp:
    g = graph.GraphOp(name, list(types), list(types), input_names=names, by_ref=by_ref)
    with ImplicitBuilder(g.body.block) as args:
        graph.OutputOp(list(args))
    return g


def verify_error(op: Operation, match: str) -> None:
    with pytest.raises(VerifyException, match=match):
        op.verify()


# ------------------------------------------------------------------------------------
# graph
# ------------------------------------------------------------------------------------


def test_graph_program_round_trip(ctx: Context) -> None:
    x_stream = graph.H2DStreamOp("x", TensorType(f32, [2, 4]))
    y_stream = graph.D2HStreamOp("y", TensorType(f32, [2, 3]))
    lin = graph.GraphOp(
        "linear",
        [TensorType(f32, [2, 4]), TensorType(f32, [4, 3])],
        [TensorType(f32, [2, 3])],
        input_names=["x", "weight"],
        by_ref=[False, True],
    )
    with ImplicitBuilder(lin.body.block) as (x, w):
        y = popxl.MatmulOp.make([x, w])
        graph.OutputOp([y.results[0]])
    main = graph.MainGraphOp()
    main.attributes["num_host_transfers"] = IntegerAttr(3, i64)
    with ImplicitBuilder(main.body.block):
        w = graph.VariableOp("weight", TensorType(f32, [4, 3])).result
        c = graph.VariableOp("counter", TensorType(f32, []), dense_attr(np.array(0, np.float32))).result
        x = graph.HostLoadOp("x", TensorType(f32, [2, 4])).result
        y = call.CallOp("linear", [x, w], [TensorType(f32, [2, 3])]).res[0]
        graph.HostStoreOp("y", y)
        del c
    module = module_with(x_stream, y_stream, lin, main)
    out = assert_round_trip(ctx, module)

    assert "graph.h2d_stream @x : tensor<2x4xf32>" in out
    assert "graph.d2h_stream @y : tensor<2x3xf32>" in out
    assert (
        'graph.graph @linear(%0: tensor<2x4xf32> {graph.name = "x"}, '
        '%1: tensor<4x3xf32> {graph.by_ref, graph.name = "weight"}) -> tensor<2x3xf32>'
    ) in out
    assert "graph.main attributes {num_host_transfers = 3 : i64} {" in out
    assert 'graph.variable "counter" = dense<0.000000e+00> : tensor<f32>' in out
    assert "call.call @linear(" in out

    # accessors
    assert lin.graph_name == "linear"
    assert [lin.input_name(i) for i in range(2)] == ["x", "weight"]
    assert [lin.input_is_by_ref(i) for i in range(2)] == [False, True]
    assert lin.output_op.outs[0].type == TensorType(f32, [2, 3])
    assert main.num_host_transfers == 3 and main.replication_factor == 1


def test_graph_parse_by_ref_args(ctx: Context) -> None:
    src = """
    graph.graph private @acc(%x: tensor<2xf32> {graph.name = "x"},
                             %a: tensor<2xf32> {graph.by_ref, graph.name = "acc"},
                             %n: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
      popxl.scaled_add_ %a, %x {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
      graph.output %x, %n : tensor<2xf32>, tensor<2xf32>
    }
    """
    module = parse(ctx, src)
    assert_round_trip(ctx, module)
    g = next(iter(module.ops))
    assert isinstance(g, graph.GraphOp)
    assert g.sym_visibility is not None and g.sym_visibility.data == "private"
    assert [g.input_name(i) for i in range(3)] == ["x", "acc", "arg2"]
    assert [g.input_is_by_ref(i) for i in range(3)] == [False, True, False]


def test_graph_update_function_type() -> None:
    g = graph.GraphOp("g", [T2], [])
    with ImplicitBuilder(g.body.block) as (x,):
        graph.OutputOp([x])
    m = module_with(g)
    verify_error(m, "graph.output types")
    g.update_function_type()
    m.verify()
    assert g.function_type.outputs.data == (T2,)


def first_op(m: ModuleOp) -> Operation:
    """The first op of a module built with at least one."""
    op = m.body.block.first_op
    assert op is not None
    return op


def test_empty_main_round_trips(ctx: Context) -> None:
    out = assert_round_trip(ctx, module_with(graph.MainGraphOp()))
    assert "graph.main {\n  }" in out
    main = parse(ctx, "graph.main {\n}").body.block.first_op
    assert isinstance(main, graph.MainGraphOp)
    assert len(main.body.blocks) == 1


def test_graph_output_type_mismatch() -> None:
    g = graph.GraphOp("g", [T2], [T3])
    with ImplicitBuilder(g.body.block) as (x,):
        graph.OutputOp([x])
    verify_error(
        module_with(g),
        r"graph @g: graph.output types .*tensor<2xf32>.* differ from the declared output types .*tensor<3xf32>",
    )


def test_graph_must_end_with_output() -> None:
    g = graph.GraphOp("g", [T2], [])
    with ImplicitBuilder(g.body.block) as (x,):
        popxl.NegOp.make([x])
    with pytest.raises(VerifyException, match="terminates block|must end with graph.output"):
        module_with(g).verify()


def test_output_outside_graph() -> None:
    m, _ = main_with(lambda: graph.OutputOp([const([1.0, 2.0]).result]))
    verify_error(m, "'graph.output' expects parent op 'graph.graph'")


def test_variable_only_in_main() -> None:
    g = graph.GraphOp("g", [], [T2])
    with ImplicitBuilder(g.body.block):
        v = graph.VariableOp("w", T2)
        graph.OutputOp([v.result])
    verify_error(
        module_with(g),
        r'graph.variable "w": variables can only be created in the main graph \(graph.main\), not in graph @g',
    )
    # detached variables are fine (they are being built)
    graph.VariableOp("w", T2).verify()


def test_variable_init_type() -> None:
    m, _ = main_with(lambda: graph.VariableOp("w", T2, dense_attr(np.zeros(3, np.float32))))
    verify_error(
        m,
        r'graph.variable "w": initial value of type tensor<3xf32> does not match the variable type tensor<2xf32>',
    )


def test_main_attributes() -> None:
    main = graph.MainGraphOp()
    main.attributes["num_host_transfers"] = IntegerAttr(0, i64)
    verify_error(module_with(main), "graph.main: 'num_host_transfers' must be a positive integer")


def test_host_load_unknown_stream() -> None:
    m, _ = main_with(lambda: graph.HostLoadOp("nope", T2))
    verify_error(m, r"graph.host_load: @nope does not name a graph.h2d_stream declaration \(no such symbol\)")


def test_host_load_wrong_type() -> None:
    m, _ = main_with(lambda: graph.HostLoadOp("x", T3))
    m.body.block.insert_op_before(graph.H2DStreamOp("x", T2), first_op(m))
    verify_error(m, r"graph.host_load: stream @x carries \(2,\) float32 but the load produces \(3,\) float32")


def test_host_load_from_d2h_stream() -> None:
    m, _ = main_with(lambda: graph.HostLoadOp("y", T2))
    m.body.block.insert_op_before(graph.D2HStreamOp("y", T2), first_op(m))
    verify_error(m, r"@y does not name a graph.h2d_stream declaration \(it is a graph.d2h_stream\)")


def test_host_store_into_h2d_stream() -> None:
    def build() -> None:
        graph.HostStoreOp("x", graph.HostLoadOp("x", T2).result)

    m, _ = main_with(build)
    m.body.block.insert_op_before(graph.H2DStreamOp("x", T2), first_op(m))
    verify_error(
        m,
        r"graph.host_store: @x does not name a graph.d2h_stream declaration \(it is a graph.h2d_stream\)",
    )


def test_host_store_wrong_type() -> None:
    m, _ = main_with(lambda: graph.HostStoreOp("y", const([1.0, 2.0]).result))
    m.body.block.insert_op_before(graph.D2HStreamOp("y", T3), first_op(m))
    verify_error(
        m,
        r"graph.host_store: stream @y carries \(3,\) float32 but the stored tensor is \(2,\) float32",
    )


def test_detached_symbol_users_raise_verify_exception() -> None:
    verify_error(graph.HostLoadOp("x", T2), r"not inside a module")
    x = const([1.0, 2.0])
    verify_error(call.CallOp("g", [x.result], [T2]), r"not inside a module")


# ------------------------------------------------------------------------------------
# call
# ------------------------------------------------------------------------------------


def _call_module(make_call, *graphs: graph.GraphOp) -> ModuleOp:
    m, _ = main_with(make_call)
    for g in graphs:
        m.body.block.insert_op_before(g, first_op(m))
    return m


def test_call_ops_round_trip(ctx: Context) -> None:
    acc = identity_graph("acc", (T2, T2), names=["x", "acc"], by_ref=[False, True])
    step = graph.GraphOp("step", [T2, T3], [T2])
    with ImplicitBuilder(step.body.block) as (h, _):
        graph.OutputOp([h])
    ident = identity_graph("id")
    noop = graph.GraphOp("noop", [], [])
    with ImplicitBuilder(noop.body.block):
        graph.OutputOp([])
    ops: dict[str, Operation] = {}

    def build() -> None:
        x = const([1.0, 2.0]).result
        w = graph.VariableOp("w", T3).result
        c = graph.ConstantOp(DenseIntOrFPElementsAttr.from_list(TB, [1])).result
        ops["call"] = call.CallOp("acc", [x, x], [T2, T2])
        ops["repeat"] = call.RepeatOp("step", 5, [x, w], [T2])
        ops["cond"] = call.ConditionalOp(c, "id", [x], "id", [x], [T2])
        call.ConditionalOp(c, "noop", [], "noop", [], [])
        call.CallOp("noop", [], [])

    m = _call_module(build, acc, step, ident, noop)
    out = assert_round_trip(ctx, m)
    assert "call.repeat @step 5 (" in out
    assert "call.conditional %" in out and " then @id(" in out and "-> ()" in out
    # by-reference operands
    c_op = ops["call"]
    assert isinstance(c_op, call.CallOp)
    assert [c_op.operand_is_by_ref(i) for i in range(2)] == [False, True]
    r_op, cond_op = ops["repeat"], ops["cond"]
    assert isinstance(r_op, call.RepeatOp) and isinstance(cond_op, call.ConditionalOp)
    assert not r_op.operand_is_by_ref(0)
    assert not cond_op.operand_is_by_ref(0)


def test_call_arity() -> None:
    g = identity_graph("g", (T2, T2), names=["x", "weight"])
    m = _call_module(lambda: call.CallOp("g", [const([1.0, 2.0]).result], [T2, T2]), g)
    verify_error(m, "call.call @g: 1 inputs given, the graph takes 2")


def test_call_type_mismatch_names_the_input() -> None:
    g = identity_graph("g", (T2, T2), names=["x", "weight"])

    def build() -> None:
        x = const([1.0, 2.0]).result
        w = const([1.0, 2.0, 3.0]).result
        call.CallOp("g", [x, w], [T2, T2])

    verify_error(
        _call_module(build, g),
        r"call.call @g: input 1 \('weight'\) is \(3,\) float32, the graph expects \(2,\) float32",
    )


def test_call_result_types() -> None:
    g = identity_graph("g")
    m = _call_module(lambda: call.CallOp("g", [const([1.0, 2.0]).result], [TensorType(f16, [2])]), g)
    verify_error(m, r"call.call @g: result types .* differ from the graph outputs")


def test_call_non_graph_symbol() -> None:
    m = _call_module(lambda: call.CallOp("s", [], []))
    m.body.block.insert_op_before(graph.H2DStreamOp("s", T2), first_op(m))
    verify_error(m, r"call.call: @s does not name a graph.graph \(it is a graph.h2d_stream\)")
    m2 = _call_module(lambda: call.CallOp("missing", [], []))
    verify_error(m2, r"@missing does not name a graph.graph \(no such symbol\)")


def test_repeat_carried_type_mismatch() -> None:
    body = graph.GraphOp("body", [T2, T3], [T3])
    with ImplicitBuilder(body.body.block) as (_, b):
        graph.OutputOp([b])

    def build() -> None:
        call.RepeatOp("body", 3, [const([1.0, 2.0]).result, const([1.0, 2.0, 3.0]).result], [T3])

    verify_error(
        _call_module(build, body),
        r"call.repeat @body: output 0 \(\(3,\) float32\) cannot be carried into input 0 \(\(2,\) float32\)",
    )


def test_repeat_more_outputs_than_inputs() -> None:
    body = graph.GraphOp("body", [T2], [T2, T2])
    with ImplicitBuilder(body.body.block) as (a,):
        graph.OutputOp([a, a])
    m = _call_module(lambda: call.RepeatOp("body", 3, [const([1.0, 2.0]).result], [T2, T2]), body)
    verify_error(m, "call.repeat @body: the graph has 2 outputs but only 1 inputs to carry them into")


def test_repeat_negative_count() -> None:
    body = identity_graph("body")
    m = _call_module(lambda: call.RepeatOp("body", -1, [const([1.0, 2.0]).result], [T2]), body)
    verify_error(m, "call.repeat: repeat_count must be >= 0, got -1")


@pytest.mark.parametrize(
    ("cond", "shown"),
    [(np.float32(1.0), r"\(\) float32"), (np.array([True, False]), r"\(2,\) bool")],
)
def test_conditional_needs_scalar_bool(cond, shown) -> None:
    g = identity_graph("id")

    def build() -> None:
        c = graph.ConstantOp(dense_attr(np.asarray(cond))).result
        x = const([1.0, 2.0]).result
        call.ConditionalOp(c, "id", [x], "id", [x], [T2])

    verify_error(
        _call_module(build, g),
        f"call.conditional: condition must be a scalar bool tensor, got {shown}",
    )


def test_conditional_checks_else_branch() -> None:
    a = identity_graph("a")
    b = identity_graph("b", (T2, T2))

    def build() -> None:
        c = graph.ConstantOp(DenseIntOrFPElementsAttr.from_list(TB, [0])).result
        x = const([1.0, 2.0]).result
        call.ConditionalOp(c, "a", [x], "b", [x], [T2])

    verify_error(_call_module(build, a, b), "call.conditional @b: 1 inputs given, the graph takes 2")


# ------------------------------------------------------------------------------------
# ipu
# ------------------------------------------------------------------------------------


def test_ipu_copy(ctx: Context) -> None:
    ops: list[Operation] = []

    def build() -> None:
        x = const([1.0, 2.0])
        x.attributes[ipu.IPU_ATTR] = IntegerAttr(0, i64)
        ops.append(x)
        ops.append(ipu.CopyOp(x.result, 0, 1))

    m, _ = main_with(build)
    out = assert_round_trip(ctx, m)
    assert "ipu.copy %" in out and "source = 0 : i64" in out and "destination = 1 : i64" in out
    x, cp = ops
    assert ipu.ipu_of(x) == 0 and ipu.ipu_of(cp) == 1
    assert cp.results[0].type == T2


def test_ipu_copy_negative_ipu() -> None:
    m, _ = main_with(lambda: ipu.CopyOp(const([1.0, 2.0]).result, -1, 1))
    verify_error(m, "ipu.copy: source IPU must be >= 0")
    m, _ = main_with(lambda: ipu.CopyOp(const([1.0, 2.0]).result, 0, -1))
    verify_error(m, "ipu.copy: destination IPU must be >= 0")


def test_ipu_copy_keeps_type() -> None:
    def build() -> None:
        x = const([1.0, 2.0]).result
        ipu.CopyOp.create(
            operands=[x],
            result_types=[T3],
            properties={"source": IntegerAttr(0, i64), "destination": IntegerAttr(1, i64)},
        )

    m, _ = main_with(build)
    verify_error(m, "expected from variable 'T'")


# ------------------------------------------------------------------------------------
# rt
# ------------------------------------------------------------------------------------


def _program(build) -> tuple[ModuleOp, rt.ProgramOp]:
    prog = rt.ProgramOp(attributes={"num_host_transfers": IntegerAttr(2, i64)})
    with ImplicitBuilder(prog.body.block):
        build()
    return ModuleOp([prog]), prog


def test_rt_program_round_trip(ctx: Context) -> None:
    def build() -> None:
        w = rt.StateOp("w", M4).result
        n = rt.StateOp("step", MemRefType(i32, []), dense_attr(np.array(0, np.int32))).result
        k = rt.ConstOp(dense_attr(np.ones(4, np.float32)), M4).result
        x = rt.AllocOp(M4).result
        c = rt.AllocOp(MemRefType(i1, [])).result
        rt.H2DOp("x", x)
        rt.KernelOp("popxl.add", [x, w], [x], {"note": IntegerAttr(1, i64)})
        rt.KernelOp("popxl.scaled_add_", [w, k], [])
        rt.CopyOp(x, w)
        loop = rt.LoopOp(3)
        with ImplicitBuilder(loop.body.block):
            rt.KernelOp("popxl.add", [x, k], [x])
        cond = rt.IfOp(c)
        with ImplicitBuilder(cond.then_region.block):
            rt.CopyOp(k, x)
        rt.D2HOp("y", x)
        del n

    m, prog = _program(build)
    out = assert_round_trip(ctx, m)
    assert "rt.program attributes {num_host_transfers = 2 : i64} {" in out
    assert 'rt.state "w" : memref<4xf32>' in out
    assert 'rt.state "step" = dense<0> : tensor<i32> : memref<i32>' in out
    assert 'rt.kernel "popxl.add"(' in out
    assert "rt.loop 3 {" in out
    assert "} else {\n    }" in out  # the empty else branch prints (and re-parses) as {}
    assert prog.int_attr("num_host_transfers", 1) == 2
    assert prog.int_attr("replication_factor", 1) == 1


def test_rt_empty_regions_round_trip(ctx: Context) -> None:
    m = parse(ctx, "rt.program {\n  rt.loop 0 {\n  }\n}")
    assert_round_trip(ctx, m)
    m2 = module_with(rt.ProgramOp())
    assert "rt.program {\n  }" in assert_round_trip(ctx, m2)


def test_rt_copy_type_mismatch() -> None:
    m, _ = _program(lambda: rt.CopyOp(rt.AllocOp(M4).result, rt.AllocOp(MemRefType(f16, [4])).result))
    verify_error(m, r"rt.copy: cannot copy \(4,\) float32 into \(4,\) float16")


def test_rt_state_parent_and_init() -> None:
    m, _ = main_with(lambda: rt.StateOp("w", M4))
    verify_error(m, "'rt.state' expects parent op 'rt.program'")
    m, _ = _program(lambda: rt.StateOp("w", M4, dense_attr(np.zeros(3, np.float32))))
    verify_error(m, r'rt.state "w": initial value tensor<3xf32> does not fit buffer memref<4xf32>')


def test_rt_const_fits_buffer() -> None:
    m, _ = _program(lambda: rt.ConstOp(dense_attr(np.zeros(3, np.float32)), M4))
    verify_error(m, "rt.const: value tensor<3xf32> does not fit buffer memref<4xf32>")


def test_rt_loop_negative_count() -> None:
    m, _ = _program(lambda: rt.LoopOp(-1))
    verify_error(m, "rt.loop: count must be >= 0, got -1")


def test_rt_if_condition() -> None:
    m, _ = _program(lambda: rt.IfOp(rt.AllocOp(MemRefType(f32, [])).result))
    verify_error(m, r"rt.if: condition must be a scalar bool buffer \(memref<i1>\), got memref<f32>")


def test_rt_streams_take_buffers() -> None:
    m, _ = _program(lambda: rt.H2DOp("x", const([1.0, 2.0]).result))
    with pytest.raises(VerifyException, match="memref"):
        m.verify()


# ------------------------------------------------------------------------------------
# DCE and CSE
# ------------------------------------------------------------------------------------


def _names(block: Block) -> list[str]:
    return [op.name for op in block.ops]


def _dce_module() -> tuple[ModuleOp, graph.MainGraphOp]:
    x_s = graph.H2DStreamOp("x", T2)
    y_s = graph.D2HStreamOp("y", T2)

    def build() -> None:
        w = graph.VariableOp("w", T2).result
        graph.VariableOp("unused", T2)  # never dead: the host can read it
        x = graph.HostLoadOp("x", T2).result
        graph.HostLoadOp("x", T2)  # result unused, but it consumes a transfer
        popxl.AddOp.make([x, w])  # dead
        popxl.NegOp.make([popxl.AddOp.make([x, x]).results[0]])  # dead chain
        popxl.ScaledAddInplaceOp.make([w, x], a=1.0, b=0.5)
        graph.HostStoreOp("y", x)
        graph.ConstantOp(dense_attr(np.zeros(2, np.float32)))  # dead

    m, main = main_with(build)
    m.body.block.insert_op_before(y_s, first_op(m))
    m.body.block.insert_op_before(x_s, y_s)
    m.verify()
    return m, main


KEPT = [
    "graph.variable",
    "graph.variable",
    "graph.host_load",
    "graph.host_load",
    "popxl.scaled_add_",
    "graph.host_store",
]


def test_region_dce_keeps_effects() -> None:
    m, main = _dce_module()
    region_dce(m.body)
    m.verify()
    assert _names(main.body.block) == KEPT
    assert _names(m.body.block)[:2] == ["graph.h2d_stream", "graph.d2h_stream"]


def test_dce_pass_keeps_effects() -> None:
    m, main = _dce_module()
    DeadCodeElimination().apply(xl_context(), m)
    assert _names(main.body.block) == KEPT


def test_rt_dce_keeps_state_and_io() -> None:
    def build() -> None:
        rt.StateOp("w", M4)
        x = rt.AllocOp(M4).result
        rt.AllocOp(M4)  # dead
        rt.ConstOp(dense_attr(np.ones(4, np.float32)), M4)  # dead
        rt.H2DOp("x", x)
        rt.KernelOp("popxl.relu", [x], [x])

    m, prog = _program(build)
    region_dce(m.body)
    assert _names(prog.body.block) == ["rt.state", "rt.alloc", "rt.h2d", "rt.kernel"]


def _cse(m: ModuleOp) -> None:
    CommonSubexpressionElimination().apply(xl_context(), m)
    m.verify()


def _adds(block: Block) -> list[Operation]:
    return [op for op in block.ops if isinstance(op, popxl.AddOp)]


def test_cse_merges_identical_adds() -> None:
    y_s = graph.D2HStreamOp("y", T2)

    def build() -> None:
        w = graph.VariableOp("w", T2).result
        x = const([1.0, 2.0]).result
        a = popxl.AddOp.make([x, w]).results[0]
        b = popxl.AddOp.make([x, w]).results[0]
        graph.HostStoreOp("y", a)
        graph.HostStoreOp("y", b)

    m, main = main_with(build)
    m.body.block.insert_op_before(y_s, main)
    _cse(m)
    (add,) = _adds(main.body.block)
    stores = [op for op in main.body.block.ops if isinstance(op, graph.HostStoreOp)]
    assert [s.value for s in stores] == [add.results[0], add.results[0]]


def test_cse_not_across_in_place_update_of_an_operand() -> None:
    y_s = graph.D2HStreamOp("y", T2)

    def build() -> None:
        w = graph.VariableOp("w", T2).result
        x = const([1.0, 2.0]).result
        a = popxl.AddOp.make([x, w]).results[0]
        popxl.ScaledAddInplaceOp.make([w, x], a=1.0, b=1.0)  # w changes
        b = popxl.AddOp.make([x, w]).results[0]
        graph.HostStoreOp("y", a)
        graph.HostStoreOp("y", b)

    m, main = main_with(build)
    m.body.block.insert_op_before(y_s, main)
    _cse(m)
    assert len(_adds(main.body.block)) == 2


def test_cse_not_when_a_result_is_updated_in_place() -> None:
    y_s = graph.D2HStreamOp("y", T2)

    def build() -> None:
        w = graph.VariableOp("w", T2).result
        x = const([1.0, 2.0]).result
        a = popxl.AddOp.make([x, w]).results[0]
        b = popxl.AddOp.make([x, w]).results[0]
        popxl.ScaledAddInplaceOp.make([a, x], a=1.0, b=1.0)  # a is mutated later
        graph.HostStoreOp("y", a)
        graph.HostStoreOp("y", b)

    m, main = main_with(build)
    m.body.block.insert_op_before(y_s, main)
    _cse(m)
    assert len(_adds(main.body.block)) == 2


def test_cse_not_when_a_result_is_passed_by_reference() -> None:
    acc = identity_graph("acc", (T2,), names=["acc"], by_ref=[True])
    y_s = graph.D2HStreamOp("y", T2)

    def build() -> None:
        x = const([1.0, 2.0]).result
        a = popxl.AddOp.make([x, x]).results[0]
        b = popxl.AddOp.make([x, x]).results[0]
        call.CallOp("acc", [a], [T2])  # may update a in place
        graph.HostStoreOp("y", a)
        graph.HostStoreOp("y", b)

    m, main = main_with(build)
    m.body.block.insert_op_before(acc, main)
    m.body.block.insert_op_before(y_s, main)
    _cse(m)
    assert len(_adds(main.body.block)) == 2


def test_regions_are_single_block() -> None:
    # A body region must hold exactly one block (an empty body has one empty block).
    main = graph.MainGraphOp(Region())
    with pytest.raises(VerifyException, match="single block"):
        module_with(main).verify()


# ------------------------------------------------------------------------------------
# graph / call helpers used by the passes
# ------------------------------------------------------------------------------------


def test_graph_and_call_helpers(ctx: Context) -> None:
    from xl.dialects.effects import written_operands

    acc = identity_graph("acc", (T2, T2), names=["x", "acc"], by_ref=[False, True])
    step = graph.GraphOp("step", [T2, T3], [T2])
    with ImplicitBuilder(step.body.block) as (h, _):
        graph.OutputOp([h])
    ident = identity_graph("id")
    ops: dict[str, Operation] = {}

    def build() -> None:
        x = const([1.0, 2.0]).result
        w = graph.VariableOp("w", T3).result
        c = graph.ConstantOp(DenseIntOrFPElementsAttr.from_list(TB, [1])).result
        ops["call"] = call.CallOp("acc", [x, x], [T2, T2])
        ops["repeat"] = call.RepeatOp("step", 5, [x, w], [T2])
        ops["cond"] = call.ConditionalOp(c, "id", [x], "acc", [x, x], [T2])

    m = _call_module(build, acc, step, ident)
    assert list(graph.graphs_by_name(m)) == ["id", "step", "acc"]
    assert graph.unique_graph_name(m, "acc") == "acc_1"
    assert graph.unique_graph_name(m, "new") == "new"
    assert call.called_graph_names(ops["cond"]) == ["id", "acc"]
    assert call.called_graph_names(ops["repeat"]) == ["step"]
    assert call.called_graph_names(m) == []
    sites = call.call_sites(m)
    assert sites["acc"] == [ops["call"], ops["cond"]] and sites["step"] == [ops["repeat"]]
    # the in-place interface of calls: operands bound to by-reference inputs
    assert written_operands(ops["call"]) == (1,)
    assert written_operands(ops["cond"]) == (3,)  # condition, then (x), else (x, acc)
    assert written_operands(ops["repeat"]) == ()

    # add_graph_outputs: the graph and its call.call sites get the new results in place
    ident2 = identity_graph("id2")
    g_in = ident2.body.block.args[0]
    neg = popxl.NegOp.make([g_in])
    ident2.body.block.insert_op_before(neg, ident2.output_op)

    def build2() -> None:
        x = const([1.0, 2.0]).result
        ops["c2"] = call.CallOp("id2", [x], [T2])

    m2 = _call_module(build2, ident2)
    old_res = ops["c2"].results[0]
    assert call.add_graph_outputs(m2, ident2, [neg.results[0]]) == [1]
    assert ops["c2"].results[0] is old_res and len(ops["c2"].results) == 2
    m2.verify()
    with pytest.raises(call.CallSiteError, match=r"@step: it is the body of a call.repeat"):
        call.add_graph_outputs(m, step, [step.body.block.args[0]])
    with pytest.raises(call.CallSiteError, match=r"@id: it is a branch of a call.conditional"):
        call.add_graph_outputs(m, ident, [ident.body.block.args[0]])


def test_graph_add_input() -> None:
    g = graph.GraphOp("g", [T2], [T2], input_names=["x"])
    with ImplicitBuilder(g.body.block) as (x,):
        graph.OutputOp([x])
    a = g.add_input(T3, "acc", by_ref=True, attrs={"ipu.id": IntegerAttr(1, i64)})
    b = g.add_input(T2, "first", index=0)
    assert [g.input_name(i) for i in range(3)] == ["first", "x", "acc"]
    assert [g.input_is_by_ref(i) for i in range(3)] == [False, False, True]
    assert g.body.block.args[2] is a and g.body.block.args[0] is b
    assert g.function_type.inputs.data == (T2, T2, T3)
    assert g.arg_attrs is not None and "ipu.id" in g.arg_attrs.data[2].data
    g.verify()
    g2 = graph.GraphOp("g2", [T2], [])  # no names yet: the old input gets `arg0`
    with ImplicitBuilder(g2.body.block):
        graph.OutputOp([])
    g2.add_input(T2, "y")
    assert [g2.input_name(i) for i in range(2)] == ["arg0", "y"]
    with pytest.raises(IndexError, match="input index 5 out of range 0..2"):
        g2.add_input(T2, "z", index=5)
