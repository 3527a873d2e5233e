"""PopXL dtypes (popxl/dtypes.py): `popxl.float32`, `popxl.int32`, ... and conversions.

A `dtype` knows its NumPy type (`as_numpy()`) and its xDSL element type
(`_element_type`); `dtype.as_dtype(x)` accepts a popxl dtype, a NumPy dtype or type,
a Python type, a torch dtype or a value.
"""

from __future__ import annotations

import builtins
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.ir import Attribute

from popxl._checks import describe
from xl.dialects.utils import element_type as _np_to_elem
from xl.dialects.utils import numpy_dtype as _elem_to_np

__all__ = [
    "bool",
    "checked_dtype",
    "complex64",
    "complex128",
    "double",
    "dtype",
    "float",
    "float8_143",
    "float8_152",
    "float16",
    "float32",
    "float64",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "np_dtype_float8_143",
    "np_dtype_float8_152",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

_BY_NAME: dict[str, dtype] = {}
_BY_NP: dict[np.dtype, dtype] = {}


class dtype:
    """A PopXL element type. Not constructible by users: use `popxl.float32` etc."""

    __slots__ = ("_host_np", "_is_complex", "_is_fp", "_is_int", "_is_signed", "_name", "_np")

    def __init__(
        self,
        name: str,
        np_type: Any,
        is_complex: builtins.bool,
        is_int: builtins.bool,
        is_fp: builtins.bool,
        is_signed: builtins.bool,
        host_np: np.dtype | None = None,
    ):
        if name in _BY_NAME:
            raise TypeError("popxl dtypes cannot be constructed; use popxl.float32 etc.")
        self._name = name
        self._np = np.dtype(np_type) if np_type is not None else None
        self._is_complex = is_complex
        self._is_int = is_int
        self._is_fp = is_fp
        self._is_signed = is_signed
        # the NumPy dtype of host arrays when it differs from the one xl computes with (float8)
        self._host_np = host_np
        _BY_NAME[name] = self
        for npd in (self._np, host_np):
            if npd is not None and npd not in _BY_NP:
                _BY_NP[npd] = self

    # -- properties -------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The dtype's name (`"float32"`), as `dtype.from_name` takes it."""
        return self._name

    @property
    def is_complex(self) -> builtins.bool:
        """True for `complex64` and `complex128`."""
        return self._is_complex

    @property
    def is_int(self) -> builtins.bool:
        """True for the signed and unsigned integer dtypes (not `bool`)."""
        return self._is_int

    @property
    def is_floating_point(self) -> builtins.bool:
        """True for `float8_143`, `float8_152`, `float16`, `float32` and `float64`."""
        return self._is_fp

    @property
    def is_signed(self) -> builtins.bool:
        """True for the dtypes that hold negative values (signed integers, floats, complex)."""
        return self._is_signed

    def as_numpy(self) -> Any:
        """The NumPy type of host arrays of this dtype: the scalar type (`np.float32` for
        `popxl.float32`, `np.complex64` for `popxl.complex64`, which the runtime does not
        compute with); for `float8_143` / `float8_152` the structured dtype of their host
        arrays, `np_dtype_float8_143` / `np_dtype_float8_152` (one uint8 of the format's bits)."""
        if self._host_np is not None:
            return self._host_np
        if self._np is None:
            return _COMPLEX_NP[self._name].type
        return self._np.type

    def _compute_np(self) -> np.dtype:
        """The NumPy dtype xl computes with (the runtime's arrays, the IR's element type):
        `as_numpy()` but for float8, which computes with ml_dtypes (`float8_e4m3fnuz` /
        `float8_e5m2fnuz`). TypeError for the complex dtypes (no runtime kernels)."""
        if self._np is None:
            raise TypeError(f"{self!r} is not supported by the xl runtime")
        return self._np

    def as_torch(self) -> Any:
        """The torch dtype of the same name (`torch.float32`); needs torch installed."""
        import torch

        return getattr(torch, _TORCH_NAMES.get(self._name, self._name))

    @property
    def _element_type(self) -> Attribute:
        """The xDSL element type (`f32` for `popxl.float32`)."""
        if self._np is None:
            raise TypeError(f"{self!r} is not supported by the xl runtime")
        return _np_to_elem(self._np)

    # -- conversions ------------------------------------------------------------------
    @classmethod
    def from_name(cls, name: str) -> dtype:
        """The dtype called `name` (`"float32"` -> `popxl.float32`); ValueError for an unknown name."""
        try:
            return _BY_NAME[name]
        except KeyError:
            raise ValueError(f"There is no popxl dtype named {name!r}") from None

    @classmethod
    def _from_element_type(cls, elem: Attribute) -> dtype:
        return _BY_NP[_elem_to_np(elem)]

    @classmethod
    def as_dtype(cls, x: Any) -> dtype:
        """A popxl dtype from a popxl dtype, NumPy dtype/type, Python type, torch dtype or value."""
        if isinstance(x, dtype):
            return x
        if x is builtins.float:
            return float32
        if x is builtins.int:
            return int64  # NumPy's default integer, as PopXL
        if x is builtins.bool:
            return _BY_NAME["bool"]
        if isinstance(x, str) and x in _BY_NAME:
            return _BY_NAME[x]
        mod = type(x).__module__
        if mod.startswith("torch"):
            if type(x).__name__ == "dtype":
                return cls.from_name(str(x).split(".")[-1])
            dt = getattr(x, "dtype", None)
            if dt is not None:
                return cls.as_dtype(dt)
        try:
            if isinstance(x, np.ndarray | np.generic):
                npd = x.dtype
            else:
                npd = np.dtype(x)
        except TypeError:
            npd = np.asarray(x).dtype
        try:
            return _NP_TO_POPXL[np.dtype(npd)]  # complex types too (the runtime refuses them)
        except KeyError:
            raise ValueError(f"There is no popxl dtype for {x!r}") from None

    # -- dunder -----------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"popxl.dtypes.{self._name}"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        return (dtype.from_name, (self._name,))

    def __copy__(self) -> dtype:
        return self

    def __deepcopy__(self, memo: Any) -> dtype:
        return self


bool = dtype("bool", np.bool_, False, False, False, False)  #: booleans, stored as one byte (`np.bool_`)
int8 = dtype("int8", np.int8, False, True, False, True)  #: 8-bit signed integers
int16 = dtype("int16", np.int16, False, True, False, True)  #: 16-bit signed integers
int32 = dtype("int32", np.int32, False, True, False, True)  #: 32-bit signed integers
int64 = dtype("int64", np.int64, False, True, False, True)  #: 64-bit signed integers (what Python ints become)
uint8 = dtype("uint8", np.uint8, False, True, False, False)  #: 8-bit unsigned integers
uint16 = dtype("uint16", np.uint16, False, True, False, False)  #: 16-bit unsigned integers
uint32 = dtype("uint32", np.uint32, False, True, False, False)  #: 32-bit unsigned integers (seeds are `uint32[2]`)
uint64 = dtype("uint64", np.uint64, False, True, False, False)  #: 64-bit unsigned integers
float16 = dtype("float16", np.float16, False, False, True, True)  #: IEEE half precision
float32 = dtype("float32", np.float32, False, False, True, True)  #: IEEE single precision (what Python floats become)
float64 = dtype("float64", np.float64, False, False, True, True)  #: IEEE double precision
# Graphcore's float8 formats: float8_143 (1 sign, 4 exponent, 3 mantissa bits, exponent
# bias 8, max 240) and float8_152 (5 exponent bits, bias 16, max 57344), both without
# infinities and with one NaN (0x80). Host arrays hold their bits as PopXL's: a structured
# dtype of one uint8 (`np_dtype_float8_143`, what `popxl.fp8_utils` and `Session` return);
# xl computes with ml_dtypes (`float8_e4m3fnuz` / `float8_e5m2fnuz`, the same bits), which
# every function taking host data also accepts (`popxl.fp8_utils.float8_view` converts).
np_dtype_float8_143 = np.dtype([("float8_143", "u1")])  #: the NumPy dtype of `float8_143` host arrays
np_dtype_float8_152 = np.dtype([("float8_152", "u1")])  #: the NumPy dtype of `float8_152` host arrays
#: Graphcore's float8 with 4 exponent and 3 mantissa bits (computed as `ml_dtypes.float8_e4m3fnuz`)
float8_143 = dtype("float8_143", ml_dtypes.float8_e4m3fnuz, False, False, True, True, np_dtype_float8_143)
#: Graphcore's float8 with 5 exponent and 2 mantissa bits (computed as `ml_dtypes.float8_e5m2fnuz`)
float8_152 = dtype("float8_152", ml_dtypes.float8_e5m2fnuz, False, False, True, True, np_dtype_float8_152)
# Not supported by the NumPy runtime; present for API parity.
complex64 = dtype("complex64", None, True, False, False, True)  #: complex, two float32 (no runtime kernels)
complex128 = dtype("complex128", None, True, False, False, True)  #: complex, two float64 (no runtime kernels)
half = float16  #: `float16`
float = float32  #: `float32`
double = float64  #: `float64`

_TORCH_NAMES = {"float8_143": "float8_e4m3fnuz", "float8_152": "float8_e5m2fnuz"}
_COMPLEX_NP = {"complex64": np.dtype(np.complex64), "complex128": np.dtype(np.complex128)}

# PopXL's lookup tables (read by code written against upstream's dtypes module): NumPy
# dtype / name / Python type / torch dtype -> popxl dtype.
_NP_TO_POPXL: dict[np.dtype, dtype] = {**_BY_NP, **{v: _BY_NAME[k] for k, v in _COMPLEX_NP.items()}}
_STR_TO_POPXL: dict[str, dtype] = dict(_BY_NAME)
_PY_TO_POPXL: dict[Any, dtype] = {builtins.bool: bool, builtins.float: float32}


def _torch_table() -> dict[Any, dtype]:
    """torch dtype -> popxl dtype for the types torch and popxl share (empty without torch)."""
    try:
        import torch
    except ImportError:
        return {}
    names = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
    return {getattr(torch, n): _BY_NAME[n] for n in names + ["complex64", "complex128"]}


def __getattr__(name: str) -> Any:
    # `_PT_TO_POPXL` imports torch on first use only (importing popxl does not need torch).
    if name == "_PT_TO_POPXL":
        table = _torch_table()
        globals()[name] = table
        return table
    raise AttributeError(f"module 'popxl.dtypes' has no attribute {name!r}")


# The host representation of float8 data (PopXL's): a structured dtype of one uint8.
_UPSTREAM_FLOAT8 = {np_dtype_float8_143: float8_143, np_dtype_float8_152: float8_152}


def element_type(dt: Any) -> Attribute:
    """The xDSL element type of a popxl dtype (or anything `dtype.as_dtype` accepts)."""
    return dtype.as_dtype(dt)._element_type


def from_element_type(elem: Attribute) -> dtype:
    """The popxl dtype of an xDSL element type (`f32` -> `popxl.float32`)."""
    return dtype._from_element_type(elem)


def checked_dtype(dt: Any, what: str) -> dtype:
    """`dt` (a popxl dtype, NumPy dtype or type, Python type, name or torch dtype) as a popxl
    dtype xl computes with, for checking an argument: `TypeError` when `dt` is not a dtype
    at all (values such as 5, 2.5 or arrays included), `ValueError` when it names no popxl
    dtype or one without a NumPy equivalent (the runtime computes on NumPy); messages start
    with `what` (e.g. the function called)."""
    if isinstance(dt, dtype):  # the common case: nothing to resolve
        if dt._np is None:
            raise ValueError(f"{what}: dtype {dt.name} is not supported by xl (no NumPy equivalent)")
        return dt
    ok = (
        isinstance(dt, str | np.dtype)
        or any(dt is t for t in (builtins.float, builtins.int, builtins.bool))
        or (isinstance(dt, type) and issubclass(dt, np.generic))
        or (type(dt).__module__.startswith("torch") and type(dt).__name__ == "dtype")
    )
    if not ok:
        raise TypeError(f"{what}: dtype must be a popxl dtype (e.g. popxl.float32), got {describe(dt)}")
    try:
        d = dtype.as_dtype(dt)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {dt!r} is not a popxl dtype") from None
    if d._np is None:
        raise ValueError(f"{what}: dtype {d.name} is not supported by xl (no NumPy equivalent)")
    return d
