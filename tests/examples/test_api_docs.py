"""The documented API: the reference pages under docs/api/ and the docstrings they come from.

For `popxl.ops` (and `var_updates`, `collectives`):
- each module's public namespace is exactly its `__all__` (no helper such as `emit1`,
  `Iterable`, `np` or an op class leaks out);
- a function's `__name__` is the name it is exported under and its module is the public
  one, so `help(popxl.ops.gelu)` shows `gelu` in `popxl.ops` (not `_unary.<locals>.f`).

For every public module of `popxl`, `popxl_addons` and `xl.compiler` (found by walking the
packages; a module is public when no part of its dotted name starts with `_`) and every
public name of each (its `__all__`, or else the names without a leading underscore it
defines itself), so that modules and names added later are covered without editing this file:
- every function and class has a docstring, and so has every public method and property
  a class defines (an override may show the docstring of what it overrides);
- every value (a constant) is documented by its comment in the source;
- `docs/gen_api.py` writes an entry for each name, each module on exactly one page, and
  the committed pages docs/api/*.md are its current output.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import pkgutil
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import popxl.ops as ops
from popxl.ops import collectives, var_updates

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "docs" / "gen_api.py"
MODULES = [ops, var_updates, collectives]


def _public(module: ModuleType) -> list[tuple[str, object]]:
    return [(n, getattr(module, n)) for n in module.__all__ if not inspect.ismodule(getattr(module, n))]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_public_namespace_is_all(module: ModuleType) -> None:
    public = {n for n in dir(module) if not n.startswith("_")}
    assert public == set(module.__all__), (
        f"{module.__name__}: not in __all__: {sorted(public - set(module.__all__))}; "
        f"missing: {sorted(set(module.__all__) - public)}"
    )
    assert len(module.__all__) == len(set(module.__all__)), "a name is listed twice"
    if module is not ops:  # var_updates / collectives re-export their implementation module's names
        impl = importlib.import_module(f"popxl.ops._{module.__name__.rsplit('.', 1)[1]}")
        assert module.__all__ == impl.__all__, f"{module.__name__}.__all__ differs from {impl.__name__}.__all__"
    for helper in ("emit", "emit1", "emit_inplace", "Iterable", "Sequence", "np", "Any", "Tensor", "GeluOp"):
        assert not hasattr(module, helper), f"{module.__name__}.{helper} is public"


CASES = [(m.__name__, n, obj) for m in MODULES for n, obj in _public(m)]


@pytest.mark.parametrize(("module", "name", "obj"), CASES, ids=[f"{m}.{n}" for m, n, _ in CASES])
def test_documented_under_its_own_name(module: str, name: str, obj: object) -> None:
    if not callable(obj):  # a constant (collectives.CollectiveOps): documented by a comment
        return
    doc = obj.__doc__ or ""
    assert doc.strip(), f"{module}.{name} has no docstring"
    assert obj.__name__ == name, f"{module}.{name} is called {obj.__name__!r}"
    assert obj.__module__ == module, f"{module}.{name} says it lives in {obj.__module__}"
    text = inspect.getdoc(obj) or ""
    assert "<locals>" not in text
    if inspect.isclass(obj):
        for attr_name, attr in vars(obj).items():
            if attr_name.startswith("_"):
                continue
            fn = attr.fget if isinstance(attr, property) else attr
            if callable(fn) or isinstance(attr, property):
                assert (getattr(fn, "__doc__", None) or "").strip(), f"{module}.{name}.{attr_name} has no docstring"
    else:
        sig = inspect.signature(obj)  # the real parameters, not (*args, **kwargs) of a wrapper
        assert list(sig.parameters) != ["args", "kwargs"], f"{module}.{name} hides its signature"


def test_help_shows_the_op() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        help(ops.gelu)
    text = out.getvalue()
    assert text.startswith("Help on function gelu in module popxl.ops:"), text[:200]
    assert "gelu(t: 'Tensor') -> 'Tensor'" in text and "tanh" in text
    assert "_unary" not in text and "<locals>" not in text
    out = io.StringIO()
    with redirect_stdout(out):
        help(var_updates.accumulate_)
    assert out.getvalue().startswith("Help on function accumulate_ in module popxl.ops.var_updates:")


def test_unimplemented_ops_keep_signature_and_raise() -> None:
    assert list(inspect.signature(ops.conv).parameters)[:2] == ["t", "weight"]
    # every public op is implemented now; the decorator still declares upstream names
    from popxl.ops._utils import unimplemented

    def future_op(t: Any, k: int = 1) -> None:
        """An upstream op not implemented yet."""

    future_op.__module__ = "popxl.ops"
    stub = unimplemented(future_op)
    assert list(inspect.signature(stub).parameters) == ["t", "k"]
    assert stub.__doc__ == "An upstream op not implemented yet."
    with pytest.raises(NotImplementedError) as info:
        stub(None)
    assert str(info.value) == "popxl.ops.future_op is not implemented in xl yet"
    # the collectives are implemented: bad arguments name the public function
    with pytest.raises(TypeError, match=r"^ops\.collectives\.replicated_all_reduce: t must be a popxl Tensor"):
        collectives.replicated_all_reduce(None)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


# -- the reference pages, for every public name of the three packages ---------------------------

PACKAGES = ("popxl", "popxl_addons", "xl.compiler")
PAGES = ROOT / "docs" / "api"


def _load_gen_api() -> ModuleType:
    sys.path.insert(0, str(GEN.parent))
    try:
        import gen_api

        return gen_api
    finally:
        sys.path.pop(0)


gen_api = _load_gen_api()


def _public_modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def _module(name: str) -> ModuleType:
    importlib.import_module(name)
    return sys.modules[name]  # not the package's attribute of that name (popxl.ops.call is also a function)


def _assigned_names(module: ModuleType) -> set[str]:
    out: set[str] = set()
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _public_names(module: ModuleType) -> list[str]:
    """`__all__`, or else the names without a leading underscore the module defines (not imports)."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    assigned = _assigned_names(module)
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if obj.__module__ == module.__name__:
                names.append(name)
        elif name in assigned:
            names.append(name)
    return names


