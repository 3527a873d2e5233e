"""Dead ops removed before outlining (`xl.passes.outline_dce`) against xDSL's `dce`: the
same IR on every valid program of the lit corpus and on random programs with dead ops,
in-place updates, calls and graphs; the `outline` pass removes them (option `dce`); the
default compile's pipeline without its separate `dce` gives the IR it gave with it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.transforms.dead_code_elimination import region_dce

from tests.helpers.fuzz_mlir import corpus
from xl.compiler.driver import OUTLINE_MIN_OPS, OUTLINE_PIPELINE, lower
from xl.dialects.graph import GraphOp
from xl.passes.outline import outline
from xl.passes.outline_dce import remove_dead_ops
from xl.tools.context import xl_context
from xl.tools.parse import parse_source


def _parse(text: str) -> ModuleOp:
    return parse_source(xl_context(), text, "x.mlir")


def _both(module: ModuleOp) -> tuple[str, str, int]:
    ours, xdsl = module.clone(), module.clone()
    n = remove_dead_ops([ours.body])
    region_dce(xdsl.body)
    ours.verify()
    return str(ours), str(xdsl), n


_CORPUS = corpus()


@pytest.mark.parametrize("name", [n for n, _ in _CORPUS])
def test_corpus_same_as_xdsl_dce(name):
    module = _parse(dict(_CORPUS)[name])
    ours, xdsl, _ = _both(module)
    assert ours == xdsl


T = "tensor<3xf32>"
_UNARY = ("gelu", "tanh", "relu")
_BINARY = ("add", "mul")


@st.composite
def programs(draw) -> str:
    """graph.main (and a graph called from it) of random ops on a few values: some results
    unused (dead), in-place updates of variables, host stores and calls (live)."""
    graph = [f"graph.graph @g(%a: {T}, %b: {T}) -> {T} {{"]
    vals = ["%a", "%b"]
    for i in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(_UNARY + _BINARY))
        a, b = draw(st.sampled_from(vals)), draw(st.sampled_from(vals))
        args, types = (f"{a}", f"{T}") if op in _UNARY else (f"{a}, {b}", f"{T}, {T}")
        graph.append(f"  %g{i} = popxl.{op} {args} : ({types}) -> {T}")
        vals.append(f"%g{i}")
    graph += [f"  graph.output {draw(st.sampled_from(vals))} : {T}", "}"]
    lines = [f"graph.h2d_stream @x : {T}", f"graph.d2h_stream @y : {T}", *graph, "graph.main {"]
    lines += [f'  %w = graph.variable "w" : {T}', f"  %x = graph.host_load @x : {T}"]
    vals = ["%w", "%x"]
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.integers(0, 9))
        a, b = draw(st.sampled_from(vals)), draw(st.sampled_from(vals))
        if kind == 0:
            lines.append(f"  %v{i} = call.call @g({a}, {b}) : ({T}, {T}) -> {T}")
        elif kind == 1:
            lines.append(f"  graph.host_store @y, {a} : {T}")
            continue
        elif kind == 2:
            lines.append(f"  popxl.scaled_add_ %w, {b} {{a = 1.0 : f64, b = 0.5 : f64}} : ({T}, {T}) -> ()")
            continue
        elif kind < 6:
            op = draw(st.sampled_from(_UNARY))
            lines.append(f"  %v{i} = popxl.{op} {a} : ({T}) -> {T}")
        else:
            op = draw(st.sampled_from(_BINARY))
            lines.append(f"  %v{i} = popxl.{op} {a}, {b} : ({T}, {T}) -> {T}")
        vals.append(f"%v{i}")
    lines.append("}")
    return "\n".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_same_as_xdsl_dce(text):
    module = _parse(text)
    ours, xdsl, _ = _both(module)
    assert ours == xdsl


def test_chain_of_dead_ops_and_live_sinks():
    text = f"""
