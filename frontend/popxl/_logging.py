"""The `popxl` logger: PopXL's messages that are not errors (PopART logs them; its default
level, warnings, goes to stderr). Warnings print to stderr as `[popxl] [warning] ...` unless
the program configures the logger (`logging.getLogger("popxl")`: its level, handlers;
`POPXL_LOG_LEVEL=info` shows the information messages too).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

__all__ = ["logger"]


class _Stderr(logging.StreamHandler):
    """Writes to the `sys.stderr` of the moment (as logging's last-resort handler does), so
    a program or test that redirects stderr sees the messages."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


logger = logging.getLogger("popxl")
if not logger.handlers:
    _handler = _Stderr()
    _handler.setFormatter(logging.Formatter("[popxl] [%(levelname)s] %(message)s"))
    logger.addHandler(_handler)
    logger.propagate = False
    logger.setLevel(os.environ.get("POPXL_LOG_LEVEL", "WARNING").upper())
