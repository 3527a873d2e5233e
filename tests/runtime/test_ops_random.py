"""popxl random ops: `create_seeds`, `split_random_seed`, `random_uniform`, `random_normal`,
`dropout`, `shaped_dropout`.

Statistics use fixed seeds and bounds several standard errors wide that a wrong
distribution (wrong range, scale, ratio, a constant or a repeated stream) cannot meet;
determinism: same seed same numbers (in both plans, other programs, other shapes'
prefixes), different seeds different numbers; dropout gradients against finite
differences and against `mask / (1 - p)`.
"""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.deferred import refused_by_session
from tests.passes.test_grad_rules import check_grads, rand
from xl.compiler import compile_module


def run_program(build, feeds: dict[str, np.ndarray], optimize: bool = True) -> dict[str, np.ndarray]:
    """Build a main graph with `build(loaded inputs) -> {name: tensor}` and run it once."""
    ir = popxl.Ir()
    with ir.main_graph:
        ins = {
            k: ops.host_load(popxl.h2d_stream(v.shape, popxl.dtypes.dtype.as_dtype(v.dtype), k))
            for k, v in feeds.items()
        }
        outs = build(**ins)
        for name, t in outs.items():
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    return compile_module(ir._module, optimize=optimize).run(feeds)


SEED = np.array([1234, 5678], np.uint32)


# ------------------------------------------------------------------------------------
# create_seeds (host)
# ------------------------------------------------------------------------------------


def _upstream_create_seeds(seed, offset=0, bps=1, gaf=1, replicas=1):
    """Upstream's algorithm written out: uint64 draws split by their binary digits."""
    vals = np.random.default_rng(seed + offset).integers(
        0, 2**64 - 1, endpoint=True, dtype="uint64", size=bps * gaf * replicas
    )
    pairs = [(int(f"{int(v):064b}"[:32], 2), int(f"{int(v):064b}"[32:], 2)) for v in vals]
    return np.squeeze(np.array(pairs, np.uint32).reshape(bps, gaf, replicas, 2))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"offset": 3},
        {"replicas": 4},
        {"batches_per_step": 2, "replicas": 3},
        {"batches_per_step": 2, "gradient_accumulation_factor": 5, "replicas": 2},
    ],
)
def test_create_seeds_matches_upstream(kw: dict) -> None:
    got = popxl.create_seeds(42, **kw)
    ref = _upstream_create_seeds(
        42,
        kw.get("offset", 0),
        kw.get("batches_per_step", 1),
        kw.get("gradient_accumulation_factor", 1),
        kw.get("replicas", 1),
    )
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, ref)
    assert popxl.create_seeds(42).shape == (2,)
    assert popxl.create_seeds(42, batches_per_step=2, replicas=3).shape == (2, 3, 2)
    assert not np.array_equal(popxl.create_seeds(42), popxl.create_seeds(43))


# ------------------------------------------------------------------------------------
# random_uniform / random_normal
# ------------------------------------------------------------------------------------

N = 200_000


@pytest.mark.parametrize("dtype", [popxl.float32, popxl.float16, popxl.float64])
def test_random_uniform_statistics(dtype) -> None:
    out = run_program(
        lambda seed: {"u": ops.random_uniform(seed, (N,), low=-1.0, high=3.0, dtype=dtype)},
        {"seed": SEED},
    )["u"]
    assert out.dtype == dtype.as_numpy() and out.shape == (N,)
    u = out.astype(np.float64)
    assert u.min() >= -1.0 and u.max() < 3.0
    # U[-1, 3): mean 1, variance 16/12; standard error of the mean 0.0026
    assert abs(u.mean() - 1.0) < 0.02
    assert abs(u.var() - 16 / 12) < 0.03
    # every tenth of the range holds 10% of the samples (sd of a count: 134)
    counts, _ = np.histogram(u, bins=10, range=(-1.0, 3.0))
    assert np.all(np.abs(counts - N / 10) < 1000), counts
    # neighbours are not correlated
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01


