"""float8: `popxl.float8_143` / `float8_152` (host data: PopXL's structured uint8 dtype;
computed with ml_dtypes), `popxl.fp8_utils`,
`popxl.utils.to_numpy` / `downcast_np_dtypes` / `table_to_string`, and the float8 ops
(`pow2scale_cast_to_fp8`, `pow2scale_cast_from_fp8`, `matmul_pow2scaled`,
`conv_pow2scaled`, `conv_transpose_pow2scaled`).

The float8 formats are checked against a decoder written from Graphcore's definition
(1 sign bit, 4 or 5 exponent bits with bias 8 or 16, 3 or 2 mantissa bits, subnormals,
no infinities, 0x80 the only NaN), not against ml_dtypes itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.fp8_utils import (
    host_fp8_mse_scale,
    host_fp8_mse_scale_pb,
    host_pow2scale_cast_from_fp8,
    host_pow2scale_cast_to_fp8,
)
from popxl.utils import downcast_np_dtypes, table_to_string, to_numpy
from tests.helpers.deferred import refused_by_session
from xl.compiler import compile_module

FORMATS = {popxl.float8_143: (4, 3, 8), popxl.float8_152: (5, 2, 16)}


def decode(code: int, exp_bits: int, man_bits: int, bias: int) -> float:
    """The value of a float8 code in Graphcore's format."""
    if code == 0x80:
        return math.nan
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> man_bits) & ((1 << exp_bits) - 1)
    m = code & ((1 << man_bits) - 1)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + m / 2**man_bits) * 2.0 ** (e - bias)


def table(dt: popxl.dtype) -> np.ndarray:
    return np.array([decode(c, *FORMATS[dt]) for c in range(256)])


def f64(a: np.ndarray) -> np.ndarray:
    """The values of float8 host data (the structured host format), as float64."""
    return host_pow2scale_cast_from_fp8(a, popxl.float64)


@pytest.mark.parametrize("dt", list(FORMATS))
def test_dtype_and_every_code(dt: popxl.dtype) -> None:
    assert dt.is_floating_point and not dt.is_int and dt.is_signed
    assert popxl.dtype.as_dtype(dt.as_numpy()) is dt
    assert popxl.dtype.from_name(dt.name) is dt
    ref = table(dt)
    codes = np.arange(256, dtype=np.uint8).view(dt.as_numpy())
    got = host_pow2scale_cast_from_fp8(codes, popxl.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)])
    assert np.nanmax(ref) == (240.0 if dt is popxl.float8_143 else 57344.0)
    # the host format is PopXL's structured dtype of one uint8 field; the ml_dtypes arrays xl
    # computes with (the same bits) are accepted too
    assert dt.as_numpy() == np.dtype([(dt.name, "u1")])
    ml = np.arange(256, dtype=np.uint8).view(dt._compute_np())
    np.testing.assert_array_equal(host_pow2scale_cast_from_fp8(ml, popxl.float64)[1:], got[1:])


@pytest.mark.parametrize("dt", list(FORMATS))
def test_host_cast_rounds_to_nearest_even(dt: popxl.dtype) -> None:
    ref = table(dt)
    finite = np.unique(ref[np.isfinite(ref)])
    rng = np.random.default_rng(0)
    top = finite.max()
    x = np.concatenate(
        [rng.uniform(-top, top, 3000), rng.standard_normal(3000) * 1e-2, (finite[1:] + finite[:-1]) / 2]
    )  # exact halfway points
    y = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(x, dt), popxl.float64)
    codes = {v: c for c, v in enumerate(ref) if np.isfinite(v)}
    for v, r in zip(x, y):
        i = np.searchsorted(finite, v)
        lo, hi = finite[max(i - 1, 0)], finite[min(i, len(finite) - 1)]
        if abs(v - lo) != abs(v - hi):
            assert r == (lo if abs(v - lo) < abs(v - hi) else hi), (v, r)
        else:  # a tie: the even code
            assert r in (lo, hi) and codes[r] % 2 == 0, (v, r)


