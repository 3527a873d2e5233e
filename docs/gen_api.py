"""Write docs/api.md, the API reference of `popxl.ops` (and its submodules) and of the
`popxl.bridge` / `popxl.printing` modules, from the docstrings.

    python docs/gen_api.py            # writes docs/api.md
    python docs/gen_api.py -o -       # prints it
    python docs/gen_api.py --check    # exit 1 when docs/api.md is not up to date

Every name in a module's `__all__` gets an entry: its signature (`inspect.signature`) and
its docstring (`inspect.getdoc`); classes list their public methods and properties.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

MODULES = (
    "popxl.ops",
    "popxl.ops.var_updates",
    "popxl.ops.collectives",
    "popxl.bridge",
    "popxl.printing",
)
OUT = Path(__file__).resolve().parent / "api.md"


class _Ann:
    """An annotation kept as written (`from __future__ import annotations` makes them strings)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def signature(obj: Any) -> str:
    """`(t: Tensor, axis: int = 0) -> Tensor`, annotations as written in the source."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""

    def ann(a: Any) -> Any:
        return _Ann(a) if isinstance(a, str) else a

    params = [p.replace(annotation=ann(p.annotation)) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=ann(sig.return_annotation)))


def _doc(obj: Any) -> str:
    return inspect.getdoc(obj) or ""


def _members(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, property) or inspect.isfunction(attr) or isinstance(attr, classmethod | staticmethod):
            out.append((name, attr))
    return out


def module_section(module: ModuleType) -> list[str]:
    lines = [f"## `{module.__name__}`", "", _doc(module), ""]
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            lines += [f"### `{module.__name__}.{name}`", "", f"Submodule: see `{obj.__name__}`.", ""]
        elif inspect.isclass(obj) and not obj.__module__.startswith("popxl"):
            origin = f"`{obj.__module__}.{obj.__qualname__}`, re-exported."
            lines += [f"### class `{module.__name__}.{name}`", "", origin, ""]
        elif inspect.isclass(obj):
            lines += [f"### class `{module.__name__}.{name}`", "", _doc(obj), ""]
            for mname, attr in _members(obj):
                if isinstance(attr, property):
                    lines += [f"- `{name}.{mname}` (property): {_doc(attr.fget)}"]
                elif inspect.isfunction(attr) or isinstance(attr, classmethod | staticmethod):
                    fn = attr.__func__ if isinstance(attr, classmethod | staticmethod) else attr
                    lines += [f"- `{name}.{mname}{signature(fn)}`: {_doc(fn)}"]
            lines.append("")
        elif callable(obj):
            lines += [f"### `{module.__name__}.{name}{signature(obj)}`", "", _doc(obj), ""]
        else:
            lines += [f"### `{module.__name__}.{name}`", "", f"`{name} = {obj!r}`", ""]
    return lines


def render(modules: tuple[str, ...] = MODULES) -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `python docs/gen_api.py`; do not edit by hand.",
        "",
    ]
    for m in modules:
        lines += module_section(importlib.import_module(m))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-o", "--output", default=str(OUT), help="file to write, or - for stdout")
    parser.add_argument("--check", action="store_true", help="fail if the output file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is not up to date: run python docs/gen_api.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
