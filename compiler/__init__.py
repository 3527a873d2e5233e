"""The compile driver: a high-level module through the pass pipeline to an `Executable`.

`xl.compiler` is the one place that knows both the passes and the runtime: `lower` runs a
pass pipeline on a copy of a module, `compile_module` lowers (unless the module is
already an `rt.program`), runs the `rt` optimisations and builds the runtime's plan. With
the default pipeline it runs `OUTLINE_PIPELINE` (automatic outlining of repeated code in
programs of 400+ ops; `compile_module(..., outline=False)` turns it off).
"""

from xl.compiler.driver import DEFAULT_PIPELINE, OUTLINE_PIPELINE, RT_PIPELINE, compile_module, lower

__all__ = ["DEFAULT_PIPELINE", "OUTLINE_PIPELINE", "RT_PIPELINE", "compile_module", "lower"]
