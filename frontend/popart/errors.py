"""PopART's exception types, as programs catch them (`except popart.popart_exception`)."""

from __future__ import annotations

from popxl.errors import PopartException, PoplarApplicationRuntimeError, PoplarException, PoplarRuntimeError

__all__ = [
    "popart_exception",
    "popart_internal_exception",
    "poplar_exception",
    "poplar_runtime_error",
    "poplar_application_runtime_error",
    "OutOfMemoryException",
]


# PopART's error type is popxl's `PopartException`: the checks PopART makes when a graph is
# built raise `popxl.errors.GraphBuildError` in xl, which `except popart.popart_exception`
# catches as in PopXL.
popart_exception = PopartException


class popart_internal_exception(popart_exception):  # noqa: N801
    """PopART's internal error type."""


# Poplar's error types: `popxl.Session.run` raises `poplar_application_runtime_error` (as
# `popxl.errors.RunDataError`) for a value out of its op's range.
poplar_exception = PoplarException
poplar_runtime_error = PoplarRuntimeError
poplar_application_runtime_error = PoplarApplicationRuntimeError


class OutOfMemoryException(popart_exception):
    """A program that does not fit the IPU's memory (never raised by xl)."""
