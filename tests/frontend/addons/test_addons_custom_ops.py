"""The popxl_addons ops upstream writes as C++ custom ops, built here from popxl ops:
`grad_reduce_square_add`, `rotary_pos_embed`, `group_quantize_decompress` / `LinearGQ`,
`fp8_amax_scale` / `fp8_mse_scale` / `LinearFP8`, `linear_layout`,
`dense_const_sparse_matmul`, `cross_entropy_sharded_wr_loss`.

Each is checked against NumPy written independently here (complex rotations, bit
unpacking through `np.unpackbits`, float8 rounding by ml_dtypes) and, where it has a
gradient, against central finite differences of xl's forward pass.
"""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl import ops
from popxl.fp8_utils import host_fp8_mse_scale
from popxl_addons.layers.linear_fp8 import LinearFP8
from popxl_addons.layers.linear_gq import LinearGQ, group_quantize_compress_numpy
from popxl_addons.ops.cross_entropy_sharded_wr_loss import cross_entropy_sharded_wr_loss
from popxl_addons.ops.fp8_amax_scale import fp8_amax_scale
from popxl_addons.ops.fp8_mse_scale import fp8_mse_scale
from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.ops.group_quantize_decompress import group_quantize_decompress, group_quantize_decompress_numpy
from popxl_addons.ops.linear_layout import linear_layout
from popxl_addons.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants, trig_tables
from popxl_addons.ops.static_sparse_ops import dense_const_sparse_matmul, random_sparse
from tests.runtime.test_ops_fp8 import _estimate_reference


def _exact(a: np.ndarray) -> popxl.dtype:
    return popxl.dtypes.dtype.as_dtype(np.asarray(a).dtype)


def run_fwd(fn, inputs) -> np.ndarray:
    """`fn(*inputs)` on variables of the inputs' own dtypes (float64 stays float64)."""
    ir = popxl.Ir()
    with ir.main_graph:
        out = addons.host_store(fn(*[popxl.variable(a, _exact(a), name=f"in{i}") for i, a in enumerate(inputs)]))
    with popxl.Session(ir, "cpu") as session:
        return session.run()[out]


def run_fwd_bwd(fn, inputs, dy: np.ndarray | None = None, seed: int = 0):
    """`fn(*inputs)` in a subgraph and the gradients of `sum(fn(...) * dy)` for every float
    input (autodiff); dtypes kept. Returns `(y, [d input], dy)`."""
    ir = popxl.Ir()
    with ir.main_graph:
        vs = [popxl.variable(a, _exact(a), name=f"in{i}") for i, a in enumerate(inputs)]
        graph = ir.create_graph(fn, *[v.spec for v in vs])
        info = ops.call_with_info(graph, *vs)
        y = info.outputs[0]
        if dy is None:
            dy = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype.as_numpy())
        grad = popxl.transforms.autodiff(
            graph, grads_required=[t for t, v in zip(graph.inputs, vs) if v.dtype.is_floating_point]
        )
        grads = ops.call(grad.graph, popxl.constant(dy, y.dtype), inputs_dict=grad.inputs_dict(info))
        outs = [addons.host_store(t) for t in (y, *grads)]
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    return got[outs[0]], [got[o] for o in outs[1:]], dy


