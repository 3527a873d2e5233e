"""Host data -> tensor data: every entry point converts alike (`popxl._host.host_array`).

`popxl.constant`, `popxl.variable`, `popxl.remote_variable`, an op's non-Tensor operand
(`ops.add(x, 2.0)`, `x * 2.0`) and `popxl.utils.to_numpy` all take host data by the same
rules: the table below (written from PopXL's documented rules, not from xl's code) gives
the dtype each kind of data becomes, and the same bad data fails the same way at each
entry point, naming the function the user called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl._host import host_array
from popxl.fp8_utils import float8_view
from popxl.utils import to_numpy

F8 = np.dtype(ml_dtypes.float8_e4m3fnuz)
UPSTREAM_F8 = np.dtype([("float8_143", "u1")])

# data, dtype given, dtype expected (NumPy), values expected
CASES: list[tuple[str, Any, Any, np.dtype, Any]] = [
    ("python float", 2.5, None, np.dtype(np.float32), 2.5),
    ("python int", 3, None, np.dtype(np.int32), 3),
    ("python bool", True, None, np.dtype(np.bool_), True),
    ("nested lists", [[1.0, 2.0], [3.0, 4.0]], None, np.dtype(np.float32), [[1, 2], [3, 4]]),
    ("float64 array", np.arange(3, dtype=np.float64), None, np.dtype(np.float32), [0, 1, 2]),
    ("int64 array", np.arange(3, dtype=np.int64), None, np.dtype(np.int32), [0, 1, 2]),
    ("uint64 array", np.arange(3, dtype=np.uint64), None, np.dtype(np.uint32), [0, 1, 2]),
    ("float16 array", np.ones(2, np.float16), None, np.dtype(np.float16), [1, 1]),
    ("numpy scalar", np.float64(1.5), None, np.dtype(np.float32), 1.5),
    ("int to float16", [1, 2], popxl.float16, np.dtype(np.float16), [1, 2]),
    ("float to int32", np.array([1.0, 2.0]), popxl.int32, np.dtype(np.int32), [1, 2]),
    ("NumPy dtype given", 1, np.float32, np.dtype(np.float32), 1.0),
    ("float to float8", [1.0, 300.0], popxl.float8_143, F8, [1.0, np.nan]),
    ("float8 data", np.array([0.5, 2.0], F8), None, F8, [0.5, 2.0]),
    ("upstream float8 data", np.array([(0x40,)], UPSTREAM_F8).reshape(()), None, F8, 1.0),
]


def _values(arr: np.ndarray) -> np.ndarray:
    f8 = float8_view(arr)  # float8 data in the host format or as xl computes with it
    return arr if f8 is None else f8.astype(np.float64)


def _constant(data: Any, dtype: Any) -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        c = popxl.constant(data, dtype)
    return c._data


def _variable(data: Any, dtype: Any) -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(data, dtype)
    with popxl.Session(ir) as s:
        return s.get_tensor_data(v)


def _remote_variable(data: Any, dtype: Any) -> np.ndarray:
    arr, dt = host_array(data, dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer(arr.shape, dt, 1)
        v = popxl.remote_variable(data, buf, 0, dtype)
    with popxl.Session(ir) as s:
        return s.get_tensor_data(v)


ENTRY_POINTS: dict[str, Callable[[Any, Any], np.ndarray]] = {
    "popxl.constant": _constant,
    "popxl.variable": _variable,
    "popxl.remote_variable": _remote_variable,
    "popxl.utils.to_numpy": lambda data, dtype: to_numpy(data, dtype),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize(("case", "data", "dtype", "want_dtype", "want"), CASES, ids=[c[0] for c in CASES])
def test_entry_points_convert_alike(
    entry: str, case: str, data: Any, dtype: Any, want_dtype: np.dtype, want: Any
) -> None:
    arr, dt = host_array(data, dtype)
    assert arr.dtype == want_dtype and dt._compute_np() == want_dtype
    assert arr.flags.c_contiguous
    np.testing.assert_array_equal(_values(arr), np.asarray(want, np.float64 if arr.dtype == F8 else None))
    got = ENTRY_POINTS[entry](data, dtype)
    # data returned to the user is in the host format (float8: PopXL's structured uint8 dtype);
    # a constant's `_data` is what xl computes with
    assert got.dtype == (want_dtype if entry == "popxl.constant" else np.dtype(dt.as_numpy())), (entry, got.dtype)
    np.testing.assert_array_equal(_values(got), _values(arr))


def test_op_operands_convert_as_constants_of_the_tensor_dtype() -> None:
    """`ops.add(x, 2.5)` and `x * [1, 2]`: the host operand becomes a constant of x's dtype."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float16), name="x")
        operand: Any = 2.5  # (ops.add is annotated with Tensor operands)
        a = ops.add(x, operand)
        b = x * [1, 2]
        c = 3 - x
    consts = [t for t in ir.main_graph.tensors if isinstance(t, popxl.Constant)]
    assert [t.dtype for t in consts] == [popxl.float16] * 3
    np.testing.assert_array_equal(consts[1]._data, np.array([1, 2], np.float16))
    assert a.dtype == b.dtype == c.dtype == popxl.float16


