"""Ops of a busy virtual IPU run on an idle worker (`xl.runtime.stream_balance`): the step stays
bit-identical to the serial plan whichever stream runs an op, and the list schedule moves
top-level work of the busier stream only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from xdsl.ir import Operation

import xl.runtime.concurrent as concurrent
from tests.runtime.test_concurrent import (
    _compile,
    _mnist_pipeline,
    check_concurrent_equals_serial,
    random_program,
)
from xl.runtime.parallel_kernels import HALF_COST
from xl.runtime.stream_balance import MOVE_MIN_COST, balance
from xl.runtime.stream_tree import IfNode, LoopNode, OpNode


@pytest.fixture(autouse=True)
def one_blas_thread() -> Iterator[None]:
    with threadpool_limits(1, "blas"):
        yield


def _nodes(nodes: list[Any], depth: int = 0) -> Iterator[tuple[OpNode, int]]:
    for n in nodes:
        if isinstance(n, OpNode):
            yield n, depth
        elif isinstance(n, LoopNode):
            yield from _nodes(n.body, depth + 1)
        elif isinstance(n, IfNode):
            yield from _nodes(n.then, depth + 1)
            yield from _nodes(n.other, depth + 1)


def _recording(monkeypatch: pytest.MonkeyPatch, choose: Callable[..., dict[Operation, int]] | None = None):
    """Replace the balancer (or wrap it) and record each call's tree and moves."""
    calls: list[tuple[list[Any], dict[Operation, int]]] = []

    def hook(root: list[Any], streams: int) -> dict[Operation, int]:
        moves = choose(root, streams) if choose is not None else balance(root, streams)
        calls.append((root, moves))
        return moves

    monkeypatch.setattr(concurrent, "balance_streams", hook)
    return calls


def test_any_stream_assignment_equals_serial_and_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random programs (loops, branches, copies, host loads, a view) with every op, at any
    depth, given to a random stream: the concurrent step equals the serial plan bit for bit
    and the NumPy interpretation of the program."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(st.data(), st.integers(2, 3), st.integers(0, 2**31 - 1))
    def check(data: Any, ipus: int, seed: int) -> None:
        rng = np.random.default_rng(seed + 1)

        def anywhere(root: list[Any], streams: int) -> dict[Operation, int]:
            return {n.op: int(rng.integers(0, streams)) for n, _ in _nodes(root) if n.op is not None}

        calls = _recording(monkeypatch, anywhere)
        check_concurrent_equals_serial(*random_program(data.draw, ipus, seed))
        assert len(calls) == 1

    check()


N = 512
M = f"memref<{N}x{N}xf32>"


def _chains(loop: int | None) -> str:
    """IPU 0: two independent chains of elementwise kernels; IPU 1: one small kernel
    (inside an `rt.loop` of `loop` iterations when given)."""
    body = [
        f'rt.kernel "popxl.tanh"(%a) -> (%b) {{ipu.id = 0 : i64}} : ({M}) -> {M}',
        f'rt.kernel "popxl.mul"(%b, %b) -> (%a) {{ipu.id = 0 : i64}} : ({M}, {M}) -> {M}',
        f'rt.kernel "popxl.tanh"(%c) -> (%d) {{ipu.id = 0 : i64}} : ({M}) -> {M}',
        f'rt.kernel "popxl.mul"(%d, %d) -> (%c) {{ipu.id = 0 : i64}} : ({M}, {M}) -> {M}',
        'rt.kernel "popxl.neg"(%e) -> (%e) {ipu.id = 1 : i64} : (memref<4xf32>) -> memref<4xf32>',
    ]
    if loop is not None:
        body = [f"rt.loop {loop} {{", *["  " + line for line in body], "}"]
    states = [f'%{n} = rt.state "{n}" : {M}' for n in "abcd"] + ['%e = rt.state "e" : memref<4xf32>']
    lines = [
        "rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {",
        *["  " + line for line in (*states, *body)],
        "}",
    ]
    return "\n".join(lines)


