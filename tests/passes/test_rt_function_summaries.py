"""What `rt.func`s write (`rt.FuncSummaries`) and the caches of the rt analyses.

The rt passes ask, for every `rt.call`, which operands it may write; the answers come from
one summary per function per analysis (`FuncSummaries`, built by each `Memory`) and, in
`rt-reuse-buffers`, from `CallFills`. These tests pin that the answers equal a direct
recomputation from the definition (random programs with functions calling each other,
cycles included), that they follow edits of a function body between two analyses (never
stale), and that a function on a call cycle writes all its arguments.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import IntegerType, MemRefType, ModuleOp, UnitAttr, f32
from xdsl.ir import Block, Region, SSAValue

from xl.compiler import compile_module, lower
from xl.dialects import rt
from xl.passes.rt_analysis import VIEW_ATTR, Memory, effects, walk_ops
from xl.passes.rt_reuse_buffers import CallFills
from xl.passes.rt_views import mark_views
from xl.runtime.plan import PlanError
from xl.tools.context import xl_context

T = MemRefType(f32, [4])
B = MemRefType(IntegerType(1), [])


def parse(text: str) -> ModuleOp:
    from xdsl.parser import Parser

    return Parser(xl_context(), text).parse_module()


def program_of(module: ModuleOp) -> rt.ProgramOp:
    (p,) = [op for op in module.ops if isinstance(op, rt.ProgramOp)]
    return p


def funcs(program: rt.ProgramOp) -> dict[str, rt.FuncOp]:
    return {f.func_name: f for f in program.body.block.ops if isinstance(f, rt.FuncOp)}


# -- the definition, recomputed directly (no memoisation, no shared state) -------------------


def _callees(program: rt.ProgramOp, f: rt.FuncOp) -> set[str]:
    return {op.callee_name for op in f.walk() if isinstance(op, rt.CallOp)}


def _on_cycle(program: rt.ProgramOp, f: rt.FuncOp) -> bool:
    """Whether `f` reaches itself through one or more calls."""
    fs = funcs(program)
    seen: set[str] = set()
    todo = list(_callees(program, f))
    while todo:
        name = todo.pop()
        if name == f.func_name:
            return True
        if name in seen or name not in fs:
            continue
        seen.add(name)
        todo.extend(_callees(program, fs[name]))
    return False


def ref_call_written(program: rt.ProgramOp, call: rt.CallOp) -> frozenset[int]:
    n_in, n = len(call.ins), len(call.operands)
    f = funcs(program).get(call.callee_name)
    if f is None or f.is_ancestor(call):
        return frozenset(range(n))
    return ref_written_args(program, f) | frozenset(range(n_in, n))


def _ref_written_value(program: rt.ProgramOp, v: SSAValue) -> bool:
    for use in v.uses:
        user = use.operation
        if isinstance(user, rt.KernelOp):
            if use.index >= len(user.ins):
                return True  # an out
            if VIEW_ATTR in user.attributes and user.outs:
                return True  # the view is written by its own kernel (conservative rule)
            continue
        if isinstance(user, rt.CopyOp) and use.index == 0 or isinstance(user, rt.D2HOp | rt.IfOp):
            continue
        if isinstance(user, rt.CallOp) and use.index not in ref_call_written(program, user):
            continue
        return True
    return False


def ref_written_args(program: rt.ProgramOp, f: rt.FuncOp) -> frozenset[int]:
    args = f.body.block.args
    if _on_cycle(program, f):
        return frozenset(range(len(args)))
    return frozenset(i for i, a in enumerate(args) if _ref_written_value(program, a))


# -- random programs with functions ------------------------------------------------------------

# op kinds of a function body ("h2d": an op whose effects the function analysis does not
# know, so it counts as writing its operand)
_KINDS = ["kernel", "inplace", "copy", "view", "call", "loop_call", "if_kernel", "h2d"]


@st.composite
def recipes(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 4))
    sigs = [(draw(st.integers(0, 3)), draw(st.integers(0, 2))) for _ in range(n)]
    bodies = []
    for _ in range(n):
        bodies.append(
            [
                (kind, draw(st.integers(0, n - 1)), draw(st.lists(st.integers(0, 30), min_size=4, max_size=4)))
                for kind in draw(st.lists(st.sampled_from(_KINDS), max_size=6))
            ]
        )
    main = [(draw(st.integers(0, n - 1)), draw(st.lists(st.integers(0, 30), min_size=5, max_size=5))) for _ in range(3)]
    return {"sigs": sigs, "bodies": bodies, "main": main}


def _call(name: str, sig: tuple[int, int], pool: list[SSAValue], picks: list[int], fresh: Any) -> rt.CallOp:
    n_in, n_out = sig
    ins = [pool[picks[k % len(picks)] % len(pool)] for k in range(n_in)] if pool else [fresh() for _ in range(n_in)]
    outs = [fresh() for _ in range(n_out)]
    return rt.CallOp(name, ins, outs)


def build(recipe: dict[str, Any]) -> ModuleOp:
    """A program of `rt.func`s (any may call any, itself included) and calls of them."""
    sigs = recipe["sigs"]
    names = [f"f{i}" for i in range(len(sigs))]
    program = rt.ProgramOp()
    top = program.body.block
    for i, (n_in, n_out) in enumerate(sigs):
        f = rt.FuncOp(names[i], [T] * n_in, [T] * n_out)
        block = f.body.block
        pool: list[SSAValue] = list(block.args)

        def fresh(block: Block = block, pool: list[SSAValue] = pool) -> SSAValue:
            a = rt.AllocOp(T)
            block.add_op(a)
            pool.append(a.result)
            return a.result

        for kind, callee, picks in recipe["bodies"][i]:
            src = pool[picks[0] % len(pool)] if pool else fresh()
            if kind == "kernel":
                dst = pool[picks[1] % len(pool)]
                block.add_op(rt.KernelOp("popxl.relu", [src], [dst] if dst is not src else [fresh()]))
            elif kind == "inplace":
                block.add_op(rt.KernelOp("popxl.relu_", [src], [src]))
            elif kind == "copy":
                dst = pool[picks[1] % len(pool)]
                block.add_op(rt.CopyOp(src, dst))
            elif kind == "view":
                out = fresh()
                block.add_op(rt.KernelOp("popxl.reshape", [src], [out], {VIEW_ATTR: UnitAttr()}))
            elif kind == "call":
                block.add_op(_call(names[callee], sigs[callee], pool, picks, fresh))
            elif kind == "loop_call":
                call = _call(names[callee], sigs[callee], pool, picks, fresh)
                block.add_op(rt.LoopOp(2, Region(Block([call]))))
            elif kind == "if_kernel":
                cond = rt.AllocOp(B)
                block.add_op(cond)
                inner = rt.KernelOp("popxl.relu", [src], [pool[picks[2] % len(pool)]])
                block.add_op(rt.IfOp(cond.result, Region(Block([inner])), Region(Block())))
            else:  # an op with effects the analyses do not know here: writes its operand
                block.add_op(rt.H2DOp("s", src))
        top.add_op(f)
    states: list[SSAValue] = []
    for k in range(4):
        s = rt.StateOp(f"w{k}", T)
        top.add_op(s)
        states.append(s.result)

    def fresh_top() -> SSAValue:
        a = rt.AllocOp(T)
        top.add_op(a)
        return a.result

    for callee, picks in recipe["main"]:
        top.add_op(_call(names[callee], sigs[callee], states, picks, fresh_top))
    return ModuleOp([program])


def check_against_definition(program: rt.ProgramOp, order: list[int]) -> None:
    fs = list(funcs(program).values())
    s = rt.FuncSummaries(program)
    # asked in any order, one summary object answers as the definition
    for k in order:
        f = fs[k % len(fs)]
        assert s.written_args(f) == ref_written_args(program, f), f.func_name
    for f in fs:
        assert s.written_args(f) == ref_written_args(program, f) == f.written_args(), f.func_name
    calls = [op for op in walk_ops(program) if isinstance(op, rt.CallOp)]
    for call in calls:
        want = ref_call_written(program, call)
        assert s.call_written(call) == want == call.written_operands()
        written = tuple(v for i, v in enumerate(call.operands) if i in want)
        assert effects(call, s) == effects(call) == (tuple(call.ins), written)
    mem = Memory(program)
    for call in calls:
        want = ref_call_written(program, call)
        for v in call.operands:
            written = any(w is v and i in want for i, w in enumerate(call.operands))
            assert (call in mem.writers.get(v, [])) == written


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(recipes(), st.lists(st.integers(0, 3), max_size=6))
def test_summaries_equal_the_definition_on_random_programs(recipe: dict[str, Any], order: list[int]) -> None:
    check_against_definition(program_of(build(recipe)), order)


@SETTINGS
@given(recipes(), st.integers(0, 3), st.integers(0, 5), st.lists(st.integers(0, 3), max_size=4))
def test_summaries_follow_a_body_edit_between_two_analyses(
    recipe: dict[str, Any], which: int, arg: int, order: list[int]
) -> None:
    """A pass editing a function body between two analyses: the analysis after the edit
    answers for the edited program (a summary is a snapshot of its analysis, never reused)."""
    program = program_of(build(recipe))
    check_against_definition(program, order)
    fs = list(funcs(program).values())
    f = fs[which % len(fs)]
    args = f.body.block.args
    if not args:
        return
    a = args[arg % len(args)]
    before = rt.FuncSummaries(program).written_args(f)
    f.body.block.add_op(rt.KernelOp("popxl.relu_", [a], [a]))  # the edit: now writes `a`
    assert arg % len(args) in rt.FuncSummaries(program).written_args(f)
    assert before <= f.written_args()
    check_against_definition(program, order)


# -- fixed cases --------------------------------------------------------------------------------

VIEWED = """
rt.program {
  rt.func @f(%a: memref<4xf32>) -> (%y: memref<4xf32>) {
    %v = rt.alloc : memref<2x2xf32>
    rt.kernel "popxl.reshape"(%a) -> (%v) : (memref<4xf32>) -> memref<2x2xf32>
    %r = rt.alloc : memref<2x2xf32>
    rt.kernel "popxl.relu"(%v) -> (%r) : (memref<2x2xf32>) -> memref<2x2xf32>
    rt.kernel "popxl.reshape"(%r) -> (%y) : (memref<2x2xf32>) -> memref<4xf32>
  }
  %x = rt.state "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  rt.call @f(%x) -> (%y) : (memref<4xf32>) -> memref<4xf32>
  rt.d2h "y", %y : memref<4xf32>
}
"""


def test_a_pass_changing_what_a_function_writes_is_seen_by_the_next_analysis() -> None:
    """`rt-views` makes the body's reshape of argument %a a view: the function then counts
    as writing %a (conservatively: its view has a writer), and the analysis of the next
    pass (a new `Memory`) sees the call write the caller's %x."""
    program = program_of(parse(VIEWED))
    f = funcs(program)["f"]
    (call,) = [op for op in walk_ops(program) if isinstance(op, rt.CallOp)]
    x = call.operands[0]
    assert f.written_args() == {1}
    assert call not in Memory(program).writers.get(x, [])
    assert mark_views(program) >= 1
    assert VIEW_ATTR in next(op for op in f.walk() if isinstance(op, rt.KernelOp)).attributes
    assert f.written_args() == {0, 1} == rt.FuncSummaries(program).written_args(f)
    assert call in Memory(program).writers[x]


