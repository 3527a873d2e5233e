"""`popxl_addons.patterns.apply_pre_alias_patterns` and `popxl.context.get_current_context`.

The tensor-parallel applications build a layer, differentiate it, then call
`apply_pre_alias_patterns(ir, level="default")` (upstream: PopART's OpToIdentityPattern
among others, which the TP all-reduces need). On xl the program is complete without it:
the call checks its arguments and leaves the program (its text) and its results as they
are, checked here on 2 replicas against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl import ops
from popxl.context import Context, get_current_context
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.patterns import apply_pre_alias_patterns, patterns_level


def _tp_program(apply: str | None) -> tuple[popxl.Ir, dict[str, popxl.DeviceToHostStream], popxl.HostToDeviceStream]:
    """y = all_reduce_identical_grad_inputs(identical_inputs(x) * w_r) on 2 replicas and its
    gradient in x for dy = 1 (x the same on both replicas, w_r per replica)."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        x = ops.host_load(xs)
        w = popxl.variable(
            np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]], np.float32),
            name="w",
            replica_grouping=ir.replica_grouping(group_size=1),
        )

        def layer(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            return replicated_all_reduce_identical_grad_inputs(replicated_all_reduce_identical_inputs(x) * w)

        g = ir.create_graph(layer, x, w)
        dg = popxl.transforms.autodiff(g, grads_required=[g.inputs[0]])
        call = ops.call_with_info(g, x, w)
        (dx,) = ops.call(dg.graph, popxl.constant(np.ones(3, np.float32)), inputs_dict=dg.inputs_dict(call))
        out = {"y": addons.host_store(call.outputs[0]), "dx": addons.host_store(dx)}
    if apply is not None:
        before = ir.to_mlir()
        apply_pre_alias_patterns(ir, level=apply)  # pyright: ignore[reportArgumentType]
        assert ir.to_mlir() == before
    return ir, out, xs


@pytest.mark.parametrize("level", [None, *patterns_level])
def test_tp_program_is_unchanged_by_the_patterns(level: str | None) -> None:
    ir, out, xs = _tp_program(level)
    x = np.array([1.0, -2.0, 0.5], np.float32)
    with popxl.Session(ir, "cpu") as session:
        got = session.run({xs: np.stack([x, x])})
    w = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]], np.float32)
    y = x * w[0] + x * w[1]  # the all-reduce of x * w_r: the same on both replicas
    np.testing.assert_allclose(got[out["y"]], np.stack([y, y]), rtol=1e-6)
    # d(y_0 + y_1 counted once)/dx: each replica's w, all-reduced (x identical on both)
    np.testing.assert_allclose(got[out["dx"]], np.stack([w.sum(0), w.sum(0)]), rtol=1e-6)


def test_pattern_arguments_are_checked() -> None:
    ir = popxl.Ir()
    apply_pre_alias_patterns(ir)
    with pytest.raises(TypeError, match=r"apply_pre_alias_patterns: ir must be a popxl.Ir, got Graph"):
        apply_pre_alias_patterns(ir.main_graph)  # pyright: ignore[reportArgumentType]
    with pytest.raises(
        ValueError, match=r"level must be one of 'no_patterns', 'minimal', 'default', 'all', got 'Default'"
    ):
        apply_pre_alias_patterns(ir, level="Default")  # pyright: ignore[reportArgumentType]


def test_get_current_context() -> None:
    ctx = get_current_context()
    assert isinstance(ctx, Context) and get_current_context() is ctx
    with pytest.raises(RuntimeError, match="no graph has been selected"):
        _ = ctx.graph
    ir = popxl.Ir()
    assert (ctx.ipu_id, ctx.io_tile_set, ctx.name_scopes, ctx.in_sequence) == (0, False, [], None)
    with ir.main_graph:
        assert ctx.graph is ir.main_graph and ctx.ir is ir and ctx.main_graph is ir.main_graph
        sub = ir.create_empty_graph("sub")
        with (
            sub,
            popxl.ipu(1),
            popxl.io_tiles(),
            popxl.name_scope("a"),
            popxl.name_scope("b"),
            popxl.in_sequence(False),
        ):
            assert ctx.graph is sub and ctx.main_graph is ir.main_graph and ctx.ir is ir
            assert (ctx.ipu_id, ctx.io_tile_set, ctx.name_scopes, ctx.in_sequence) == (1, True, ["a", "b"], False)
            # what the applications use it for
            assert get_current_context().graph.ir is ir
        assert (ctx.ipu_id, ctx.io_tile_set, ctx.name_scopes) == (0, False, [])
    assert "ipu_id=0" in repr(ctx)
