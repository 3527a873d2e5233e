"""Run-time printing switched by a log level (popxl_addons/debugging.py).

```python
x = addons.print_tensor(x, "after fc1")            # level 'DEBUG': printed when MODEL_LOG_LEVEL
addons.print_text("step done", level="INFO")       # is at or below the call's level
```

The environment variable `MODEL_LOG_LEVEL` (TRACE < DEBUG < INFO < WARN, default INFO) is
read at each call: a call whose `level` is below it adds nothing to the program and
`print_tensor` returns its input unchanged.
"""

from __future__ import annotations

import os
from typing import Any

import popxl
import popxl.ops as ops

__all__ = ["print_tensor", "print_text", "LEVELS"]

#: The levels of `print_tensor` / `print_text`, lowest first: a message prints when its level is at
#: least the one `MODEL_LOG_LEVEL` names in the environment (default `"INFO"`).
LEVELS = {"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3}


def _enabled(level: str, what: str) -> bool:
    if level not in LEVELS:
        raise ValueError(f"addons.{what}: level must be one of {list(LEVELS)}, got {level!r}")
    env = os.environ.get("MODEL_LOG_LEVEL", "INFO")
    if env not in LEVELS:
        raise ValueError(f"MODEL_LOG_LEVEL must be one of {list(LEVELS)}, got {env!r}")
    return LEVELS[env] <= LEVELS[level]


def print_tensor(t: popxl.Tensor, *args: Any, level: str = "DEBUG", **kwargs: Any) -> popxl.Tensor:
    """`ops.print_tensor(t, *args, **kwargs)` when `level` is enabled, else `t` itself."""
    if not isinstance(t, popxl.Tensor):
        raise TypeError(f"addons.print_tensor: expected a Tensor, got {type(t).__name__}")
    if _enabled(level, "print_tensor"):
        return ops.print_tensor(t, *args, **kwargs)
    return t


def print_text(text: str, num: popxl.Tensor | None = None, level: str = "DEBUG") -> None:
    """Print `text` at run time (with the value of `num` if given) when `level` is enabled."""
    if _enabled(level, "print_text"):
        t = num if num is not None else popxl.constant(0, popxl.int32)
        ops.print_tensor(t, str(text))