CYCLE = """
rt.program {
  rt.func @f(%a: memref<4xf32>, %b: memref<4xf32>) -> () {
    rt.call @g(%a) -> () : (memref<4xf32>) -> ()
  }
  rt.func @g(%a: memref<4xf32>) -> () {
    %t = rt.alloc : memref<4xf32>
    rt.call @f(%a, %t) -> () : (memref<4xf32>, memref<4xf32>) -> ()
  }
  rt.func @h(%a: memref<4xf32>, %b: memref<4xf32>) -> () {
    rt.call @h(%b, %a) -> () : (memref<4xf32>, memref<4xf32>) -> ()
  }
  rt.func @reads(%a: memref<4xf32>, %b: memref<4xf32>) -> () {
    rt.d2h "never", %a : memref<4xf32>
    rt.call @f(%b, %b) -> () : (memref<4xf32>, memref<4xf32>) -> ()
  }
  %x = rt.state "x" : memref<4xf32>
  %z = rt.state "z" : memref<4xf32>
  rt.call @reads(%x, %z) -> () : (memref<4xf32>, memref<4xf32>) -> ()
}
"""


def test_functions_on_a_call_cycle_write_all_their_arguments() -> None:
    program = program_of(parse(CYCLE))
    fs = funcs(program)
    s = rt.FuncSummaries(program)
    assert s.written_args(fs["g"]) == {0}  # asked first from inside the cycle
    assert s.written_args(fs["f"]) == {0, 1}
    assert s.written_args(fs["h"]) == {0, 1}  # calls itself
    assert s.written_args(fs["reads"]) == {1}  # reads %a; %b goes to f, which writes all
    (top,) = [op for op in program.body.block.ops if isinstance(op, rt.CallOp)]
    assert s.call_written(top) == {1}
    check_against_definition(program, [0, 1, 2, 3])