MODULE_NAMES = _public_modules()


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return gen_api.render()


def _section(pages: dict[str, str], module_name: str) -> str:
    """The text of a module's section (after its `## ` heading, up to the next one)."""
    heading = f"\n## `{module_name}`\n"
    page = next(text for text in pages.values() if heading in text)
    return re.split(r"^## ", page.split(heading, 1)[1], flags=re.M)[0]


def _entries(text: str) -> dict[str, str]:
    """Heading (without `### `) -> the text under it, for every `###` entry of `text`."""
    out: dict[str, str] = {}
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        head, _, body = block.partition("\n")
        body = re.split(r"^## ", body, flags=re.M)[0]
        assert head not in out, f"two entries {head}"
        out[head] = body.strip()
    return out


def test_every_public_module_is_on_one_page(pages: dict[str, str]) -> None:
    assert {"popxl.transforms.autodiff", "popxl_addons.layers.linear", "xl.compiler.memory"} <= set(MODULE_NAMES)
    assert not any("._" in m for m in MODULE_NAMES)
    for name in MODULE_NAMES:
        on = [f for f, text in pages.items() if f"\n## `{name}`\n" in text]
        assert len(on) == 1, f"module {name} is on pages {on}"
    headings = {m for text in pages.values() for m in re.findall(r"^## `([^`]+)`$", text, flags=re.M)}
    assert headings == set(MODULE_NAMES), sorted(headings ^ set(MODULE_NAMES))


def _ours(obj: object) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in {"popxl", "popxl_addons", "xl"}


def _undocumented(obj: object, where: str) -> list[str]:
    """The function or class if it has no docstring, and each public method / property a class
    defines that has none (neither its own nor one of what it overrides)."""
    problems = []
    if not (inspect.getdoc(obj) or "").strip():
        problems.append(f"{where} has no docstring")
    if inspect.isclass(obj):
        for name, attr in vars(obj).items():
            if name.startswith("_"):
                continue
            if isinstance(attr, property) or inspect.isfunction(attr) or isinstance(attr, classmethod | staticmethod):
                if not gen_api.member_doc(obj, name):
                    problems.append(f"{where}.{name} has no docstring")
    return problems


