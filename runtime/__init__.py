"""The NumPy runtime: compiles a lowered `rt` program once and runs it."""

from xl.runtime.executable import DEFAULT_PIPELINE, Executable, compile_module, lower

__all__ = ["DEFAULT_PIPELINE", "Executable", "compile_module", "lower"]