def test_random_normal_statistics() -> None:
    out = run_program(lambda seed: {"n": ops.random_normal(seed, (N,), mean=2.0, std=0.5)}, {"seed": SEED})["n"]
    assert out.dtype == np.float32
    z = (out.astype(np.float64) - 2.0) / 0.5
    assert abs(z.mean()) < 0.015 and abs(z.std() - 1.0) < 0.01
    # fractions within 1, 2 and 3 standard deviations: 68.27%, 95.45%, 99.73%
    for k, p in ((1, 0.6827), (2, 0.9545), (3, 0.9973)):
        assert abs(np.mean(np.abs(z) < k) - p) < 0.005
    assert abs(np.mean(z**3)) < 0.03  # symmetric
    assert abs(np.mean(z**4) - 3.0) < 0.1  # normal kurtosis


def test_determinism_seed_plan_and_program() -> None:
    def build(seed):
        return {"u": ops.random_uniform(seed, (4, 5)), "n": ops.random_normal(seed, (7,))}

    a = run_program(build, {"seed": SEED}, optimize=True)
    b = run_program(build, {"seed": SEED}, optimize=False)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # a program with other ops around gives the same numbers for the same seed
    c = run_program(
        lambda seed, x: {"u": ops.random_uniform(seed, (4, 5)) + x * 0.0},
        {"seed": SEED, "x": np.ones((4, 5), np.float32)},
    )
    np.testing.assert_array_equal(c["u"], a["u"])
    # the values are a function of the seed value: the same seed from a variable
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.variable(SEED, popxl.uint32, name="seed")
        u = ops.random_uniform(s, (4, 5))
        d2h = popxl.d2h_stream(u.shape, u.dtype, "u")
        ops.host_store(d2h, u)
    with popxl.Session(ir, "cpu") as sess:
        np.testing.assert_array_equal(sess.run()[d2h], a["u"])
        np.testing.assert_array_equal(sess.run()[d2h], a["u"])  # every step
    # different seeds: different numbers
    other = run_program(build, {"seed": np.array([1234, 5679], np.uint32)})
    assert not np.any(other["u"] == a["u"])
    # a longer draw starts with the shorter one (counter-based: element i is fixed)
    longer = run_program(lambda seed: {"u": ops.random_uniform(seed, (40,))}, {"seed": SEED})["u"]
    np.testing.assert_array_equal(longer[:20], a["u"].reshape(-1))


def test_split_random_seed() -> None:
    out = run_program(lambda seed: dict(zip("abc", ops.split_random_seed(seed, 3))), {"seed": SEED})
    seeds = [out[k] for k in "abc"]
    assert all(s.dtype == np.uint32 and s.shape == (2,) for s in seeds)
    assert len({tuple(s) for s in seeds} | {tuple(SEED)}) == 4
    again = run_program(lambda seed: dict(zip("ab", ops.split_random_seed(seed))), {"seed": SEED})
    np.testing.assert_array_equal(again["a"], seeds[0])
    np.testing.assert_array_equal(again["b"], seeds[1])

    # streams of split seeds are uncorrelated with each other and with the parent
    def build(seed):
        s1, s2 = ops.split_random_seed(seed)
        return {
            "p": ops.random_uniform(seed, (N,)),
            "u1": ops.random_uniform(s1, (N,)),
            "u2": ops.random_uniform(s2, (N,)),
        }

    r = run_program(build, {"seed": SEED})
    for x, y in (("p", "u1"), ("p", "u2"), ("u1", "u2")):
        assert abs(np.corrcoef(r[x], r[y])[0, 1]) < 0.01


# ------------------------------------------------------------------------------------
# dropout / shaped_dropout
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_ratio_scale_and_mask(p: float) -> None:
    x = np.random.default_rng(0).uniform(1.0, 2.0, (400, 500)).astype(np.float32)
    out = run_program(
        lambda x, seed: {"y": ops.dropout(x, seed, p), "u": ops.random_uniform(seed, x.shape, dtype=popxl.float64)},
        {"x": x, "seed": SEED},
    )
    y = out["y"]
    dropped = y == 0
    # the drop fraction: standard error sqrt(p(1-p)/2e5) <= 0.0012
    assert abs(dropped.mean() - p) < 0.006
    np.testing.assert_allclose(y[~dropped], x[~dropped] / np.float32(1 - p), rtol=1e-6)
    # the mask is `random_uniform(seed) < p` on the same seed and shape (float64 samples)
    np.testing.assert_array_equal(dropped, out["u"] < p)
    # E[y] = x
    assert abs(y.astype(np.float64).mean() / x.astype(np.float64).mean() - 1.0) < 0.02