def test_float64_rounds_once() -> None:
    """float64 data just above a halfway point rounds up (ml_dtypes alone goes through
    float32, where the value becomes the halfway point and rounds to even)."""
    x = np.array([1 + 2**-4 + 2**-30, 1 + 2**-4, 1 + 2**-4 - 2**-30, -(1 + 2**-4 + 2**-30), 2**-11 + 2**-40])
    got = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(x, popxl.float8_143), popxl.float64)
    np.testing.assert_array_equal(got, [1.125, 1.0, 1.0, -1.125, 2**-10])
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((5,), popxl.float64, "x")
        y = ops.pow2scale_cast_to_fp8(ops.host_load(xs), 0, popxl.float8_143)
        ops.host_store(popxl.d2h_stream((5,), popxl.float8_143, "y"), y)
    out = compile_module(ir._module).run({"x": x})["y"]
    np.testing.assert_array_equal(out.astype(np.float64), [1.125, 1.0, 1.0, -1.125, 2**-10])


def test_host_cast_scale_overflow_and_errors() -> None:
    x = np.array([1.0, 100.0, 300.0, -1000.0, np.nan], np.float32)
    y = host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(x, popxl.float8_143), popxl.float32)
    np.testing.assert_array_equal(y[:2], [1.0, 96.0])
    assert np.isnan(y[2:]).all()  # overflow -> NaN by default
    sat = host_pow2scale_cast_from_fp8(
        host_pow2scale_cast_to_fp8(x, popxl.float8_143, nan_on_overflow=False), popxl.float32
    )
    np.testing.assert_array_equal(sat[:4], [1.0, 96.0, 240.0, -240.0])
    assert np.isnan(sat[4])
    # x * 2**3 before the cast, back with 2**-3
    s = host_pow2scale_cast_to_fp8(np.array([0.1, 0.5], np.float32), popxl.float8_143, log2_scale=3)
    np.testing.assert_array_equal(host_pow2scale_cast_from_fp8(s, popxl.float32), [0.8125, 4.0])
    np.testing.assert_array_equal(
        host_pow2scale_cast_from_fp8(s, popxl.float16, log2_scale=-3), np.array([0.1015625, 0.5], np.float16)
    )
    torch = pytest.importorskip("torch")
    t = host_pow2scale_cast_to_fp8(torch.tensor([1.5, 2.25]), popxl.float8_152)
    assert t.dtype == popxl.dtypes.np_dtype_float8_152
    np.testing.assert_array_equal(f64(t), [1.5, 2.0])
    assert popxl.float8_152.as_torch() is torch.float8_e5m2fnuz
    with pytest.raises(RuntimeError, match="not currently supported"):
        host_pow2scale_cast_to_fp8(x, popxl.float16)
    with pytest.raises(RuntimeError, match="src.dtype int32 not currently supported"):
        host_pow2scale_cast_to_fp8(np.arange(3, dtype=np.int32), popxl.float8_143)
    with pytest.raises(RuntimeError, match=r"log2_scale 40 is not in \[-32, 32\)"):
        host_pow2scale_cast_to_fp8(x, popxl.float8_143, log2_scale=40)
    with pytest.raises(RuntimeError, match="src.dtype float32 not currently supported"):
        host_pow2scale_cast_from_fp8(x, popxl.float32)
    with pytest.raises(RuntimeError, match="not currently supported"):
        host_pow2scale_cast_from_fp8(s, popxl.int32)