graph.h2d_stream @x : {T}
graph.d2h_stream @y : {T}
graph.main {{
  %w = graph.variable "w" : {T}
  %x = graph.host_load @x : {T}
  %d0 = popxl.gelu %x : ({T}) -> {T}
  %d1 = popxl.add %d0, %w : ({T}, {T}) -> {T}
  %l0 = popxl.tanh %x : ({T}) -> {T}
  popxl.scaled_add_ %w, %l0 {{a = 1.0 : f64, b = 0.5 : f64}} : ({T}, {T}) -> ()
  %l1 = popxl.relu %x : ({T}) -> {T}
  graph.host_store @y, %l1 : {T}
}}"""
    module = _parse(text)
    ours, xdsl, n = _both(module)
    assert ours == xdsl
    assert n == 2  # gelu and the add reading it
    assert "popxl.gelu" not in ours and "popxl.add" not in ours
    assert all(k in ours for k in ("popxl.tanh", "popxl.scaled_add_", "popxl.relu", "graph.host_load"))


def _dead_in_repeats() -> ModuleOp:
    """Three identical layers, each with a dead op among them."""
    lines = [
        f"graph.h2d_stream @x : {T}",
        f"graph.d2h_stream @y : {T}",
        "graph.main {",
        f"  %v0 = graph.host_load @x : {T}",
    ]
    for i in range(3):
        lines += [
            f"  %a{i} = popxl.gelu %v{i} : ({T}) -> {T}",
            f"  %dead{i} = popxl.relu %a{i} : ({T}) -> {T}",
            f"  %b{i} = popxl.tanh %a{i} : ({T}) -> {T}",
            f"  %v{i + 1} = popxl.add %a{i}, %b{i} : ({T}, {T}) -> {T}",
        ]
    lines += [f"  graph.host_store @y, %v3 : {T}", "}"]
    return _parse("\n".join(lines))


def test_outline_removes_dead_ops_first():
    kept = _dead_in_repeats()
    outline(kept, 3)  # the function: dead ops outlined with the rest (kept alive by the calls)
    body = next(op for op in kept.body.block.ops if isinstance(op, GraphOp))
    assert "popxl.relu" in str(body)
    module = _dead_in_repeats()
    outline(module, 3, dce=True)
    body = next(op for op in module.body.block.ops if isinstance(op, GraphOp))
    assert "popxl.relu" not in str(module)
    assert [op.name for op in body.body.block.ops] == ["popxl.gelu", "popxl.tanh", "popxl.add", "graph.output"]
    piped = lower(_dead_in_repeats(), "outline{min-ops=3}")  # the pass: dce=true by default
    assert str(piped) == str(module)
    assert "popxl.relu" in str(lower(_dead_in_repeats(), "outline{min-ops=3 dce=false}"))


@pytest.mark.parametrize("name", ["frontend"])
def test_default_pipeline_same_ir_as_with_a_separate_dce(name):
    """The default compile's outlining pipeline gives the IR the pipeline with xDSL's
    `dce` before `hoist-updates` (and `outline{dce=false}`) gave."""
    module = _parse(dict(_CORPUS)[name])
    spec = f"outline{{min-ops={OUTLINE_MIN_OPS}}}"
    assert spec in OUTLINE_PIPELINE and ",dce,hoist-updates" not in OUTLINE_PIPELINE
    before = OUTLINE_PIPELINE.replace("hoist-updates,", "dce,hoist-updates,").replace(
        spec, f"outline{{min-ops={OUTLINE_MIN_OPS} dce=false}}"
    )
    for min_ops in (2, OUTLINE_MIN_OPS):
        now = OUTLINE_PIPELINE.replace(spec, f"outline{{min-ops={min_ops}}}")
        old = before.replace(f"min-ops={OUTLINE_MIN_OPS} ", f"min-ops={min_ops} ")
        assert str(lower(module, now)) == str(lower(module, old))


def test_regions_of_several_blocks_as_xdsl():
    """A region of several blocks (no xl dialect makes one; built by hand, unverified):
    blocks without live ops go, as in xDSL, whose liveness visits the blocks reachable
    from the entry block only (here none: the second and third blocks go whole)."""
    from xdsl.ir import Block

    from xl.dialects.graph import MainGraphOp

    def build() -> ModuleOp:
        module = _parse(f"""
graph.h2d_stream @x : {T}
graph.d2h_stream @y : {T}
graph.main {{
  %x = graph.host_load @x : {T}
  %a = popxl.gelu %x : ({T}) -> {T}
  %b = popxl.tanh %x : ({T}) -> {T}
  %c = popxl.relu %x : ({T}) -> {T}
  graph.host_store @y, %c : {T}
}}""")
        main = next(op for op in module.body.block.ops if isinstance(op, MainGraphOp))
        first = main.regions[0].block
        ops = list(first.ops)
        dead, live = Block(), Block()
        main.regions[0].add_block(dead)
        main.regions[0].add_block(live)
        for op in ops[1:3]:  # gelu, tanh: a block of dead ops
            op.detach()
            dead.add_op(op)
        for op in ops[3:]:  # relu, host_store: unreachable
            op.detach()
            live.add_op(op)
        return module

    ours, xdsl, n = _both_unverified(build())
    assert ours == xdsl and n == 4
    assert "graph.host_load" in ours and "popxl.relu" not in ours


def _both_unverified(module: ModuleOp) -> tuple[str, str, int]:
    ours, xdsl = module.clone(), module.clone()
    n = remove_dead_ops([ours.body])
    region_dce(xdsl.body)
    return str(ours), str(xdsl), n
