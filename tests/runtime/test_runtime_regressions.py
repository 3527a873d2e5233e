"""Regressions found by the property test (/work/notes/bugs.md), against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.runtime_check import check_all
from xl.runtime.kernels import KERNELS, kernel_factory


def _gelu(x: float) -> float:
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_p1_gelu_of_rank0_tensor() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        g = ops.gelu(ops.max(ops.host_load(x)))
        ops.host_store(popxl.d2h_stream(g.shape, g.dtype, "o"), g)
    check_all(ir, [{"o": np.float32(_gelu(2.0))}], [{"x": np.array([1.0, 2.0], np.float32)}])


@pytest.mark.parametrize("name", sorted(c.name for c in KERNELS))
def test_rank0_arrays_are_filled(name: str) -> None:
    """Every kernel that runs on rank-0 float arrays writes its rank-0 output (NumPy
    arithmetic on 0-d arrays gives scalars, which `out=` refuses)."""
    factory = kernel_factory(name)
    assert factory is not None
    props = {"a": 0.5, "b": 2.0}
    for n_in in (1, 2):
        try:
            k = factory(dict(props))
        except (KeyError, ValueError, TypeError):
            return  # the kernel needs other attributes: not an elementwise kernel
        ins = [np.array(0.75, np.float32) for _ in range(n_in)]
        out = np.array(np.nan, np.float32)
        try:
            k(*ins, out)
        except TypeError as e:
            assert "ArrayType" not in str(e), f"{name}: {e}"
            continue
        except (ValueError, IndexError, KeyError, np.exceptions.AxisError):
            continue
        return


def test_p2_inplace_update_of_a_constant_starts_from_its_value_each_run() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((1,), popxl.float32, "x")
        t0 = ops.host_load(x)
        c = popxl.constant(np.array([0.5], np.float32))
        ops.add_(c, t0)
        ops.host_store(popxl.d2h_stream(c.shape, c.dtype, "o"), c)
    feeds = [{"x": np.array([1.0], np.float32)}, {"x": np.array([2.0], np.float32)}]
    check_all(ir, [{"o": np.array([1.5], np.float32)}, {"o": np.array([2.5], np.float32)}], feeds)


def test_writing_an_rt_const_is_refused(tmp_path, capsys) -> None:
    from xl.tools.run import main

    prog = tmp_path / "c.mlir"
    prog.write_text(
        "rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {\n"
        "  %c = rt.const dense<1.0> : tensor<2xf32> : memref<2xf32>\n"
        '  rt.kernel "popxl.scaled_add_"(%c, %c) -> (%c) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64}'
        " : (memref<2xf32>, memref<2xf32>) -> memref<2xf32>\n"
        '  rt.d2h "y", %c : memref<2xf32>\n'
        "}\n"
    )
    assert main([str(prog)]) == 1
    err = capsys.readouterr().err
    assert "xl-run: error: runtime: 'popxl.scaled_add_' writes the constant tensor \"c\"" in err


@pytest.mark.parametrize("optimize", [True, False])
def test_collective_grouping_larger_than_the_replicas_is_refused_by_both_plans(optimize: bool) -> None:
    """An rt-level all-reduce over groups of 2 in a one-replica program (found by the IR
    fuzzer's differential run: `replication_factor = 4` misspelt, so the program has one
    replica) is an error on both plans. rt-trivial-collectives used to erase it as an
    identity (every all-reduce was the identity with one replica), so the optimised plan
    ran it silently while the straightforward plan refused it."""
    from xdsl.dialects.builtin import ModuleOp

    from xl.compiler import compile_module
    from xl.runtime.errors import PlanError
    from xl.tools.context import xl_context
    from xl.tools.parse import parse_source

    module = parse_source(
        xl_context(),
        "rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {\n"
        '  %w = rt.state "w" = dense<1.0> : tensor<4xf32> : memref<4xf32>\n'
        '  rt.kernel "replica.all_reduce_"(%w) -> (%w) {grouping = #replica.grouping<stride = 1, group_size = 2>,'
        ' op = "mean"} : (memref<4xf32>) -> memref<4xf32>\n'
        '  rt.d2h "y", %w : memref<4xf32>\n'
        "}\n",
        "g.mlir",
    )
    assert isinstance(module, ModuleOp)
    with pytest.raises(PlanError, match="replication factor 1 is not divisible by stride \\* group_size = 2"):
        compile_module(module, optimize=optimize)


def test_trivial_collectives_still_dropped_with_one_replica() -> None:
    """The fix above keeps rt-trivial-collectives' job: on one replica, an all-reduce without
    a grouping or over groups of one is erased."""
    from xl.compiler.driver import lower
    from xl.tools.context import xl_context
    from xl.tools.parse import parse_source

    text = (
        "rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {\n"
        '  %w = rt.state "w" = dense<1.0> : tensor<4xf32> : memref<4xf32>\n'
        '  rt.kernel "replica.all_reduce_"(%w) -> (%w) {grouping = #replica.grouping<stride = 1, group_size = 1>,'
        ' op = "mean"} : (memref<4xf32>) -> memref<4xf32>\n'
        '  rt.kernel "replica.all_reduce_"(%w) -> (%w) {op = "add"} : (memref<4xf32>) -> memref<4xf32>\n'
        '  rt.d2h "y", %w : memref<4xf32>\n'
        "}\n"
    )
    out = lower(parse_source(xl_context(), text, "g.mlir"), "rt-trivial-collectives")
    assert "all_reduce" not in str(out)
