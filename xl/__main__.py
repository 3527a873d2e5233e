"""`python -m xl`: what xl is, its command-line tools and its example programs.

The tools are the console scripts of the installed distribution that run `xl.tools`
(each described by its module's first sentence); the examples are the programs of the
source tree's `examples/` folder (those with a `__main__` block), which a wheel does not
install. Nothing is imported beyond the standard library, so the help is instant.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import xl

DISTRIBUTION = "xl-popxl"

# The console scripts when the distribution's metadata cannot be read (a bare source tree).
_TOOLS = {"xl-opt": "xl.tools.opt", "xl-run": "xl.tools.run"}


def _first_sentence(doc: str | None) -> str:
    """The first paragraph of `doc` on one line, cut after its first sentence; without the
    leading "`name`: " of a tool's docstring."""
    para = " ".join((doc or "").strip().split("\n\n", 1)[0].split())
    if ". " in para:
        para = para.split(". ", 1)[0] + "."
    head, sep, rest = para.partition(": ")
    if sep and " " not in head and len(head) <= 24:  # "`xl-opt`: run ..." / "xl: PopXL ..."
        para = rest
    return para[:1].upper() + para[1:]


def _module_doc(module: str) -> str | None:
    """The docstring of `module`, read from its source without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")))


def tools() -> dict[str, str]:
    """Console script -> module of the xl tools (`xl-opt`, `xl-run`)."""
    try:
        scripts = distribution(DISTRIBUTION).entry_points.select(group="console_scripts")
    except PackageNotFoundError:
        return dict(_TOOLS)
    found = {ep.name: ep.value.split(":", 1)[0] for ep in scripts if ep.value.startswith("xl.tools.")}
    return dict(sorted(found.items())) or dict(_TOOLS)


def examples_dir() -> Path | None:
    """The source tree's `examples/` folder, when xl runs from a source checkout."""
    folder = Path(xl.__file__).resolve().parent.parent / "examples"
    return folder if folder.is_dir() else None


def examples(folder: Path) -> dict[str, str]:
    """Program file name -> its first sentence, for the programs of `folder` (files with a
    `__main__` block; helper modules such as the data loader are left out)."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        if "__main__" not in source:
            continue
        found[path.name] = _first_sentence(ast.get_docstring(ast.parse(source)))
    return found


def _rows(items: dict[str, str], indent: int = 2, width: int = 88) -> list[str]:
    """One line per item: its name, then its text (cut at a word to fit the line)."""
    column = max(len(k) for k in items) + 2
    lines = []
    for name, text in items.items():
        head = " " * indent + name.ljust(column)
        if len(head) + len(text) > width:  # the sentence up to its first parenthesis or colon
            text = re.split(r" \(|: ", text, maxsplit=1)[0].rstrip(".") + "."
        if len(head) + len(text) > width:
            text = text[: width - len(head) - 4].rsplit(" ", 1)[0] + " ..."
        lines.append(head + text)
    return lines


def help_text() -> str:
    lines = [
        f"xl {xl.__version__}: {_first_sentence(xl.__doc__)}",
        "",
        "Programs are written as for PopXL: import popxl, popxl.ops as ops, popxl_addons as addons.",
        "",
        "Tools (each with --help):",
    ]
    lines += _rows({name: _first_sentence(_module_doc(module)) for name, module in tools().items()})
    lines += [
        "",
        "  xl-opt prog.mlir -p 'inline,canonicalize,cse,lower-to-rt'    passes on textual IR",
        "  xl-opt --list-passes                                          every pass and its options",
        "  xl-run prog.mlir x=x.npy                                      run it, print the outputs",
        "",
    ]
    folder = examples_dir()
    if folder is None:
        lines.append("Examples: the programs in the examples/ folder of the source repository.")
    else:
        lines.append(f"Examples ({folder}, run as python examples/NAME.py):")
        lines += _rows(examples(folder))
    lines += ["", "Documentation: README.md and docs/ of the source repository."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args != ["-h"] and args != ["--help"]:
        print(
            f"python -m xl: unknown argument '{args[0]}': it only prints a help (python -m xl); "
            f"the tools are {' and '.join(tools())}",
            file=sys.stderr,
        )
        return 2
    print(help_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