FILL_CYCLE = """
rt.program {
  rt.func @f(%a: memref<4xf32>) -> (%y: memref<4xf32>) {
    rt.call @g(%a) -> (%y) : (memref<4xf32>) -> memref<4xf32>
  }
  rt.func @g(%a: memref<4xf32>) -> (%y: memref<4xf32>) {
    rt.call @f(%a) -> (%y) : (memref<4xf32>) -> memref<4xf32>
  }
  %x = rt.state "x" : memref<4xf32>
  %y = rt.alloc : memref<4xf32>
  rt.call @f(%x) -> (%y) : (memref<4xf32>) -> memref<4xf32>
  rt.d2h "y", %y : memref<4xf32>
}
"""


def test_recursive_destinations_are_not_filled_and_do_not_hang_the_optimiser() -> None:
    """Each function's destination is first used by a call of the other: whether it is
    filled has no answer by recursion; it counts as not filled (no storage shared), and
    the plan reports the recursion."""
    module = parse(FILL_CYCLE)
    program = program_of(module)
    (call,) = [op for op in program.body.block.ops if isinstance(op, rt.CallOp)]
    assert CallFills(program).filled(call) == frozenset()
    optimised = lower(module, "rt-optimize")
    assert sum(isinstance(op, rt.CallOp) for op in optimised.walk()) == 3
    with pytest.raises(PlanError, match=r"rt.func @f is recursive"):
        compile_module(module)


