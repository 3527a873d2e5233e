"""PopART's exception types, as programs catch them (`except popart.popart_exception`)."""

from __future__ import annotations

__all__ = ["popart_exception", "popart_internal_exception", "poplar_exception", "OutOfMemoryException"]


class popart_exception(RuntimeError):  # noqa: N801 (PopART's name)
    """PopART's error type."""


class popart_internal_exception(popart_exception):  # noqa: N801
    """PopART's internal error type."""


class poplar_exception(RuntimeError):  # noqa: N801
    """Poplar's error type."""


class OutOfMemoryException(popart_exception):
    """A program that does not fit the IPU's memory (never raised by xl)."""