@pytest.mark.parametrize("module_name", MODULE_NAMES)
def test_every_public_name_is_documented(module_name: str, pages: dict[str, str]) -> None:
    module = _module(module_name)
    assert (inspect.getdoc(module) or "").strip(), f"module {module_name} has no docstring"
    names = _public_names(module)
    assert names, f"{module_name} has no public names"
    entries = _entries(_section(pages, module_name))
    problems = []
    for name in names:
        obj = getattr(module, name)
        qualified = f"{module_name}.{name}"
        if inspect.isclass(obj):
            head = f"class `{qualified}`"
        elif callable(obj) and not inspect.ismodule(obj):
            head = f"`{qualified}{gen_api.signature(obj)}`"
        else:
            head = f"`{qualified}`"
        body = entries.get(head)
        if not body:
            problems.append(f"no entry {head}" if body is None else f"empty entry {head}")
            continue
        if inspect.ismodule(obj):
            continue
        if inspect.isclass(obj) or callable(obj):
            if _ours(obj):
                problems += _undocumented(obj, qualified)
                if inspect.isclass(obj) and not body.startswith("The class `"):
                    for member, _ in gen_api.members(obj):
                        if f"- `{obj.__name__}.{member}" not in body:
                            problems.append(f"{qualified}: the page lacks {member}")
        elif not body.startswith("The value `"):
            # a value: its line `name = value`, then its comment from the source
            prose = [line for line in body.splitlines() if line.strip() and not line.startswith(f"`{name} = ")]
            if not prose:
                problems.append(f"{qualified} (a value) has no comment in the source")
    assert not problems, "\n".join(problems)


def test_reexports_point_to_the_first_description(pages: dict[str, str]) -> None:
    text = pages["popxl.md"]
    entries = _entries(text)
    assert entries["class `popxl.ir.Ir`"] == "The class `popxl.Ir`."
    assert entries["`popxl.dtypes.float32`"] == "The value `popxl.float32`."
    assert entries["`popxl.float32`"].startswith("`float32 = popxl.dtypes.float32`")
    assert "IEEE single precision" in entries["`popxl.float32`"]
    assert "- `Ir.main_graph` (property): The main graph" in entries["class `popxl.Ir`"]
    assert "### `popxl.bridge.tensor_of(" in text and "### `popxl.printing.schedule_str(" in text
    gelu = _entries(pages["popxl_ops.md"])["`popxl.ops.gelu(t: Tensor) -> Tensor`"]
    assert gelu == inspect.getdoc(ops.gelu)
    addons = _entries(pages["popxl_addons.md"])
    assert addons["class `popxl_addons.module.Module`"] == "The class `popxl_addons.Module`."
    assert (
        "- `Linear.build(self, x: popxl.Tensor) -> popxl.Tensor`: `x @ weight"
        in addons["class `popxl_addons.layers.Linear`"]
    )
    compiler = _entries(pages["compiler.md"])
    assert compiler["`xl.compiler.driver.DEFAULT_PIPELINE`"] == "The value `xl.compiler.DEFAULT_PIPELINE`."


VALUES = {
    "__init__.py": (
        "from .defs import A, B as BB\nfrom .defs import C\n__all__ = ['A', 'BB', 'C', 'D', 'E']\n"
        "#: Comment above,\n#: two lines.\nD = 4\nE = 5  #: A trailing comment.\n"
    ),
    "defs.py": '# Plain comment above.\nA = 1\nB = 2\n"""A string after."""\nC = 3\n',
}


def test_value_comments_are_found_through_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg_doc").mkdir()
    for name, text in VALUES.items():
        (tmp_path / "pkg_doc" / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        package = importlib.import_module("pkg_doc")
        got = {n: gen_api.constant_doc(package, n) for n in package.__all__}
        assert got == {
            "A": ("Plain comment above.", "pkg_doc.defs.A"),
            "BB": ("A string after.", "pkg_doc.defs.B"),
            "C": ("", "pkg_doc.defs.C"),  # undocumented: test_every_public_name_is_documented names such a value
            "D": ("Comment above, two lines.", "pkg_doc.D"),
            "E": ("A trailing comment.", "pkg_doc.E"),
        }
        ref = gen_api.Reference()
        text = "\n".join(line for n in package.__all__ for line in ref.entry(package, n))
        assert "### `pkg_doc.BB`\n\n`BB = 2`\n\nA string after." in text
    finally:
        for name in ("pkg_doc", "pkg_doc.defs"):
            sys.modules.pop(name, None)


def test_committed_pages_are_current(pages: dict[str, str], tmp_path: Path) -> None:
    assert sorted(p.name for p in PAGES.glob("*.md")) == sorted(pages), "docs/api/ holds other pages"
    for name, text in pages.items():
        assert (PAGES / name).read_text() == text, f"docs/api/{name} is out of date: run python docs/gen_api.py"
    r = subprocess.run([sys.executable, str(GEN), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "api"
    subprocess.run([sys.executable, str(GEN), "-o", str(out)], check=True, cwd=tmp_path)
    assert {p.name: p.read_text() for p in out.glob("*.md")} == pages
    (out / "compiler.md").write_text("old\n")
    r = subprocess.run([sys.executable, str(GEN), "--check", "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 1 and "compiler.md: not up to date" in r.stderr, r.stderr
