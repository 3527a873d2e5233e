"""Write the API reference under docs/api/ from the docstrings and signatures.

    python docs/gen_api.py            # writes docs/api/*.md
    python docs/gen_api.py -o -       # prints every page
    python docs/gen_api.py -o DIR     # writes the pages into DIR
    python docs/gen_api.py --check    # exit 1 when a committed page is not up to date

One page per entry of `PAGES`: `popxl.md` (popxl and its modules but the ops),
`popxl_ops.md` (`popxl.ops` and its modules), `popxl_addons.md`, `compiler.md`
(`xl.compiler`). Each page covers every public module under its roots (`pkgutil`; a module
whose dotted name has a part starting with `_` is private) and, in each module, every
public name (`public_names`: the module's `__all__`, or else its names without a leading
underscore that it defines itself). A function gets its signature (`inspect.signature`,
annotations as written) and its docstring (`inspect.getdoc`); a class its constructor's
signature, its docstring, its enum members and its public methods and properties (an
override without a docstring shows the one it inherits); a constant its value and the
comment that documents it in the source (the comment lines right above the assignment, a
`#:` comment at its end, or a string right after it, as Sphinx reads them). An object that several
modules export is described once, where it is first met (packages before their modules),
and the other entries point there. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib
import importlib.util
import inspect
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

OUT_DIR = Path(__file__).resolve().parent / "api"


@dataclass(frozen=True)
class Page:
    """One page of the reference: the public modules under `roots`, minus those under `exclude`."""

    file: str
    title: str
    roots: tuple[str, ...]
    exclude: tuple[str, ...] = ()


PAGES = (
    Page("popxl.md", "popxl", ("popxl",), exclude=("popxl.ops",)),
    Page("popxl_ops.md", "popxl.ops", ("popxl.ops",)),
    Page("popxl_addons.md", "popxl_addons", ("popxl_addons",)),
    Page("compiler.md", "xl.compiler", ("xl.compiler",)),
)


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


def _is_private(module_name: str) -> bool:
    return any(part.startswith("_") for part in module_name.split("."))


def public_modules(root: str) -> list[str]:
    """`root` and every module below it whose dotted name has no part starting with `_`, sorted."""
    package = importlib.import_module(root)
    names = [root]
    if hasattr(package, "__path__"):
        names += [m.name for m in pkgutil.walk_packages(package.__path__, root + ".") if not _is_private(m.name)]
    return sorted(set(names), key=lambda n: n.split("."))


def module(name: str) -> ModuleType:
    """The module `name` (not an attribute of its package with the same name, as `popxl.ops.call`)."""
    importlib.import_module(name)
    return sys.modules[name]


def public_names(mod: ModuleType) -> list[str]:
    """The module's `__all__`, or else the names without a leading underscore it defines
    itself (not the modules, classes and functions it imports)."""
    if hasattr(mod, "__all__"):
        return list(mod.__all__)
    names = []
    for name, obj in vars(mod).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        home = getattr(obj, "__module__", None)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and home != mod.__name__:
            continue
        if not (inspect.isclass(obj) or callable(obj)) and _assignment(mod, name) is None:
            continue  # a value imported from elsewhere
        names.append(name)
    return names


def _assignment(mod: ModuleType, name: str) -> tuple[list[str], int, ast.Module] | None:
    """The source lines of `mod`, the index in its body of the top-level statement that
    assigns `name`, and the parsed module; None when it does not assign it."""
    try:
        source = inspect.getsource(mod)
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    for i, node in enumerate(tree.body):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return source.splitlines(), i, tree
    return None


def _import_source(mod: ModuleType, name: str) -> tuple[ModuleType, str] | None:
    """Where `mod` imports `name` from (`from .x import name [as alias]`): the module and its name there."""
    try:
        tree = ast.parse(inspect.getsource(mod))
    except (OSError, TypeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    target = importlib.util.resolve_name("." * node.level + (node.module or ""), mod.__package__)
                    return module(target), alias.name
    return None


def constant_doc(mod: ModuleType, name: str) -> tuple[str, str]:
    """The documentation of the value `name` of `mod` and the dotted name of its definition:
    the comment lines right above its assignment (`#` or `#:`), a `#:` comment at the end of it, or a
    string statement right after it; followed through `from ... import`."""
    for _ in range(10):
        found = _assignment(mod, name)
        if found is not None:
            lines, i, tree = found
            node = tree.body[i]
            where = f"{mod.__name__}.{name}"
            after = tree.body[i + 1] if i + 1 < len(tree.body) else None
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                return inspect.cleandoc(after.value.value), where
            above: list[str] = []
            n = node.lineno - 2
            while n >= 0 and lines[n].lstrip().startswith("#"):
                above.insert(0, lines[n].lstrip().removeprefix("#:").removeprefix("#").strip())
                n -= 1
            if above:
                return " ".join(above), where
            end = lines[(node.end_lineno or node.lineno) - 1]
            if "#:" in end:
                return end.split("#:", 1)[1].strip(), where
            return "", where
        source = _import_source(mod, name)
        if source is None:
            break
        mod, name = source
    return "", f"{mod.__name__}.{name}"


def _doc(obj: Any) -> str:
    return inspect.getdoc(obj) or ""


def member_doc(cls: type, name: str) -> str:
    """The docstring of the method or property `name` of `cls`, or the one it overrides."""
    for klass in cls.__mro__:
        attr = vars(klass).get(name)
        if attr is None:
            continue
        fn = attr.fget if isinstance(attr, property) else attr
        if isinstance(fn, classmethod | staticmethod):
            fn = fn.__func__
        doc = inspect.getdoc(fn) if fn is not None else None
        if doc:
            return doc
    return ""


def members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties `cls` defines itself, in source order."""
    out = []
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, property) or inspect.isfunction(attr) or isinstance(attr, classmethod | staticmethod):
            out.append((name, attr))
    return out


