"""PopXL's smaller modules and Tensor helpers: popxl.random_seed, popxl.errors,
popxl.typing_, popxl.tensorlocation (TileSet, ExecutionContext), popxl.testing, the dtype
lookup tables, Tensor.strides (bytes, as NumPy) and Tensor.diag (vs np.diag)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popxl
from popxl import ops
from popxl.dtypes import _NP_TO_POPXL, _PY_TO_POPXL, _STR_TO_POPXL
from popxl.errors import UndefinedValue
from popxl.random_seed import MAX_UINT64, create_seeds, two_uint32_to_uint64, uint64_to_two_uint32
from popxl.tensorlocation import ExecutionContext, TensorLocation, TensorStorage, TileSet
from popxl.testing import get_all_dtypes, get_all_int_dtypes
from popxl.typing_ import NewAliasAnnotation


@given(st.integers(0, 2**64 - 1))
def test_uint64_split_is_high_and_low_words(n: int) -> None:
    hi, lo = uint64_to_two_uint32(n)
    assert (hi, lo) == (n // 2**32, n % 2**32)
    assert two_uint32_to_uint64(hi, lo) == n


def test_random_seed_module() -> None:
    assert MAX_UINT64 == 2**64 - 1
    with pytest.raises(ValueError):
        uint64_to_two_uint32(-1)
    with pytest.raises(ValueError):
        uint64_to_two_uint32(2**64)
    s = create_seeds(5, batches_per_step=3, replicas=2)
    assert s.shape == (3, 2, 2) and s.dtype == np.uint32
    assert create_seeds is popxl.create_seeds
    # the same draws as NumPy's generator, split into words
    want = np.random.default_rng(5).integers(0, MAX_UINT64, endpoint=True, dtype="uint64", size=6)
    got = [two_uint32_to_uint64(int(a), int(b)) for a, b in s.reshape(-1, 2)]
    assert got == [int(v) for v in want]


Id = NewAliasAnnotation("Id", int)


def _takes_id(x: Id) -> Id:  # pyright: ignore[reportInvalidTypeForm]  # an alias annotation, as upstream uses it
    return x


def test_undefined_value_and_alias_annotation() -> None:
    assert issubclass(UndefinedValue, Exception)
    assert inspect.signature(_takes_id, eval_str=True).parameters["x"].annotation is Id and Id.__name__ == "Id"
    with pytest.raises(NotImplementedError, match="only be used as an annotation"):
        Id(1)


def test_tensorlocation_module() -> None:
    assert TensorLocation is popxl.TensorLocation and TensorStorage is popxl.TensorStorage
    assert TileSet is popxl.TileSet and ExecutionContext is popxl.ExecutionContext
    assert [(m.name, m.value) for m in TileSet] == [("Compute", 0), ("IO", 1), ("Undefined", 2)]
    assert [m.name for m in ExecutionContext] == [
        "Normal",
        "AccumulateOuterFragment",
        "WeightsFromHostFragment",
        "WeightsToHostFragment",
        "OptimizerFromHostFragment",
        "Subgraph",
    ]
    assert TileSet._from_name("io") is TileSet.IO and TileSet._from_name(None) is TileSet.Undefined


def test_testing_dtype_lists() -> None:
    names = {d.name for d in get_all_dtypes()}
    every = {v.name for v in vars(popxl.dtypes).values() if isinstance(v, popxl.dtype)}
    assert names == every - {"bool"}
    assert [d.name for d in get_all_int_dtypes(include_unsigned=False)] == ["int8", "int16", "int32", "int64"]
    assert all(not d.is_signed for d in get_all_int_dtypes(include_signed=False))
    assert get_all_int_dtypes(False, False) == []


def test_dtype_tables() -> None:
    for d in get_all_dtypes() + [popxl.bool]:
        assert _NP_TO_POPXL[np.dtype(d.as_numpy())] is d
        assert _STR_TO_POPXL[d.name] is d
    assert _PY_TO_POPXL[float] is popxl.float32 and _PY_TO_POPXL[bool] is popxl.bool
    assert popxl.dtype.as_dtype(int) is popxl.int64  # NumPy's default integer
    torch = pytest.importorskip("torch")
    from popxl.dtypes import _PT_TO_POPXL

    for t, d in _PT_TO_POPXL.items():
        assert _NP_TO_POPXL[torch.empty(0, dtype=t).numpy().dtype] is d


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 5), max_size=4),
    st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int32, np.uint64, np.bool_]),
)
def test_strides_in_bytes_as_numpy(shape: list[int], np_type: type) -> None:
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros((2, 3), np_type), dtype=popxl.dtype.as_dtype(np_type))
        assert t.strides(shape) == np.zeros(shape, np_type).strides
        assert t.strides() == np.zeros((2, 3), np_type).strides


@pytest.mark.parametrize("shape", [(4, 4), (3, 1), (1, 3), (2, 5), (5, 2), (1, 1)])
def test_diag_vs_numpy(shape: tuple[int, int]) -> None:
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 1.5 - 2.0
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(data)
        y = x.diag()
        out = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(out, y)
        with pytest.raises(ValueError, match="2d"):
            popxl.variable(np.zeros((2, 2, 2), np.float32)).diag()
        with pytest.raises(ValueError, match="2d"):
            popxl.variable(np.zeros(3, np.float32)).diag()
    assert y.shape == (min(shape),)
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run()[out], np.diag(data))