def test_host_fp8_mse_scale_pb() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4000) * 1e-4).astype(np.float32)
    s = host_fp8_mse_scale_pb(x)
    assert isinstance(s, int) and -31 <= s <= 31
    # the float8 grid is the same at every power of two: data 8x larger wants a scale 3 lower
    assert host_fp8_mse_scale_pb(x * 8) == s - 3

    def err(scale: int, dt=popxl.float8_143) -> float:
        y = host_pow2scale_cast_from_fp8(
            host_pow2scale_cast_to_fp8(x, dt, scale, nan_on_overflow=False), popxl.float64, -scale
        )
        return float(np.mean((y - x.astype(np.float64)) ** 2))

    assert err(s) <= min(err(s - 1), err(s + 1)) and err(s) < err(0) / 10
    s5 = host_fp8_mse_scale_pb(x.astype(np.float16), popxl.float8_152)  # float16 data too
    assert err(s5, popxl.float8_152) <= min(err(s5 - 1, popxl.float8_152), err(s5 + 1, popxl.float8_152))
    assert err(s5, popxl.float8_152) < err(0, popxl.float8_152)
    # 10.0 for e4m3 (max 240): scales up to 4 (10 * 16 = 160) represent it, 5 overflows
    assert host_fp8_mse_scale_pb(np.full(10, 10.0, np.float32)) <= 4
    with pytest.raises(RuntimeError, match="dtype float64 not currently supported"):
        host_fp8_mse_scale_pb(x.astype(np.float64))
    with pytest.raises(RuntimeError, match="not currently supported"):
        host_fp8_mse_scale_pb(x, popxl.int8)


# ------------------------------------------------------------------------------------
# popxl.utils
# ------------------------------------------------------------------------------------


def _estimate_reference(x: np.ndarray, f8: popxl.dtype) -> list[float]:
    """The histogram estimate of every candidate bias -31..31, written element by element
    from its definition: float32's normal exponents e in [-126, 126] (|x| in [2**e,
    2**(e+1))); the candidate with bias b keeps the `span` exponents from the format's
    smallest one plus b upwards; a value below that window costs (2**e)**2, one
    inside it (2**e)**2 * 2**(-2 * (m_src - m_f8)), one above it (edge - 2**e)**2 with the
    fixed edge 2**(-126 + k + span - 1) of candidate k, plus (2**-127)**2 once."""
    lo8, hi8, m8 = {"float8_143": (-10, 7, 3), "float8_152": (-17, 15, 2)}[f8.name]
    span = hi8 - lo8 + 1
    m_src = 23 if x.dtype == np.float32 else 10
    a = np.abs(x.astype(np.float64))
    n = a.size
    out = []
    for k in range(63):
        first = lo8 + (k - 31)  # lowest exponent the candidate keeps
        total = (2.0**-127) ** 2
        costs = []
        for v in a:
            if v < 2.0**-126:
                continue  # zeros and tiny values are not charged
            e = 126 if v >= 2.0**126 else int(np.floor(np.log2(v)))  # infinities in the top bin
            if e < first:
                costs.append((2.0**e) ** 2)
            elif e < first + span:
                costs.append((2.0**e) ** 2 * 2.0 ** (-2 * (m_src - m8)))
            else:
                costs.append((2.0 ** (-126 + k + span - 1) - 2.0**e) ** 2)
        out.append(total + sum(costs) / n)
    return out


