"""Checks of programs that build but that a `popxl.Session` refuses: ops on operands of a
dtype they cannot compute are built, as in PopXL, and refused when the program is compiled
(`xl.dialects.popxl.deferred_dtype_checks`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import popxl


def refused_by_session(build: Callable[[], object], match: str) -> None:
    """`build()` (popxl calls, run in the main graph of a new Ir) succeeds, and
    `popxl.Session` refuses the program with a ValueError matching `match`."""
    ir = popxl.Ir()
    with ir.main_graph:
        build()
    with pytest.raises(ValueError, match=match):
        popxl.Session(ir)
