"""float8 scales out of range, as PopXL: a run fails with
`popart.poplar_application_runtime_error` (also the runtime's `DataRangeError`, a
ValueError) naming the op; with PopART's session option
`throwIfLog2ScaleTensorNotInRange = False` the run goes on, the scale clamped to
[-32, 31] (`clamp-log2-scale`, xl's documented value; undefined on an IPU).

Expected values are NumPy's `x * 2.0 ** clamped_scale` on the float8 values decoded
by `host_pow2scale_cast_from_fp8` (the host conversion, tested on its own elsewhere).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops
import xl.dialects.popxl as dialect
from popxl.errors import RunDataError
from popxl.fp8_utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8
from xl.passes.clamp_log2_scale import SCALE_OPERAND
from xl.runtime.kernels.registry import DataRangeError

X = np.array([[0.5, -1.25], [3.0, 0.125]], np.float32)
X8 = host_pow2scale_cast_to_fp8(X, popxl.float8_143)


def _cast_to(s: popxl.Tensor) -> popxl.Tensor:
    return ops.pow2scale_cast_from_fp8(
        ops.pow2scale_cast_to_fp8(popxl.variable(X, popxl.float16), s, popxl.float8_152),
        popxl.constant(np.int32(0)),
        popxl.float32,
    )


def _cast_from(s: popxl.Tensor) -> popxl.Tensor:
    return ops.pow2scale_cast_from_fp8(popxl.variable(X8, popxl.float8_143), s, popxl.float32)


def _matmul(s: popxl.Tensor) -> popxl.Tensor:
    eye = host_pow2scale_cast_to_fp8(np.eye(2), popxl.float8_143)
    return ops.cast(
        ops.matmul_pow2scaled(popxl.variable(X8, popxl.float8_143), popxl.variable(eye, popxl.float8_143), s),
        popxl.float32,
    )


# the op each case builds (by its dialect class) and its value for a scale, from NumPy
CASES: dict[str, tuple[type, Callable[[popxl.Tensor], popxl.Tensor], Callable[[int], np.ndarray]]] = {
    "pow2scale_cast_to_fp8": (
        dialect.Pow2ScaleCastToFp8Op,
        _cast_to,
        lambda s: host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(X, popxl.float8_152, s), popxl.float32),
    ),
    "pow2scale_cast_from_fp8": (
        dialect.Pow2ScaleCastFromFp8Op,
        _cast_from,
        lambda s: host_pow2scale_cast_from_fp8(X8, popxl.float32) * np.float32(2.0**s),
    ),
    "matmul_pow2scaled": (
        dialect.MatmulPow2ScaledOp,
        _matmul,
        lambda s: (host_pow2scale_cast_from_fp8(X8, popxl.float64) * 2.0**s).astype(np.float16).astype(np.float32),
    ),
}


def test_every_op_with_a_scale_is_covered() -> None:
    with_scale = {
        c
        for c in vars(dialect).values()
        if inspect.isclass(c)
        and issubclass(c, dialect.PopxlOp)
        and hasattr(c, "get_irdl_definition")
        and SCALE_OPERAND in [n for n, _ in getattr(c.get_irdl_definition(), "operands", ())]
    }
    assert with_scale == {cls for cls, _, _ in CASES.values()}


def _program(build: Callable[[popxl.Tensor], popxl.Tensor], scale: int) -> tuple[popxl.Ir, popxl.DeviceToHostStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        y = build(popxl.constant(np.int32(scale), name="scale"))
        o = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(o, y)
    return ir, o


@pytest.mark.parametrize("scale", [-50, 32, 100])
@pytest.mark.parametrize("case", sorted(CASES))
def test_out_of_range_fails_the_run_by_default(case: str, scale: int) -> None:
    cls, build, _ = CASES[case]
    ir, _ = _program(build, scale)
    with popxl.Session(ir, "ipu_model") as session:
        with pytest.raises(
            popart.poplar_application_runtime_error, match=rf"\({cls.name} in graph .*log2_scale {scale}"
        ) as info:
            session.run()
    assert isinstance(info.value, RunDataError | DataRangeError | ValueError)
    with popxl.Session(ir, "ipu_model") as session, pytest.raises(DataRangeError):
        session.run()  # still caught as the runtime's error type


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # float16 products of 2**31
@pytest.mark.parametrize("scale", [-50, -32, -3, 31, 100])
@pytest.mark.parametrize("case", sorted(CASES))
def test_option_off_clamps_the_scale(case: str, scale: int) -> None:
    _, build, reference = CASES[case]
    ir, o = _program(build, scale)
    opts = ir._pb_ir.getSessionOptions()
    opts.throwIfLog2ScaleTensorNotInRange = False
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[o]
    np.testing.assert_array_equal(got, reference(min(max(scale, -32), 31)))
    opts.throwIfLog2ScaleTensorNotInRange = True  # read by each new Session
    with popxl.Session(ir, "ipu_model") as session:
        if -32 <= scale < 32:
            np.testing.assert_array_equal(session.run()[o], reference(scale))
        else:
            with pytest.raises(popart.poplar_application_runtime_error):
                session.run()


def test_error_hierarchy_as_popart() -> None:
    assert issubclass(popart.poplar_application_runtime_error, popart.poplar_runtime_error)
    assert issubclass(popart.poplar_runtime_error, popart.poplar_exception)
    assert issubclass(popart.poplar_exception, RuntimeError)
    assert issubclass(RunDataError, popart.poplar_application_runtime_error) and issubclass(RunDataError, ValueError)
