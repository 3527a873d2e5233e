"""float8 host data in PopXL's format: a structured dtype of one uint8 holding the format's
bits (`popxl.dtypes.np_dtype_float8_143` / `_152`), what `popxl.fp8_utils`,
`popxl.utils.to_numpy` and `Session` return; the ml_dtypes arrays xl computes with are
accepted wherever host data goes in.

The expected bits come from an encoder written here from the formats' definition (1 sign
bit, 4 or 5 exponent bits with bias 8 or 16, 3 or 2 mantissa bits, subnormals, no
infinities, 0x80 the only NaN), not from the code under test.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl.fp8_utils import float8_view, host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8
from popxl.utils import to_numpy
from popxl_addons.variable_factory import VariableFactory

# every popxl dtype of one byte that is a float: the float8 formats (exponent, mantissa bits, bias)
FLOAT8 = [
    d
    for d in (getattr(popxl.dtypes, n) for n in popxl.dtypes.__all__)
    if isinstance(d, popxl.dtype) and d.is_floating_point and d._compute_np().itemsize == 1
]
LAYOUT = {"float8_143": (4, 3, 8), "float8_152": (5, 2, 16)}


def test_the_registry_has_both_formats() -> None:
    assert sorted(d.name for d in FLOAT8) == sorted(LAYOUT)


def decode(code: int, exp_bits: int, man_bits: int, bias: int) -> float:
    if code == 0x80:
        return math.nan
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> man_bits) & ((1 << exp_bits) - 1)
    m = code & ((1 << man_bits) - 1)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + m / 2**man_bits) * 2.0 ** (e - bias)


def codes_and_values(dt: popxl.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every code but NaN and negative zero's twin, with its value."""
    codes = np.array([c for c in range(256) if c != 0x80], np.uint8)
    return codes, np.array([decode(int(c), *LAYOUT[dt.name]) for c in codes])


def bits(host: np.ndarray) -> np.ndarray:
    """The uint8 field of host float8 data."""
    assert host.dtype.names is not None and len(host.dtype.names) == 1
    return host[host.dtype.names[0]]


@pytest.mark.parametrize("dt", FLOAT8, ids=lambda d: d.name)
def test_dtype_host_and_compute_types(dt: popxl.dtype) -> None:
    host = np.dtype([(dt.name, "u1")])
    assert dt.as_numpy() == host == getattr(popxl.dtypes, f"np_dtype_{dt.name}")
    assert popxl.dtype.as_dtype(host) is dt
    assert popxl.dtype.as_dtype(dt._compute_np()) is dt  # ml_dtypes arrays are float8 data too
    assert popxl.dtype.as_dtype(np.zeros(2, host)) is dt


@pytest.mark.parametrize("log2_scale", [-3, 0, 2])
@pytest.mark.parametrize("dt", FLOAT8, ids=lambda d: d.name)
def test_host_cast_gives_the_formats_bits(dt: popxl.dtype, log2_scale: int) -> None:
    codes, values = codes_and_values(dt)
    for src_dtype in (np.float32, np.float64):
        src = (values * 2.0**-log2_scale).astype(src_dtype)  # exact: powers of two apart
        out = host_pow2scale_cast_to_fp8(src, dt, log2_scale=log2_scale)
        assert isinstance(out, np.ndarray) and out.dtype == dt.as_numpy() and out.shape == src.shape
        np.testing.assert_array_equal(bits(out), codes)
        back = host_pow2scale_cast_from_fp8(out, popxl.float64, -log2_scale)
        np.testing.assert_array_equal(back, src.astype(np.float64))


@pytest.mark.parametrize("dt", FLOAT8, ids=lambda d: d.name)
def test_overflow_infinity_and_nan_bits(dt: popxl.dtype) -> None:
    _, values = codes_and_values(dt)
    top = values.max()
    x = np.array([top * 2, -top * 2, np.inf, -np.inf, np.nan], np.float32)
    np.testing.assert_array_equal(bits(host_pow2scale_cast_to_fp8(x, dt)), [0x80] * 5)
    # saturation keeps the sign; the format has no infinity: they become NaN in both modes
    np.testing.assert_array_equal(
        bits(host_pow2scale_cast_to_fp8(x, dt, nan_on_overflow=False)), [0x7F, 0xFF, 0x80, 0x80, 0x80]
    )
    np.testing.assert_array_equal(
        bits(host_pow2scale_cast_to_fp8(np.array([np.inf], np.float16), dt, 0, False)), [0x80]
    )


