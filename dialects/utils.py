"""Helpers shared by the xl dialects: element types <-> NumPy dtypes, type checks."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    MemRefType,
    Signedness,
    TensorType,
)
from xdsl.ir import Attribute
from xdsl.utils.exceptions import VerifyException

_NP_TO_ELEM: dict[np.dtype, Attribute] = {
    np.dtype(np.float16): Float16Type(),
    np.dtype(np.float32): Float32Type(),
    np.dtype(np.float64): Float64Type(),
    np.dtype(np.int8): IntegerType(8),
    np.dtype(np.int16): IntegerType(16),
    np.dtype(np.int32): IntegerType(32),
    np.dtype(np.int64): IntegerType(64),
    np.dtype(np.uint8): IntegerType(8, Signedness.UNSIGNED),
    np.dtype(np.uint16): IntegerType(16, Signedness.UNSIGNED),
    np.dtype(np.uint32): IntegerType(32, Signedness.UNSIGNED),
    np.dtype(np.uint64): IntegerType(64, Signedness.UNSIGNED),
    np.dtype(np.bool_): IntegerType(1),
    # popxl.float8_143 / float8_152 (Graphcore's formats: exponent bias 8 / 16, NaN is
    # 0x80, no infinities, no negative zero) are ml_dtypes' *fnuz float8 types.
    np.dtype(ml_dtypes.float8_e4m3fnuz): Float8E4M3FNUZType(),
    np.dtype(ml_dtypes.float8_e5m2fnuz): Float8E5M2FNUZType(),
}

FLOAT8_DTYPES: tuple[np.dtype, ...] = (
    np.dtype(ml_dtypes.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2fnuz),
)
"""The NumPy dtypes of the float8 element types (`f8E4M3FNUZ`, `f8E5M2FNUZ`)."""
_ELEM_TO_NP: dict[Attribute, np.dtype] = {v: k for k, v in _NP_TO_ELEM.items()}

DTYPES: tuple[np.dtype, ...] = tuple(_NP_TO_ELEM)
"""The NumPy dtype of every xl element type: what a tensor, a variable or a weight file holds."""


def element_type(dtype: np.dtype | type | str) -> Attribute:
    """The xDSL element type for a NumPy dtype (``np.float32`` -> ``f32``)."""
    try:
        return _NP_TO_ELEM[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"dtype {np.dtype(dtype)} has no xl element type") from None


def numpy_dtype(elem: Attribute) -> np.dtype:
    """The NumPy dtype of an xDSL element type (``f32`` -> ``float32``)."""
    try:
        return _ELEM_TO_NP[elem]
    except KeyError:
        raise TypeError(f"element type {elem} has no NumPy dtype") from None


def tensor_type(shape: Sequence[int], dtype: np.dtype | type | str) -> TensorType[Any]:
    # TensorType[Any]: the element type follows `dtype` at run time (any int, float or bool type)
    """`tensor<shape x dtype>`; types are immutable, so they are cached."""
    return _tensor_type(tuple(int(d) for d in shape), np.dtype(dtype))


@functools.lru_cache(maxsize=4096)
def _tensor_type(shape: tuple[int, ...], dtype: np.dtype) -> TensorType[Any]:
    return TensorType(element_type(dtype), list(shape))


def memref_type(shape: Sequence[int], dtype: np.dtype | type | str) -> MemRefType:
    return MemRefType(element_type(dtype), list(shape))


def shape_of(t: Attribute) -> tuple[int, ...]:
    assert isinstance(t, TensorType | MemRefType), t
    return tuple(t.get_shape())


def dtype_of(t: Attribute) -> np.dtype:
    assert isinstance(t, TensorType | MemRefType), t
    return numpy_dtype(t.get_element_type())


def is_float(t: Attribute) -> bool:
    return isinstance(t.get_element_type(), Float16Type | Float32Type | Float64Type)  # pyright: ignore[reportAttributeAccessIssue]


def fmt_type(t: Attribute) -> str:
    """Short human form of a tensor type for messages: ``(2, 4) float32``."""
    if isinstance(t, TensorType | MemRefType):
        try:
            return f"{shape_of(t)} {dtype_of(t)}"
        except TypeError:
            pass
    return str(t)


def dense_attr(value: np.ndarray) -> DenseIntOrFPElementsAttr:
    """A dense elements attribute holding ``value`` (any rank, any xl dtype)."""
    value = np.asarray(value)
    value = np.ascontiguousarray(value).reshape(value.shape)  # ascontiguousarray makes 0-d 1-d
    ttype = tensor_type(value.shape, value.dtype)
    if value.dtype == np.bool_:
        return DenseIntOrFPElementsAttr.from_list(ttype, [int(v) for v in value.reshape(-1)])
    return DenseIntOrFPElementsAttr(ttype, BytesAttr(value.tobytes()))


def dense_to_numpy(attr: DenseIntOrFPElementsAttr, copy: bool = True) -> np.ndarray:
    """The NumPy array held by a dense elements attribute (`copy=False`: possibly a
    read-only view of the attribute's bytes, for a caller that copies what it keeps)."""
    ttype = attr.get_type()
    dtype = dtype_of(ttype)
    shape = shape_of(ttype)
    if dtype == np.bool_:
        vals = list(attr.get_values())
        arr = np.array(vals, dtype=np.bool_)
    else:
        arr = np.frombuffer(attr.data.data, dtype=dtype)
        if copy:
            arr = arr.copy()
    if arr.size == 1 and int(np.prod(shape)) != 1:  # splat
        return np.full(shape, arr.reshape(()), dtype=dtype)
    return arr.reshape(shape)


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise VerifyException(msg)