def test_call_fills_are_asked_once_per_function_argument() -> None:
    """Many calls of one function: the body is looked at once per argument; every call
    whose destination is filled by the body's first use of it is answered from that."""
    text = (
        """
rt.program {
  rt.func @f(%a: memref<4xf32>) -> (%y: memref<4xf32>, %z: memref<4xf32>) {
    rt.kernel "popxl.relu"(%a) -> (%y) : (memref<4xf32>) -> memref<4xf32>
    rt.kernel "popxl.add"(%a, %z) -> (%z) : (memref<4xf32>, memref<4xf32>) -> memref<4xf32>
  }
  %x = rt.state "x" : memref<4xf32>
"""
        + "".join(
            f"""  %y{i} = rt.alloc : memref<4xf32>
  %z{i} = rt.alloc : memref<4xf32>
  rt.call @f(%x) -> (%y{i}, %z{i}) : (memref<4xf32>) -> (memref<4xf32>, memref<4xf32>)
"""
            for i in range(5)
        )
        + "}\n"
    )
    program = program_of(parse(text))
    fills = CallFills(program)
    calls = [op for op in program.body.block.ops if isinstance(op, rt.CallOp)]
    for call in calls:
        y, z = call.outs
        assert fills.filled(call) == {y}  # relu fills %y; the add reads %z first
    f = funcs(program)["f"]
    assert {k: v for k, v in fills._args.items() if k[0] is f} == {(f, 1): True, (f, 2): False}


def test_function_names_that_are_not_identifiers_round_trip() -> None:
    text = """
rt.program {
  rt.func @"step(1)"(%a: memref<4xf32>) -> () {
    rt.kernel "popxl.relu_"(%a) -> (%a) : (memref<4xf32>) -> memref<4xf32>
  }
  %x = rt.state "x" : memref<4xf32>
  rt.call @"step(1)"(%x) -> () : (memref<4xf32>) -> ()
}
"""
    module = parse(text)
    printed = str(module)
    assert 'rt.func @"step(1)"(%a: memref<4xf32>) -> ()' in printed
    again = parse(printed)
    assert str(again) == printed
    again.verify()
    (call,) = [op for op in program_of(again).body.block.ops if isinstance(op, rt.CallOp)]
    assert call.written_operands() == {0}