@pytest.mark.parametrize("dt", FLOAT8, ids=lambda d: d.name)
def test_session_streams_and_variables_use_the_host_format(dt: popxl.dtype) -> None:
    codes, values = codes_and_values(dt)
    data = host_pow2scale_cast_to_fp8(values[:6], dt)
    nan_data = host_pow2scale_cast_to_fp8(np.array([1.0, np.nan, 2.0]), dt)
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((3,), dt, "x")
        o = popxl.d2h_stream((3,), dt, "y")
        ops.host_store(o, ops.host_load(s))
        v = popxl.variable(data, dt, name="v")
    with popxl.Session(ir, "ipu_model") as session:
        for given in (nan_data, float8_view(nan_data)):  # the host format, or ml_dtypes
            out = session.run({s: given})[o]
            assert out.dtype == dt.as_numpy()
            np.testing.assert_array_equal(bits(out), bits(nan_data))
            np.testing.assert_equal(out, nan_data)  # NaN compares by its bits
        got = session.get_tensor_data(v)
        assert got.dtype == dt.as_numpy()
        np.testing.assert_array_equal(bits(got), codes[:6])
        new = host_pow2scale_cast_to_fp8(values[6:12], dt)
        session.write_variable_data(v, new)
        np.testing.assert_array_equal(bits(session.get_tensor_data(v)), codes[6:12])
        session.write_variable_data(v, float8_view(data))  # ml_dtypes data too
        np.testing.assert_array_equal(bits(session.get_tensor_data(v)), codes[:6])
        outputs = session.create_host_outputs()
        assert outputs[o].dtype == dt.as_numpy()
        session.run_with_outputs({s: nan_data}, outputs)
        np.testing.assert_array_equal(bits(outputs[o]), bits(nan_data))
        ml_out = np.zeros(3, dt._compute_np())
        session.run_with_outputs({s: nan_data}, {o: ml_out})
        np.testing.assert_array_equal(ml_out.view(np.uint8), bits(nan_data))


@pytest.mark.parametrize("dt", FLOAT8, ids=lambda d: d.name)
def test_to_numpy_constants_memmaps_and_factories(dt: popxl.dtype, tmp_path: Path) -> None:
    codes, values = codes_and_values(dt)
    out = to_numpy(values[:4], dt)
    assert out.dtype == dt.as_numpy()
    np.testing.assert_array_equal(bits(out), codes[:4])
    ml = float8_view(out)
    assert ml is not None
    assert to_numpy(ml, dt).dtype == dt.as_numpy()  # float8 data of either kind is taken as it is
    mm = np.memmap(tmp_path / "w.bin", dtype=dt.as_numpy(), mode="w+", shape=(4,))
    mm[...] = out
    ir = popxl.Ir()
    with ir.main_graph:
        c = popxl.constant(out, dt)
        v = popxl.variable(mm, dt)
        o = popxl.d2h_stream((4,), popxl.float32, "c")
        ops.host_store(o, ops.pow2scale_cast_from_fp8(c, popxl.constant(np.int32(0)), popxl.float32))
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[o], values[:4].astype(np.float32))
        np.testing.assert_array_equal(bits(session.get_tensor_data(c)), codes[:4])
        np.testing.assert_array_equal(bits(np.asarray(session.get_tensor_data(v))), codes[:4])
    # an addons variable factory draws float values and casts them on the host
    factory = VariableFactory(lambda *_: values[:4], dt)
    drawn = factory.next_data()
    assert drawn.dtype == dt.as_numpy()
    np.testing.assert_array_equal(bits(drawn), codes[:4])
