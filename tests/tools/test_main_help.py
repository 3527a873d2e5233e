"""`python -m xl`: a short help naming every tool of the installed distribution and every
example program of examples/ (both read from where they are defined, so a tool or an
example added later is covered)."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _first_words(path: Path) -> str:
    """The first two words of the file's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split()[:2])


def test_help_lists_the_tools_and_the_examples() -> None:
    r = subprocess.run([sys.executable, "-m", "xl"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("xl 0.") and r.stderr == ""
    scripts = importlib.metadata.distribution("xl-popxl").entry_points.select(group="console_scripts")
    tools = {ep.name: ep.value.split(":")[0] for ep in scripts}
    assert set(tools) >= {"xl-opt", "xl-run"}
    lines = out.splitlines()
    for name, module in tools.items():
        (line,) = [ln for ln in lines if ln.startswith(f"  {name}  ")]
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None
        doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or ""
        # The module's first sentence, without its "`xl-opt`:" lead.
        assert line.split(None, 1)[1].lower().rstrip(".") in doc.split("\n\n")[0].replace("\n", " ").lower()
    from xl.__main__ import examples_dir

    if examples_dir() is None:  # xl installed from a wheel: the examples are not beside it
        assert "Examples: the programs in the examples/ folder of the source repository." in out
        return
    programs = [p for p in sorted((ROOT / "examples").glob("*.py")) if "__main__" in p.read_text()]
    helpers = [p for p in sorted((ROOT / "examples").glob("*.py")) if p not in programs]
    assert programs and helpers
    for p in programs:
        (line,) = [ln for ln in lines if ln.startswith(f"  {p.name} ")]
        assert line.split(None, 1)[1].startswith(_first_words(p)), line
        assert len(line) <= 88
    for p in helpers:
        assert f"  {p.name} " not in out
    assert len(lines) <= 40  # short


def test_help_without_a_source_tree(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import xl.__main__ as xl_main

    monkeypatch.setattr(xl_main, "examples_dir", lambda: None)
    assert xl_main.main([]) == 0
    out = capsys.readouterr().out
    assert "Examples: the programs in the examples/ folder of the source repository." in out
    assert "mnist.py" not in out


def test_unknown_argument() -> None:
    r = subprocess.run([sys.executable, "-m", "xl", "opt"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("python -m xl: unknown argument 'opt'") and "xl-opt" in r.stderr
    r = subprocess.run([sys.executable, "-m", "xl", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Tools" in r.stdout
