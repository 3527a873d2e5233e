"""The documented API of `popxl.ops` (and `var_updates`, `collectives`) and docs/api.md.

- each module's public namespace is exactly its `__all__` (no helper such as `emit1`,
  `Iterable`, `np` or an op class leaks out);
- every public function and class has a docstring, and so has every public method and
  property of those classes;
- a function's `__name__` is the name it is exported under and its module is the public
  one, so `help(popxl.ops.gelu)` shows `gelu` in `popxl.ops` (not `_unary.<locals>.f`);
- `docs/gen_api.py` runs, lists every public name with its signature and docstring, and the
  committed `docs/api.md` is its current output.
"""

from __future__ import annotations

import importlib
import inspect
import io
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import popxl.ops as ops
from popxl.ops import collectives, var_updates

ROOT = Path(__file__).resolve().parent.parent
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


def _generated(tmp_path: Path) -> str:
    out = tmp_path / "api.md"
    subprocess.run([sys.executable, str(GEN), "-o", str(out)], check=True, cwd=tmp_path)
    return out.read_text()


def test_api_page_lists_every_public_name(tmp_path: Path) -> None:
    text = _generated(tmp_path)
    for module in MODULES:
        assert f"## `{module.__name__}`" in text
        for name, obj in _public(module):
            if inspect.isclass(obj):
                head = f"### class `{module.__name__}.{name}`"
            elif callable(obj):
                head = f"### `{module.__name__}.{name}{_sig(obj)}`"
            else:
                head = f"### `{module.__name__}.{name}`"
            assert head in text, f"docs/api.md lacks {head}"
            first = (inspect.getdoc(obj) or "").splitlines()[0] if callable(obj) else ""
            assert first in text, f"docs/api.md lacks the docstring of {module.__name__}.{name}"
    assert "### `popxl.ops.gelu(t: Tensor) -> Tensor`" in text
    assert "### `popxl.bridge.tensor_of(" in text and "### `popxl.printing.schedule_str(" in text


def _sig(obj: object) -> str:
    sys.path.insert(0, str(GEN.parent))
    try:
        import gen_api

        return gen_api.signature(obj)
    finally:
        sys.path.pop(0)


def test_committed_api_page_is_current(tmp_path: Path) -> None:
    assert (ROOT / "docs" / "api.md").read_text() == _generated(tmp_path), (
        "docs/api.md is out of date: run python docs/gen_api.py"
    )
    r = subprocess.run([sys.executable, str(GEN), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    stale = tmp_path / "stale.md"
    stale.write_text("old\n")
    r = subprocess.run([sys.executable, str(GEN), "--check", "-o", str(stale)], capture_output=True, text=True)
    assert r.returncode == 1 and "is not up to date" in r.stderr
