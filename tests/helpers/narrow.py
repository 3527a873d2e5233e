"""`narrow(value, cls)`: `value`, checked to be an instance of `cls`.

For values whose type a test knows but a type checker cannot follow: a leaf of a `DotTree`
(`NamedTensors` / `NamedVariableFactories` attribute access is typed `leaf | DotTree`), an
xDSL attribute of a known kind, ... Unlike `typing.cast` it checks the claim when the test
runs (an AssertionError naming the expected and the actual type).
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def narrow(value: object, cls: type[T]) -> T:
    assert isinstance(value, cls), f"expected a {cls.__name__}, got {type(value).__name__}: {value!r}"
    return value
