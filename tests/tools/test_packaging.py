"""The build configuration ships every package folder under its import name, and the built
wheel has the metadata, licence files and packages it should."""

from __future__ import annotations

import email.message
import email.parser
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


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
    # popdist: the upstream name PopXL programs import for multi-process launches; popart: the
    # PopART names (session options, version) PopXL programs use
    assert tops == {"xl", "popxl", "popxl_addons", "popdist", "popart"}


# --- the built wheel ---------------------------------------------------------------------------

DIST_NAME = "xl-popxl"


def _setuptools_major() -> int:
    try:
        return int(importlib.metadata.version("setuptools").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return 0


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel of this source tree (or the one named by $XL_WHEEL), built from a copy of
    the files the build reads so the source tree gets no build/ or egg-info folder."""
    given = os.environ.get("XL_WHEEL")
    if given:
        return zipfile.ZipFile(given)
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "NOTICE"):
        shutil.copy2(ROOT / name, src / name)
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for folder in {f.split("/")[0] for f in cfg["package-dir"].values()}:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)]
    if _setuptools_major() >= 77:  # the build requirement is already here: no isolated env
        cmd.insert(4, "--no-build-isolation")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = (tmp / "dist").glob("*.whl")
    return zipfile.ZipFile(whl)


def _dist_info(wheel: zipfile.ZipFile) -> str:
    (info,) = {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info")}
    return info


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    text = wheel.read(f"{_dist_info(wheel)}/METADATA").decode()
    return email.parser.Parser().parsestr(text)


def test_wheel_name_python_and_dependencies(wheel: zipfile.ZipFile) -> None:
    md = _metadata(wheel)
    assert md["Name"] == DIST_NAME
    assert _dist_info(wheel) == f"xl_popxl-{md['Version']}.dist-info"
    # The same floor as the xDSL release xl runs with.
    xdsl = importlib.metadata.metadata("xdsl")
    assert md["Requires-Python"] == xdsl["Requires-Python"] == ">=3.11"
    requires = md.get_all("Requires-Dist")
    assert requires is not None
    core = [Requirement(r) for r in requires if "extra ==" not in r]
    assert {r.name for r in core} == {"xdsl", "numpy", "ml_dtypes", "threadpoolctl"}
    # xDSL: the tested range (pyproject says why), which holds the installed release.
    (xdsl_req,) = [r for r in core if r.name == "xdsl"]
    assert str(xdsl_req.specifier) == "<0.76,>=0.74"
    assert xdsl_req.specifier.contains(xdsl["Version"])
    assert not xdsl_req.specifier.contains("0.73.0")
    # tqdm only for the tests (the seed tutorial's code imports it), not for xl or the examples.
    assert 'tqdm>=4.60; extra == "test"' in requires
    classifiers = md.get_all("Classifier")
    assert classifiers is not None
    for version in ("3.11", "3.12"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert not any(c.startswith("Programming Language :: Python :: 3.10") for c in classifiers)


def test_wheel_ships_py_typed(wheel: zipfile.ZipFile) -> None:
    """PEP 561: every top-level package of the wheel carries a py.typed marker."""
    names = set(wheel.namelist())
    tops = {n.split("/")[0] for n in names} - {_dist_info(wheel)}
    assert tops and {f"{top}/py.typed" for top in tops} <= names
    for top in tops:
        assert wheel.read(f"{top}/py.typed") == b""


def test_wheel_license_and_notice(wheel: zipfile.ZipFile) -> None:
    md = _metadata(wheel)
    assert md["License-Expression"] == "MIT"
    license_files = md.get_all("License-File")
    assert license_files is not None and sorted(license_files) == ["LICENSE", "NOTICE"]
    info = _dist_info(wheel)
    license_text = wheel.read(f"{info}/licenses/LICENSE").decode()
    assert license_text == (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} xl contributors$", license_text, re.M)
    notice = wheel.read(f"{info}/licenses/NOTICE").decode()
    assert "Copyright (c) 2021 Graphcore" in notice  # popxl-addons
    assert "Copyright 2019 Graphcore Ltd." in notice  # tutorials
    # Each MIT notice is reproduced in full (the condition of the licence), plus xl's own LICENSE.
    grant = "Permission is hereby granted, free of charge, to any person obtaining"
    assert notice.count(grant) == 2 and license_text.count(grant) == 1


def test_wheel_top_level_packages_only(wheel: zipfile.ZipFile) -> None:
    tops = {n.split("/")[0] for n in wheel.namelist()} - {_dist_info(wheel)}
    assert tops == {"xl", "popxl", "popxl_addons", "popdist", "popart"}
    top_level = wheel.read(f"{_dist_info(wheel)}/top_level.txt").decode().split()
    assert sorted(top_level) == ["popart", "popdist", "popxl", "popxl_addons", "xl"]


def test_wheel_has_every_source_module(wheel: zipfile.ZipFile) -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    names = set(wheel.namelist())
    expected = set()
    for package, folder in cfg["package-dir"].items():
        for py in (ROOT / folder).rglob("*.py"):
            rel = py.relative_to(ROOT / folder)
            expected.add("/".join([*package.split("."), *rel.parts]))
    assert expected and expected <= names, sorted(expected - names)


def test_wheel_entry_points(wheel: zipfile.ZipFile) -> None:
    text = wheel.read(f"{_dist_info(wheel)}/entry_points.txt").decode()
    assert "xl-opt = xl.tools.opt:main" in text
    assert "xl-run = xl.tools.run:entry" in text


def test_version_is_single_sourced(wheel: zipfile.ZipFile) -> None:
    import xl

    md = _metadata(wheel)
    init = wheel.read("xl/__init__.py").decode()
    (in_wheel,) = re.findall(r'^__version__ = "([^"]+)"$', init, re.M)
    assert in_wheel == md["Version"] == xl.__version__
    # The installed distribution (editable here) reports the same version.
    assert importlib.metadata.version(DIST_NAME) == xl.__version__
