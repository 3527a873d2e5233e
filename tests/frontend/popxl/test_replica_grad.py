"""Gradients of the replica collectives against finite differences across replicas.

Each case builds `loss_r = sum(collective(x_r) * c_r)` on 4 replicas, differentiates it with
`transforms.autodiff` (the rules of `xl.passes.grad_rules_replica`) and runs forward and
gradient through `popxl.Session`. The finite differences perturb the inputs of the
replicas and measure the objective whose exact gradient the PopXL rule is:

- `sum`: the replicas' inputs are independent and the objective is the sum of every
  replica's loss (all-reduce, reduce-scatter);
- `once`: the result is the same on every member of a group and the loss is counted once
  per group (all-gather, identical-grad-inputs all-reduce);
- `shared`: the members of a group hold one shared value, perturbed on all of them at
  once, and the objective is the sum of the losses (replicated slice, sharded slice,
  identical-inputs all-reduce).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl import transforms
from tests.helpers.replica_harness import ReplicatedGrad, finite_difference, runtime_has_collectives

pytestmark = pytest.mark.skipif(not runtime_has_collectives(), reason="the runtime has no replica collective kernels")

R = 4
C = ops.collectives

# (stride, group_size) or an explicit assignment
GROUPINGS: dict[str, Any] = {
    "all": (1, 4),
    "pairs": (1, 2),
    "strided": (2, 2),
    "explicit": [0, 1, 1, 0],
}


def _group(ir: popxl.Ir, spec: Any) -> Any:
    if isinstance(spec, list):
        return ir.replica_grouping_from_assignments(spec)
    return ir.replica_grouping(*spec)


def _assignment(spec: Any) -> list[int]:
    if isinstance(spec, list):
        return spec
    s, g = spec
    return [r % s + s * (r // (s * g)) for r in range(R)]


# name: (convention, grouping, shape, result shape, collective(ir, x, group))
CASES: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...], Callable[..., Any]]] = {
    "all_reduce-add": ("sum", "all", (2, 3), (2, 3), lambda ir, x, g: C.replicated_all_reduce(x, "add", g)),
    "all_reduce-add-explicit": (
        "sum",
        "explicit",
        (2, 3),
        (2, 3),
        lambda ir, x, g: C.replicated_all_reduce(x, "add", g),
    ),
    "all_reduce-mean": ("sum", "strided", (2, 3), (2, 3), lambda ir, x, g: C.replicated_all_reduce(x, "mean", g)),
    "all_reduce-mul": ("sum", "pairs", (2, 3), (2, 3), lambda ir, x, g: C.replicated_all_reduce(x, "mul", g)),
    "all_reduce-square_add": ("sum", "all", (3,), (3,), lambda ir, x, g: C.replicated_all_reduce(x, "square_add", g)),
    "all_reduce-max": ("sum", "all", (2, 3), (2, 3), lambda ir, x, g: C.replicated_all_reduce(x, "max", g)),
    "all_reduce-min": ("sum", "strided", (2, 3), (2, 3), lambda ir, x, g: C.replicated_all_reduce(x, "min", g)),
    "reduce_scatter-add": ("sum", "all", (2, 4), (2,), lambda ir, x, g: C.replicated_reduce_scatter(x, "add", g)),
    "reduce_scatter-mean": ("sum", "strided", (2, 3), (3,), lambda ir, x, g: C.replicated_reduce_scatter(x, "mean", g)),
    "reduce_scatter-mul": ("sum", "pairs", (4,), (2,), lambda ir, x, g: C.replicated_reduce_scatter(x, "mul", g)),
    "reduce_scatter-max": ("sum", "all", (2, 4), (2,), lambda ir, x, g: C.replicated_reduce_scatter(x, "max", g)),
    # element counts that do not divide by the group size: the last shards are zero-padded
    "reduce_scatter-add-padded": (
        "sum",
        "all",
        (2, 3),
        (2,),
        lambda ir, x, g: C.replicated_reduce_scatter(x, "add", g),
    ),
    "reduce_scatter-mean-padded": (
        "sum",
        "strided",
        (5,),
        (3,),
        lambda ir, x, g: C.replicated_reduce_scatter(x, "mean", g),
    ),
    "reduce_scatter-max-padded": (
        "sum",
        "explicit",
        (3, 1),
        (2,),
        lambda ir, x, g: C.replicated_reduce_scatter(x, "max", g),
    ),
    "all_gather-concat": ("once", "strided", (2, 3), (2, 6), lambda ir, x, g: C.replicated_all_gather(x, 1, g)),
    "all_gather-new_axis": (
        "once",
        "all",
        (2, 3),
        (4, 2, 3),
        lambda ir, x, g: C.replicated_all_gather(x, 0, g, "new_axis"),
    ),
    "all_gather-explicit": ("once", "explicit", (3,), (6,), lambda ir, x, g: C.replicated_all_gather(x, 0, g)),
    "identical_grad_inputs": (
        "once",
        "pairs",
        (2, 3),
        (2, 3),
        lambda ir, x, g: _addons_op("replicated_all_reduce_identical_grad_inputs", x, g),
    ),
    "identical_inputs": (
        "shared",
        "strided",
        (2, 3),
        (2, 3),
        lambda ir, x, g: _addons_op("replicated_all_reduce_identical_inputs", x, g),
    ),
    "slice-axis0": ("shared", "all", (4, 3), (3,), lambda ir, x, g: C.replicated_slice(x, 0, g)),
    "slice-axis1": ("shared", "pairs", (2, 4), (2, 2), lambda ir, x, g: C.replicated_slice(x, 1, g)),
    "sharded_slice": ("shared", "strided", (2, 3), (3,), lambda ir, x, g: C.replica_sharded_slice(x, g)),
    "sharded_slice-padded": ("shared", "all", (7,), (2,), lambda ir, x, g: C.replica_sharded_slice(x, g)),
}


def _addons_op(name: str, x: popxl.Tensor, g: Any) -> popxl.Tensor:
    import popxl_addons as addons

    return getattr(addons.ops, name)(x, "add", g)


@pytest.mark.parametrize("name", list(CASES))
def test_collective_gradient_matches_finite_differences(name: str) -> None:
    convention, gname, shape, out_shape, collective = CASES[name]
    gspec = GROUPINGS[gname]

    def body(ir: popxl.Ir, x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
        y = collective(ir, x, _group(ir, gspec))
        assert y.shape == out_shape, (y.shape, out_shape)
        return ops.sum(y * c)

    h = ReplicatedGrad(R, shape, out_shape, body)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    assign = _assignment(gspec)
    groups = sorted(set(assign))
    firsts = [assign.index(g) for g in groups]
    # positive, well-separated values: products and min/max are smooth at the point
    x = rng.uniform(0.5, 2.0, size=(R, *shape))
    c = rng.normal(size=(R, *out_shape))
    if convention == "once":
        c = c[[firsts[assign[r]] for r in range(R)]]  # one loss per group
    p = None  # the per-group values, with the "shared" convention
    if convention == "shared":
        p = rng.uniform(0.5, 2.0, size=(len(groups), *shape))
        x = p[assign]
    loss, dx = h.run(x, c)
    assert dx.shape == (R, *shape)

    if convention == "sum":
        fd = finite_difference(lambda xx: h.losses(xx, c).sum(), x)
    elif convention == "once":
        np.testing.assert_allclose(loss, loss[[firsts[assign[r]] for r in range(R)]], rtol=1e-12)
        fd = finite_difference(lambda xx: h.losses(xx, c)[firsts].sum(), x)
    else:
        assert p is not None
        fdp = finite_difference(lambda pp: h.losses(pp[assign], c).sum(), p)
        fd = fdp[assign]
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-7)
    assert np.abs(dx).max() > 1e-3  # a real gradient, not zeros


def test_all_reduce_gradient_is_the_all_reduce_of_the_gradients() -> None:
    """PopXL's rule for add: each replica's dx is the sum of the group's seeds."""

    def body(ir: popxl.Ir, x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
        return ops.sum(C.replicated_all_reduce(x, "add", ir.replica_grouping(2, 2)) * c)

    h = ReplicatedGrad(R, (3,), (3,), body)
    c = np.arange(R * 3, dtype=np.float64).reshape(R, 3)
    _, dx = h.run(np.ones((R, 3)), c)
    np.testing.assert_array_equal(dx, c[[0, 1, 0, 1]] + c[[2, 3, 2, 3]])


def test_gradient_ir_uses_collectives() -> None:
    """The gradient graph of an all-gather holds a replicated slice (and vice versa)."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32), name="x")
        g = ir.create_graph(lambda t: ops.sum(C.replicated_all_gather(t, axis=1)), x)
        text = ir.to_mlir()
        info = transforms.autodiff(g)
    grad_text = ir.to_mlir()[len(text) - 2 :]
    assert "replica.slice" in grad_text and "axis = 1 : i64" in grad_text
    assert info.graph is not None


def test_all_reduce_of_ipus_gradients() -> None:
    """`ops.collectives.all_reduce` and its identical variants across the IPUs of one replica."""
    rng = np.random.default_rng(3)
    x0, x1, c0, c1 = (rng.uniform(0.5, 2, size=3) for _ in range(4))

    def run(mode: str, op: str, a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        ir = popxl.Ir()
        with ir.main_graph:
            s0 = popxl.h2d_stream((3,), popxl.float64, "a")
            s1 = popxl.h2d_stream((3,), popxl.float64, "b")
            with popxl.ipu(0):
                t0 = ops.host_load(s0)
            with popxl.ipu(1):
                t1 = ops.host_load(s1)

            def f(u: popxl.Tensor, v: popxl.Tensor) -> popxl.Tensor:
                fn = {"plain": C.all_reduce, "inputs": C.all_reduce_identical_inputs,
                      "grads": C.all_reduce_identical_grad_inputs}[mode]  # fmt: skip
                y0, y1 = fn([u, v], [0, 1], op)
                l0 = ops.sum(y0 * popxl.constant(c0, popxl.float64))
                # identical grad inputs: both IPUs compute the same loss (same weights), so the
                # gradients of both outputs are identical
                c = c0 if mode == "grads" else c1
                with popxl.ipu(1):
                    l1 = ops.sum(y1 * popxl.constant(c, popxl.float64))
                return l0 + l1.copy_to_ipu(0, 1)

            with popxl.ipu(0):
                g = ir.create_graph(f, t0, t1)
                info = transforms.autodiff(g)
                call = ops.call_with_info(g, t0, t1)
                loss = call.outputs[0]
                da, db = ops.call(
                    info.graph, popxl.constant(np.float64(1), popxl.float64), inputs_dict=info.inputs_dict(call)
                )
            outs = {}
            for k, t in (("loss", loss), ("da", da), ("db", db)):
                outs[k] = popxl.d2h_stream(t.shape, t.dtype, k)
                ops.host_store(outs[k], t)
        with popxl.Session(ir, "ipu_model") as s:
            o = s.run({s0: a, s1: b})
        return float(o[outs["loss"]]), o[outs["da"]], o[outs["db"]]

    for op in ("add", "mean", "mul", "max", "square_add"):
        _, da, db = run("plain", op, x0, x1)
        np.testing.assert_allclose(da, finite_difference(lambda a, op=op: run("plain", op, a, x1)[0], x0), rtol=1e-6)
        np.testing.assert_allclose(db, finite_difference(lambda b, op=op: run("plain", op, x0, b)[0], x1), rtol=1e-6)
    # identical inputs: one shared value; the gradient of each input is the summed gradient
    loss, da, db = run("inputs", "add", x0, x0)
    np.testing.assert_allclose(loss, np.sum(x0 * c0) + np.sum(x0 * c1), rtol=1e-12)  # identity forward
    fd = finite_difference(lambda p: run("inputs", "add", p, p)[0], x0)
    np.testing.assert_allclose(da, fd, rtol=1e-6)
    np.testing.assert_allclose(db, fd, rtol=1e-6)
    # identical grad inputs: forward all-reduce, gradient the identity; each IPU's input gets
    # the gradient of its own copy of the (identical) loss, half of the total
    loss, da, db = run("grads", "add", x0, x1)
    np.testing.assert_allclose(loss, 2 * np.sum((x0 + x1) * c0), rtol=1e-12)
    half = lambda a, b: run("grads", "add", a, b)[0] / 2  # noqa: E731
    np.testing.assert_allclose(da, finite_difference(lambda a: half(a, x1), x0), rtol=1e-6)
    np.testing.assert_allclose(db, finite_difference(lambda b: half(x0, b), x1), rtol=1e-6)
    for op in ("mean", "max"):
        loss, da, db = run("grads", op, x0, x1)
        ref = (x0 + x1) / 2 if op == "mean" else np.maximum(x0, x1)
        np.testing.assert_allclose(loss, 2 * np.sum(ref * c0), rtol=1e-12)
        np.testing.assert_allclose(da, c0, rtol=1e-12)


def test_in_place_all_reduce_on_an_intermediate_is_differentiated() -> None:
    """`replicated_all_reduce_` on a forward intermediate: `functionalize` makes it the
    out-of-place all-reduce, whose rule gives the gradient."""

    def body(ir: popxl.Ir, x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
        u = x * 2.0
        C.replicated_all_reduce_(u, "add", ir.replica_grouping(1, 2))
        return ops.sum(u * c)

    h = ReplicatedGrad(R, (3,), (3,), body)
    rng = np.random.default_rng(5)
    x, c = rng.normal(size=(R, 3)), rng.normal(size=(R, 3))
    _, dx = h.run(x, c)
    fd = finite_difference(lambda xx: h.losses(xx, c).sum(), x)
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dx, 2 * (c + c[[1, 0, 3, 2]]), rtol=1e-12)
