"""The tensor-parallel popxl_addons ops, run over replicas: `replicated_all_reduce_TP`,
`cross_entropy_sharded_loss`, `layer_norm_distributed` / `LayerNormDistributed`, and the
strided collectives.

Forward results are compared with NumPy computations on the unsharded data; gradients
with NumPy's analytic gradients and with central finite differences of xl's own forward
pass across all replicas (`tests/helpers/replica_harness.py`), for the objective each op's
gradient convention stands for: the loss of `cross_entropy_sharded_loss` is the same on
every replica and counted once; the outputs of `layer_norm_distributed` are each
replica's shard, every replica's loss counted.
"""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl import ops
from popxl_addons.array_munging import shard, unshard
from popxl_addons.layers.layer_norm_distributed import LayerNormDistributed
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.ops.layer_norm_distributed import layer_norm_distributed
from popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP import replicated_all_reduce
from popxl_addons.ops.replicated_strided_collectives import (
    replicated_all_gather_strided,
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_graph,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
    replicated_reduce_scatter_strided,
)
from tests.helpers.replica_harness import ReplicatedGrad, finite_difference

R = 4


def _np_log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


# ------------------------------------------------------------------------------------
# replicated_all_reduce (differentiable)
# ------------------------------------------------------------------------------------


def test_replicated_all_reduce_value_and_gradient() -> None:
    """Pairs (1, 2): y_r = x_r + x_partner; d(sum_r sum(y_r * c_r))/dx_r = c_r + c_partner."""

    def body(ir: popxl.Ir, x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
        return ops.sum(replicated_all_reduce(x, "add", ir.replica_grouping(group_size=2)) * c)

    h = ReplicatedGrad(R, (3,), (3,), body)
    rng = np.random.default_rng(0)
    x, c = rng.normal(size=(R, 3)), rng.normal(size=(R, 3))
    loss, dx = h.run(x, c)
    partner = [1, 0, 3, 2]
    np.testing.assert_allclose(loss, ((x + x[partner]) * c).sum(1), rtol=1e-12)
    np.testing.assert_allclose(dx, c + c[partner], rtol=1e-12)
    np.testing.assert_allclose(dx, finite_difference(lambda xx: h.losses(xx, c).sum(), x), rtol=1e-6)


# ------------------------------------------------------------------------------------
# a tensor-parallel embedding (the negative shifted ids of gather(zero_OOR))
# ------------------------------------------------------------------------------------


def test_tensor_parallel_embedding() -> None:
    """`layers.Embedding` sharded by vocabulary over 4 replicas, as the TP applications
    use it: each replica looks up `ids - offset` (negative or too large for the ids of the
    other shards: zeros), the all-reduce over the TP group gives the full lookup on every
    replica; the gradient of the table shard gets the rows of its own ids only."""
    vocab, hidden, n = 50, 3, 6
    rng = np.random.default_rng(11)
    table = rng.normal(size=(vocab, hidden)).astype(np.float32)
    ids = np.array([0, 49, 16, 17, 33, 16], np.int32)  # shards of 16 rows: 0-15, 16-31, 32-47, 48-63
    dy = rng.normal(size=(n, hidden)).astype(np.float32)
    ir = popxl.Ir(replication=R)
    tp = ir.replica_grouping(group_size=R)
    with ir.main_graph:
        layer = addons.layers.Embedding(popxl.float32, vocab, hidden, replica_grouping=tp.transpose())
        offsets = layer.offsets
        off = popxl.variable(offsets.astype(np.int32), popxl.int32, name="offset", replica_grouping=tp.transpose())
        x = popxl.variable(ids, popxl.int32, name="ids") - off
        facts, graph = layer.create_graph(x)
        dgraph = addons.autodiff(graph)
        variables = facts.init()
        fwd = graph.bind(variables).call_with_info(x)
        y = replicated_all_reduce(fwd.outputs[0], "add", tp)
        (dw,) = dgraph.call(popxl.constant(dy), args=dgraph.grad_graph_info.inputs_dict(fwd))
        out_y, out_dw = addons.host_store(y), addons.host_store(dw)
    size = layer.vocab_shard_size
    padded = np.zeros((R * size, hidden), np.float32)
    padded[:vocab] = table
    with popxl.Session(ir, "cpu") as session:
        session.write_variables_data({variables.weight: padded.reshape(R, size, hidden)})
        got = session.run()
    np.testing.assert_allclose(got[out_y], np.stack([table[ids]] * R), rtol=1e-6)
    want = np.zeros((R * size, hidden), np.float32)
    np.add.at(want, ids, dy)
    np.testing.assert_allclose(got[out_dw], want.reshape(R, size, hidden), rtol=1e-6)


# ------------------------------------------------------------------------------------
# cross_entropy_sharded_loss
# ------------------------------------------------------------------------------------

N, VOCAB = 5, 12


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_sharded_vs_numpy_and_finite_differences(reduction: str) -> None:
    """4 replicas each hold 3 of 12 classes; labels shifted per replica (those of other
    replicas fall outside [0, 3), negative ones too). Every replica has the loss of the
    whole softmax; its gradient is its slice of d loss / d logits."""
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(N, VOCAB)) * 2
    labels = np.array([0, 11, 4, 7, 3])
    c_len = VOCAB // R
    shifted = np.stack([labels - r * c_len for r in range(R)]).astype(np.float64)

    def body(ir: popxl.Ir, x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
        loss = cross_entropy_sharded_loss(x, ops.cast(c, popxl.int32), reduction=reduction)  # pyright: ignore[reportArgumentType]
        return ops.sum(loss) if reduction == "none" else loss

    h = ReplicatedGrad(R, (N, c_len), (N,), body)
    x = shard(logits, R, axis=1)
    loss, dx = h.run(x, shifted)
    per_sample = -_np_log_softmax(logits)[np.arange(N), labels]
    want = {"none": per_sample.sum(), "mean": per_sample.mean(), "sum": per_sample.sum()}[reduction]
    np.testing.assert_allclose(loss, np.full(R, want), rtol=1e-12)
    softmax = np.exp(_np_log_softmax(logits))
    grad = softmax - np.eye(VOCAB)[labels]
    if reduction == "mean":
        grad /= N
    np.testing.assert_allclose(unshard(dx, 1), grad, rtol=1e-10, atol=1e-12)
    # the loss (the same on every replica) as a function of every replica's logits
    fd = finite_difference(lambda xx: h.losses(xx, shifted)[0], x)
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-8)