@pytest.mark.parametrize("f8", [popxl.float8_143, popxl.float8_152])
def test_host_fp8_mse_scale_estimate(f8: popxl.dtype) -> None:
    rng = np.random.default_rng(11)
    for src_dt in (np.float32, np.float16):
        for x in (
            (rng.standard_normal(60) * 3e-3).astype(src_dt),
            rng.uniform(2.0**5, 2.0**6, 50).astype(src_dt),
            np.array([0.0, 1.0, -0.25, 7.5, np.inf], src_dt),
        ):
            metric, scale = host_fp8_mse_scale(x, f8)
            ref = _estimate_reference(x, f8)
            best = min(ref)
            assert metric == pytest.approx(best, rel=1e-9, abs=0.0)
            tied = [b for b in range(-31, 32) if ref[b + 31] <= best * (1 + 1e-12)]
            assert scale == -tied[len(tied) // 2], (x, f8)
    # near the top of float8_143's range the scale is negative, near the bottom positive
    assert host_fp8_mse_scale(rng.uniform(2.0**5, 2.0**6, 500).astype(np.float32), popxl.float8_143)[1] < 0
    assert host_fp8_mse_scale(rng.uniform(2.0**-6, 2.0**-5, 500).astype(np.float32), popxl.float8_143)[1] > 0
    # torch data and the errors
    torch = pytest.importorskip("torch")
    x = rng.standard_normal(20).astype(np.float32)
    assert host_fp8_mse_scale(torch.tensor(x), f8) == host_fp8_mse_scale(x, f8)
    with pytest.raises(RuntimeError, match="dtype float64 not currently supported"):
        host_fp8_mse_scale(x.astype(np.float64), f8)
    with pytest.raises(RuntimeError, match="not currently supported"):
        host_fp8_mse_scale(x, popxl.float16)


def test_to_numpy_rules(tmp_path) -> None:
    assert downcast_np_dtypes == {
        np.dtype("int64"): np.dtype("int32"),
        np.dtype("uint64"): np.dtype("uint32"),
        np.dtype("float64"): np.dtype("float32"),
    }
    assert to_numpy(np.arange(3)).dtype == np.int32
    assert to_numpy(np.arange(3, dtype=np.uint64)).dtype == np.uint32
    assert to_numpy([1.5, 2.0]).dtype == np.float32
    assert to_numpy(np.arange(3), downcast=False).dtype == np.int64
    assert to_numpy(3.0, popxl.float16).dtype == np.float16
    a = np.arange(4, dtype=np.float32)
    assert to_numpy(a) is not a and np.shares_memory(to_numpy(a, copy=False), a)
    np.testing.assert_array_equal(to_numpy(a), a)
    f8 = to_numpy([1.0, 1000.0], popxl.float8_143, log2_scale=-2, nan_on_overflow=False)
    assert f8.dtype == popxl.float8_143.as_numpy()
    np.testing.assert_array_equal(f64(f8), [0.25, 240.0])
    assert np.isnan(f64(to_numpy([1000.0], popxl.float8_143))[0])  # NaN by default
    assert to_numpy(f8, popxl.float8_143).tobytes() == f8.tobytes()  # float8 data taken as it is
    with pytest.raises(RuntimeError, match="'log2scale' is not supported"):
        to_numpy(a, popxl.float32, log2_scale=1)
    with pytest.raises(RuntimeError, match="'nan_on_overflow' is not supported"):
        to_numpy(a, nan_on_overflow=True)
    with pytest.raises(TypeError, match="Type int64 is not supported for float8 tensors"):
        to_numpy(np.arange(3), popxl.float8_152)
    m = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="w+", shape=(4,))
    assert to_numpy(m, copy=False) is m
    with pytest.raises(ValueError, match="memory-mapped"):
        to_numpy(m, popxl.float16, copy=False)
    m64 = np.memmap(tmp_path / "m64.bin", dtype=np.float64, mode="w+", shape=(4,))
    with pytest.raises(ValueError, match="requires downcasting"):
        to_numpy(m64)
    torch = pytest.importorskip("torch")
    assert to_numpy(torch.arange(3)).dtype == np.int32


def test_table_to_string() -> None:
    rows = [["num", "foo", "name"], [3, "aaab", "args"], [4, "barrrr", "kwargs"], [-1, "who", "popxl"]]
    assert table_to_string(rows) == (
        "num | foo    | name  \n"
        "----------------------\n"
        "3   | aaab   | args  \n"
        "4   | barrrr | kwargs\n"
        "-1  | who    | popxl \n"
    )
    assert table_to_string([["a", "b"]], delimiter=",", header=False) == "a,b\n"


