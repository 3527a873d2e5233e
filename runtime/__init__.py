"""The NumPy runtime: compiles a lowered `rt` program once and runs it.

It depends on the `rt` dialect only; the pass pipeline that produces an `rt.program`
is the compile driver's (`xl.compiler`). `compile_module`, `lower` and
`DEFAULT_PIPELINE` are still importable from here (resolved from `xl.compiler` on
first use) for existing callers.
"""

from typing import Any

from xl.runtime.errors import PlanError
from xl.runtime.executable import MAX_REPLICAS, Executable, compile_program

__all__ = ["MAX_REPLICAS", "Executable", "PlanError", "compile_program"]

_FROM_COMPILER = frozenset({"DEFAULT_PIPELINE", "RT_PIPELINE", "compile_module", "lower"})


def __getattr__(name: str) -> Any:
    if name in _FROM_COMPILER:
        import xl.compiler

        return getattr(xl.compiler, name)
    raise AttributeError(f"module 'xl.runtime' has no attribute {name!r}")
