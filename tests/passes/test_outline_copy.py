"""`outlined_copy` builds what `inline{keep-shared=true},hoist-updates,outline` make of a
clone, without the expanded program (the default compile's first step on large programs).

The reference is the three passes on a clone: the printed modules (ops, order, value names,
graphs and their inputs) must be equal, on training steps of repeated layers (forward and
gradient graphs called once from `graph.main`, variable updates), on random straight-line
programs repeated a few times and on random structured programs (graphs calling graphs,
by-reference inputs, copies at calls) wherever it applies, at several `min-ops`; where it
does not apply it returns None and `lower` runs the passes; the input is never changed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

import popxl
import popxl.ops as ops
import popxl_addons as addons
from tests.helpers import property_programs as straight
from tests.helpers import property_structured as structured
from xl.compiler import lower
from xl.compiler.driver import OUTLINE_PIPELINE, first_copy, pass_pipeline
from xl.dialects.call import CallOp
from xl.dialects.graph import GraphOp
from xl.passes.outline_copy import outlined_copy
from xl.tools.context import xl_context


def _passes(module: ModuleOp, min_ops: int) -> ModuleOp:
    want = module.clone()
    pass_pipeline(f"inline{{keep-shared=true}},hoist-updates,outline{{min-ops={min_ops}}}").apply(xl_context(), want)
    return want


def _check_same(module: ModuleOp, min_ops: int, applies: bool = True) -> ModuleOp | None:
    """`outlined_copy` gives the passes' result on a clone (or None, allowed unless
    `applies`), and leaves `module` as it was."""
    before = str(module)
    got = outlined_copy(module, min_ops)
    assert str(module) == before
    if got is None:
        assert not applies
        return None
    got.verify()
    assert str(got) == str(_passes(module, min_ops))
    return got


class Linear(addons.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.full((x.shape[-1], self.width), 0.1, np.float32), x.dtype)
        b = self.add_variable_input("b", lambda: np.zeros((self.width,), np.float32), x.dtype)
        return x @ w + b


class Net(addons.Module):
    """`layers` Linear + gelu layers after a first one of another width; with `attention`, a
    softmax attention with a residual add in each layer (in-place updates, views)."""

    def __init__(self, layers: int, attention: bool) -> None:
        super().__init__()
        self.first = Linear(4)
        self.layers = [Linear(4) for _ in range(layers)]
        for i, m in enumerate(self.layers):
            setattr(self, f"l{i}", m)
        self.attention = attention

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = ops.gelu(self.first(x))
        for m in self.layers:
            h = ops.gelu(m(x))
            if self.attention:
                h = ops.softmax(h @ h.T, axis=-1) @ h
            x = x + h
        return x


def training_step(layers: int, attention: bool) -> ModuleOp:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "x"))
        facts, fwd = Net(layers, attention).create_graph(x)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        ops.host_store(popxl.d2h_stream((2, 4), popxl.float32, "y"), info.outputs[0])
        binfo = bwd.call_with_info(info.outputs[0], args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, binfo)
        for t in variables.tensors:
            ops.scaled_add_(t, grads[t], b=-0.1)
    return ir._module


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("layers", [1, 3, 8])
def test_training_steps_outline_alike(layers: int, attention: bool) -> None:
    module = training_step(layers, attention)
    for min_ops in (1, 2, 3, 6):
        got = _check_same(module, min_ops)
        assert got is not None
        if layers > 1:  # the repeated layers are outlined
            assert any(isinstance(op, GraphOp) for op in got.body.block.ops)
            assert sum(isinstance(op, CallOp) for op in got.walk()) >= 2


def test_lower_uses_it_and_gives_the_passes_result() -> None:
    """The default compile's pipeline starts with the copy (`first_copy` skips the four
    passes it stands for) and lowers to the rt program of the passes on a clone."""
    module = training_step(6, False)
    passes = pass_pipeline(OUTLINE_PIPELINE).passes
    copy, start = first_copy(module, passes)
    assert start == 4 and [p.name for p in passes[:start]] == ["pipeline", "inline", "hoist-updates", "outline"]
    want = module.clone()
    pass_pipeline(OUTLINE_PIPELINE).apply(xl_context(), want)
    assert str(lower(module, OUTLINE_PIPELINE)) == str(want)


@settings(max_examples=40, deadline=None)
@given(straight.recipes(max_ops=12), st.integers(2, 4), st.sampled_from([1, 2, 3]))
def test_repeated_random_programs_outline_alike(recipe: straight.Recipe, repeats: int, min_ops: int) -> None:
    """Straight-line programs (`graph.main` only) whose ops are drawn `repeats` times."""
    recipe = straight.Recipe(recipe.streams, recipe.variables, recipe.ops * repeats, recipe.runs, recipe.seed)
    p = straight.resolve(recipe)
    _check_same(straight.build(p, straight.popxl_source(p)).ir._module, min_ops)


@settings(max_examples=60, deadline=None)
@given(structured.recipes(max_ipus=3, max_graphs=3, max_body=6, max_main=5), st.sampled_from([1, 2, 3]))
def test_random_structured_programs_outline_alike(recipe: structured.Recipe, min_ops: int) -> None:
    """Graphs calling graphs, by-reference inputs, inputs copied at calls; None where some
    graph is called from several places or an op has regions (repeat, conditional)."""
    p = structured.resolve(recipe)
    _check_same(structured.build(p, structured.popxl_source(p)).ir._module, min_ops, applies=False)


SHARED = """
graph.graph @g(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %y = popxl.gelu %x : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %y : tensor<2xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %r = call.call @g(%a) : (tensor<2xf32>) -> tensor<2xf32>
  %s = call.call @g(%r) : (tensor<2xf32>) -> tensor<2xf32>
}
"""


@pytest.mark.parametrize(
    "text",
    [
        SHARED,  # a graph called from two places (inline keeps its calls)
        SHARED.replace(
            "graph.main {",
            "graph.graph @dead(%x: tensor<2xf32>) -> () {\n"
            "  %y = call.call @g(%x) : (tensor<2xf32>) -> tensor<2xf32>\n  graph.output\n}\ngraph.main {",
        ).replace(
            "  %s = call.call @g(%r) : (tensor<2xf32>) -> tensor<2xf32>\n", ""
        ),  # one call of @g in a graph never called
    ],
)
def test_left_to_the_passes(text: str) -> None:
    """Where the input is not a chain of single calls, None; `lower` then runs the passes."""
    module = Parser(xl_context(), text).parse_module()
    assert outlined_copy(module, 1) is None
    want = module.clone()
    pass_pipeline(OUTLINE_PIPELINE).apply(xl_context(), want)
    assert str(lower(module, OUTLINE_PIPELINE)) == str(want)


@pytest.mark.parametrize("dead", [False, True])
def test_single_call_applies(dead: bool) -> None:
    """A graph called once; with `dead`, also a graph called from nowhere (erased)."""
    text = SHARED.replace("  %s = call.call @g(%r) : (tensor<2xf32>) -> tensor<2xf32>\n", "")
    if dead:
        text += "graph.graph @dead(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n  graph.output %x : tensor<2xf32>\n}\n"
    _check_same(Parser(xl_context(), text).parse_module(), 1)


def test_repeat_is_left_to_the_passes() -> None:
    """A graph run by `call.repeat`: None."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2,), popxl.float32, "x"))
        graph = ir.create_graph(lambda t: ops.gelu(t) + 1.0, x)
        (y,) = ops.repeat(graph, 3, x)
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "y"), y)
    module = ir._module
    assert outlined_copy(module, 1) is None
    want = module.clone()
    pass_pipeline(OUTLINE_PIPELINE).apply(xl_context(), want)
    assert str(lower(module, OUTLINE_PIPELINE)) == str(want)
