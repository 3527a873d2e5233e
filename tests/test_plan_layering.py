"""Layering of the compiler: the runtime depends on the `rt` dialect only, the compile
driver (`xl.compiler`) is what joins the passes and the runtime."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _loaded_after(import_line: str) -> set[str]:
    code = f"import sys\n{import_line}\nprint('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


@pytest.mark.parametrize("module", ["xl.runtime", "xl.runtime.plan", "xl.runtime.executable", "xl.runtime.kernels"])
def test_runtime_imports_no_pass_tool_or_driver(module: str):
    loaded = _loaded_after(f"import {module}")
    assert module in loaded
    bad = sorted(m for m in loaded if m.split(".")[:2] in (["xl", "passes"], ["xl", "tools"], ["xl", "compiler"]))
    assert bad == []


def test_plan_does_not_import_the_executable():
    # no import cycle: the plan builder needs neither `executable` nor the driver
    import xl.runtime.plan as plan

    src = open(plan.__file__).read()
    assert "xl.runtime.executable" not in src and "xl.compiler" not in src
    assert "xl.runtime.plan" in _loaded_after("import xl.runtime.plan")


def test_compile_module_lives_in_the_driver():
    import xl.compiler as compiler
    import xl.runtime as runtime

    assert compiler.compile_module.__module__ == "xl.compiler.driver"
    # kept importable from the runtime for existing callers (resolved lazily)
    assert runtime.compile_module is compiler.compile_module
    assert runtime.lower is compiler.lower
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = runtime.no_such_name
