"""docs/extending.md lists every place a new `popxl` op touches, and each place holds every op.

The guide's table "Every place an op touches" names one file or folder per row. This test
knows what each of those places must hold for an op (its class in the dialect's op list, a
kernel, a gradient rule, a frontend function exported from `popxl.ops`, its API page, its
lit round trip, its kernel test, its kernel case, its export recipe) and checks, for every
op of the `popxl` dialect (so ops added later are covered):

- the table names exactly the places checked here, and each exists;
- every op is in each place (user-facing ops only where the place is about the user API:
  an op with the `Internal` trait is built by passes, not by the frontend).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from xdsl.ir import Operation

import popxl
import popxl.custom_ops
import popxl.ops
import xl.passes.autodiff  # noqa: F401  (registers every gradient rule)
from popxl.ops import collectives, var_updates
from tests.frontend.popxl import test_ops_exports
from tests.helpers.kernel_cases import CASES
from xl.dialects.popxl import Popxl
from xl.dialects.traits import Internal, NoGradient, NotDifferentiable
from xl.passes.grad_rules import GRAD_RULES
from xl.runtime.kernels import KERNELS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extending.md"
OPS = sorted(Popxl.operations, key=lambda c: c.name)

# The modules whose `__all__` is the user's way to an op, with the name users call them by.
EXPORTS: dict[str, list[str]] = {
    "popxl.ops": list(popxl.ops.__all__),
    "popxl.ops.var_updates": list(var_updates.__all__),
    "popxl.ops.collectives": list(collectives.__all__),
    "popxl.custom_ops": list(popxl.custom_ops.__all__),  # popxl.custom: a program's own op
}


def doc_places() -> list[str]:
    """The first `path` of each row of the table under "Every place an op touches"."""
    text = DOC.read_text()
    m = re.search(r"^## Every place an op touches\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"{DOC}: no section '## Every place an op touches'"
    rows = [line for line in m.group(1).splitlines() if line.startswith("|") and not set(line) <= set("|- ")]
    places = []
    for row in rows[1:]:  # after the header
        first = re.search(r"`([^`]+)`", row.split("|")[1])
        assert first, f"{DOC}: a row names no place: {row}"
        places.append(first.group(1))
    return places


# -- what references what in the frontend ------------------------------------------------
def _references() -> dict[str, set[str]]:
    """Each top-level function or class of frontend/popxl -> the names it uses."""
    refs: dict[str, set[str]] = {}
    for path in sorted((ROOT / "frontend" / "popxl").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                used = refs.setdefault(node.name, set())
                for n in ast.walk(node):
                    if isinstance(n, ast.Name):
                        used.add(n.id)
                    elif isinstance(n, ast.Attribute):
                        used.add(n.attr)
    return refs


REFS = _references()


def _closure(name: str) -> set[str]:
    """Every name `name` uses, directly or through the functions it calls."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for used in REFS.get(todo.pop(), ()):
            if used not in seen:
                seen.add(used)
                todo.append(used)
    return seen


EXPORTED_USES = {f"{mod}.{n}": _closure(n) for mod, names in EXPORTS.items() for n in names}


def exported_builders(cls: type[Operation]) -> list[str]:
    """`module.name` of every exported function that builds `cls` (directly or through helpers)."""
    return [name for name, uses in EXPORTED_USES.items() if cls.__name__ in uses]


# -- one check per place: None when `cls` is there, else what is missing ---------------------
Check = Callable[[type[Operation]], str | None]


def _class_in_dialect(cls: type[Operation]) -> str | None:
    if Path(inspect.getsourcefile(cls) or "").resolve() != (ROOT / "dialects" / "popxl.py").resolve():
        return "its class is not defined in dialects/popxl.py"
    return None if cls in Popxl.operations else "not in the Popxl dialect's OPS"


def _kernel(cls: type[Operation]) -> str | None:
    return None if cls in KERNELS else "no kernel registered by class (@kernel)"


def _gradient(cls: type[Operation]) -> str | None:
    if cls in GRAD_RULES or cls.has_trait(NoGradient) or cls.has_trait(NotDifferentiable):
        return None
    return "no @grad_rule and no NoGradient / NotDifferentiable trait"


def _frontend_function(cls: type[Operation]) -> str | None:
    if cls.has_trait(Internal):
        return None
    users = [n for n, used in REFS.items() if cls.__name__ in used]
    return None if users else "no frontend function builds it"


