"""The NumPy runtime: compiles a lowered `rt` program once and runs it.

It depends on the `rt` dialect (and the op classes its kernels name) only: the pass
pipeline that produces an `rt.program`, `compile_module` and `lower`, is the compile
driver's (`xl.compiler`).
"""

from xl.runtime.errors import PlanError
from xl.runtime.executable import MAX_REPLICAS, Executable, compile_program

__all__ = ["MAX_REPLICAS", "Executable", "PlanError", "compile_program"]