def test_dropout_zero_ratio_is_identity_and_determinism() -> None:
    x = np.random.default_rng(1).standard_normal((8, 9)).astype(np.float32)
    out = run_program(lambda x, seed: {"y": ops.dropout(x, seed, 0.0)}, {"x": x, "seed": SEED})
    np.testing.assert_array_equal(out["y"], x)
    a = run_program(lambda x, seed: {"y": ops.dropout(x, seed, 0.3)}, {"x": x, "seed": SEED}, optimize=True)
    b = run_program(lambda x, seed: {"y": ops.dropout(x, seed, 0.3)}, {"x": x, "seed": SEED}, optimize=False)
    np.testing.assert_array_equal(a["y"], b["y"])
    c = run_program(lambda x, seed: {"y": ops.dropout(x, seed, 0.3)}, {"x": x, "seed": SEED + 1})
    assert not np.array_equal(a["y"] == 0, c["y"] == 0)


def test_shaped_dropout_drops_whole_rows() -> None:
    x = np.ones((1000, 6), np.float32)
    out = run_program(lambda x, seed: {"y": ops.shaped_dropout(x, seed, (1000, 1), 0.4)}, {"x": x, "seed": SEED})
    y = out["y"]
    rows_dropped = np.all(y == 0, axis=1)
    rows_kept = np.all(y == np.float32(1 / 0.6), axis=1)
    assert np.all(np.logical_or(rows_dropped, rows_kept))
    assert abs(rows_dropped.mean() - 0.4) < 0.05  # sd 0.0155
    # the mask is dropout's mask of a (1000, 1) tensor
    ref = run_program(
        lambda m, seed: {"y": ops.dropout(m, seed, 0.4)}, {"m": np.ones((1000, 1), np.float32), "seed": SEED}
    )
    np.testing.assert_array_equal(rows_dropped, ref["y"][:, 0] == 0)


@pytest.mark.parametrize("ratio", [0.25, 0.6])
def test_dropout_gradient(ratio: float) -> None:
    seed = np.array([9, 99], np.uint32)
    x = rand((4, 6))
    prog = check_grads(lambda e, c, x: [e("popxl.dropout", x, c(seed), ratio=ratio)], [x])
    # the gradient is dy * mask / (1 - ratio), with the forward pass's mask
    dy = rand((4, 6))
    ys, (g,) = prog.run([x], {0: dy})
    mask = ys[0] != 0
    np.testing.assert_allclose(g, dy * mask / (1 - ratio), rtol=1e-12)
    assert 0 < mask.sum() < mask.size


def test_shaped_dropout_gradient_and_chain() -> None:
    seed = np.array([5, 6], np.uint32)
    check_grads(lambda e, c, x: [e("popxl.shaped_dropout", x, c(seed), shape=(1, 5), ratio=0.5)], [rand((3, 5))])
    check_grads(
        lambda e, c, x: [e("popxl.tanh", e("popxl.dropout", e("popxl.mul", x, x), c(seed), ratio=0.3))],
        [rand((2, 7), low=-1.0, high=1.0)],
    )


def test_dropout_autodiff_through_frontend() -> None:
    """popxl.transforms.autodiff of a graph with dropout: the gradient uses the same mask."""
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        seed = ops.host_load(popxl.h2d_stream((2,), popxl.uint32, "seed"))
        xin = ops.host_load(popxl.h2d_stream((5, 8), popxl.float32, "x"))

        def f(t: popxl.Tensor, s: popxl.Tensor) -> popxl.Tensor:
            return ops.dropout(t, s, 0.5) * 3.0

        g = ir.create_graph(f, xin, seed)
        dg = popxl.transforms.autodiff(g, grads_required=[g.inputs[0]])
        info = ops.call_with_info(g, xin, seed)
        (y,) = info.outputs
        (dx,) = ops.call(dg.graph, popxl.constant(np.ones((5, 8), np.float32)), inputs_dict=dg.inputs_dict(info))
        for name, t in (("y", y), ("dx", dx)):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    out = compile_module(ir._module).run({"seed": SEED, "x": x})
    kept = out["y"] != 0
    np.testing.assert_allclose(out["dx"], np.where(kept, 6.0, 0.0))
    np.testing.assert_allclose(out["y"][kept], 6.0 * x[kept], rtol=1e-6)


