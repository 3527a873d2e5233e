"""`xl.all_reduce_gemm_update` (`rt-fold-all-reduce-gemm`): the replicas' weight-gradient
products summed into one buffer inside the collective. Against NumPy (float64), and bit for
bit against the same program without the fold (each replica's gradient written apart, then
`xl.all_reduce_update`): the sums are added in the same order. Also with the replicas split
over two instances (a comm exchanging arrays between threads), as under MPI."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import xl.passes.rt_optimize as rt_optimize
from tests.runtime.test_replica_runtime import GIDS, GROUPINGS, grouping_text, groups_of
from xl.compiler import compile_module
from xl.runtime.comm import split_replicas
from xl.runtime.errors import PlanError
from xl.tools.context import xl_context
from xl.tools.parse import parse_source

K = 8  # rows of each replica's batch: a product's contracting dimension


def program(r: int, grouping: str, op: str, transposed_weight: bool) -> str:
    """`w += -0.1 * all_reduce(x^T @ d)` (or `d^T @ x` into a transposed weight), two runs."""
    ws = "2x3" if transposed_weight else "3x2"
    if transposed_weight:
        grad = f"""  %dt = popxl.transpose %d {{perm = array<i64: 1, 0>}} : (tensor<{K}x2xf32>) -> tensor<2x{K}xf32>
  %gr = popxl.matmul %dt, %x : (tensor<2x{K}xf32>, tensor<{K}x3xf32>) -> tensor<2x3xf32>"""
    else:
        grad = f"""  %xt = popxl.transpose %x {{perm = array<i64: 1, 0>}} : (tensor<{K}x3xf32>) -> tensor<3x{K}xf32>
  %gr = popxl.matmul %xt, %d : (tensor<3x{K}xf32>, tensor<{K}x2xf32>) -> tensor<3x2xf32>"""
    return f"""
