"""PopART's exception types, as programs catch them (`except popart.popart_exception`)."""

from __future__ import annotations

from popxl.errors import PopartException

__all__ = ["popart_exception", "popart_internal_exception", "poplar_exception", "OutOfMemoryException"]


# PopART's error type is popxl's `PopartException`: the checks PopART makes when a graph is
# built raise `popxl.errors.GraphBuildError` in xl, which `except popart.popart_exception`
# catches as in PopXL.
popart_exception = PopartException


class popart_internal_exception(popart_exception):  # noqa: N801
    """PopART's internal error type."""


class poplar_exception(RuntimeError):  # noqa: N801
    """Poplar's error type."""


class OutOfMemoryException(popart_exception):
    """A program that does not fit the IPU's memory (never raised by xl)."""