# ------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------


def test_errors_name_the_op() -> None:
    # an int result: built, refused when compiled (as PopXL)
    refused_by_session(
        lambda: ops.random_uniform(popxl.variable(np.zeros(2, np.uint32)), (2,), dtype=popxl.int32),
        "popxl.random_uniform: the result must be a floating point tensor",
    )
    refused_by_session(
        lambda: ops.dropout(popxl.variable(np.zeros(2, np.uint32)), popxl.variable(np.zeros(2, np.uint32)), 0.5),
        "popxl.dropout: input must be a floating point tensor",
    )
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 3), np.float32), name="x")
        bad = popxl.variable(np.zeros(3, np.uint32), name="bad")
        seed = popxl.variable(SEED, popxl.uint32, name="seed")
        with pytest.raises(ValueError, match=r"ops.dropout: seed_tensor must be shape=\(2,\) dtype=uint32"):
            ops.dropout(x, bad, 0.5)
        with pytest.raises(ValueError, match=r"ops.random_uniform: seed_tensor must be shape=\(2,\)"):
            ops.random_uniform(x, (2,))
        with pytest.raises(TypeError, match="ops.random_normal: seed_tensor must be a Tensor"):
            ops.random_normal(np.array([1, 2], np.uint32), (2,))  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
        with pytest.raises(ValueError, match=r"popxl.dropout: ratio 1.0 must be in \[0, 1\)"):
            ops.dropout(x, seed, 1.0)
        with pytest.raises(ValueError, match=r"popxl.shaped_dropout: mask shape \(3, 1\) does not broadcast"):
            ops.shaped_dropout(x, seed, (3, 1), 0.5)
        with pytest.raises(ValueError, match="popxl.random_normal: mean 0.0 and std -1.0"):
            ops.random_normal(seed, (2,), std=-1.0)
        with pytest.raises(ValueError, match="ops.split_random_seed: n must be >= 1"):
            ops.split_random_seed(seed, 0)


def test_replicas_draw_from_their_own_seed() -> None:
    """With 2 replicas each replica's numbers are those of a one-replica run with its seed
    (`create_seeds(replicas=2)` gives one seed per replica): swapping the seeds swaps the
    outputs, whatever order the replicas run in."""

    def program(replication: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
        ir = popxl.Ir(replication=replication)
        with ir.main_graph:
            ss = popxl.h2d_stream((2,), popxl.uint32, "seed")
            seed = ops.host_load(ss)
            x = popxl.variable(np.ones((4, 5), np.float32), name="x")
            y = ops.dropout(x, seed, 0.5) + ops.random_normal(seed, (4, 5))
            ys = popxl.d2h_stream((4, 5), popxl.float32, "y")
            ops.host_store(ys, y)
        return ir, ss, ys

    seeds = popxl.create_seeds(7, replicas=2)
    assert seeds.shape == (2, 2)
    ir, ss, ys = program(2)
    with popxl.Session(ir, "cpu") as s:
        both = s.run({ss: seeds})[ys]
        swapped = s.run({ss: seeds[::-1].copy()})[ys]
    assert both.shape == (2, 4, 5)
    for r in range(2):
        ir1, ss1, ys1 = program(1)
        with popxl.Session(ir1, "cpu") as s1:
            np.testing.assert_array_equal(both[r], s1.run({ss1: seeds[r]})[ys1])
    np.testing.assert_array_equal(swapped, both[::-1])
    assert not np.array_equal(both[0], both[1])


@pytest.mark.parametrize("seed", [(0, 0), (1, 2), (2**32 - 1, 7)])
@pytest.mark.parametrize("n", [1, 3, 1000, 65537])
def test_fast_uniform_equals_the_raw_word_definition(seed: tuple[int, int], n: int) -> None:
    """The kernels draw through `Generator(Philox).random`; it must give exactly the top
    53 bits of the raw Philox words times 2**-53, for every stream."""
    from xl.runtime.kernels.random import uniform, uniform_from_bits

    s = np.array(seed, np.uint32)
    for stream in (0, 1):
        assert np.array_equal(uniform(s, n, stream), uniform_from_bits(s, n, stream))
