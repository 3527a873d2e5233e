"""The `outline` pass's building blocks against their definitions: suffix and LCP arrays vs
sorting the suffixes, the vectorised wirings vs the canonical wiring computed op by op, the
outputs of groups vs the use lists, the skipped last round vs running it, and the
signatures' attribute classes vs xDSL's equality."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import DenseArrayBase, FloatAttr, IntegerAttr, ModuleOp, StringAttr, f32, f64, i32, i64
from xdsl.ir import Attribute
from xdsl.parser import Parser

import xl.passes.outline as outline_pass
from xl.dialects.graph import GraphOp, MainGraphOp
from xl.passes.outline import outline, suffix_lcp_arrays
from xl.tools.context import xl_context

# -- suffix and LCP arrays ---------------------------------------------------------------


def with_separators(symbols: list[int], cuts: list[int]) -> list[int]:
    """`symbols` (>= 0) with unique negative separators at `cuts` and at the end."""
    s = list(symbols)
    sep = -1
    for c in sorted(set(cuts)):
        if c < len(s):
            s[c] = sep
            sep -= 1
    return [*s, sep]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.lists(st.integers(0, 59), max_size=6))
def test_suffix_and_lcp_arrays_match_sorted_suffixes(symbols, cuts):
    s = with_separators(symbols, cuts)
    sa, lcp = suffix_lcp_arrays(s)
    assert sa == sorted(range(len(s)), key=lambda i: s[i:])
    for i in range(1, len(s)):
        a, b = s[sa[i - 1] :], s[sa[i] :]
        h = 0
        while h < min(len(a), len(b)) and a[h] == b[h]:
            h += 1
        assert lcp[i] == h
    assert lcp[0] == 0


def test_suffix_and_lcp_arrays_long_repeat():
    s = [*([1, 2, 3] * 400), -1]  # LCP up to 1,197: many doubling levels
    sa, lcp = suffix_lcp_arrays(s)
    assert sa == sorted(range(len(s)), key=lambda i: s[i:])
    assert max(lcp) == 3 * 399


# -- random programs with repeats ----------------------------------------------------------

T = "tensor<3x3xf32>"


def repeated_program(block: list[tuple[str, int, int]], repeats: int, tail: int) -> ModuleOp:
    """`block` (op, operand choices) written `repeats` times, reading the previous repeat's
    last value, a few shared values (so outside values repeat inside a run) and its own
    earlier results; then `tail` extra ops."""
    lines = [f"graph.h2d_stream @x : {T}", f"graph.d2h_stream @y : {T}", "graph.main {"]
    lines += [f"  %s{i} = graph.host_load @x : {T}" for i in range(2)]
    shared = ["%s0", "%s1"]
    last = "%s0"
    n = 0

    def emit(kind: str, a: str, b: str) -> str:
        nonlocal n
        v = f"%v{n}"
        n += 1
        if kind in ("add", "mul", "matmul"):
            lines.append(f"  {v} = popxl.{kind} {a}, {b} : ({T}, {T}) -> {T}")
        else:
            lines.append(f"  {v} = popxl.{kind} {a} : ({T}) -> {T}")
        return v

    for _ in range(repeats):
        local = [last]
        for kind, i, j in block:
            pool = local + shared
            local.append(emit(kind, pool[i % len(pool)], pool[j % len(pool)]))
        last = local[-1]
    for k in range(tail):
        last = emit(("tanh", "gelu")[k % 2], last, last)
    lines += [f"  graph.host_store @y, {last} : {T}", "}"]
    return Parser(xl_context(), "\n".join(lines)).parse_module()


programs = st.builds(
    repeated_program,
    st.lists(
        st.tuples(st.sampled_from(("add", "mul", "matmul", "tanh", "gelu")), st.integers(0, 9), st.integers(0, 9)),
        min_size=1,
        max_size=6,
    ),
    st.integers(2, 5),
    st.integers(0, 4),
)


def sequence(module: ModuleOp) -> outline_pass._Sequence:
    blocks = [h.regions[0].block for h in module.ops if isinstance(h, GraphOp | MainGraphOp)]
    return outline_pass._build_sequence(blocks, set(), outline_pass._Signatures())


def wiring_by_definition(seq: outline_pass._Sequence, p: int, length: int) -> tuple:
    """The wiring of the run [p, p + length) op by op: an operand defined in the run by
    (offset, result index), one from outside by its order of first use."""
    inside = {id(op): k for k, op in enumerate(seq.ops[p : p + length])}
    outside: dict[int, int] = {}
    key = []
    for op in seq.ops[p : p + length]:
        assert op is not None
        for v in op.operands:
            k = inside.get(id(v.owner))
            if k is not None:
                key.append((k, v.index))  # pyright: ignore[reportAttributeAccessIssue]
            else:
                key.append(-1 - outside.setdefault(id(v), len(outside)))
    return tuple(key)


def outputs_by_definition(seq: outline_pass._Sequence, starts: list[int], length: int) -> list[tuple[int, int]]:
    outs = set()
    for p in starts:
        run = {id(op) for op in seq.ops[p : p + length]}
        for k, op in enumerate(seq.ops[p : p + length]):
            assert op is not None
            for r in op.results:
                if any(id(u.operation) not in run for u in r.uses):
                    outs.add((k, r.index))
    return sorted(outs)


def partition(keys: list) -> list[list[int]]:
    groups: dict = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return sorted(groups.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.integers(1, 8))
def test_wirings_and_outputs_match_their_definitions(module, length):
    seq = sequence(module)
    sig = seq.sig
    n = len(sig)
    checked = 0
    for p0 in range(n - length + 1):
        if min(sig[p0 : p0 + length]) < 0:
            continue
        positions = [p for p in range(n - length + 1) if sig[p : p + length] == sig[p0 : p0 + length]]
        if positions[0] != p0 or len(positions) < 2:
            continue
        keys, first_use = outline_pass._wirings(seq, positions, length)
        byte_keys = [k.tobytes() for k in keys]
        expected = [wiring_by_definition(seq, p, length) for p in positions]
        assert partition(byte_keys) == partition(expected)
        assert first_use.sum(axis=1).tolist() == [-min((k for k in e if type(k) is int), default=0) for e in expected]
        # shorter runs at the same positions: the first columns
        short = max(1, length // 2)
        m = seq.start[p0 + short] - seq.start[p0]
        assert partition([k[:m].tobytes() for k in keys]) == partition(
            [wiring_by_definition(seq, p, short) for p in positions]
        )
        for group in partition(expected):
            starts = outline_pass._pick([positions[i] for i in group], length)
            assert outline_pass._outputs(seq, starts, length) == outputs_by_definition(seq, starts, length)
        checked += 1
    if length == 1:
        assert checked  # every program repeats its block at least twice


@pytest.mark.parametrize("seed", range(3))
def test_pick_scan_and_bisection_agree(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        positions = sorted({int(x) for x in rng.integers(0, 500, rng.integers(1, 80))})
        length = int(rng.integers(1, 60))
        chosen, end = [], -1
        for p in positions:
            if p >= end:
                chosen.append(p)
                end = p + length
        assert outline_pass._pick(positions, length) == chosen


# -- the skipped last round ---------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.integers(1, 6))
def test_skipped_round_would_find_nothing(module, min_ops):
    skipped = module.clone()
    names = outline(skipped, min_ops)
    forced = module.clone()
    original = outline_pass._repeats_left
    outline_pass._repeats_left = lambda *args: True  # every round runs until one finds nothing
    try:
        forced_names = outline(forced, min_ops)
    finally:
        outline_pass._repeats_left = original
    assert names == forced_names
    assert str(skipped) == str(forced)


SECOND_ROUND = [  # programs whose second round takes a group (the first leaves a shorter repeat)
    ([("gelu", 4, 5), ("tanh", 7, 0), ("gelu", 8, 6), ("gelu", 7, 7), ("matmul", 7, 3), ("matmul", 4, 0)], 2, 0, 2),
    ([("add", 6, 5), ("tanh", 0, 0), ("matmul", 0, 4), ("gelu", 4, 3), ("gelu", 8, 5), ("tanh", 4, 3)], 2, 4, 3),
]


@pytest.mark.parametrize("block, repeats, tail, min_ops", SECOND_ROUND)
def test_round_not_skipped_when_it_finds_more(block, repeats, tail, min_ops, monkeypatch):
    module = repeated_program(block, repeats, tail)
    taken_per_round: list[int] = []
    select = outline_pass.select_groups

    def counting(seq, k):
        groups, more = select(seq, k)
        taken_per_round.append(len(groups))
        return groups, more

    monkeypatch.setattr(outline_pass, "select_groups", counting)
    names = outline(module, min_ops)
    assert taken_per_round[1] >= 1  # the second round ran (not skipped) and outlined more
    assert len(names) == sum(taken_per_round)


# -- attribute classes of the signatures -------------------------------------------------


def fresh_attribute(kind: int, value: int) -> Attribute:
    """A new attribute object (never a shared one) of a few kinds ops carry; `value` picks
    among values that include equal floats of different bits (0.0 / -0.0, two NaNs)."""
    floats = [0.0, -0.0, 1.0, float("nan"), struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]]
    if kind == 0:
        return FloatAttr(floats[value % len(floats)], (f32, f64)[value // len(floats) % 2])
    if kind == 1:
        return IntegerAttr(value % 3, (i32, i64)[value // 3 % 2])
    if kind == 2:
        return DenseArrayBase.from_list((i32, i64)[value % 2], [value // 2 % 2, 1])
    return StringAttr(("a", "b")[value % 2])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9)), min_size=2, max_size=12))
def test_attribute_classes_are_xdsl_equality(specs):
    # each attribute a new object: classes come from the plain-value keys and `by_value`
    sigs = outline_pass._Signatures()
    attrs = [fresh_attribute(k, v) for k, v in specs]
    classes = [sigs._class(a) for a in attrs]
    for a, ca in zip(attrs, classes, strict=True):
        for b, cb in zip(attrs, classes, strict=True):
            assert (ca == cb) == (a == b), (a, b)
