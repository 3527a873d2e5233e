"""The build configuration ships every package folder under its import name."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    dirs = cfg["package-dir"]
    expected = set()
    for name, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            expected.add(".".join([name, *rel.parts]))
    assert expected == listed


def test_no_generic_top_level_names():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tops = {p.split(".")[0] for p in cfg["packages"]}
    assert tops == {"xl", "popxl", "popxl_addons"}