graph.h2d_stream @x : tensor<{K}x3xf32>
graph.h2d_stream @d : tensor<{K}x2xf32>
graph.d2h_stream @y : tensor<{ws}xf32>
graph.main attributes {{replication_factor = {r} : i64}} {{
  %w = graph.variable "w" = dense<0.5> : tensor<{ws}xf32>
  %x = graph.host_load @x : tensor<{K}x3xf32>
  %d = graph.host_load @d : tensor<{K}x2xf32>
{grad}
  replica.all_reduce_ %gr {{grouping = {grouping}, op = "{op}"}} : (tensor<{ws}xf32>) -> ()
  popxl.scaled_add_ %w, %gr {{a = 1.0 : f64, b = -0.1 : f64}} : (tensor<{ws}xf32>, tensor<{ws}xf32>) -> ()
  %y = popxl.identity %w : (tensor<{ws}xf32>) -> tensor<{ws}xf32>
  graph.host_store @y, %y : tensor<{ws}xf32>
}}
"""


def feeds(r: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "x": rng.normal(size=(r, K, 3)).astype(np.float32),
        "d": rng.normal(size=(r, K, 2)).astype(np.float32),
    }


def reference(r: int, groups: list[list[int]], op: str, transposed_weight: bool, runs: int) -> list[np.ndarray]:
    """The weights after each run, in float64 (NumPy, independently of the runtime)."""
    f = feeds(r)
    x, d = f["x"].astype(np.float64), f["d"].astype(np.float64)
    grads = np.einsum("rki,rkj->rji", x, d) if transposed_weight else np.einsum("rki,rkj->rij", x, d)
    w = np.full((r, *grads.shape[1:]), 0.5)
    out = []
    for _ in range(runs):
        for members in groups:
            w[members] += -0.1 * grads[members].sum(axis=0) / (len(members) if op == "mean" else 1)
        out.append(w.copy())
    return out


def run_steps(text: str, r: int, runs: int, fold: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list[str]]:
    with monkeypatch.context() as mp:
        if not fold:
            mp.setattr(rt_optimize, "fold_all_reduce_gemms", lambda program: 0)
        exe = compile_module(parse_source(xl_context(), text, "gemm_update.mlir"), optimize=True)
    return [exe.run(feeds(r))["y"].copy() for _ in range(runs)], exe.sources


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
@pytest.mark.parametrize("op", ["add", "mean"])
@pytest.mark.parametrize("transposed_weight", [False, True], ids=["xT_d", "dT_x"])
def test_folded_gemm_update_equals_the_unfolded_collective(
    r: int, stride: int, size: int, assign: list[int] | None, op: str, transposed_weight: bool, monkeypatch
) -> None:
    text = program(r, grouping_text(stride, size, assign), op, transposed_weight)
    got, sources = run_steps(text, r, 2, True, monkeypatch)
    # groups of one: the all-reduce is dropped and the update folds into a plain gemm
    assert all(("# xl.all_reduce_gemm_update" in s) == (size > 1) for s in sources)
    unfolded, sources = run_steps(text, r, 2, False, monkeypatch)
    assert not any("# xl.all_reduce_gemm_update" in s for s in sources)
    want = reference(r, groups_of(r, stride, size, assign), op, transposed_weight, 2)
    for k in range(2):
        np.testing.assert_array_equal(got[k], unfolded[k])
        np.testing.assert_allclose(got[k].reshape(want[k].shape), want[k], rtol=1e-5, atol=1e-6)


class ThreadComm:
    """Instance `index` of `n` instances run as threads of one process: `gather` exchanges
    the local arrays through a shared table (as the MPI comm does between processes)."""

    def __init__(self, n: int, index: int, table: dict[int, list[np.ndarray]], barrier: threading.Barrier) -> None:
        self.num_instances, self.instance_index = n, index
        self.table, self.barrier = table, barrier

    def local_replicas(self, replication_factor: int) -> range:
        return split_replicas(replication_factor, self.num_instances, self.instance_index)

    def gather(self, local: list[np.ndarray]) -> list[np.ndarray]:
        self.table[self.instance_index] = [a.copy() for a in local]
        self.barrier.wait()
        out = [a for i in range(self.num_instances) for a in self.table[i]]
        self.barrier.wait()  # every instance has read the table before the next exchange
        return out


@pytest.mark.parametrize(("r", "stride", "size", "assign"), [g for g in GROUPINGS if g[0] == 4], ids=GIDS[2:])
def test_replicas_over_two_instances_equal_one_process(
    r: int, stride: int, size: int, assign: list[int] | None, monkeypatch
) -> None:
    """Two instances of two replicas each: every instance's weights equal the one-process run
    bit for bit (the products of the other instance's replicas are exchanged and summed in
    replica order)."""
    text = program(r, grouping_text(stride, size, assign), "mean", False)
    one, _ = run_steps(text, r, 2, True, monkeypatch)
    table: dict[int, list[np.ndarray]] = {}
    barrier = threading.Barrier(2, timeout=30)
    exes = [
        compile_module(
            parse_source(xl_context(), text, "gemm_update.mlir"), optimize=True, comm=ThreadComm(2, i, table, barrier)
        )
        for i in range(2)
    ]
    assert all(any("# xl.all_reduce_gemm_update" in s for s in e.sources) for e in exes) == (size > 1)
    f = feeds(r)
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            mine = {k: v[2 * i : 2 * i + 2] for k, v in f.items()}
            results[i] = [exes[i].run(mine)["y"].copy() for _ in range(2)]
        except BaseException as e:  # reported by the test thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(2):
        for k in range(2):
            np.testing.assert_array_equal(results[i][k], one[k][2 * i : 2 * i + 2])


BAD = """
rt.program attributes {{num_host_transfers = 1 : i64, replication_factor = 2 : i64}} {{
  %x = rt.alloc : memref<8x4xf32>
  %dy = rt.alloc : memref<8x3xf32>
  %w = rt.state "w" : memref<{w}xf32>
  rt.kernel "xl.all_reduce_gemm_update"(%x, %dy, %w) -> (%w) {{op = "{op}", scale = -0.05 : f64, trans_a = true,
      trans_b = false}} : (memref<8x4xf32>, memref<8x3xf32>, memref<{w}xf32>) -> memref<{w}xf32>
}}
"""


@pytest.mark.parametrize(
    ("w", "op", "message"),
    [
        ("3x3", "mean", r"xl.all_reduce_gemm_update: cannot multiply \(4, 8\) by \(8, 3\) into the weight's \(3, 3\)"),
        ("4x3", "max", r"xl.all_reduce_gemm_update: the fused update supports add and mean, not 'max'"),
    ],
)
@pytest.mark.parametrize("optimize", [True, False], ids=["optimised", "straightforward"])
def test_bad_fused_update_is_refused_naming_the_kernel(w: str, op: str, message: str, optimize: bool) -> None:
    m = parse_source(xl_context(), BAD.format(w=w, op=op), "bad.mlir")
    with pytest.raises(PlanError, match=message):
        compile_module(m, optimize=optimize)
