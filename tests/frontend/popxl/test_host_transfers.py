"""Host transfer counts per stream against `num_host_transfers`, checked at compile time.

Loads in a `repeat` of k run k times per run; in a conditional, between the counts of
the two branches. PopXL wraps around when a stream is loaded more often than
num_host_transfers: that runs (as in PopXL) with a `HostTransferWarning` naming the
stream and both counts. An output stream stored fewer times than num_host_transfers
runs too, as in PopXL (BERT's SQuAD inference stores its output once with 10
transfers): the transfers left unset hold zeros (PopXL: undefined) and a warning says
which. Results are checked against NumPy in both plans and through the Session.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import popxl
from popxl import ops
from tests.helpers.runtime_check import run_all
from xl.compiler import compile_module, lower
from xl.dialects import rt
from xl.runtime.transfers import HostTransferWarning, count_transfers


def _repeat_program(n_transfers: int, loads: int, stores: int, extra_store: bool = False) -> popxl.Ir:
    """Loads `x` `loads` times (a repeat), doubles each value, stores `y` `stores` times."""
    ir = popxl.Ir()
    ir.num_host_transfers = n_transfers
    with ir.main_graph:
        xs = popxl.h2d_stream((2,), popxl.float32, "x")
        ys = popxl.d2h_stream((2,), popxl.float32, "y")
        g = ir.create_empty_graph("body")
        with g:
            v = ops.host_load(xs) * 2.0
            ops.host_store(ys, v)
        if loads != stores:
            g2 = ir.create_empty_graph("load_only")
            with g2:
                ops.host_load(xs)
            ops.repeat(g2, loads - stores) if loads > stores else None
        ops.repeat(g, stores)
        if extra_store:
            ops.host_store(ys, popxl.constant(np.zeros(2, np.float32)))
    return ir


def test_matching_counts_no_warning(recwarn) -> None:
    ir = _repeat_program(3, 3, 3)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    for path, (runs, _) in run_all(ir, [{"x": x}]).items():
        np.testing.assert_array_equal(runs[0]["y"], 2 * x, err_msg=path)
    assert not [w for w in recwarn if issubclass(w.category, HostTransferWarning)]
    low = lower(ir._module)
    (program,) = list(low.ops)
    assert isinstance(program, rt.ProgramOp)
    assert count_transfers(program) == {("h2d", "x"): (3, 3), ("d2h", "y"): (3, 3)}


def test_more_loads_than_transfers_wrap_with_a_warning() -> None:
    """4 loads of 2 transfers: loads 3 and 4 read transfers 0 and 1 again (PopXL)."""
    ir = popxl.Ir()
    ir.num_host_transfers = 2
    with ir.main_graph:
        xs = popxl.h2d_stream((1,), popxl.float32, "x")
        ys = popxl.d2h_stream((1,), popxl.float32, "y")
        acc = popxl.variable(np.zeros(1, np.float32), name="acc")
        g = ir.create_empty_graph("body")
        with g:
            ops.host_load(xs)
        b = ir.create_empty_graph("acc")
        with b:
            a = popxl.graph_input((1,), popxl.float32, "a", by_ref=True)
            ops.var_updates.accumulate_(a, ops.host_load(xs) * 10.0)
        ops.repeat(b, 4, acc)
        ops.host_store(ys, acc)
        ops.host_store(ys, acc)
    x = np.array([[1.0], [2.0]], np.float32)
    with pytest.warns(
        HostTransferWarning,
        match=r'stream "x": host_load runs 4 times per run but '
        r"num_host_transfers is 2: loads beyond the first 2 wrap around",
    ):
        results = run_all(ir, [{"x": x}])
    for path, (runs, state) in results.items():
        np.testing.assert_allclose(state["acc"], [60.0], err_msg=path)  # 10 (1 + 2 + 1 + 2)
        np.testing.assert_allclose(runs[0]["y"], [[60.0], [60.0]], err_msg=path)


def test_fewer_stores_than_transfers_run_with_a_warning() -> None:
    """4 transfers, 4 loads, 3 stores: transfer 3 of `y` is not set (zeros)."""
    ir = _repeat_program(4, 4, 3)
    msg = (
        r'stream "y": host_store runs 3 times per run but num_host_transfers is 4: '
        r"transfer 3 of the output are not set by the program and hold zeros \(PopXL leaves them undefined\)"
    )
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    with pytest.warns(HostTransferWarning, match=msg):
        results = run_all(ir, [{"x": x}])
    for path, (runs, _) in results.items():
        # the repeat of 3 loads and stores transfers 0..2; the single load reads transfer 3
        np.testing.assert_array_equal(runs[0]["y"][:3], 2 * x[1:], err_msg=path)
        np.testing.assert_array_equal(runs[0]["y"][3], [0.0, 0.0], err_msg=path)


def test_store_once_with_ten_transfers_as_squad_inference() -> None:
    """BERT's SQuAD inference: one load and one store per run with num_host_transfers 10
    (PopXL runs it). Transfer 0 of the output is the result of transfer 0 of the input;
    transfers 1..9 are zeros; both streams are named in a warning, on every run."""
    ir = popxl.Ir()
    ir.num_host_transfers = 10
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        ys = popxl.d2h_stream((3,), popxl.float32, "y")
        ops.host_store(ys, ops.host_load(xs) * 3.0)
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    want = np.zeros((10, 3), np.float32)
    want[0] = 3 * x[0]
    with pytest.warns(HostTransferWarning) as record:
        results = run_all(ir, [{"x": x}, {"x": x + 1}])
    messages = {str(w.message) for w in record}
    assert (
        'stream "y": host_store runs 1 time per run but num_host_transfers is 10: transfers 1..9 of the '
        "output are not set by the program and hold zeros (PopXL leaves them undefined)"
    ) in messages, messages
    assert (
        'stream "x": host_load runs 1 time per run but num_host_transfers is 10: transfers 1..9 of the input '
        "are never read"
    ) in messages, messages
    for path, (runs, _) in results.items():
        np.testing.assert_array_equal(runs[0]["y"], want, err_msg=path)
        want1 = np.zeros((10, 3), np.float32)
        want1[0] = 3 * (x[0] + 1)
        np.testing.assert_array_equal(runs[1]["y"], want1, err_msg=path)  # nothing left from run 0
    with pytest.warns(HostTransferWarning), popxl.Session(ir, "ipu_hw") as session:
        out = session.run({xs: x})
    np.testing.assert_array_equal(out[ys], want)


def test_fewer_loads_than_transfers_warns() -> None:
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        xs = popxl.h2d_stream((1,), popxl.float32, "x")
        ys = popxl.d2h_stream((1,), popxl.float32, "y")
        x = ops.host_load(xs)
        g = ir.create_empty_graph("st")
        with g:
            ops.host_store(ys, popxl.constant(np.ones(1, np.float32)))
        ops.repeat(g, 2)
        ops.host_store(ys, x + 1.0)
    with pytest.warns(
        HostTransferWarning,
        match=r'stream "x": host_load runs 1 time per run but '
        r"num_host_transfers is 3: transfers 1\.\.2 of the input are never read",
    ):
        results = run_all(ir, [{"x": np.array([[5.0], [6.0], [7.0]], np.float32)}])
    for path, (runs, _) in results.items():
        np.testing.assert_array_equal(runs[0]["y"], [[1.0], [1.0], [6.0]], err_msg=path)


def test_more_stores_than_transfers_warns() -> None:
    ir = _repeat_program(1, 1, 1, extra_store=True)
    with pytest.warns(
        HostTransferWarning,
        match=r'stream "y": host_store runs 2 times per run but '
        r"num_host_transfers is 1: stores beyond the first 1 wrap around",
    ):
        results = run_all(ir, [{"x": np.array([1.0, 2.0], np.float32)}])
    for path, (runs, _) in results.items():
        np.testing.assert_array_equal(runs[0]["y"], [0.0, 0.0], err_msg=path)  # the last store wins


def _rt(text: str) -> tuple[ModuleOp, rt.ProgramOp]:
    from xdsl.parser import Parser

    from xl.tools.context import xl_context

    module = Parser(xl_context(), text).parse_module()
    (program,) = list(module.ops)
    assert isinstance(program, rt.ProgramOp)
    return module, program


COND = """
rt.program attributes {num_host_transfers = 2 : i64, replication_factor = 1 : i64} {
  %c = rt.alloc : memref<i1>
  rt.h2d "c", %c : memref<i1>
  %x = rt.alloc : memref<2xf32>
  rt.loop 2 {
    rt.if %c : memref<i1> {
      rt.h2d "x", %x : memref<2xf32>
      rt.d2h "y", %x : memref<2xf32>
    } else {
      rt.d2h "y", %x : memref<2xf32>
    }
  }
  rt.d2h "z", %x : memref<2xf32>
}
"""


def test_conditional_counts_are_ranges() -> None:
    """In a loop of 2, a branch loads `x` (0 to 2 loads); both branches store `y`
    (2 stores); `z` is stored once of 2 transfers (a warning); `c` is loaded once."""
    module, program = _rt(COND)
    assert count_transfers(program) == {
        ("h2d", "c"): (1, 1),
        ("h2d", "x"): (0, 2),
        ("d2h", "y"): (2, 2),
        ("d2h", "z"): (1, 1),
    }
    with pytest.warns(HostTransferWarning) as record:
        compile_module(module, optimize=False)
    messages = [str(w.message) for w in record]
    assert any(
        'stream "z": host_store runs 1 time per run but num_host_transfers is 2: transfer 1 of the output are '
        "not set by the program and hold zeros" in m
        for m in messages
    ), messages
    assert any(
        'stream "c": host_load runs 1 time per run but num_host_transfers is 2: transfer 1 of the '
        "input are never read" in m
        for m in messages
    ), messages
    assert any('stream "x": host_load runs between 0 and 2 times (depending on a condition)' in m for m in messages), (
        messages
    )
