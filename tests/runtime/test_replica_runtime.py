"""Replica collectives in the runtime: every collective against NumPy, per group of a grouping.

Each program loads per-replica data (`[R, *shape]` host arrays), applies one collective and
stores the result; the expected values are computed here with NumPy from the replica groups
derived independently (stride / group_size as PopXL defines them, or an explicit assignment).
Every case runs in both plans (the generated plan and the straightforward one).
"""

from __future__ import annotations

import numpy as np
import pytest

from xl.compiler import compile_module
from xl.runtime.executable import ReplicaDivergenceError
from xl.tools.context import xl_context
from xl.tools.parse import parse_source

REDUCTIONS = ("add", "mean", "mul", "min", "max", "square_add")


def groups_of(r: int, stride: int, size: int, assignment: list[int] | None = None) -> list[list[int]]:
    """The replica groups, computed from PopXL's definition (independently of the runtime)."""
    if assignment is None:
        assignment = [i % stride + stride * (i // (stride * size)) for i in range(r)]
    out: dict[int, list[int]] = {}
    for i, g in enumerate(assignment):
        out.setdefault(g, []).append(i)
    return [out[g] for g in sorted(out)]


def grouping_text(stride: int, size: int, assignment: list[int] | None) -> str:
    if assignment is not None:
        return f"#replica.grouping<assignment = [{', '.join(map(str, assignment))}]>"
    return f"#replica.grouping<stride = {stride}, group_size = {size}>"


# (R, stride, group_size, explicit assignment): every replica alone, one group, two contiguous
# groups, strided groups, an explicit assignment
GROUPINGS = [
    (2, 1, 1, None),
    (2, 1, 2, None),
    (4, 1, 1, None),
    (4, 1, 4, None),
    (4, 1, 2, None),
    (4, 2, 2, None),
    (4, 1, 2, [0, 1, 1, 0]),
]
GIDS = [f"R{r}-s{s}-g{g}" + ("-explicit" if a else "") for r, s, g, a in GROUPINGS]


def ttype(shape: tuple[int, ...], dt: str = "f32") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{dt}>"


def program(r: int, body: str, x_shape: tuple[int, ...], y_shape: tuple[int, ...], dt: str = "f32") -> str:
    return f"""
graph.h2d_stream @x : {ttype(x_shape, dt)}
graph.d2h_stream @y : {ttype(y_shape, dt)}
graph.main attributes {{replication_factor = {r} : i64}} {{
  %x = graph.host_load @x : {ttype(x_shape, dt)}
{body}
  graph.host_store @y, %y : {ttype(y_shape, dt)}
}}
"""


def run_both(text: str, feeds: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    m = parse_source(xl_context(), text, "replica.mlir")
    m.verify()
    return [compile_module(m, optimize=opt).run(feeds) for opt in (True, False)]


def reduce_ref(op: str, xs: list[np.ndarray]) -> np.ndarray:
    if op == "add":
        return np.sum(xs, axis=0)
    if op == "mean":
        return np.sum(xs, axis=0) / len(xs)
    if op == "mul":
        return np.prod(xs, axis=0)
    if op == "min":
        return np.min(xs, axis=0)
    if op == "max":
        return np.max(xs, axis=0)
    if op == "square_add":
        return np.sum(np.square(xs), axis=0)
    if op == "and":
        return np.all(xs, axis=0)
    if op == "or":
        return np.any(xs, axis=0)
    raise AssertionError(op)


def per_replica(r: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, (r, *shape)).astype(np.float32)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
def test_all_reduce(r: int, stride: int, size: int, assign: list[int] | None, op: str, inplace: bool) -> None:
    g = grouping_text(stride, size, assign)
    if inplace:
        body = (
            f'  replica.all_reduce_ %x {{grouping = {g}, op = "{op}"}} : (tensor<2x3xf32>) -> ()\n'
            "  %y = popxl.identity %x : (tensor<2x3xf32>) -> tensor<2x3xf32>"
        )
    else:
        body = f'  %y = replica.all_reduce %x {{grouping = {g}, op = "{op}"}} : (tensor<2x3xf32>) -> tensor<2x3xf32>'
    x = per_replica(r, (2, 3))
    want = np.empty_like(x)
    for members in groups_of(r, stride, size, assign):
        want[members] = reduce_ref(op, [x[m].astype(np.float64) for m in members])
    for out in run_both(program(r, body, (2, 3), (2, 3)), {"x": x}):
        np.testing.assert_allclose(out["y"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
@pytest.mark.parametrize("op", ["and", "or"])
def test_all_reduce_logical(r: int, stride: int, size: int, assign: list[int] | None, op: str) -> None:
    g = grouping_text(stride, size, assign)
    body = f'  %y = replica.all_reduce %x {{grouping = {g}, op = "{op}"}} : (tensor<5xi1>) -> tensor<5xi1>'
    x = np.random.default_rng(1).random((r, 5)) < 0.6
    want = np.empty_like(x)
    for members in groups_of(r, stride, size, assign):
        want[members] = reduce_ref(op, [x[m] for m in members])
    for out in run_both(program(r, body, (5,), (5,), "i1"), {"x": x}):
        np.testing.assert_array_equal(out["y"], want)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
def test_identical_inputs_variants(r: int, stride: int, size: int, assign: list[int] | None) -> None:
    g = grouping_text(stride, size, assign)
    body = (
        f'  %a = replica.all_reduce_identical_inputs %x {{grouping = {g}, op = "add"}} : (tensor<3xf32>) -> tensor<3xf32>\n'
        f'  %b = replica.all_reduce_identical_grad_inputs %x {{grouping = {g}, op = "add"}} : (tensor<3xf32>) -> tensor<3xf32>\n'
        "  %y = popxl.concat %a, %b {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<6xf32>"
    )
    x = per_replica(r, (3,))
    want = np.empty((r, 6), np.float32)
    want[:, :3] = x  # identical inputs: the identity forward
    for members in groups_of(r, stride, size, assign):
        want[members, 3:] = x[members].sum(axis=0)
    for out in run_both(program(r, body, (3,), (6,)), {"x": x}):
        np.testing.assert_allclose(out["y"], want, rtol=1e-6)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
@pytest.mark.parametrize(("axis", "new_axis"), [(0, False), (1, False), (-1, False), (0, True)])
def test_all_gather(r: int, stride: int, size: int, assign: list[int] | None, axis: int, new_axis: bool) -> None:
    g = grouping_text(stride, size, assign)
    gs = len(groups_of(r, stride, size, assign)[0])
    shape = (2, 3)
    if new_axis:
        out_shape: tuple[int, ...] = (gs, *shape)
    else:
        s: list[int] = list(shape)
        s[axis % 2] *= gs
        out_shape = tuple(s)
    body = (
        f"  %y = replica.all_gather %x {{axis = {axis} : i64, grouping = {g}, "
        f"new_axis = {'true' if new_axis else 'false'}}} : ({ttype(shape)}) -> {ttype(out_shape)}"
    )
    x = per_replica(r, shape)
    want = np.empty((r, *out_shape), np.float32)
    for members in groups_of(r, stride, size, assign):
        parts = [x[m] for m in members]
        want[members] = np.stack(parts) if new_axis else np.concatenate(parts, axis=axis)
    for out in run_both(program(r, body, shape, out_shape), {"x": x}):
        np.testing.assert_array_equal(out["y"].reshape(r, *out_shape), want)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
@pytest.mark.parametrize("op", ["add", "mean", "max", "square_add"])
def test_reduce_scatter(r: int, stride: int, size: int, assign: list[int] | None, op: str) -> None:
    g = grouping_text(stride, size, assign)
    gs = len(groups_of(r, stride, size, assign)[0])
    shape = (2, 4)  # 8 elements: divisible by 1, 2, 4
    shard = 8 // gs
    body = f'  %y = replica.reduce_scatter %x {{grouping = {g}, op = "{op}"}} : ({ttype(shape)}) -> {ttype((shard,))}'
    x = per_replica(r, shape)
    want = np.empty((r, shard), np.float32)
    for members in groups_of(r, stride, size, assign):
        total = reduce_ref(op, [x[m].astype(np.float64).reshape(-1) for m in members])
        for i, m in enumerate(members):
            want[m] = total[i * shard : (i + 1) * shard]
    for out in run_both(program(r, body, shape, (shard,)), {"x": x}):
        np.testing.assert_allclose(out["y"].reshape(r, shard), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
def test_sharded_slice(r: int, stride: int, size: int, assign: list[int] | None) -> None:
    g = grouping_text(stride, size, assign)
    gs = len(groups_of(r, stride, size, assign)[0])
    shard = 8 // gs
    body = f"  %y = replica.sharded_slice %x {{grouping = {g}}} : (tensor<2x4xf32>) -> {ttype((shard,))}"
    x = per_replica(r, (2, 4))
    want = np.empty((r, shard), np.float32)
    for members in groups_of(r, stride, size, assign):
        for i, m in enumerate(members):
            want[m] = x[m].reshape(-1)[i * shard : (i + 1) * shard]
    for out in run_both(program(r, body, (2, 4), (shard,)), {"x": x}):
        np.testing.assert_array_equal(out["y"].reshape(r, shard), want)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
@pytest.mark.parametrize("axis", [0, 1])
def test_replicated_slice(r: int, stride: int, size: int, assign: list[int] | None, axis: int) -> None:
    g = grouping_text(stride, size, assign)
    gs = len(groups_of(r, stride, size, assign)[0])
    shape = (4, 8)
    out_shape: list[int] = list(shape)
    if out_shape[axis] == gs:
        del out_shape[axis]  # a part of size 1 drops the axis (as upstream)
    else:
        out_shape[axis] //= gs
    body = f"  %y = replica.slice %x {{axis = {axis} : i64, grouping = {g}}} : ({ttype(shape)}) -> {ttype(tuple(out_shape))}"
    x = per_replica(r, shape)
    want = np.empty((r, *out_shape), np.float32)
    for members in groups_of(r, stride, size, assign):
        for i, m in enumerate(members):
            part = np.split(x[m], gs, axis=axis)[i]
            want[m] = part.reshape(out_shape)
    for out in run_both(program(r, body, shape, tuple(out_shape)), {"x": x}):
        np.testing.assert_array_equal(out["y"].reshape(r, *out_shape), want)


def test_slice_drops_axis_of_size_one() -> None:
    body = "  %y = replica.slice %x {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 4>} : (tensor<4x3xf32>) -> tensor<3xf32>"
    x = per_replica(4, (4, 3))
    for out in run_both(program(4, body, (4, 3), (3,)), {"x": x}):
        np.testing.assert_array_equal(out["y"], np.stack([x[i, i] for i in range(4)]))


# ------------------------------------------------------------------------------------
# Lockstep: loops, several transfers, branches, divergence
# ------------------------------------------------------------------------------------

LOOP = """
graph.h2d_stream @x : tensor<3xf32>
graph.d2h_stream @y : tensor<3xf32>
graph.graph @body(%a: tensor<3xf32> {graph.name = "a"}) -> (tensor<3xf32>) {
  %x = graph.host_load @x : tensor<3xf32>
  %s = popxl.add %a, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %m = replica.all_reduce %s {grouping = #replica.grouping<stride = 2, group_size = 2>, op = "mean"} : (tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @y, %m : tensor<3xf32>
  graph.output %m : tensor<3xf32>
}
graph.main attributes {num_host_transfers = 3 : i64, replication_factor = 4 : i64} {
  %z = graph.constant dense<0.0> : tensor<3xf32>
  %r = call.repeat @body 3 (%z) : (tensor<3xf32>) -> tensor<3xf32>
}
"""


def test_collective_inside_a_loop_with_transfers() -> None:
    """A collective in a loop body: every iteration exchanges data; `[n, R, *shape]` host data."""
    x = np.random.default_rng(3).normal(size=(3, 4, 3)).astype(np.float32)
    groups = groups_of(4, 2, 2)
    a = np.zeros((4, 3))
    want = np.empty((3, 4, 3))
    for i in range(3):
        s = a + x[i]
        for members in groups:
            s[members] = s[members].mean(axis=0)
        a = s
        want[i] = a
    for out in run_both(LOOP, {"x": x}):
        np.testing.assert_allclose(out["y"], want, rtol=1e-6, atol=1e-6)


BRANCH = """
graph.h2d_stream @c : tensor<i1>
graph.h2d_stream @x : tensor<3xf32>
graph.d2h_stream @y : tensor<3xf32>
graph.graph @then(%a: tensor<3xf32> {graph.name = "a"}) -> (tensor<3xf32>) {
  %m = replica.all_reduce %a {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<3xf32>) -> tensor<3xf32>
  graph.output %m : tensor<3xf32>
}
graph.graph @else(%a: tensor<3xf32> {graph.name = "a"}) -> (tensor<3xf32>) {
  %m = popxl.neg %a : (tensor<3xf32>) -> tensor<3xf32>
  graph.output %m : tensor<3xf32>
}
graph.main attributes {replication_factor = 2 : i64} {
  %c = graph.host_load @c : tensor<i1>
  %x = graph.host_load @x : tensor<3xf32>
  %y = call.conditional %c then @then(%x) else @else(%x) : tensor<i1>, (tensor<3xf32>), (tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @y, %y : tensor<3xf32>
}
"""


def test_collective_in_a_branch_taken_by_every_replica() -> None:
    x = per_replica(2, (3,))
    for out in run_both(BRANCH, {"c": np.array([True, True]), "x": x}):
        np.testing.assert_allclose(out["y"], np.stack([x.sum(0), x.sum(0)]), rtol=1e-6)
    for out in run_both(BRANCH, {"c": np.array([False, False]), "x": x}):
        np.testing.assert_array_equal(out["y"], -x)


def test_diverged_replicas_are_an_error() -> None:
    m = parse_source(xl_context(), BRANCH, "branch.mlir")
    x = per_replica(2, (3,))
    for opt in (True, False):
        exe = compile_module(m, optimize=opt)
        with pytest.raises(
            ReplicaDivergenceError,
            match=r"replica 0 reached collective #0 \(replica.all_reduce.*replica 1 reached the end of the step",
        ):
            exe.run({"c": np.array([True, False]), "x": x})
        # the executable still works afterwards
        out = exe.run({"c": np.array([True, True]), "x": x})
        np.testing.assert_allclose(out["y"], np.stack([x.sum(0), x.sum(0)]), rtol=1e-6)


@pytest.mark.parametrize(("r", "stride", "size", "assign"), GROUPINGS, ids=GIDS)
@pytest.mark.parametrize("op", ["add", "mean"])
def test_folded_all_reduce_update(r: int, stride: int, size: int, assign: list[int] | None, op: str) -> None:
    """`w += -0.1 * all_reduce(x^T @ d)`: rt-optimize folds the all-reduce and the update into
    one `xl.all_reduce_update` collective (the generated plan); the straightforward plan runs
    them apart. Both against NumPy, per group, over two runs."""
    g = grouping_text(stride, size, assign)
    text = f"""
graph.h2d_stream @x : tensor<4x3xf32>
graph.h2d_stream @d : tensor<4x2xf32>
graph.d2h_stream @y : tensor<3x2xf32>
graph.main attributes {{replication_factor = {r} : i64}} {{
  %w = graph.variable "w" = dense<0.5> : tensor<3x2xf32>
  %x = graph.host_load @x : tensor<4x3xf32>
  %d = graph.host_load @d : tensor<4x2xf32>
  %xt = popxl.transpose %x {{perm = array<i64: 1, 0>}} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %gr = popxl.matmul %xt, %d : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
  replica.all_reduce_ %gr {{grouping = {g}, op = "{op}"}} : (tensor<3x2xf32>) -> ()
  popxl.scaled_add_ %w, %gr {{a = 1.0 : f64, b = -0.1 : f64}} : (tensor<3x2xf32>, tensor<3x2xf32>) -> ()
  %y = popxl.identity %w : (tensor<3x2xf32>) -> tensor<3x2xf32>
  graph.host_store @y, %y : tensor<3x2xf32>
}}
"""
    m = parse_source(xl_context(), text, "fold.mlir")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(r, 4, 3)).astype(np.float32)
    d = rng.normal(size=(r, 4, 2)).astype(np.float32)
    grads = np.einsum("rij,rik->rjk", x.astype(np.float64), d.astype(np.float64))
    w = np.full((r, 3, 2), 0.5)
    want = []
    for _ in range(2):
        for members in groups_of(r, stride, size, assign):
            total = grads[members].sum(axis=0) / (len(members) if op == "mean" else 1)
            w[members] += -0.1 * total
        want.append(w.copy())
    opt, plain = compile_module(m, optimize=True), compile_module(m, optimize=False)
    # groups of one: the all-reduce is dropped and the update folds into a gemm instead
    assert all(("yield 0  # xl.all_reduce_gemm_update" in s) == (size > 1) for s in opt.sources)
    for exe in (opt, plain):
        for k in range(2):
            out = exe.run({"x": x, "d": d})
            np.testing.assert_allclose(out["y"].reshape(r, 3, 2), want[k], rtol=1e-5, atol=1e-6)


def test_replica_invariant_mark_is_checked_by_the_runtime() -> None:
    """A hand-written `rt.replica_invariant` on a variable each replica updates itself is
    ignored (one buffer per replica), so the replicas keep their own values."""
    text = """
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 2 : i64} {
  %w = rt.state "w" = dense<1.0> : tensor<3xf32> : memref<3xf32> {rt.replica_invariant}
  %x = rt.alloc : memref<3xf32>
  rt.h2d "x", %x : memref<3xf32>
  rt.kernel "popxl.scaled_add_"(%w, %x) -> (%w) {a = 1.0 : f64, b = 1.0 : f64} : (memref<3xf32>, memref<3xf32>) -> memref<3xf32>
}
"""
    x = per_replica(2, (3,))
    for opt in (False, True):  # as given, and re-marked by rt-optimize
        exe = compile_module(parse_source(xl_context(), text, "mark.mlir"), optimize=opt)
        assert exe.get_state("w", 0) is not exe.get_state("w", 1)
        exe.run({"x": x})
        np.testing.assert_allclose(exe.gather_state("w"), 1 + x, rtol=1e-6)
