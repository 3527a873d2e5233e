"""`InputStreams` / `OutputStreams`: named collections of host streams (popxl_addons/streams.py).

```python
inputs = InputStreams(x=((2, 4), popxl.float32), labels=((2,), popxl.int32))
x = ops.host_load(inputs.x)
```
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import popxl

__all__ = ["InputStreams", "OutputStreams"]


class _Streams:
    _make: Any = None

    def __init__(self, **streams: tuple[tuple[int, ...], Any]):
        self._streams: dict[str, Any] = {}
        for name, spec in streams.items():
            if not isinstance(spec, tuple | list) or len(spec) != 2:
                raise TypeError(f"{type(self).__name__}: stream {name!r} must be given as (shape, dtype), got {spec!r}")
            shape, dtype = spec
            self._streams[name] = type(self)._make(shape, dtype, name)

    @classmethod
    def from_streams(cls, streams: Mapping[str, Any] | Iterable[Any]):
        """From existing streams: a {name: stream} mapping or streams (named by tensor id)."""
        obj = cls.__new__(cls)
        if isinstance(streams, Mapping):
            obj._streams = dict(streams)
        else:
            obj._streams = {}
            for s in streams:
                name = getattr(s, "tensor_id", None) or str(len(obj._streams))
                obj._streams[str(name).split("/")[-1]] = s
        return obj

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.__dict__["_streams"][name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no stream '{name}'") from None

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, str):
            return self._streams[key]
        values = list(self._streams.values())
        return values[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._streams.values())

    def __len__(self) -> int:
        return len(self._streams)

    def keys(self):
        return self._streams.keys()

    def values(self):
        return self._streams.values()

    def items(self):
        return self._streams.items()

    def to_dict(self) -> dict[str, Any]:
        return dict(self._streams)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self._streams)})"


class InputStreams(_Streams):
    """Host-to-device streams by name: `InputStreams(name=(shape, dtype), ...)`."""

    _make = staticmethod(lambda shape, dtype, name: popxl.h2d_stream(shape, dtype, name))


class OutputStreams(_Streams):
    """Device-to-host streams by name: `OutputStreams(name=(shape, dtype), ...)`."""

    _make = staticmethod(lambda shape, dtype, name: popxl.d2h_stream(shape, dtype, name))
