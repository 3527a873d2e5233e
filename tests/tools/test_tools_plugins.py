"""Passes from outside the repository: `--load-pass-plugin`, the `xl.passes` entry points
(see also tests/examples/test_docs_guides.py), and custom passes in a Session's compile."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.tool_runner import xl_opt as _xl_opt
from xl.compiler import compile_module
from xl.passes import get_all_passes
from xl.passes.plugins import PluginError, load_pass_plugin

# A pass that doubles every graph.constant: its effect on the numbers shows that it ran.
DOUBLE_CONSTANTS = '''
from dataclasses import dataclass

import numpy as np
from xdsl.passes import ModulePass

from xl.dialects.graph import ConstantOp
from xl.dialects.utils import dense_attr, dense_to_numpy


@dataclass(frozen=True)
class DoubleConstantsPass(ModulePass):
    """Multiply every graph.constant by `factor`."""

    name = "test-double-constants"
    factor: float = 2.0

    def apply(self, ctx, op) -> None:
        for c in op.walk():
            if isinstance(c, ConstantOp):
                v = dense_to_numpy(c.value)
                c.value = dense_attr((v * self.factor).astype(v.dtype))


class NotAPass:
    name = "not-a-pass"
'''

PROGRAM = """graph.main {
  %c = graph.constant dense<[1.0, 2.5]> : tensor<2xf32>
}
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(autouse=True)
def _restore_plugin_registry():
    """Plugins loaded by a test stay registered for that test only."""
    from xl.passes import plugins

    saved = dict(plugins._loaded)
    yield
    plugins._loaded.clear()
    plugins._loaded.update(saved)


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    p = tmp_path / "double_constants.py"
    p.write_text(DOUBLE_CONSTANTS)
    return p


def test_load_pass_plugin_in_xl_opt(plugin: Path, tmp_path: Path) -> None:
    prog = tmp_path / "p.mlir"
    prog.write_text(PROGRAM)
    r = _run(
        ["xl-opt", str(prog), "--load-pass-plugin", str(plugin), "-p", "test-double-constants{factor=3.0}"], tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert "dense<[3.000000e+00, 7.500000e+00]> : tensor<2xf32>" in r.stdout
    r = _run(["xl-opt", "--load-pass-plugin", str(plugin), "--list-passes"], tmp_path)
    plugins = r.stdout.split("plugin passes", 1)[1].split("xDSL passes", 1)[0]
    assert "test-double-constants: Multiply every graph.constant by `factor`." in plugins
    assert "factor: float = 2.0" in plugins
    # Without the plugin the pass is unknown.
    r = _run(["xl-opt", str(prog), "-p", "test-double-constants"], tmp_path)
    assert r.returncode == 1 and "test-double-constants" in r.stderr and "Traceback" not in r.stderr


def test_load_pass_plugin_in_xl_run(plugin: Path, tmp_path: Path) -> None:
    prog = tmp_path / "p.mlir"
    prog.write_text(
        "graph.d2h_stream @y : tensor<2xf32>\n"
        "graph.main attributes {num_host_transfers = 1 : i64} {\n"
        "  %c = graph.constant dense<[1.0, 2.5]> : tensor<2xf32>\n"
        "  graph.host_store @y, %c : tensor<2xf32>\n}\n"
    )
    r = _run(
        [
            "xl-run",
            str(prog),
            "--load-pass-plugin",
            str(plugin),
            "-p",
            "test-double-constants,inline,canonicalize,lower-to-rt",
            "-o",
            "out.npz",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], [2.0, 5.0])


def test_plugin_errors(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="does not exist"):
        load_pass_plugin(tmp_path / "missing.py")
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(PluginError, match="defines no ModulePass subclass with a 'name'"):
        load_pass_plugin(empty)
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    with pytest.raises(PluginError, match="broken.py': ModuleNotFoundError"):
        load_pass_plugin(broken)
    clash = tmp_path / "clash.py"
    clash.write_text(
        textwrap.dedent("""
        from dataclasses import dataclass
        from xdsl.passes import ModulePass

        @dataclass(frozen=True)
        class MyInline(ModulePass):
            name = "inline"
            def apply(self, ctx, op): pass
    """)
    )
    with pytest.raises(PluginError, match="inline is already an xl pass"):
        load_pass_plugin(clash)
    code, _, err = _xl_opt("--load-pass-plugin", str(empty), "--list-passes")
    assert code == 1 and err.startswith("xl-opt: error: pass plugin") and "Traceback" not in err


def test_python_registry_sees_loaded_plugin(plugin: Path) -> None:
    loaded = load_pass_plugin(plugin)
    assert list(loaded) == ["test-double-constants"]
    assert get_all_passes()["test-double-constants"]() is loaded["test-double-constants"]


def _program() -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2,), popxl.float32, "x")
        ys = popxl.d2h_stream((2,), popxl.float32, "y")
        c = popxl.constant(np.array([1.0, -3.0], np.float32))
        ops.host_store(ys, ops.host_load(xs) * c)
    return ir, xs, ys


def test_session_runs_custom_passes(plugin: Path) -> None:
    cls = load_pass_plugin(plugin)["test-double-constants"]
    x = np.array([0.5, 2.0], np.float32)
    ir, xs, ys = _program()
    with popxl.Session(ir, "cpu", passes=[cls(factor=10.0)]) as s:  # pyright: ignore[reportCallIssue]  # a class loaded from the plugin file: its fields are not known statically
        out = s.run({xs: x})
    np.testing.assert_allclose(out[ys], x * np.array([10.0, -30.0], np.float32))
    # The Ir itself is not changed by the Session's passes.
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_allclose(s.run({xs: x})[ys], x * np.array([1.0, -3.0], np.float32))


def test_extra_passes_errors(plugin: Path) -> None:
    ir, _, _ = _program()
    with pytest.raises(TypeError, match="extra passes must be ModulePass instances"):
        compile_module(ir._module, extra_passes=["inline"])  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    from xl.tools.opt import TestFailPass

    with pytest.raises(ValueError, match="the IR after pass 'xl-test-fail' is invalid"):
        compile_module(ir._module, extra_passes=[TestFailPass(kind="verify")])


def test_pipelines_are_parsed_once_per_spec_and_pass_classes(tmp_path: Path) -> None:
    """`compile_module` reuses a parsed pipeline, but a plugin that registers another class
    under a name already used is what the next compile runs; unknown names still fail."""
    from xl.compiler.driver import DEFAULT_PIPELINE, pass_pipeline

    assert pass_pipeline(DEFAULT_PIPELINE) is pass_pipeline(DEFAULT_PIPELINE)
    x = np.array([0.5, 2.0], np.float32)
    ir, xs, ys = _program()
    spec = f"test-double-constants,{DEFAULT_PIPELINE}"
    outs = []
    for factor in (2.0, 3.0):  # two plugin files, one pass name
        p = tmp_path / f"double_{int(factor)}.py"
        p.write_text(DOUBLE_CONSTANTS.replace("factor: float = 2.0", f"factor: float = {factor}"))
        load_pass_plugin(p)
        outs.append(compile_module(ir._module, pipeline=spec).run({"x": x})["y"])
    np.testing.assert_allclose(outs[0], x * np.array([2.0, -6.0], np.float32))
    np.testing.assert_allclose(outs[1], x * np.array([3.0, -9.0], np.float32))
    with pytest.raises(ValueError, match="Unrecognized passes"):
        pass_pipeline("inline,no-such-pass")
