"""Host streams (popxl/streams.py): `h2d_stream`, `d2h_stream`.

A stream is a module-level symbol (`graph.h2d_stream @name : type`); the Python
objects are cached per Ir by name, so the same object comes back everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from numpy.typing import DTypeLike

from popxl._checks import check_name, check_shape
from popxl.context import gcg
from popxl.dtypes import checked_dtype
from popxl.dtypes import dtype as _dtype
from popxl.tensor import TensorSpec
from xl.dialects.graph import D2HStreamOp, H2DStreamOp
from xl.dialects.utils import tensor_type

if TYPE_CHECKING:
    from popxl.dtypes import dtype as DType
    from popxl.ir import Ir

__all__ = ["DeviceToHostStream", "HostToDeviceStream", "d2h_stream", "h2d_stream"]


class _Stream:
    _KIND = ""

    # set by `_create` (the only constructor)
    _ir: Ir
    _name: str
    _shape: tuple[int, ...]
    _dtype: DType

    def __init__(self) -> None:
        raise TypeError(f"Use popxl.{self._KIND}_stream(...) to create a stream")

    @classmethod
    def _create(cls, ir: Ir, name: str, shape: tuple[int, ...], dt: _dtype) -> _Stream:
        s = cls.__new__(cls)
        s._ir = ir
        s._name = name
        s._shape = shape
        s._dtype = dt
        return s

    @property
    def tensor_id(self) -> str:
        return self._name

    @property
    def name(self) -> str:
        return self._name

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> _dtype:
        return self._dtype

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self._shape, self._dtype)

    @property
    def ir(self) -> Ir:
        return self._ir

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __str__(self) -> str:
        return f"{type(self).__name__} {self._name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._name} {self._dtype!r} {self._shape}]"


class HostToDeviceStream(_Stream):
    """A stream of host data into the device; read it with `ops.host_load`."""

    _KIND = "h2d"


class DeviceToHostStream(_Stream):
    """A stream of device data to the host; write it with `ops.host_store`."""

    _KIND = "d2h"


def _make(kind: str, shape: Iterable[int] | int, dtype: _dtype | DTypeLike, name: str | None) -> _Stream:
    what = f"popxl.{kind}_stream"
    name = check_name(name, what)
    if name is not None:
        what += f" {name!r}"
    shape = check_shape(shape, what)
    dt = checked_dtype(dtype, what)
    ir = gcg().ir
    name = ir._unique_stream_name(name if name is not None else f"{kind}_stream")
    ttype = tensor_type(shape, dt._compute_np())
    if kind == "h2d":
        ir._add_stream_decl(H2DStreamOp(name, ttype))
        s = HostToDeviceStream._create(ir, name, shape, dt)
        ir._h2d[name] = s
    else:
        ir._add_stream_decl(D2HStreamOp(name, ttype))
        s = DeviceToHostStream._create(ir, name, shape, dt)
        ir._d2h[name] = s
    return s


def h2d_stream(shape: Iterable[int] | int, dtype: _dtype | DTypeLike, name: str | None = None) -> HostToDeviceStream:
    """A host-to-device stream (always declared at module level).

    `shape` is a tuple of non-negative ints and `dtype` a popxl dtype; anything else
    is refused at once (TypeError/ValueError naming the stream)."""
    s = _make("h2d", shape, dtype, name)
    assert isinstance(s, HostToDeviceStream)
    return s


def d2h_stream(shape: Iterable[int] | int, dtype: _dtype | DTypeLike, name: str | None = None) -> DeviceToHostStream:
    """A device-to-host stream (always declared at module level); arguments are
    checked as for `h2d_stream`."""
    s = _make("d2h", shape, dtype, name)
    assert isinstance(s, DeviceToHostStream)
    return s
