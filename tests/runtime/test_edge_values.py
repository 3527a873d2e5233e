"""Behaviours at the edges of the value and shape ranges, each pinned against NumPy.

- the default (optimised) plan's softmax on logits near 1000 (its fast template must
  subtract the maximum: without it exp overflows and the result is NaN);
- reduce-scatter of a count the group size does not divide, in an `rt` program run by
  `xl-run` and by both plans: the count is padded with zeros to a multiple of the group
  and member i gets shard i (the dialect op refuses such a count; the lowered kernel, which
  hand-written or transformed `rt` programs reach, pads as upstream does);
- `ops.split` refuses sizes that do not add up to the dimension and a count that does not
  divide it, with messages naming both;
- the gradients of `ops.max` / `ops.min` (`reduce_max` / `reduce_min`) with tied extrema: as PopART's
  ReduceMaxGrad / ReduceMinGrad, every element equal to the extremum gets the whole
  incoming gradient (a mask times dy), not a share of it.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from xdsl.parser import Parser

import popxl
from popxl import ops
from tests.helpers.nn_testing import run_fwd_bwd
from xl.compiler import compile_module
from xl.tools.context import xl_context


def _softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("axis", [1, 0])
def test_softmax_of_logits_near_1000_in_the_default_plan(axis: int) -> None:
    rng = np.random.default_rng(0)
    x = (1000.0 + rng.standard_normal((4, 10)) * 3).astype(np.float32)
    x[0, :3] = 1000.0  # ties at the maximum
    x[1] = -1000.0  # a row of large negative logits
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream(x.shape, popxl.float32, "x")
        y = ops.softmax(ops.host_load(xs), axis=axis)
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    want = _softmax64(x, axis)
    exe = compile_module(ir._module)  # the default: lowered, rt-optimised, generated plan
    src = "".join(exe.sources)
    assert "softmax" in src.split("# popxl.softmax")[0].rsplit("\n", 1)[-1], "the softmax template is not what runs"
    got = exe.run({"x": x})["y"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    with popxl.Session(ir, "cpu") as session:
        got = session.run({xs: x})[ys]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


# 15 elements over groups of 2: shards of 8, the last one padded with a zero
REDUCE_SCATTER = """
builtin.module {
  rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 4 : i64} {
    %x = rt.alloc : memref<3x5xf32>
    rt.h2d "x", %x : memref<3x5xf32>
    %y = rt.alloc : memref<8xf32>
    rt.kernel "replica.reduce_scatter"(%x) -> (%y) {op = "add", grouping = #replica.grouping<stride = 2, group_size = 2>} : (memref<3x5xf32>) -> memref<8xf32>
    rt.d2h "y", %y : memref<8xf32>
  }
}
"""


def _reduce_scatter_reference(x: np.ndarray) -> np.ndarray:
    """[4 replicas, 8]: groups {0, 2} and {1, 3}; member i of a group gets shard i of the
    group's sum, flattened and zero-padded to 16 elements."""
    out = np.zeros((4, 8), np.float32)
    for group in ([0, 2], [1, 3]):
        total = np.zeros(16, np.float64)
        total[:15] = sum(x[r].astype(np.float64).reshape(-1) for r in group)
        for i, r in enumerate(group):
            out[r] = total[8 * i : 8 * (i + 1)]
    return out


def test_reduce_scatter_of_an_indivisible_count_through_xl_run(tmp_path) -> None:
    from xl.tools.run import main

    x = np.random.default_rng(1).standard_normal((4, 3, 5)).astype(np.float32)
    want = _reduce_scatter_reference(x)
    assert (want[2, 7], want[3, 7]) == (0.0, 0.0)  # the padding, on the second member of each group
    prog = tmp_path / "rs.mlir"
    prog.write_text(REDUCE_SCATTER)
    np.savez(tmp_path / "in.npz", x=x)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([str(prog), str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")])
    assert code in (0, None), err.getvalue()
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], want, rtol=1e-6, atol=1e-6)
    for optimize in (False, True):
        module = Parser(xl_context(), REDUCE_SCATTER).parse_module()
        got = compile_module(module, optimize=optimize).run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"optimize={optimize}")


def test_split_refuses_sizes_that_do_not_add_up() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.arange(12, dtype=np.float32).reshape(3, 4), name="t")
        with pytest.raises(ValueError, match=r"^ops.split: sizes \[1, 2\] do not add up to dim 1 \(4\) of \(3, 4\)$"):
            ops.split(t, [1, 2], axis=1)
        with pytest.raises(ValueError, match=r"^ops.split: sizes \[2, 2\] do not add up to dim 0 \(3\) of \(3, 4\)$"):
            ops.split(t, [2, 2])
        # sizes that add up but with a negative one: refused, not a part of shape -2
        with pytest.raises(ValueError, match=r"^ops.split: sizes \[6, -2\] of dim 1 of \(3, 4\) must not be negative$"):
            ops.split(t, [6, -2], axis=1)
        with pytest.raises(ValueError, match=r"^ops.split: dim 1 of \(3, 4\) is not divisible by 3$"):
            ops.split(t, 3, axis=1)
        with pytest.raises(ValueError, match=r"^ops.split: dim 0 of \(3, 4\) is not divisible by 2$"):
            ops.split(t, 2)
        parts = ops.split(t, [1, 3], axis=-1)
        assert [p.shape for p in parts] == [(3, 1), (3, 3)]


def _extremum_grad(x: np.ndarray, dy: np.ndarray, axis: int, keepdims: bool, fn) -> np.ndarray:
    """Every element equal to the extremum along `axis` gets all of dy (PopART's rule)."""
    ext = fn(x, axis=axis, keepdims=True)
    d = dy if keepdims else np.expand_dims(dy, axis)
    return np.where(x == ext, d, 0.0).astype(np.float32)


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_reduce_extremum_gradient_with_ties(kind: str, keepdims: bool, axis: int) -> None:
    x = np.array(
        [[1.0, 3.0, 3.0, -2.0], [2.0, 2.0, 2.0, 2.0], [-5.0, 0.0, -5.0, 3.0]],
        np.float32,
    )  # ties at the maximum and at the minimum of rows and columns
    op = ops.max if kind == "max" else ops.min
    fn = np.max if kind == "max" else np.min
    y, (dx,), dy = run_fwd_bwd(lambda a: op(a, axis=axis, keepdims=keepdims), [x])
    np.testing.assert_array_equal(y, fn(x, axis=axis, keepdims=keepdims))
    np.testing.assert_allclose(dx, _extremum_grad(x, dy, axis, keepdims, fn), rtol=1e-6, atol=0)