# ------------------------------------------------------------------------------------
# float8 tensors and ops in programs
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimize", [True, False])
def test_program_casts_matmul_and_streams(optimize: bool) -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 8)).astype(np.float32)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        # a variable given float data and a float8 dtype is converted (scaled by 2**1)
        wv = popxl.variable(b, popxl.float8_152, name="w", log2_scale=1)
        x8s = popxl.h2d_stream((3, 8), popxl.float8_143, "x8")
        x8 = ops.host_load(x8s)
        xf = ops.host_load(popxl.h2d_stream((3, 8), popxl.float32, "xf"))
        scale = popxl.constant(np.int32(-3))
        y = ops.matmul_pow2scaled(x8, wv, scale)
        c8 = ops.pow2scale_cast_to_fp8(xf, popxl.constant(np.int32(2)), popxl.float8_143)
        back = ops.pow2scale_cast_from_fp8(c8, popxl.constant(np.int32(-2)), popxl.float32)
        for name, t in (("y", y), ("c8", c8), ("back", back)):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    assert y.dtype == popxl.float16 and c8.dtype == popxl.float8_143
    x8_data = host_pow2scale_cast_to_fp8(a, popxl.float8_143)
    # the runtime computes with the ml_dtypes view of the host format's bits
    out = compile_module(ir._module, optimize=optimize).run(
        {"x8": x8_data.view(popxl.float8_143._compute_np()), "xf": a}
    )
    w8 = host_pow2scale_cast_to_fp8(b, popxl.float8_152, log2_scale=1)
    ref = f64(x8_data) @ f64(w8) * 2.0**-3
    np.testing.assert_array_equal(out["y"], ref.astype(np.float16))
    np.testing.assert_array_equal(
        out["c8"].view(np.uint8), host_pow2scale_cast_to_fp8(a, popxl.float8_143, 2).view(np.uint8)
    )
    np.testing.assert_array_equal(
        out["back"], f64(host_pow2scale_cast_to_fp8(a, popxl.float8_143, 2)).astype(np.float32) / 4
    )