def _chains_reference(a: np.ndarray, c: np.ndarray, e: np.ndarray) -> list[np.ndarray]:
    b = np.tanh(a)
    d = np.tanh(c)
    return [b * b, b, d * d, d, -e]


def _set_and_run(exe: Any, rng: np.random.Generator) -> list[np.ndarray]:
    init = {n: rng.uniform(-1, 1, (N, N)).astype(np.float32) for n in "ac"}
    init["e"] = np.arange(4, dtype=np.float32)
    for n, v in init.items():
        exe.set_state(n, v)
    exe.run()
    return [exe.get_state(n) for n in "abcde"]


def test_busy_ipu_shares_its_top_level_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """IPU 0 holds two independent chains, IPU 1 almost nothing: some of IPU 0's kernels run
    on stream 1 (none of IPU 1's on stream 0), the code of stream 1 has them, and the step
    equals the serial plan bit for bit and NumPy."""
    calls = _recording(monkeypatch)
    conc = _compile(_chains(None), workers=2)
    ser = _compile(_chains(None), concurrent=False)
    (root, moves) = calls[0]
    assert moves, "nothing moved"
    nodes = {id(n.op): n for n, _ in _nodes(root) if n.op is not None}
    assert {nodes[id(op)].stream for op in moves} == {0} and set(moves.values()) == {1}
    assert all(nodes[id(op)].cost >= MOVE_MIN_COST for op in moves)
    stream1 = conc.sources[0].split("def _stream1_0")[1]
    assert any(name in stream1 for name in ("tanh", "mul"))
    got = _set_and_run(conc, np.random.default_rng(0))
    want = _set_and_run(ser, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    ref = _chains_reference(
        rng.uniform(-1, 1, (N, N)).astype(np.float32),
        rng.uniform(-1, 1, (N, N)).astype(np.float32),
        np.arange(4, dtype=np.float32),
    )
    for g, w, r in zip(got, want, ref, strict=True):
        assert np.array_equal(g, w)
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-7)


def test_ops_in_loops_stay_on_their_ipu(monkeypatch: pytest.MonkeyPatch) -> None:
    """One decision is one execution: the same chains inside an `rt.loop` are not moved."""
    calls = _recording(monkeypatch)
    conc = _compile(_chains(3), workers=2)
    ser = _compile(_chains(3), concurrent=False)
    assert calls[0][1] == {}
    for g, w in zip(_set_and_run(conc, np.random.default_rng(1)), _set_and_run(ser, np.random.default_rng(1))):
        assert np.array_equal(g, w)


def test_the_plan_is_the_same_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The moves depend on the program, never on timings: two builds, the same code."""
    calls = _recording(monkeypatch)
    a, b = _compile(_chains(None), workers=2), _compile(_chains(None), workers=2)
    assert a.sources == b.sources
    assert len(calls[0][1]) == len(calls[1][1]) > 0


def test_float16_elementwise_kernels_cost_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy's float16 loops: an elementwise kernel over float16 costs `HALF_COST` times the
    same kernel over float32 (a product is costed by its FLOPs either way)."""
    calls = _recording(monkeypatch)
    lines = ["rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {"]
    for t in ("f32", "f16"):
        m = f"memref<64x64x{t}>"
        lines += [
            f'  %x{t} = rt.state "x{t}" : {m}',
            f'  %y{t} = rt.state "y{t}" : {m}',
            f'  rt.kernel "popxl.add"(%x{t}, %x{t}) -> (%y{t}) {{ipu.id = 0 : i64}} : ({m}, {m}) -> {m}',
            f'  rt.kernel "popxl.matmul"(%x{t}, %x{t}) -> (%y{t}) {{ipu.id = 1 : i64}} : ({m}, {m}) -> {m}',
        ]
    lines.append("}")
    _compile("\n".join(lines), workers=2)
    costs = [n.cost for n, _ in _nodes(calls[0][0])]
    add32, mm32, add16, mm16 = costs
    assert add32 == 3 * 64 * 64 and add16 == HALF_COST * add32
    assert mm16 == mm32 > 0


