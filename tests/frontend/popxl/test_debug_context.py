"""popxl.context's op_debug_context / debug_context_frame_offset (the call site recorded for
an op function, moved out of helpers) and _execution_context (Normal and Subgraph only)."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import popxl
from popxl.context import (
    DebugContext,
    _execution_context,
    debug_context_frame_offset,
    get_current_context,
    op_debug_context,
)

SEEN: list[DebugContext] = []


def _record() -> None:
    dc = get_current_context().debug_context
    assert dc is not None
    SEEN.append(dc)


@op_debug_context
def double(t: popxl.Tensor) -> popxl.Tensor:
    _record()
    return t * 2.0


@op_debug_context("renamed")
def triple(t: popxl.Tensor) -> popxl.Tensor:
    _record()
    return double(t) + t


@debug_context_frame_offset(1)
def helper(t: popxl.Tensor) -> popxl.Tensor:
    return double(t)


def _line() -> int:
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def test_call_sites_and_names() -> None:
    SEEN.clear()
    here = os.path.realpath(__file__)
    with popxl.Ir().main_graph, popxl.name_scope("outer"):
        x = popxl.variable(np.ones(2, np.float32))
        line = _line() + 1
        double(x)
        helper(x)  # the helper is skipped: the call site is this line
        triple(x)
        assert get_current_context().debug_context is None
    first, second, third, inner = SEEN
    assert (first.name, first.api, first.file, first.line, first.function) == (
        "outer/double",
        "double",
        here,
        line,
        "test_call_sites_and_names",
    )
    assert second.line == line + 1 and second.api == "double"
    assert (third.name, third.line) == ("outer/renamed", line + 2)
    # the nested op function's call site is inside triple
    assert inner.function == "triple" and inner.file == here
    # the decorated function is the function (name, docstring), its result unchanged
    assert double.__name__ == "double" and helper.__name__ == "helper"


def test_frame_offset_as_context_manager_and_errors() -> None:
    with debug_context_frame_offset(2) as total:
        assert total == 3
        with debug_context_frame_offset(0) as inner:
            assert inner == 4
    with debug_context_frame_offset(0) as after:
        assert after == 1
    with pytest.raises(TypeError, match="expected an int"):
        with debug_context_frame_offset("1"):  # pyright: ignore[reportArgumentType]  # bad input
            pass
    with pytest.raises(TypeError, match="expected a function or a name"):
        op_debug_context(3)  # pyright: ignore[reportArgumentType]  # bad input


def test_execution_context() -> None:
    ctx = get_current_context()
    assert ctx.execution_context is popxl.ExecutionContext.Normal
    with _execution_context(popxl.ExecutionContext.Subgraph) as e:
        assert e is popxl.ExecutionContext.Subgraph and ctx.execution_context is e
    assert ctx.execution_context is popxl.ExecutionContext.Normal
    for other in set(popxl.ExecutionContext) - {popxl.ExecutionContext.Normal, popxl.ExecutionContext.Subgraph}:
        with pytest.raises(NotImplementedError, match=other.name):
            with _execution_context(other):
                pass
    with pytest.raises(TypeError, match="ExecutionContext"):
        with _execution_context("Normal"):  # pyright: ignore[reportArgumentType]  # bad input
            pass