def test_session_float8_variable_roundtrip() -> None:
    data = np.array([0.5, -3.0, 7.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(data, popxl.float8_143, name="v")
        c = popxl.constant(host_pow2scale_cast_to_fp8(data * 2, popxl.float8_143))
        assert c.dtype == popxl.float8_143  # float8 data gives a float8 constant
        y = ops.pow2scale_cast_from_fp8(v, popxl.constant(np.int32(1)), popxl.float16)
        s = popxl.d2h_stream((3,), popxl.float16, "y")
        ops.host_store(s, y)
    with popxl.Session(ir, "cpu") as sess:
        np.testing.assert_array_equal(sess.run()[s], np.array([1.0, -6.0, 14.0], np.float16))
        got = sess.get_tensor_data(v)
    assert got.dtype == popxl.float8_143.as_numpy()
    assert got.dtype == popxl.dtypes.np_dtype_float8_143
    np.testing.assert_array_equal(f64(got), data)


def _conv_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Direct loops (float64)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = xp.shape
    m, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, m, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,mchw->nm", patch, w)
    return out


def test_conv_pow2scaled_and_transpose() -> None:
    rng = np.random.default_rng(7)
    x = host_pow2scale_cast_to_fp8(rng.standard_normal((2, 3, 6, 6)), popxl.float8_143)
    w = host_pow2scale_cast_to_fp8(rng.standard_normal((4, 3, 3, 3)), popxl.float8_152)
    wt = host_pow2scale_cast_to_fp8(rng.standard_normal((3, 2, 2, 2)), popxl.float8_143)
    ir = popxl.Ir()
    with ir.main_graph:
        xv, wv, wtv = (popxl.variable(a, name=n) for a, n in ((x, "x"), (w, "w"), (wt, "wt")))
        y = ops.conv_pow2scaled(xv, wv, popxl.constant(np.int32(2)), stride=(2, 2), padding=(1, 1, 1, 1))
        z = ops.conv_transpose_pow2scaled(xv, wtv, -1, stride=(2, 2))
        for name, t in (("y", y), ("z", z)):
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    assert y.dtype == z.dtype == popxl.float16 and y.shape == (2, 4, 3, 3) and z.shape == (2, 2, 12, 12)
    out = compile_module(ir._module).run({})
    ref = _conv_ref(f64(x), f64(w), 2, 1) * 4
    np.testing.assert_array_equal(out["y"], ref.astype(np.float16))
    # the transpose of a stride-2, 2x2 kernel convolution: each input pixel paints a 2x2 block
    xs, wts = f64(x), f64(wt)
    zref = np.einsum("nchw,cmij->nmhiwj", xs, wts).reshape(2, 2, 12, 12) * 0.5
    np.testing.assert_array_equal(out["z"], zref.astype(np.float16))


def test_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")
        x8 = popxl.variable(np.ones((2, 2), np.float32), popxl.float8_143, name="x8")
        s = popxl.constant(np.int32(0))
        with pytest.raises(TypeError, match="not supported for ops.cast, please consider pow2scale_cast_to_fp8"):
            ops.cast(x, popxl.float8_143)
        with pytest.raises(TypeError, match="not supported for ops.cast"):
            ops.cast(x8, popxl.float32)
        with pytest.raises(TypeError, match="Data type popxl.dtypes.float16 not supported for pow2scale_cast_to_fp8"):
            ops.pow2scale_cast_to_fp8(x, s, popxl.float16)
        with pytest.raises(TypeError, match="not supported for pow2scale_cast_from_fp8"):
            ops.pow2scale_cast_from_fp8(x8, s, popxl.float64)
        with pytest.raises(ValueError, match="Log2 scale argument must be a scalar tensor"):
            ops.pow2scale_cast_to_fp8(x, popxl.constant(np.zeros(2, np.int32)), popxl.float8_143)
        with pytest.raises(TypeError, match="Log2 scale tensor must be of type popxl.int32"):
            ops.pow2scale_cast_to_fp8(x, popxl.constant(np.int8(1)), popxl.float8_143)
        with pytest.raises(TypeError, match="Scaled matmul operands must be of dtype popxl.float8_143"):
            ops.matmul_pow2scaled(x, x8, s)
        with pytest.raises(TypeError, match="Scaled conv operands must be of dtype"):
            ops.conv_pow2scaled(x, x8, s)
        with pytest.raises(ValueError, match="popxl.pow2scale_cast_from_fp8: input must be a float8_143 or float8_152"):
            ops.pow2scale_cast_from_fp8(x, s, popxl.float32)
        with pytest.raises(ValueError, match="popxl.matmul_pow2scaled: contracting dimensions differ"):
            ops.matmul_pow2scaled(x8, ops.reshape(popxl.variable(np.ones(6), popxl.float8_152), (3, 2)), s)
    # an op that cannot compute float8: built, refused when compiled (as PopXL)
    refused_by_session(
        lambda: ops.add(*[popxl.variable(np.ones(2), popxl.float8_143)] * 2),
        "popxl.add: unsupported dtype float8_e4m3fnuz",
    )
    # the scale is checked when the op runs
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((), popxl.int32, "scale")
        x = popxl.variable(np.ones(2, np.float32), name="x")
        y = ops.pow2scale_cast_to_fp8(x, ops.host_load(xs), popxl.float8_143)
        ops.host_store(popxl.d2h_stream((2,), popxl.float8_143, "y"), y)
    exe = compile_module(ir._module)
    with pytest.raises(ValueError, match=r"pow2scale_cast_to_fp8: log2_scale 32 of .* is out of range \[-32, 32\)"):
        exe.run({"scale": np.array(32, np.int32)})
    np.testing.assert_array_equal(exe.run({"scale": np.array(-1, np.int32)})["y"].astype(np.float32), [0.5, 0.5])


def test_no_gradient_through_float8() -> None:
    """Float8 tensors carry no gradient (as integer tensors): autodiff passes none through
    the float8 casts; the other paths are unaffected."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")

        def f(t: popxl.Tensor) -> popxl.Tensor:
            t8 = ops.pow2scale_cast_to_fp8(t, 0, popxl.float8_143)
            return ops.pow2scale_cast_from_fp8(t8, 0, popxl.float32) + t * 3.0

        g = ir.create_graph(f, x)
        dg = popxl.transforms.autodiff(g)
        info = ops.call_with_info(g, x)
        (dx,) = ops.call(dg.graph, popxl.constant(np.ones((2, 2), np.float32)), inputs_dict=dg.inputs_dict(info))
        ops.host_store(popxl.d2h_stream((2, 2), popxl.float32, "dx"), dx)
    np.testing.assert_array_equal(compile_module(ir._module).run({})["dx"], np.full((2, 2), 3.0))
