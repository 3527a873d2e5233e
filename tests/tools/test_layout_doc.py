"""docs/compiler.md's Layout table names every module of the compiler's folders, so the
table a reader uses to find a thing matches the tree (modules added later fail here until
the table names them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ["dialects", "runtime", "runtime/kernels", "compiler", "tools"]


def _layout() -> str:
    doc = (ROOT / "docs" / "compiler.md").read_text()
    start = doc.index("## Layout")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end != -1 else len(doc)]


@pytest.mark.parametrize("folder", FOLDERS)
def test_layout_names_every_module(folder: str) -> None:
    table = _layout()
    modules = sorted(p.name for p in (ROOT / folder).glob("*.py") if p.name != "__init__.py")
    assert modules, folder
    missing = [m for m in modules if f"`{m}`" not in table and f"`{m[:-3]}`" not in table]
    assert not missing, f"docs/compiler.md ## Layout does not name {folder}/{missing}"


def test_layout_names_no_module_that_is_gone() -> None:
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\.py)`", _layout()))
    assert named
    folders = ["dialects", "passes", "runtime", "runtime/kernels", "compiler", "tools", "benchmarks", "docs"]
    on_disk = {p.name for folder in folders for p in (ROOT / folder).glob("*.py")}
    gone = sorted(named - on_disk)
    assert not gone, f"docs/compiler.md ## Layout names modules that do not exist: {gone}"