def test_cross_entropy_sharded_ignore_index_tensor_and_groups() -> None:
    """Two tensor-parallel groups of 2 (rf 4, stride 1), each with its own batch; the
    ignore index a per-replica tensor `-offset` (label 0 ignored), as GPT-3's LM head
    passes it; the loss is the mean over the samples not ignored; float32."""
    rng = np.random.default_rng(2)
    tp = 2
    c_len = VOCAB // tp
    logits = rng.normal(size=(2, N, VOCAB)).astype(np.float32)  # one batch per group
    labels = np.array([[0, 3, 11, 6, 0], [5, 0, 7, 1, 9]])
    ir = popxl.Ir(replication=R)
    group = ir.replica_grouping(group_size=tp)
    with ir.main_graph:
        xs = popxl.h2d_stream((N, c_len), popxl.float32, "x")
        ls = popxl.h2d_stream((N,), popxl.int32, "labels")
        offset = popxl.variable(
            np.array([0, c_len], np.int32), popxl.int32, name="offset", replica_grouping=group.transpose()
        )
        x, lab = ops.host_load(xs), ops.host_load(ls)

        def loss_fn(x: popxl.Tensor, lab: popxl.Tensor, offset: popxl.Tensor) -> popxl.Tensor:
            return cross_entropy_sharded_loss(x, lab - offset, ignore_index=-offset, replica_grouping=group)

        g = ir.create_graph(loss_fn, x, lab, offset)
        dg = popxl.transforms.autodiff(g, grads_required=[g.inputs[0]])
        call = ops.call_with_info(g, x, lab, offset)
        (dx,) = ops.call(dg.graph, popxl.constant(np.float32(1.0)), inputs_dict=dg.inputs_dict(call))
        out_loss, out_dx = addons.host_store(call.outputs[0]), addons.host_store(dx)
    feed_x = np.stack([logits[r // tp][:, (r % tp) * c_len : (r % tp + 1) * c_len] for r in range(R)])
    feed_l = np.stack([labels[r // tp] for r in range(R)]).astype(np.int32)
    with popxl.Session(ir, "cpu") as session:
        out = session.run({xs: feed_x, ls: feed_l})
    for r in range(R):
        b = r // tp
        keep = labels[b] != 0
        nll = -_np_log_softmax(logits[b].astype(np.float64))[np.arange(N), labels[b]]
        np.testing.assert_allclose(out[out_loss][r], nll[keep].mean(), rtol=1e-6)
        grad = (np.exp(_np_log_softmax(logits[b].astype(np.float64))) - np.eye(VOCAB)[labels[b]]) * keep[:, None]
        grad /= keep.sum()
        np.testing.assert_allclose(out[out_dx][r], grad[:, (r % tp) * c_len : (r % tp + 1) * c_len], atol=1e-7)


def test_cross_entropy_sharded_float16_and_errors() -> None:
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(N, VOCAB)).astype(np.float16)
    labels = np.array([1, 2, 3, 10, 11])
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(shard(logits, 2, axis=1), name="x", replica_grouping=ir.replica_grouping(group_size=1))
        lab = popxl.variable(np.stack([labels, labels - 6]).astype(np.int32), name="l",
                             replica_grouping=ir.replica_grouping(group_size=1))  # fmt: skip
        loss = cross_entropy_sharded_loss(x, lab, reduction="none")
        assert loss.dtype == popxl.float16 and loss.shape == (N,)
        out = addons.host_store(loss)
        with pytest.raises(ValueError, match=r"cross_entropy_sharded_loss: logits must be of rank 2"):
            cross_entropy_sharded_loss(x.reshape((N, 2, 3)), lab)
        with pytest.raises(ValueError, match=r"indices must have shape \(n_samples,\) = \(5,\)"):
            cross_entropy_sharded_loss(x, lab.reshape((5, 1)))
        with pytest.raises(TypeError, match=r"indices must be an integer tensor, got float16"):
            cross_entropy_sharded_loss(x, x[:, 0])
        with pytest.raises(ValueError, match=r"`reduction` should be one of `mean`, `sum` and `none`"):
            cross_entropy_sharded_loss(x, lab, reduction="avg")  # pyright: ignore[reportArgumentType]
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[out]
    want = -_np_log_softmax(logits.astype(np.float64))[np.arange(N), labels]
    np.testing.assert_allclose(got, np.stack([want, want]), rtol=2e-3)


# ------------------------------------------------------------------------------------
# layer_norm_distributed
# ------------------------------------------------------------------------------------


def _np_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def test_layer_norm_distributed_vs_numpy_and_finite_differences() -> None:
    """Hidden 8 sharded over 4 replicas (2 each); c holds each replica's loss weights,
    weight and bias shards; the objective is the sum of every replica's loss."""
    n, h = 3, 8
    hs = h // R
    eps = 1e-3

    def body(ir: popxl.Ir, x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
        dy, w, b = c[:n], c[n], c[n + 1]
        return ops.sum(layer_norm_distributed(x, w, b, epsilon=eps) * dy)

    harness = ReplicatedGrad(R, (n, hs), (n + 2, hs), body)
    rng = np.random.default_rng(4)
    x_full = rng.normal(size=(n, h)) * 2 + 1
    dy_full, w_full, b_full = rng.normal(size=(n, h)), rng.normal(size=h), rng.normal(size=h)
    x = shard(x_full, R, axis=1)
    c = np.concatenate([shard(dy_full, R, 1), shard(w_full[None], R, 1), shard(b_full[None], R, 1)], axis=1)
    loss, dx = harness.run(x, c)
    y = _np_layer_norm(x_full, w_full, b_full, eps)
    np.testing.assert_allclose(loss, shard(y * dy_full, R, 1).sum(axis=(1, 2)), rtol=1e-10)
    # analytic: d/dx of sum(y * dy) with xhat the normalised x
    sd = np.sqrt(x_full.var(-1, keepdims=True) + eps)
    xhat = (x_full - x_full.mean(-1, keepdims=True)) / sd
    g = dy_full * w_full
    want = (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True)) / sd
    np.testing.assert_allclose(unshard(dx, 1), want, rtol=1e-9, atol=1e-12)
    fd = finite_difference(lambda xx: harness.losses(xx, c).sum(), x)
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("stride", [1, 2])
def test_layer_norm_distributed_module(stride: int) -> None:
    """`LayerNormDistributed` over groups of 2 of 4 replicas (consecutive, or strided),
    weight and bias shards per group member: y and the gradients of x, weight and bias
    against a NumPy layer norm of the whole hidden axis (each group its own batch)."""
    n, h, tp = 4, 6, 2
    hs = h // tp
    rng = np.random.default_rng(5 + stride)
    ir = popxl.Ir(replication=R)
    rg = ir.replica_grouping(stride=stride, group_size=tp)
    groups = rg.assignment
    members = [sorted(r for r in range(R) if groups[r] == gi).index(r) for r, gi in enumerate(groups)]
    xb = rng.normal(size=(2, n, h))  # one batch per group
    dyb = rng.normal(size=(2, n, h))
    w_full, b_full = rng.normal(size=h), rng.normal(size=h)

    def per_replica(a: np.ndarray) -> np.ndarray:  # (group, n, h) -> (R, n, hs)
        return np.stack([a[groups[r]][:, members[r] * hs : (members[r] + 1) * hs] for r in range(R)]).astype(np.float32)

    with ir.main_graph:
        every = ir.replica_grouping(group_size=1)
        x = popxl.variable(per_replica(xb), name="x", replica_grouping=every)
        dy = popxl.variable(per_replica(dyb), name="dy", replica_grouping=every)
        facts, graph = LayerNormDistributed(replica_grouping=rg).create_graph(x)
        dgraph = addons.autodiff(graph)
        variables = facts.init("ln")
        fwd = graph.bind(variables).call_with_info(x)
        y = fwd.outputs[0]
        dx, dw, db = dgraph.call(dy, args=dgraph.grad_graph_info.inputs_dict(fwd))
        outs = [addons.host_store(t) for t in (y, dx, dw, db)]
    with popxl.Session(ir, "cpu") as session:
        session.write_variables_data(
            {
                variables.weight: shard(w_full.astype(np.float32), tp, 0),
                variables.bias: shard(b_full.astype(np.float32), tp, 0),
            }
        )
        got = session.run()
    sd = np.sqrt(xb.var(-1, keepdims=True) + 1e-5)
    xhat = (xb - xb.mean(-1, keepdims=True)) / sd
    g = dyb * w_full
    dx_want = (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True)) / sd
    np.testing.assert_allclose(got[outs[0]], per_replica(xhat * w_full + b_full), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[outs[1]], per_replica(dx_want), rtol=1e-4, atol=1e-5)
    for r in range(R):
        cols = slice(members[r] * hs, (members[r] + 1) * hs)
        b = groups[r]
        np.testing.assert_allclose(got[outs[2]][r], (dyb[b] * xhat[b]).sum(0)[cols], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[outs[3]][r], dyb[b].sum(0)[cols], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------
# strided collectives
# ------------------------------------------------------------------------------------

RF = 8


def _groups(stride: int, size: int) -> list[list[int]]:
    """The replicas of each group of (stride, size) over RF replicas, in group order."""
    out = []
    for block in range(0, RF, stride * size):
        for i in range(stride):
            out.append([block + i + j * stride for j in range(size)])
    return out


def _run_replicated(build, feeds: dict[str, np.ndarray], rf: int = RF) -> dict[str, np.ndarray]:
    """build(ir, loaded tensors) -> {name: tensor}; each feed is `[rf, *shape]` float32."""
    ir = popxl.Ir(replication=rf)
    with ir.main_graph:
        streams = {k: popxl.h2d_stream(v.shape[1:], popxl.float32, k) for k, v in feeds.items()}
        outs = {
            k: addons.host_store(t) for k, t in build(ir, {k: ops.host_load(s) for k, s in streams.items()}).items()
        }
    with popxl.Session(ir, "cpu") as session:
        got = session.run({streams[k]: v for k, v in feeds.items()})
    return {k: got[s] for k, s in outs.items()}


@pytest.mark.parametrize("stride,size", [(2, 2), (1, 4), (4, 2)])
def test_strided_reduce_scatter_all_gather_all_reduce(stride: int, size: int) -> None:
    """Against NumPy sums over each group: reduce-scatter of 6 elements (padded to a
    multiple of the group size) gives each member its slice of the group's sum;
    all-gather concatenates the group's tensors in member order; all-reduce adds them
    (`mean` divides)."""
    data = np.arange(RF * 6, dtype=np.float32).reshape(RF, 6) ** 1.5
    groups = _groups(stride, size)

    def build(ir: popxl.Ir, t: dict[str, popxl.Tensor]) -> dict[str, popxl.Tensor]:
        g = ir.replica_grouping(stride, size)
        return {
            "rs": replicated_reduce_scatter_strided(t["x"], group=g),
            "ag": replicated_all_gather_strided(t["x"], group=g),
            "ar": replicated_all_reduce_strided(t["x"], "add", g),
            "mean": replicated_all_reduce_strided(t["x"], "mean", g),
        }

    got = _run_replicated(build, {"x": data})
    shard_len = -(-6 // size)
    for members in groups:
        total = data[members].sum(0)
        padded = np.concatenate([total, np.zeros(shard_len * size - 6, np.float32)])
        for i, r in enumerate(members):
            np.testing.assert_allclose(got["rs"][r], padded[i * shard_len : (i + 1) * shard_len], rtol=1e-6)
            np.testing.assert_array_equal(got["ag"][r], data[members].reshape(-1))
            np.testing.assert_allclose(got["ar"][r], total, rtol=1e-6)
            np.testing.assert_allclose(got["mean"][r], total / size, rtol=1e-6)


def test_strided_rts_round_trip_and_graph() -> None:
    """A reduce-scatter configured for replicated tensor sharding carries the input's
    shape as its meta shape; the strided all-gather of the shards gives the group's sum in
    that shape. The graph helper all-reduces each named tensor."""
    data = np.arange(RF * 8, dtype=np.float32).reshape(RF, 2, 4)

    def build(ir: popxl.Ir, t: dict[str, popxl.Tensor]) -> dict[str, popxl.Tensor]:
        g = ir.replica_grouping(2, 4)
        s = replicated_reduce_scatter_strided(t["x"], group=g, configure_output_for_replicated_tensor_sharding=True)
        assert s.shape == (2,) and tuple(s.meta_shape) == (2, 4)
        full = replicated_all_gather_strided(s, group=g)
        assert full.shape == (2, 4)
        graph, names = replicated_all_reduce_strided_graph(addons.NamedTensors(a=t["x"], b=t["x"] * 2.0), group=g)
        reduced = addons.NamedTensors.pack(names, graph.bind(addons.NamedTensors(a=t["x"], b=t["x"] * 2.0)).call())
        return {"full": full, "a": reduced.a, "b": reduced.b}

    got = _run_replicated(build, {"x": data})
    for members in _groups(2, 4):
        total = data[members].sum(0)
        for r in members:
            np.testing.assert_allclose(got["full"][r], total, rtol=1e-6)
            np.testing.assert_allclose(got["a"][r], total, rtol=1e-6)
            np.testing.assert_allclose(got["b"][r], 2 * total, rtol=1e-6)


def test_strided_identical_variants_gradients() -> None:
    """identical_inputs: the value is x, the gradient the group's sum of the seeds;
    identical_grad_inputs: the value is the group's sum, the gradient the seed."""

    def body(kind: str):
        def f(ir: popxl.Ir, x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
            fn = {
                "inputs": replicated_all_reduce_strided_identical_inputs,
                "grads": replicated_all_reduce_strided_identical_grad_inputs,
                "plain": replicated_all_reduce_strided,
            }[kind]
            return ops.sum(fn(x, "add", ir.replica_grouping(2, 2)) * c)

        return f

    rng = np.random.default_rng(7)
    x, c = rng.normal(size=(R, 3)), rng.normal(size=(R, 3))
    partner = [2, 3, 0, 1]  # groups {0, 2} and {1, 3}
    loss, dx = ReplicatedGrad(R, (3,), (3,), body("inputs")).run(x, c)
    np.testing.assert_allclose(loss, (x * c).sum(1), rtol=1e-12)
    np.testing.assert_allclose(dx, c + c[partner], rtol=1e-12)
    loss, dx = ReplicatedGrad(R, (3,), (3,), body("grads")).run(x, c)
    np.testing.assert_allclose(loss, ((x + x[partner]) * c).sum(1), rtol=1e-12)
    np.testing.assert_allclose(dx, c, rtol=1e-12)
    h = ReplicatedGrad(R, (3,), (3,), body("plain"))
    _, dx = h.run(x, c)
    np.testing.assert_allclose(dx, finite_difference(lambda xx: h.losses(xx, c).sum(), x), rtol=1e-6)


def test_strided_errors() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x = popxl.variable(np.ones(6, np.float32), name="x")
        with pytest.raises(ValueError, match=r"replicated_all_reduce_strided: op must be 'add' or 'mean'"):
            replicated_all_reduce_strided(x, "max")
        with pytest.raises(ValueError, match=r"the 6 elements of .* must divide by the group size 4"):
            replicated_reduce_scatter_strided(x, configure_output_for_replicated_tensor_sharding=True)
        with pytest.raises(TypeError, match=r"replicated_all_gather_strided: t must be a popxl Tensor"):
            replicated_all_gather_strided(np.ones(3))  # pyright: ignore[reportArgumentType]
