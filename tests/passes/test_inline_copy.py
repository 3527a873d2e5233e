"""`inlined_copy` builds what `inline` makes of a clone, copying each op once (the first
step of `lower`); `lower` falls back to a clone where it does not apply.

The reference is the `inline` pass itself on a clone: the printed modules (ops, order,
value names, graphs kept) must be equal, on random structured popxl programs (graphs
calling graphs from one or several places, by-reference inputs updated in place, inputs
not by reference written, repeats, conditionals) and a training step, for every option
of the pass; the input is left as it was.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tests.helpers.property_structured import Recipe, build, popxl_source, recipes, resolve
from xl.compiler import lower
from xl.compiler.driver import DEFAULT_PIPELINE, OUTLINE_PIPELINE, first_copy, pass_pipeline
from xl.passes.inline import inline_all, inlined_copy
from xl.tools.context import xl_context

OPTIONS = [(True, False), (True, True), (False, False), (False, True)]  # (remove_dead, keep_shared)


def _check_same(module: ModuleOp, copies: bool = True) -> None:
    """`inlined_copy` gives what `inline_all` gives on a clone, for every option (or None
    where it leaves the module to the pass; `copies`: never)."""
    before = str(module)
    for remove_dead, keep_shared in OPTIONS:
        want = module.clone()
        inline_all(want, remove_dead, keep_shared)
        got = inlined_copy(module, remove_dead, keep_shared)
        if got is None and not copies:
            continue
        assert got is not None
        got.verify()
        assert str(got) == str(want), (remove_dead, keep_shared)
    assert str(module) == before


@settings(max_examples=40, deadline=None)
@given(recipes(max_graphs=5, max_body=6, max_main=10))
def test_random_structured_programs_inline_alike(recipe: Recipe) -> None:
    p = resolve(recipe)
    _check_same(build(p, popxl_source(p)).ir._module, copies=False)


def test_training_step_inlines_alike() -> None:
    import numpy as np

    import popxl
    import popxl.ops as ops
    import popxl_addons as addons

    class Layer(addons.Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            w = self.add_variable_input("w", lambda: np.full((4, 4), 0.1, np.float32), x.dtype)
            return ops.gelu(x @ w)

    class Net(addons.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Layer(), Layer()

        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            return self.b(self.a(x))

    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 4), popxl.float32, "x"))
        facts, fwd = Net().create_graph(x)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        binfo = bwd.call_with_info(info.outputs[0], args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, binfo)
        for t in variables.tensors:
            ops.scaled_add_(t, grads[t], b=-0.1)
    _check_same(ir._module)
    # and the whole lowering: the same rt program as the passes on a clone
    for pipeline in (DEFAULT_PIPELINE, OUTLINE_PIPELINE):
        want = ir._module.clone()
        pass_pipeline(pipeline).apply(xl_context(), want)
        assert str(lower(ir._module, pipeline)) == str(want)


@pytest.mark.parametrize("calls", [1, 2])
def test_inputs_copied_at_the_call_inline_alike(calls: int) -> None:
    """One tensor passed to a by-reference input the callee updates and to an input not by
    reference, which the callee also updates in place: both get their copies at the call;
    a value output twice gives two tensors."""
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    spec = popxl.TensorSpec((2, 3), popxl.float32)

    def g(a0: popxl.TensorByRef, a1: popxl.Tensor, a2: popxl.Tensor) -> tuple[popxl.Tensor, ...]:
        ops.add_(a0, a1)
        ops.relu_(a2)
        t = a1 * 1.0
        return t, t, a2

    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "x0"), "x")
        graph = ir.create_graph(g, spec, spec, spec)
        for i in range(calls):
            r = ops.call(graph, x, x, x)
            ops.host_store(popxl.d2h_stream((2, 3), popxl.float32, f"o{i}"), r[0] + r[1])
    _check_same(ir._module)


def test_by_ref_input_not_updated_is_left_to_the_pass() -> None:
    """Found by comparing with the pass: G1 passes its input to a by-reference input of G0,
    whose body does not update it. The call of G0 counts it as written, its inlined body
    does not, so whether G1's call copies its input depends on which call the pass expands
    first: no copy (None), and `lower` gives the passes' result on a clone."""
    import popxl
    import popxl.ops as ops

    ir = popxl.Ir()
    spec = popxl.TensorSpec((2, 3), popxl.float32)
    with ir.main_graph:

        def g0(a0: popxl.TensorByRef) -> None:
            return None

        def g1(a0: popxl.Tensor) -> None:
            ops.call(graph0, a0)

        graph0 = ir.create_graph(g0, spec)
        graph1 = ir.create_graph(g1, spec)
        x = ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "x0"), "x")
        ops.call(graph1, ops.tanh(x))
        ops.host_store(popxl.d2h_stream((2, 3), popxl.float32, "o0"), x)
    module = ir._module
    assert inlined_copy(module) is None
    for pipeline in (DEFAULT_PIPELINE, OUTLINE_PIPELINE):
        want = module.clone()
        pass_pipeline(pipeline).apply(xl_context(), want)
        assert str(lower(module, pipeline)) == str(want)


def _parse(text: str) -> ModuleOp:
    return Parser(xl_context(), text).parse_module()


CYCLE = """
graph.graph @f(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %y = call.call @g(%x) : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %y : tensor<2xf32>
}
graph.graph @g(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %y = call.call @f(%x) : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %y : tensor<2xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %r = call.call @f(%a) : (tensor<2xf32>) -> tensor<2xf32>
}
"""


def test_graphs_in_a_cycle_are_left_to_the_pass() -> None:
    """No copy (None); `lower` clones and the pass reports the recursion as before."""
    module = _parse(CYCLE)
    assert inlined_copy(module) is None
    passes = pass_pipeline(DEFAULT_PIPELINE).passes
    copy, start = first_copy(module, passes)
    assert start == 0 and str(copy) == str(module) and copy is not module
    with pytest.raises(ValueError, match="calls itself"):
        lower(module, "inline")


def test_calls_of_a_shared_graph_in_a_cycle_are_kept() -> None:
    """With keep-shared, calls of a graph called from two places are not expanded, so the
    cycle through them is no obstacle: the copy is the pass's result."""
    text = CYCLE.replace(
        "%r = call.call @f(%a) : (tensor<2xf32>) -> tensor<2xf32>",
        "%r = call.call @f(%a) : (tensor<2xf32>) -> tensor<2xf32>\n"
        "  %s = call.call @f(%r) : (tensor<2xf32>) -> tensor<2xf32>",
    )
    module = _parse(text)
    got = inlined_copy(module, keep_shared=True)
    want = module.clone()
    inline_all(want, keep_shared=True)
    assert got is not None and str(got) == str(want)


def test_unknown_graph_is_left_to_the_pass() -> None:
    module = _parse("""
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %r = call.call @nowhere(%a) : (tensor<2xf32>) -> tensor<2xf32>
}
""")
    assert inlined_copy(module) is None
    with pytest.raises(ValueError, match="unknown graph @nowhere"):
        lower(module, "inline")
