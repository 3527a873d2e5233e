"""Reshapes and transposes (views in the optimised plan) against NumPy, in every path.

`rt-views` may bind a reshape/transpose output as a NumPy view of its input; these
programs chain views, reshape non-contiguous views (which NumPy cannot view) and write
the viewed storage around the views. Each result is computed independently with NumPy
and checked for the straightforward plan, the optimised plan and `popxl.Session`.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import MemRefType

import popxl
from popxl import ops
from tests.helpers.narrow import narrow
from tests.helpers.runtime_check import check_all
from xl.compiler import DEFAULT_PIPELINE, lower
from xl.dialects import rt
from xl.passes.rt_analysis import VIEW_ATTR

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.0


def _prog(build):
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream(X.shape, popxl.float32, "x")
        x = ops.host_load(xs)
        outs = build(x)
        for name, t in outs.items():
            s = popxl.d2h_stream(t.shape, t.dtype, name)
            ops.host_store(s, t)
    return ir


CASES = {
    "transpose_then_flatten": (
        lambda x: {"y": x.reshape((6, 4)).transpose((1, 0)).reshape((24,))},
        lambda a: {"y": a.reshape(6, 4).T.reshape(24)},
    ),
    "transpose_reshape_2d": (
        lambda x: {"y": x.transpose((2, 0, 1)).reshape((4, 6))},
        lambda a: {"y": a.transpose(2, 0, 1).reshape(4, 6)},
    ),
    "double_transpose_flatten": (
        lambda x: {"y": x.transpose((1, 0, 2)).transpose((1, 0, 2)).reshape((24,))},
        lambda a: {"y": a.reshape(24)},
    ),
    "transpose_split_merge": (
        lambda x: {"y": x.transpose((0, 2, 1)).reshape((2, 2, 2, 3)).reshape((8, 3))},
        lambda a: {"y": a.transpose(0, 2, 1).reshape(8, 3)},
    ),
    "squeeze_of_transpose": (
        lambda x: {"y": ops.squeeze(x[:, :1, :].transpose((2, 1, 0)).reshape((4, 1, 2)), [1]) + 1.0},
        lambda a: {"y": a[:, :1, :].transpose(2, 1, 0).reshape(4, 2) + 1.0},
    ),
    "views_feed_math": (
        lambda x: {
            "y": ops.matmul(x.reshape((6, 4)).transpose((1, 0)), x.reshape((6, 4))),
            "z": ops.relu(x.transpose((2, 1, 0)).reshape((12, 2))) * 2.0,
        },
        lambda a: {
            "y": a.reshape(6, 4).T @ a.reshape(6, 4),
            "z": np.maximum(a.transpose(2, 1, 0).reshape(12, 2), 0) * 2.0,
        },
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_view_chains(case: str) -> None:
    build, ref = CASES[case]
    ir = _prog(build)
    check_all(ir, [ref(X)], [{"x": X}])


def test_flattened_transpose_is_not_marked_a_view() -> None:
    """The issue's program: the transpose is a view, the flattening reshape copies."""
    ir = _prog(lambda x: {"y": x.reshape((6, 4)).transpose((1, 0)).reshape((24,))})
    low = lower(ir._module, DEFAULT_PIPELINE + ",rt-optimize")
    marks = {
        op.kernel.data: VIEW_ATTR in op.attributes
        for op in low.walk()
        if isinstance(op, rt.KernelOp) and op.kernel.data in ("popxl.transpose",)
    }
    assert marks == {"popxl.transpose": True}
    flat = [
        op
        for op in low.walk()
        if isinstance(op, rt.KernelOp)
        and op.kernel.data == "popxl.reshape"
        and narrow(op.outs[0].type, MemRefType).get_shape() == (24,)
    ]
    assert len(flat) == 1 and VIEW_ATTR not in flat[0].attributes
    check_all(ir, [{"y": X.reshape(6, 4).T.reshape(24)}], [{"x": X}])


def test_view_of_variable_then_update() -> None:
    """A reshaped/transposed variable read after the variable is updated in place must
    show the old value where the program read it before the update."""
    w0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(w0, name="w")
        before = w.transpose((1, 0)).reshape((6,))
        flat = w.reshape((6,))
        r1 = before * 1.0
        ops.scaled_add_(w, w, a=1.0, b=1.0)  # w = 2 w
        after = w.transpose((1, 0)) + 0.0
        for name, t in {"before": r1, "flat": flat, "after": after}.items():
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    w1 = 2 * w0
    w2 = 2 * w1
    expected = [
        {"before": w0.T.reshape(6), "flat": w0.reshape(6), "after": w1.T},
        {"before": w1.T.reshape(6), "flat": w1.reshape(6), "after": w2.T},
    ]
    check_all(ir, expected, [{}, {}], state={"w": w2})


def test_xl_run_flattened_transpose(tmp_path) -> None:
    """The same program through `xl-run` (text in, npz out)."""
    from xl.tools.run import main

    ir = _prog(lambda x: {"y": x.transpose((2, 1, 0)).reshape((24,))})
    prog = tmp_path / "p.mlir"
    prog.write_text(ir.to_mlir())
    np.savez(tmp_path / "in.npz", x=X)
    assert main([str(prog), str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")]) in (0, None)
    got = np.load(tmp_path / "out.npz")["y"]
    np.testing.assert_array_equal(got, X.transpose(2, 1, 0).reshape(24))
