"""The frontend's import structure: no import cycle in popxl, no import of the tools.

- The module-level import graph of `popxl` (the imports a module runs when it is loaded:
  outside functions and `if TYPE_CHECKING:`; importing `popxl.ops._utils` also runs the
  package `popxl.ops`) has no cycle. The top package `popxl` is left out: its `__init__`
  re-exports every module and runs first, so counting it would join everything.
- In a fresh interpreter each popxl module imports on its own, with `popxl/__init__.py`
  not run (so its import order cannot hide a cycle between two modules): a cycle shows as
  an ImportError of a partially initialised module.
- `Tensor`'s methods are set by `popxl.ops` (`popxl/ops/_tensor_methods.py`): the methods
  `popxl/tensor.py` declares for type checkers are exactly the ones set.
- No frontend module imports `xl.tools` (the tools sit above the frontend), not even
  inside a function.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import popxl
from popxl.ops import _tensor_methods

FRONTEND = Path(__file__).resolve().parents[3] / "frontend"
POPXL = FRONTEND / "popxl"


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _load_time_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when a module with this body is loaded."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node):
                out += _load_time_imports(node.body) + _load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                out += _load_time_imports(part)
        elif isinstance(node, ast.ClassDef | ast.With):
            out += _load_time_imports(node.body)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the package's modules it imports at load time} for the package at `root`.

    `from p import x` depends on module `p.x` if there is one, else on `p` itself; loading
    a module also runs the packages it sits in, which for the importer's own packages are
    already running (no edge)."""
    files = {_module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    top = root.name

    def targets(mod: str, name: str) -> set[str]:
        """What `mod` loads importing `name`: its module, and the packages it sits in
        that are not `mod`'s own (those are running already)."""
        while name not in files and "." in name:  # an attribute of a module
            name = name.rpartition(".")[0]
        out = {name}
        while "." in name:
            name = name.rpartition(".")[0]
            if not mod.startswith(name + "."):
                out.add(name)
        return out

    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _load_time_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                for a in node.names:
                    edges |= targets(mod, a.name)
                continue
            base = node.module or ""
            if node.level:
                here = mod.split(".") if is_package else mod.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join(here + ([base] if base else []))
            for a in node.names:
                edges |= targets(mod, f"{base}.{a.name}" if f"{base}.{a.name}" in files else base)
        graph[mod] = {e for e in edges if e in files and e not in (mod, top)}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [m0, m1, ..., m0], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_popxl_import_graph_has_no_cycle() -> None:
    graph = import_graph(POPXL)
    assert {"popxl.tensor", "popxl.ops._utils", "popxl.ops", "popxl.session"} <= graph.keys()
    assert "popxl.tensor" in graph["popxl.ops._utils"]
    assert "popxl.ops" in graph["popxl.ops._remote"] or "popxl.ops._utils" in graph["popxl.ops._remote"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in popxl: " + " -> ".join(cycle or ())


def test_the_scan_finds_a_cycle(tmp_path: Path) -> None:
    """The graph and the search are not vacuous: a cycle closed by an import at the bottom of
    a module (as `popxl/tensor.py` had with `popxl/remote_buffer.py`), through a package's
    `__init__` and through a relative import is found; imports inside functions and under
    `if TYPE_CHECKING:` are not edges."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\nA = 1\n"
        "def f():\n    from pkg import c\n",
        "b.py": "from pkg.sub.d import D\nB = 1\n",
        "c.py": "C = 1\nfrom pkg.b import B  # noqa: E402\n",
        "sub/__init__.py": "from .e import E\n",
        "sub/d.py": "D = 1\n",
        "sub/e.py": "from pkg import c\nE = 1\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(pkg)
    assert graph["pkg.a"] == set()
    assert graph["pkg.sub"] == {"pkg.sub.e"}
    assert graph["pkg.sub.e"] == {"pkg.c"}
    assert find_cycle(graph) == ["pkg.b", "pkg.sub", "pkg.sub.e", "pkg.c", "pkg.b"]
    (pkg / "c.py").write_text("C = 1\n")
    assert find_cycle(import_graph(pkg)) is None


_IMPORT_EACH = textwrap.dedent(
    """
    import importlib, importlib.util, json, sys, traceback
    root, top, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    failures = {}
    for name in names:
        for m in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[m]
        # the top package without running its __init__
        spec = importlib.util.spec_from_file_location(top, root + "/__init__.py", submodule_search_locations=[root])
        sys.modules[top] = importlib.util.module_from_spec(spec)
        try:
            importlib.import_module(name)
        except Exception:
            failures[name] = traceback.format_exc(limit=-3)
    print(json.dumps(failures))
    """
)


def test_each_popxl_module_imports_on_its_own() -> None:
    names = sorted(import_graph(POPXL))
    assert len(names) > 25
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, str(POPXL), "popxl", json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    failures = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failures, "modules that do not import on their own:\n" + "\n".join(
        f"{n}:\n{tb}" for n, tb in failures.items()
    )


def test_isolated_import_finds_a_cycle(tmp_path: Path) -> None:
    """The isolated import fails on a cycle that the package's `__init__` order hides."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from cyc import a, b\n")  # a first: works
    (pkg / "a.py").write_text("A = 1\nfrom cyc.b import B  # noqa: E402\n")
    (pkg / "b.py").write_text("from cyc.a import A\nB = A\n")
    ok = subprocess.run([sys.executable, "-c", "import cyc.b"], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr  # hidden by `__init__`
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, str(pkg), "cyc", json.dumps(["cyc.a", "cyc.b"])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    failures = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(failures) == {"cyc.b"} and "partially initialized" in failures["cyc.b"]


# ---------------------------------------------------------------------------------------
# Tensor's methods
# ---------------------------------------------------------------------------------------


def _declared_tensor_methods() -> set[str]:
    """The methods `popxl/tensor.py` declares under `if TYPE_CHECKING:` in `class Tensor`."""
    tree = ast.parse((POPXL / "tensor.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    blocks = [n for n in cls.body if isinstance(n, ast.If) and _is_type_checking(n)]
    assert len(blocks) == 1
    return {n.name for n in blocks[0].body if isinstance(n, ast.FunctionDef)}


def test_tensor_methods_declared_are_the_methods_set() -> None:
    declared = _declared_tensor_methods()
    assert {"reshape", "T", "__add__", "__getitem__", "__iadd__"} <= declared
    assert declared == set(_tensor_methods._METHODS)
    for name, method in _tensor_methods._METHODS.items():
        assert popxl.Tensor.__dict__[name] is method, name


# ---------------------------------------------------------------------------------------
# Layers: the frontend does not import the tools
# ---------------------------------------------------------------------------------------


def _tools_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        if any(n == "xl.tools" or n.startswith("xl.tools.") for n in names):
            out.append(f"{path.relative_to(FRONTEND)}:{node.lineno}")
    return out


def test_frontend_does_not_import_tools(tmp_path: Path) -> None:
    found = [f for p in sorted(FRONTEND.rglob("*.py")) for f in _tools_imports(p)]
    assert not found, "frontend modules importing xl.tools: " + ", ".join(found)
    probe = FRONTEND / "_tools_probe.py"
    try:
        probe.write_text("def f():\n    from xl.tools.opt import main\n    from xl import tools\n")
        assert _tools_imports(probe) == ["_tools_probe.py:2", "_tools_probe.py:3"]
    finally:
        probe.unlink()


def test_tensor_and_remote_buffer_are_not_a_knot() -> None:
    """`popxl.remote_buffer` knows no tensors: `popxl.tensor` imports it, not the reverse."""
    graph = import_graph(POPXL)
    assert "popxl.remote_buffer" in graph["popxl.tensor"]
    assert "popxl.tensor" not in graph["popxl.remote_buffer"]