def test_seed_003_optimiser_steps_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 003's pipeline: optimiser steps of IPU 0 (the larger layers' Adam) run on the
    worker of IPU 1, and nothing of IPU 1 moves (the bit-for-bit comparison with the serial
    plan is `test_concurrent.test_mnist_pipeline_concurrent_equals_serial`)."""
    import popxl

    calls = _recording(monkeypatch)
    ir, *_ = _mnist_pipeline(4)
    with popxl.Session(ir, "cpu"):
        pass
    root, moves = calls[0]
    nodes = {id(n.op): n for n, _ in _nodes(root) if n.op is not None}
    assert moves and {nodes[id(op)].stream for op in moves} == {0}
    graphs = {str(op.attributes["rt.graph"]) for op in moves if "rt.graph" in op.attributes}
    assert any("Adam" in g for g in graphs), graphs


def test_moved_ops_have_a_trace_row_of_their_own() -> None:
    """A profiled step: the kernels of IPU 0 that worker 1 runs are on `IPU 0 on worker 1`,
    and no row holds two threads' events (slices of a row never overlap)."""
    from xl.runtime.profile import Profile

    exe = _compile(_chains(None), workers=2, profile=True)
    assert exe.profile is not None
    prof = Profile(exe.profile)
    for _ in range(2):
        _set_and_run(exe, np.random.default_rng(2))
    rows: dict[str, list[tuple[int, int]]] = {}
    for e in prof.events():
        rows.setdefault(e.info.row, []).append((e.start_ns, e.end_ns))
    assert "IPU 0 on worker 1" in rows and "IPU 0" in rows
    for row, spans in rows.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), row
    trace = prof.chrome_trace()["traceEvents"]
    names = {e["args"]["name"] for e in trace if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert "IPU 0 on worker 1" in names


def test_a_moved_op_that_fails_is_named_and_nothing_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    """IPU 0's dynamic_slice, run by worker 1, fails (offset out of range) while IPU 1 waits
    for its result: the error names the op on IPU 0, no stream hangs, the next run works."""
    import popxl
    import popxl.ops as ops
    from tests.runtime.test_concurrent import _run_with_timeout
    from xl.dialects import rt
    from xl.runtime.kernels import DataRangeError

    def slices_elsewhere(root: list[Any], streams: int) -> dict[Operation, int]:
        return {
            n.op: 1 - n.stream
            for n, _ in _nodes(root)
            if isinstance(n.op, rt.KernelOp) and n.op.kernel.data == "popxl.dynamic_slice"
        }

    calls = _recording(monkeypatch, slices_elsewhere)
    ir = popxl.Ir()
    with ir.main_graph:
        off_s = popxl.h2d_stream((1,), popxl.uint32, "off")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        with popxl.ipu(0):
            table = popxl.variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="table")
            off = ops.host_load(off_s, "off")
            g = ops.dynamic_slice(table, off, axes=[0], sizes=[2], no_overlap=False).copy_to_ipu(1)
        with popxl.ipu(1):
            ops.host_store(ys, g + 1.0)
    with popxl.Session(ir, "cpu") as session:
        assert session._exe.workers == 2 and len(calls[0][1]) == 1
        with pytest.raises(
            DataRangeError, match=r"DynamicSlice\.\d+ \(popxl.dynamic_slice in graph main_graph on IPU 0\) failed"
        ):
            _run_with_timeout(lambda: session.run({off_s: np.array([7], np.uint32)}))
        out = _run_with_timeout(lambda: session.run({off_s: np.array([1], np.uint32)}))
        np.testing.assert_array_equal(out[ys], np.arange(12, dtype=np.float32).reshape(4, 3)[1:3] + 1.0)