def _is_project(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in {"popxl", "popxl_addons", "xl"}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _class_entry(qualified: str, name: str, cls: type) -> list[str]:
    lines = [f"### class `{qualified}`", ""]
    if not _is_project(cls):
        return [*lines, f"`{cls.__module__}.{cls.__qualname__}`, re-exported.", ""]
    sig = signature(cls)
    if sig and not issubclass(cls, enum.Enum):
        lines += [f"`{name}{sig}`", ""]
    lines += [_doc(cls), ""]
    init = vars(cls).get("__init__")
    if inspect.isfunction(init) and init.__doc__:
        lines += [inspect.cleandoc(init.__doc__), ""]
    if issubclass(cls, enum.Enum):
        lines += ["Members: " + ", ".join(f"`{m.name}`" for m in cls) + ".", ""]
    for mname, attr in members(cls):
        doc = member_doc(cls, mname).replace("\n", "\n  ").replace("\n  \n", "\n\n")
        if isinstance(attr, property):
            lines.append(f"- `{name}.{mname}` (property): {doc}")
        else:
            fn = attr.__func__ if isinstance(attr, classmethod | staticmethod) else attr
            kind = " (classmethod)" if isinstance(attr, classmethod) else ""
            kind = " (staticmethod)" if isinstance(attr, staticmethod) else kind
            lines.append(f"- `{name}.{mname}{signature(fn)}`{kind}: {doc}")
    lines.append("")
    return lines


class Reference:
    """The reference being written: remembers where each object was described."""

    def __init__(self) -> None:
        self.described: dict[object, str] = {}

    def _key(self, mod: ModuleType, name: str, obj: Any) -> object:
        if inspect.isclass(obj) or inspect.isroutine(obj) or callable(obj):
            return id(obj)
        return ("value", constant_doc(mod, name)[1])  # equal small ints or strings are not the same name

    def entry(self, mod: ModuleType, name: str) -> list[str]:
        """The entry of `mod.name`: its heading and its description (or where it was described)."""
        obj = getattr(mod, name)
        qualified = f"{mod.__name__}.{name}"
        if inspect.ismodule(obj):
            return [f"### `{qualified}`", "", f"Module: see `{obj.__name__}`.", ""]
        key = self._key(mod, name, obj)
        first = self.described.get(key)
        if first is None:
            self.described[key] = qualified
        if inspect.isclass(obj):
            if first is not None:
                return [f"### class `{qualified}`", "", f"The class `{first}`.", ""]
            return _class_entry(qualified, name, obj)
        if callable(obj):
            head = f"### `{qualified}{signature(obj)}`"
            if first is not None:
                return [head, "", f"The function `{first}`.", ""]
            return [head, "", _doc(obj), ""]
        head = f"### `{qualified}`"
        if first is not None:
            return [head, "", f"The value `{first}`.", ""]
        value = _one_line(repr(obj))
        doc, _ = constant_doc(mod, name)
        return [head, "", f"`{name} = {value}`", "", doc, ""]


def render_page(page: Page, ref: Reference) -> str:
    """The Markdown of one page."""
    names = [
        m
        for root in page.roots
        for m in public_modules(root)
        if not any(m == e or m.startswith(e + ".") for e in page.exclude)
    ]
    others = ", ".join(f"[`{p.title}`]({p.file})" for p in PAGES if p is not page)
    lines = [
        f"# API reference: `{page.title}`",
        "",
        "Generated from the docstrings by `python docs/gen_api.py`; do not edit by hand.",
        f"The other pages: {others}.",
        "",
        "Modules: " + ", ".join(f"`{n}`" for n in names) + ".",
        "",
    ]
    for name in names:
        mod = module(name)
        lines += [f"## `{name}`", "", _doc(mod), ""]
        for public in public_names(mod):
            lines += ref.entry(mod, public)
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip() + "\n"


def render() -> dict[str, str]:
    """Every page, by file name, in the order of `PAGES` (an object is described on the first page that has it)."""
    ref = Reference()
    return {page.file: render_page(page, ref) for page in PAGES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-o", "--output", default=str(OUT_DIR), help="folder to write the pages in, or - for stdout")
    parser.add_argument("--check", action="store_true", help="fail if a page in the folder differs")
    args = parser.parse_args(argv)
    pages = render()
    if args.output == "-":
        for text in pages.values():
            sys.stdout.write(text)
        return 0
    out = Path(args.output)
    if args.check:
        stale = [f for f, text in pages.items() if not (out / f).exists() or (out / f).read_text() != text]
        if stale:
            print(
                f"{', '.join(str(out / f) for f in stale)}: not up to date: run python docs/gen_api.py", file=sys.stderr
            )
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for f, text in pages.items():
        (out / f).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