def _fd(f, x: np.ndarray, dy: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of sum(f(x) * dy) (f runs xl's forward pass)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (np.sum(f(xp) * dy) - np.sum(f(xm) * dy)) / (2 * eps)
    return g


# ------------------------------------------------------------------------------------
# grad_reduce_square_add
# ------------------------------------------------------------------------------------


def test_grad_reduce_square_add() -> None:
    rng = np.random.default_rng(0)
    g32 = rng.normal(size=(3, 4)).astype(np.float32) * 64
    g16 = g32.astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        a = grad_reduce_square_add(popxl.variable(g32), 64)
        b = grad_reduce_square_add(popxl.variable(g16), popxl.constant(np.float16(64.0)))
        c = grad_reduce_square_add(popxl.variable(g16), popxl.constant(np.int32(8)))
        assert a.dtype == b.dtype == popxl.float32 and a.shape == ()
        outs = [addons.host_store(t) for t in (a, b, c)]
        with pytest.raises(ValueError, match=r"grad_reduce_square_add: loss_scaling must not be 0"):
            grad_reduce_square_add(popxl.variable(g32), 0)
        with pytest.raises(TypeError, match=r"t must be a float tensor, got int32"):
            grad_reduce_square_add(popxl.constant(np.ones(3, np.int32)), 2)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    np.testing.assert_allclose(got[outs[0]], (g32.astype(np.float64) ** 2).sum() / 64**2, rtol=1e-6)
    # float16 data squared and summed in float32 (no float16 overflow: 64 * 4 ** 2 ...)
    np.testing.assert_allclose(got[outs[1]], (g16.astype(np.float64) ** 2).sum() / 64**2, rtol=1e-6)
    np.testing.assert_allclose(got[outs[2]], (g16.astype(np.float64) ** 2).sum() / 64, rtol=1e-6)


def test_grad_reduce_square_add_gradient() -> None:
    rng = np.random.default_rng(1)
    g = rng.normal(size=(2, 3)).astype(np.float32)
    y, (dg,), dy = run_fwd_bwd(lambda t: grad_reduce_square_add(t, 4.0), [g])
    np.testing.assert_allclose(dg, 2 * g * dy / 16, rtol=1e-6)
    fd = _fd(lambda v: run_fwd(lambda t: grad_reduce_square_add(t, 4.0), [v]), g.astype(np.float64), dy, 1e-2)
    np.testing.assert_allclose(dg, fd, rtol=1e-3)  # the forward pass sums in float32


# ------------------------------------------------------------------------------------
# rotary_pos_embed
# ------------------------------------------------------------------------------------


def _np_rope(q: np.ndarray, rotary_dim: int, base: float = 10000.0, inverse: bool = False) -> np.ndarray:
    """Adjacent pairs as complex numbers, rotated by position * base ** (-2i / rotary_dim)."""
    z = q[..., :rotary_dim:2] + 1j * q[..., 1:rotary_dim:2]
    angle = np.arange(q.shape[1])[:, None] * base ** (-np.arange(0, rotary_dim, 2) / rotary_dim)[None, :]
    z = z * np.exp((-1j if inverse else 1j) * angle)[None, :, None, :]
    out = q.copy()
    out[..., :rotary_dim:2], out[..., 1:rotary_dim:2] = z.real, z.imag
    return out


@pytest.mark.parametrize("rotary_dim", [None, 4, 6])
def test_rotary_pos_embed_vs_complex_rotation(rotary_dim: int | None) -> None:
    rng = np.random.default_rng(2)
    q = rng.normal(size=(2, 5, 3, 8))
    r = rotary_dim or 8
    sin, cos = trig_tables(5, r, np_dtype="float64")
    np.testing.assert_allclose(sin, np.sin(np.arange(5)[:, None] * 10000.0 ** (-np.arange(0, r, 2) / r)), rtol=1e-12)

    def rope(t: popxl.Tensor) -> popxl.Tensor:
        s, c = trig_tables(t.shape[1], r, np_dtype="float64")
        return rotary_pos_embed(t, popxl.constant(s, popxl.float64), popxl.constant(c, popxl.float64), rotary_dim)

    y, (dq,), dy = run_fwd_bwd(rope, [q])
    np.testing.assert_allclose(y, _np_rope(q, r), rtol=1e-12, atol=1e-12)
    # the gradient is the inverse rotation of dy (a rotation's transpose)
    np.testing.assert_allclose(dq, _np_rope(dy.astype(np.float64), r, inverse=True), rtol=1e-10, atol=1e-12)
    small, dsmall = q[:1, :3, :1], dy[:1, :3, :1]
    fd = _fd(lambda v: run_fwd(rope, [v]), small, dsmall)
    np.testing.assert_allclose(run_fwd_bwd(rope, [small], dy=dsmall)[1][0], fd, rtol=1e-6, atol=1e-9)


def test_rotary_pos_embed_tables_and_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        sin, cos = trig_table_constants(4, 4, dtype=popxl.float16)
        assert sin.shape == (4, 2) and sin.dtype == popxl.float16
        t = popxl.variable(np.zeros((1, 4, 2, 6), np.float16))
        batch_sin = sin.reshape((1, 4, 2))
        assert rotary_pos_embed(t, batch_sin, cos, 4).shape == (1, 4, 2, 6)
        with pytest.raises(ValueError, match=r"rotary_pos_embed: t should have rank 4"):
            rotary_pos_embed(t.reshape((4, 2, 6)), sin, cos, 4)
        with pytest.raises(ValueError, match=r"rotary_dim must be an even number in \(0, 6\], got 3"):
            rotary_pos_embed(t, sin, cos, 3)
        with pytest.raises(ValueError, match=r"sin must have the shape \(4, 3\)"):
            rotary_pos_embed(t, sin, cos)
        with pytest.raises(TypeError, match=r"cos must have the dtype of t \(float16\), got float32"):
            rotary_pos_embed(t, sin, ops.cast(cos, popxl.float32), 4)


# ------------------------------------------------------------------------------------
# group quantisation
# ------------------------------------------------------------------------------------


def _unpack_bits(packed: np.ndarray) -> np.ndarray:
    """The four 4-bit values of each uint16, top nibble first, from its 16 bits."""
    bits = np.unpackbits(packed.astype(">u2").view(np.uint8)).reshape(*packed.shape, 4, 4)
    return (bits * np.array([8, 4, 2, 1])).sum(-1)


@pytest.mark.parametrize("dim", [-1, 0])
def test_group_quantize_round_trip(dim: int) -> None:
    rng = np.random.default_rng(3)
    w = rng.normal(size=(8, 16)).astype(np.float16)
    w[0, 8:] = 0.25  # a constant group along the last axis: scale 0
    w[:, 1] = -0.5  # and one along the first
    packed, scale, bias = group_quantize_compress_numpy(w, 8, dim)
    moved = w if dim == -1 else w.T
    assert packed.dtype == np.uint16 and packed.shape == (moved.shape[0], moved.shape[1] // 8, 2)
    q = _unpack_bits(packed).reshape(moved.shape[0], -1, 8)
    groups = moved.reshape(moved.shape[0], -1, 8).astype(np.float32)
    # each value within half a step of its group's grid (the float16 rounding of min / step aside)
    np.testing.assert_allclose(q * scale + bias, groups, atol=float(scale.max()) * 0.5 + 2e-3)
    (row, group), value = ((0, 1), 0.25) if dim == -1 else ((1, 0), -0.5)
    assert (q[row, group] == 0).all() and scale[row, group, 0] == 0 and bias[row, group, 0] == np.float16(value)
    dec = group_quantize_decompress_numpy(packed, scale, bias, dim)
    want = (q.astype(np.float16) * scale + bias).reshape(moved.shape)  # float16 arithmetic, as the scale
    np.testing.assert_array_equal(dec, want.T if dim == 0 else want)
    got = run_fwd(lambda p, s, b: group_quantize_decompress(p, s, b, dim), [packed, scale, bias])
    np.testing.assert_array_equal(got, dec)


def test_group_quantize_decompress_gradient_and_errors() -> None:
    rng = np.random.default_rng(4)
    packed = rng.integers(0, 2**16, size=(3, 2, 1)).astype(np.uint16)
    scale, bias = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))

    def f(s: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
        return group_quantize_decompress(popxl.constant(packed), ops.cast(s, popxl.float32), ops.cast(b, popxl.float32))

    y, (ds, db), dy = run_fwd_bwd(f, [scale.astype(np.float32), bias.astype(np.float32)])
    q = _unpack_bits(packed).reshape(3, 2, 4)
    np.testing.assert_allclose(y, (q * scale[..., None] + bias[..., None]).reshape(3, 8), rtol=1e-6)
    np.testing.assert_allclose(ds, (q * dy.reshape(3, 2, 4)).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(db, dy.reshape(3, 2, 4).sum(-1), rtol=1e-5)
    fd = _fd(lambda v: run_fwd(lambda s: f(s, popxl.constant(bias.astype(np.float32))), [v]), scale, dy, 1e-3)
    np.testing.assert_allclose(ds, fd, rtol=1e-3)
    ir = popxl.Ir()
    with ir.main_graph:
        p = popxl.variable(packed)
        s16 = popxl.variable(scale.astype(np.float16))
        with pytest.raises(NotImplementedError, match=r"supported only for packed tensors with rank 3"):
            group_quantize_decompress(p.reshape((3, 2)), s16, s16)
        with pytest.raises(ValueError, match=r"group_scale must have the shape \(3, 2, 1\) or \(3, 2\), got \(2, 3\)"):
            group_quantize_decompress(p, s16.reshape((2, 3)), s16)
        with pytest.raises(TypeError, match=r"t must hold packed uint16 values, got int32"):
            group_quantize_decompress(ops.cast(p, popxl.int32), s16, s16)


def test_linear_gq_matches_its_decompressed_weight() -> None:
    rng = np.random.default_rng(5)
    w = rng.normal(size=(8, 16)).astype(np.float32)  # torch layout (out, in)
    bias = rng.normal(size=8).astype(np.float32)
    x = rng.normal(size=(3, 16)).astype(np.float32)
    layer = SimpleNamespace(weight=w, bias=bias)  # what torch_mapping reads of a torch.nn.Linear
    for dim, gs in ((0, 8), (-1, 4)):
        ir = popxl.Ir()
        with ir.main_graph:
            xt = popxl.variable(x, name="x")
            facts, graph = LinearGQ(8, group_size=gs, dim=dim).create_graph(xt)
            variables = facts.init()
            (y,) = graph.bind(variables).call(xt)
            out = addons.host_store(y)
        weights = LinearGQ.torch_mapping(variables, layer, group_size=gs, dim=dim)
        with popxl.Session(ir, "cpu") as session:
            session.write_variables_data(weights)
            got = session.run()[out]
        packed, scale, b = group_quantize_compress_numpy(w.T, gs, dim)
        w_q = group_quantize_decompress_numpy(packed, scale.astype(np.float32), b.astype(np.float32), dim)
        assert w_q.shape == (16, 8)
        np.testing.assert_allclose(got, x @ w_q + bias, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, x @ w.T + bias, atol=0.5)  # close to the unquantised layer
    with pytest.raises(ValueError, match=r"LinearGQ: group_size must be a positive multiple of 4"):
        ir = popxl.Ir()
        with ir.main_graph:
            LinearGQ(8, group_size=0).create_graph(popxl.variable(x))


# ------------------------------------------------------------------------------------
# float8 scales and LinearFP8
# ------------------------------------------------------------------------------------

F8 = {popxl.float8_143: ml_dtypes.float8_e4m3fnuz, popxl.float8_152: ml_dtypes.float8_e5m2fnuz}


def _np_mse_scale(x: np.ndarray, dt: popxl.dtype) -> int:
    """The scale of the histogram estimate, from tests/runtime/test_ops_fp8's element-by-element
    reference of its definition (NaN counted in the bin of [0.5, 1) as upstream does)."""
    x = np.where(np.isnan(x), np.asarray(0.75, x.dtype), x)
    est = _estimate_reference(x, dt)
    ties = [b for b in range(-31, 32) if est[b + 31] <= min(est) * (1 + 1e-12)]
    return -ties[len(ties) // 2]


def test_fp8_scales() -> None:
    rng = np.random.default_rng(6)
    datas = [rng.normal(size=40).astype(np.float32) * 10.0**k for k in (-5, 0, 4)]
    datas += [np.zeros(4, np.float32), np.array([1.0, np.inf, -300.0, np.nan], np.float32)]
    datas += [rng.normal(size=30).astype(np.float16)]
    ir = popxl.Ir()
    cases = []
    with ir.main_graph:
        for d in datas:
            for dt in F8:
                v = popxl.variable(d)
                cases.append((d, dt, addons.host_store(fp8_amax_scale(v, dt)), addons.host_store(fp8_mse_scale(v, dt))))
        with pytest.raises(RuntimeError, match=r"fp8_amax_scale: dtype popxl.dtypes.int32 not currently supported"):
            fp8_amax_scale(popxl.variable(np.ones(2, np.int32)))
        with pytest.raises(RuntimeError, match=r"fp8_mse_scale: dtype popxl.dtypes.float16 not currently supported"):
            fp8_mse_scale(popxl.variable(np.ones(2, np.float32)), popxl.float16)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    for d, dt, amax, mse in cases:
        finite = np.abs(d[np.isfinite(d)].astype(np.float64))
        top = float(ml_dtypes.finfo(F8[dt]).max)
        want = 31 if finite.max() == 0 else int(np.clip(np.floor(np.log2(top / finite.max())), -31, 31))
        assert int(got[amax]) == want, (d, dt)
        # as upstream: the histogram estimate on the device, the host function's scale
        assert int(got[mse]) == _np_mse_scale(d, dt) == host_fp8_mse_scale(d, dt)[1], (d, dt)


def test_linear_fp8_forward_and_backward() -> None:
    """Against NumPy float8 emulation (ml_dtypes rounding, amax scales); the gradients of
    `build_grad` against the same emulation of the backward products."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4, 8)).astype(np.float16)
    dy = rng.normal(size=(4, 3)).astype(np.float16)
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph:
        xt = popxl.variable(x, name="x")
        facts, graph = LinearFP8(3).create_graph(xt)
        dgraph = graph.autodiff()  # the layer's build_grad
        variables = facts.init()
        fwd = graph.bind(variables).call_with_info(xt)
        dx, dw, db = dgraph.call(popxl.constant(dy), args=dgraph.grad_graph_info.inputs_dict(fwd))
        outs = [addons.host_store(t) for t in (fwd.outputs[0], dx, dw, db)]
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
        w = session.get_tensor_data(variables.weight)
        assert np.abs(w).max() <= 0.04 and w.std() > 0.005  # truncated normal, std 0.02

    def amax(a: np.ndarray, top: float) -> int:
        return int(np.clip(np.floor(np.log2(top / np.abs(a.astype(np.float64)).max())), -31, 31))

    def q(a: np.ndarray, s: int, dt) -> np.ndarray:
        return (a.astype(np.float64) * 2.0**s).astype(dt).astype(np.float64)

    sw, sx = amax(w, 240), amax(x, 240)
    wq, xq = q(w, sw, F8[popxl.float8_143]), q(x, sx, F8[popxl.float8_143])
    np.testing.assert_allclose(got[outs[0]], (xq @ wq * 2.0 ** (-sw - sx)).astype(np.float16), rtol=2e-3)
    sd = int(np.clip(amax(dy, 57344) - 3, -31, 31))
    dq = q(dy, sd, F8[popxl.float8_152])
    np.testing.assert_allclose(got[outs[1]], (dq @ wq.T * 2.0 ** (-sw - sd)).astype(np.float16), rtol=2e-3)
    np.testing.assert_allclose(got[outs[2]], (xq.T @ dq * 2.0 ** (-sx - sd)).astype(np.float16), rtol=2e-3)
    np.testing.assert_allclose(got[outs[3]], dy.astype(np.float32).sum(0), rtol=2e-3)
    # the float8 layer is close to the exact one
    np.testing.assert_allclose(got[outs[0]], x.astype(np.float32) @ w, atol=0.05)
    with pytest.raises(ValueError, match=r"The scale_metric option median is not available"):
        LinearFP8(3, scale_metric="median")


class _TwoAux(addons.Module):
    """y = exp(x) * sin(x), differentiated by hand from two aux tensors that become new
    forward outputs (LinearFP8 keeps four)."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        e, s = ops.exp(x), ops.sin(x)
        self.aux["e"], self.aux["s"] = e, s
        return e * s

    def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
        e, s = self.aux["e"], self.aux["s"]
        return dy * e * (s + ops.cos(ops.log(e)))


def test_build_grad_with_several_new_aux_outputs() -> None:
    """Each aux tensor is connected to its own forward output (the second one pointed one
    past the end before: an IndexError when calling the gradient graph)."""
    x = np.array([0.3, -1.2, 2.0], np.float32)
    dy = np.array([1.0, 2.0, -0.5], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xt = popxl.variable(x)
        _, graph = _TwoAux().create_graph(xt)
        dgraph = graph.autodiff()
        fwd = graph.call_with_info(xt)
        (dx,) = dgraph.call(popxl.constant(dy), args=dgraph.grad_graph_info.inputs_dict(fwd))
        out = addons.host_store(dx)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[out]
    np.testing.assert_allclose(got, dy * np.exp(x) * (np.sin(x) + np.cos(x)), rtol=1e-5)


# ------------------------------------------------------------------------------------
# linear_layout, dense_const_sparse_matmul
# ------------------------------------------------------------------------------------


def test_linear_layout_is_a_copy() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, (dx,), dy = run_fwd_bwd(lambda t: linear_layout(t, bs=4) * 2.0, [x])
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(dx, 2 * dy)
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(ValueError, match=r"linear_layout: bs must be a positive int, got 0"):
        linear_layout(popxl.variable(x), 0)


def _csr(dense: np.ndarray) -> SimpleNamespace:
    """CSR arrays of `dense`, written row by row (the attributes scipy's csr_matrix has)."""
    data, indices, indptr = [], [], [0]
    for row in dense:
        nz = np.flatnonzero(row)
        data += list(row[nz])
        indices += list(nz)
        indptr.append(len(data))
    return SimpleNamespace(data=np.array(data), indices=np.array(indices), indptr=np.array(indptr))


def test_dense_const_sparse_matmul() -> None:
    rng = np.random.default_rng(8)
    np.random.seed(3)
    w = random_sparse(rng.normal(size=(6, 5)), density=0.4)
    np.random.seed(3)
    drop = np.random.binomial(1, 0.6, size=(6, 5)).astype(bool)  # upstream's Bernoulli draws
    assert (w[drop] == 0).all() and (w[~drop] != 0).all()
    x = rng.normal(size=(4, 6)).astype(np.float32)
    for rhs in [_csr(w)] + ([__import__("scipy.sparse").sparse.csr_matrix(w)] if _has_scipy() else []):
        y, (dx,), dy = run_fwd_bwd(lambda t, rhs=rhs: dense_const_sparse_matmul(t, rhs, 5), [x])
        np.testing.assert_allclose(y, x @ w.astype(np.float32), rtol=1e-5)
        np.testing.assert_allclose(dx, dy @ w.astype(np.float32).T, rtol=1e-5)
    y3 = run_fwd(lambda t: dense_const_sparse_matmul(t.reshape((1, 4, 6)), _csr(w), 5), [x])
    np.testing.assert_allclose(y3, (x @ w.astype(np.float32))[None], rtol=1e-5)
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(x)
        with pytest.raises(ValueError, match=r"rhs has 6 rows, lhs \(4, 5\) has 5 columns"):
            dense_const_sparse_matmul(v[:, :5], _csr(w), 5)
        with pytest.raises(ValueError, match=r"column index 4 outside output_cols=3"):
            dense_const_sparse_matmul(v, _csr(w), 3)
        with pytest.raises(TypeError, match=r"rhs must be a CSR matrix"):
            dense_const_sparse_matmul(v, w, 5)
        with pytest.raises(RuntimeError, match=r"dtype popxl.dtypes.int32 not currently supported"):
            dense_const_sparse_matmul(popxl.variable(np.ones((2, 6), np.int32)), _csr(w), 5)


def _has_scipy() -> bool:
    try:
        import scipy.sparse  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------------
# cross_entropy_sharded_wr_loss
# ------------------------------------------------------------------------------------


def test_cross_entropy_sharded_wr_loss() -> None:
    """Classes 3 + 4 + 2 on IPUs 0, 1, 2 of one replica; unshifted labels; the loss on
    IPU 0 against NumPy; the gradient of each shard against NumPy and finite differences."""
    rng = np.random.default_rng(9)
    n, sizes = 4, (3, 4, 2)
    logits = rng.normal(size=(n, sum(sizes)))
    labels = np.array([0, 8, 4, 3], np.int32)
    bounds = np.cumsum((0, *sizes))

    def build(xs: list[np.ndarray], dy: np.ndarray | None):
        ir = popxl.Ir()
        with ir.main_graph:
            vs, ls = [], []
            for s, a in enumerate(xs):
                with popxl.ipu(s):
                    vs.append(popxl.variable(a, popxl.float64, name=f"x{s}"))
                    ls.append(popxl.variable(labels, name=f"l{s}") + 0)
            if dy is None:
                loss = cross_entropy_sharded_wr_loss(vs, ls)
                assert loss.ipu == 0
                return ir, [addons.host_store(loss)]
            g = ir.create_graph(lambda *a: cross_entropy_sharded_wr_loss(list(a[:3]), list(a[3:]), [0, 1, 2]), *vs, *ls)
            dg = popxl.transforms.autodiff(g, grads_required=g.inputs[:3])
            call = ops.call_with_info(g, *vs, *ls)
            with popxl.ipu(0):
                seed = popxl.constant(dy, popxl.float64)
            grads = ops.call(dg.graph, seed, inputs_dict=dg.inputs_dict(call))
            return ir, [addons.host_store(t) for t in (call.outputs[0], *grads)]

    def run(xs: list[np.ndarray], dy: np.ndarray | None = None) -> list[np.ndarray]:
        ir, outs = build(xs, dy)
        with popxl.Session(ir, "cpu") as session:
            got = session.run()
        return [got[o] for o in outs]

    shards = [logits[:, bounds[s] : bounds[s + 1]] for s in range(3)]
    dy = rng.normal(size=n)
    loss, *grads = run(shards, dy)
    lsm = logits - logits.max(1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -lsm[np.arange(n), labels], rtol=1e-12)
    want = (np.exp(lsm) - np.eye(9)[labels]) * dy[:, None]
    np.testing.assert_allclose(np.concatenate(grads, axis=1), want, rtol=1e-10, atol=1e-12)
    fd = _fd(lambda v: run([v, shards[1], shards[2]])[0], shards[0], dy)
    np.testing.assert_allclose(grads[0], fd, rtol=1e-6, atol=1e-9)
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(shards[0])
        lab = popxl.variable(labels)
        with pytest.raises(ValueError, match=r"same number of logits and indices"):
            cross_entropy_sharded_wr_loss([a, a], [lab])
        with pytest.raises(ValueError, match=r"Number of specified tensor does not equal number of specified IPUs"):
            cross_entropy_sharded_wr_loss([a], [lab], ipus=[0, 1])
        with pytest.raises(ValueError, match=r"every logits shard must be \(n_samples, classes\)"):
            cross_entropy_sharded_wr_loss([a, a.reshape((2, 6))], [lab, lab], ipus=[0, 0])
        with pytest.raises(ValueError, match=r"Could not automatically infer the IPU"):
            cross_entropy_sharded_wr_loss([a], [lab])  # lab: no op computes or uses it yet


def test_call_takes_lists_of_tensors() -> None:
    """As upstream, a list or tuple among a call's inputs stands for its tensors (the
    within-replica cross-entropy's module is called with its lists of shards)."""
    ir = popxl.Ir()
    with ir.main_graph:
        a, b, c = (popxl.variable(np.float32(v)) for v in (1.0, 2.0, 3.0))
        g = ir.create_graph(lambda x, y, z: x * 100.0 + y * 10.0 + z, a, b, c)
        outs = [
            addons.host_store(ops.call(g, [a, b], c)[0]),
            addons.host_store(ops.call(g, a, (b, c))[0]),
            addons.host_store(ops.call_with_info(g, [a], [b, c]).outputs[0]),
        ]
        with pytest.raises(ValueError, match=r"too many inputs"):
            ops.call(g, [a, b], [c, a])
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    assert [float(got[o]) for o in outs] == [123.0] * 3