BAD: list[tuple[str, Any, type[Exception], str]] = [
    ("None", None, TypeError, "expected host data"),
    ("a string", "abc", TypeError, "expected host data"),
    ("ragged lists", [[1, 2], [3]], ValueError, "cannot convert"),
    ("objects", [object()], TypeError, "cannot convert"),
    ("complex data", np.ones(2, np.complex128), TypeError, r"complex data \(complex128\) is not supported by xl"),
]
BAD_ENTRIES: dict[str, Callable[[popxl.Tensor, Any], Any]] = {
    "popxl.constant": lambda x, data: popxl.constant(data),
    "popxl.variable": lambda x, data: popxl.variable(data),
    "popxl.remote_variable": lambda x, data: popxl.remote_variable(data, popxl.remote_buffer((2,), popxl.float32)),
    "popxl.utils.to_numpy": lambda x, data: to_numpy(data),
    # an operand takes the other's dtype: complex data converts to it (as NumPy's astype)
    "ops.add": lambda x, data: ops.add(x, data),
}


@pytest.mark.parametrize(("case", "data", "error", "match"), BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("entry", sorted(BAD_ENTRIES))
def test_bad_data_fails_alike_naming_the_function(
    entry: str, case: str, data: Any, error: type[Exception], match: str
) -> None:
    if entry == "ops.add" and case == "complex data":
        return
    if entry == "popxl.utils.to_numpy" and case == "complex data":
        # as upstream, to_numpy passes complex data through (popxl.complex64 / complex128
        # exist as dtypes); variables and constants refuse it (xl's runtime is real-valued)
        assert to_numpy(data).dtype == np.complex128
        return
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        with pytest.raises(error, match=match) as info:
            BAD_ENTRIES[entry](x, data)
    assert str(info.value).startswith(entry + ":"), str(info.value)


@pytest.mark.parametrize("entry", ["popxl.constant", "popxl.variable", "ops.add", "x + data"])
@pytest.mark.parametrize("nested", [False, True])
def test_a_tensor_is_no_host_data(entry: str, nested: bool) -> None:
    """A Tensor, or a list holding Tensors, where host data is expected: TypeError naming
    the function (an operator converts its operand as `popxl.constant`)."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        y = popxl.variable(np.ones(2, np.float32), name="y")
        data: Any = [y, y] if nested or entry in ("ops.add", "x + data") else y
        want = "containing popxl Tensors; use ops.concat" if isinstance(data, list) else "got a popxl Tensor"
        with pytest.raises(TypeError, match=want) as info:
            if entry == "popxl.constant":
                popxl.constant(data)
            elif entry == "popxl.variable":
                popxl.variable(data)
            elif entry == "ops.add":
                ops.add(x, data)  # pyright: ignore[reportArgumentType]
            else:
                _ = x + data
    named = "popxl.constant" if entry == "x + data" else entry
    assert str(info.value).startswith(named + ":"), str(info.value)
    with pytest.raises(TypeError, match="got a popxl Tensor"):
        np.asarray(x)
