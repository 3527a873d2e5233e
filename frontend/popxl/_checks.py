"""Argument checks shared by the popxl API (popxl/_checks.py).

Every public entry point that takes a shape, an int or a name from the user checks it
here (a dtype: `popxl.dtypes.checked_dtype`), so a mistake is refused at once with a message naming the function
and the object (stream, tensor, op), instead of failing later inside xl:

    >>> check_shape((2.5, 3), "popxl.h2d_stream 'x'")
    Traceback (most recent call last):
    TypeError: popxl.h2d_stream 'x': shape (2.5, 3) has a non-integer dim 2.5 (float)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_int", "check_name", "check_shape", "describe"]


def describe(x: Any) -> str:
    """A short description of a user value for error messages."""
    text = repr(x)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(x).__name__})"


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def check_int(x: Any, what: str, arg: str, minimum: int | None = None) -> int:
    """`x` as an int (Python or NumPy integer, not bool), at least `minimum` if given."""
    if not _is_int(x):
        raise TypeError(f"{what}: {arg} must be an int, got {describe(x)}")
    v = int(x)
    if minimum is not None and v < minimum:
        raise ValueError(f"{what}: {arg} must be >= {minimum}, got {v}")
    return v


def check_shape(shape: Any, what: str) -> tuple[int, ...]:
    """A tensor shape: an iterable of non-negative ints (an int alone is a 1-D shape)."""
    if _is_int(shape):
        shape = (shape,)
    if isinstance(shape, str | bytes) or shape is None:
        raise TypeError(f"{what}: shape must be a tuple of ints, got {describe(shape)}")
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{what}: shape must be a tuple of ints, got {describe(shape)}") from None
    for d in dims:
        if not _is_int(d):
            raise TypeError(f"{what}: shape {dims} has a non-integer dim {d!r} ({type(d).__name__})")
        if d < 0:
            raise ValueError(f"{what}: shape {dims} has a negative dim {int(d)}")
    return tuple(int(d) for d in dims)


def check_name(name: Any, what: str) -> str | None:
    """An optional name: None or a non-empty str."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError(f"{what}: name must be a str, got {describe(name)}")
    if not name:
        raise ValueError(f"{what}: name must not be empty")
    return name