def _exported(cls: type[Operation]) -> str | None:
    if cls.has_trait(Internal):
        return None
    return None if exported_builders(cls) else "no function in popxl.ops' __all__ builds it"


API_TEXT = "\n".join(p.read_text() for p in sorted((ROOT / "docs" / "api").glob("*.md")))


def _api_page(cls: type[Operation]) -> str | None:
    if cls.has_trait(Internal):
        return None
    names = exported_builders(cls)
    documented = [n for n in names if f"`{n}(" in API_TEXT or f"`{n}`" in API_TEXT]
    return None if documented else f"none of {names} is on a docs/api page (python docs/gen_api.py)"


# popxl/ops.mlir, and popxl_nn/ops.mlir for the nn ops
LIT = "\n".join(p.read_text() for p in sorted((ROOT / "tests" / "filecheck" / "dialects").glob("popxl*/ops.mlir")))


def _lit_round_trip(cls: type[Operation]) -> str | None:
    pat = re.compile(r"(?<![\w.])" + re.escape(cls.name) + r"(?![\w.])")
    lines = LIT.splitlines()
    parsed = any(pat.search(line) for line in lines if not line.lstrip().startswith("//"))
    checked = any(pat.search(line) for line in lines if re.match(r"\s*//\s*CHECK", line))
    return None if parsed and checked else "no round-trip line and CHECK line in popxl*/ops.mlir"


KERNEL_TESTS = "\n".join(
    p.read_text()
    for p in [ROOT / "tests/runtime/test_kernels.py", *sorted((ROOT / "tests/runtime").glob("test_ops_*.py"))]
)


def _kernel_test(cls: type[Operation]) -> str | None:
    return None if f"P.{cls.__name__}" in KERNEL_TESTS else f"no kernel test names P.{cls.__name__}"


CASE_CLASSES = {c.cls for c in CASES}


def _kernel_case(cls: type[Operation]) -> str | None:
    return None if cls in CASE_CLASSES else "no KernelCase"


def _export_recipe(cls: type[Operation]) -> str | None:
    recipes = {
        f"{qual}.{name}"
        for _, qual, table, stubs in test_ops_exports.MODULES
        for name in [*table, *stubs, *test_ops_exports.TESTED_ELSEWHERE]
    }
    names = [n for n in exported_builders(cls) if n.startswith("popxl.ops")]
    if cls.has_trait(Internal) or not names:
        return None
    return None if any(n in recipes for n in names) else f"no recipe for any of {names}"


CHECKS: dict[str, Check] = {
    "dialects/popxl.py": _class_in_dialect,
    "runtime/kernels/": _kernel,
    "passes/grad_rules.py": _gradient,
    "frontend/popxl/ops/_ops.py": _frontend_function,
    "frontend/popxl/ops/__init__.py": _exported,
    "docs/api/popxl_ops.md": _api_page,
    "tests/filecheck/dialects/popxl/ops.mlir": _lit_round_trip,
    "tests/runtime/test_kernels.py": _kernel_test,
    "tests/helpers/kernel_cases.py": _kernel_case,
    "tests/frontend/popxl/test_ops_exports.py": _export_recipe,
}


def test_the_table_names_every_place() -> None:
    places = doc_places()
    assert sorted(places) == sorted(CHECKS), (
        f"docs/extending.md's table names {sorted(places)}; the places an op touches are {sorted(CHECKS)}"
    )
    for place in places:
        assert (ROOT / place).exists(), f"docs/extending.md names {place}, which does not exist"


@pytest.mark.parametrize("place", list(CHECKS))
def test_every_op_is_in_every_place(place: str) -> None:
    missing = [f"{cls.name}: {why}" for cls in OPS if (why := CHECKS[place](cls)) is not None]
    assert not missing, f"{place} (docs/extending.md):\n  " + "\n  ".join(missing)


def test_the_reach_sees_the_frontend() -> None:
    """A user-facing op is found through the function users call (the check is not vacuous)."""
    from xl.dialects.popxl import GeluOp, MinimumOp

    assert "popxl.ops.gelu" in exported_builders(GeluOp)
    assert "popxl.ops.collectives.all_reduce" in exported_builders(MinimumOp)  # through a helper
