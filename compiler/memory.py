"""Memory per virtual IPU of a high-level or lowered module, without running it.

The module goes through the pipeline `compile_module` uses (the lowering pipeline, then
`rt-optimize`), and `xl.runtime.memory.memory_report` reads the resulting `rt.program`.

```python
from xl.compiler.memory import lowered_program, module_memory_report
print(module_memory_report(module).table())
```
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from xl.compiler.driver import DEFAULT_PIPELINE, RT_PIPELINE, apply_extra_passes, compile_pipeline, lower
from xl.dialects import rt
from xl.runtime.errors import PlanError
from xl.runtime.memory import MemoryReport, memory_report

__all__ = ["lowered_program", "module_memory_report"]


def lowered_program(
    module: ModuleOp,
    pipeline: str = DEFAULT_PIPELINE,
    extra_passes: Sequence[ModulePass] = (),
    outline: bool = True,
) -> rt.ProgramOp:
    """The `rt.program` that `compile_module(module, pipeline, extra_passes=...,
    outline=...)` plans (optimised; automatic outlining as `compile_module` does it);
    `module` is left untouched."""
    if extra_passes:
        module = apply_extra_passes(module, extra_passes)
    if any(isinstance(op, rt.ProgramOp) for op in module.ops):
        module = lower(module, RT_PIPELINE)
    else:
        module = lower(module, f"{compile_pipeline(pipeline, outline, True, module)},{RT_PIPELINE}")
    programs = [op for op in module.ops if isinstance(op, rt.ProgramOp)]
    if len(programs) != 1:
        raise PlanError(f"runtime: expected one rt.program, found {len(programs)}")
    return programs[0]


def module_memory_report(
    module: ModuleOp,
    pipeline: str = DEFAULT_PIPELINE,
    extra_passes: Sequence[ModulePass] = (),
    outline: bool = True,
) -> MemoryReport:
    """`memory_report` of the program `compile_module` would build from `module`."""
    return memory_report(lowered_program(module, pipeline, extra_passes, outline))


def session_memory_report(session: object, print_table: bool = True) -> MemoryReport:
    """`popxl.Session.memory_report`: the report of the session's program, its tensors named
    as `print_schedule` shows them (`%3 @ main_graph`). The runtime's `Executable` keeps its
    `rt.program` (`program`); otherwise the Ir's module is lowered again with the session's
    extra passes, as the Session compiled it. Printed (`MemoryReport.text()`) unless
    `print_table=False`."""
    program = getattr(getattr(session, "_exe", None), "program", None)
    names = getattr(session, "_tensor_names", None)  # print_schedule's names of each op's results
    if isinstance(program, rt.ProgramOp):
        report = memory_report(program, names)
    else:
        ir = session.ir  # pyright: ignore[reportAttributeAccessIssue]
        extra = tuple(getattr(session, "_extra_passes", ()))
        report = memory_report(lowered_program(ir._module, extra_passes=extra), names)
    if print_table:
        print(report.text())
    return report
