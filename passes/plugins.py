"""Passes from outside the repository: the `xl.passes` entry-point group and plugin files.

An installed distribution adds passes by declaring entry points in the group
`ENTRY_POINT_GROUP`, one per pass, named by the pass name::

    # pyproject.toml of the distribution that provides the pass
    [project.entry-points."xl.passes"]
    my-pass = "my_package.my_pass:MyPass"

`xl-opt`, `xl-run -p`, `xl.runtime.lower` and every other user of
`xl.passes.get_all_passes()` then know `my-pass`. A file can also be loaded at run time
(`xl-opt --load-pass-plugin my_pass.py`, or `load_pass_plugin("my_pass.py")` from Python):
every `ModulePass` subclass defined in it with a `name` is registered.

xl's own passes keep their names: a plugin pass with the name of an xl pass is refused. An
installed plugin that cannot be imported fails only where its pass is used; `xl-opt
--list-passes` warns about it (naming it, its distribution and the error) and lists the
other passes (`resolve_passes`).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from xdsl.passes import ModulePass

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginError",
    "entry_point_passes",
    "load_pass_plugin",
    "loaded_plugin_passes",
    "resolve_passes",
]

ENTRY_POINT_GROUP = "xl.passes"

_loaded: dict[str, type[ModulePass]] = {}
"""Passes registered by `load_pass_plugin` in this process."""


class PluginError(ValueError):
    """A plugin that cannot be loaded or does not define a usable pass."""


def _check_pass(obj: object, where: str, name: str | None = None) -> type[ModulePass]:
    if not (inspect.isclass(obj) and issubclass(obj, ModulePass)):
        raise PluginError(f"{where}: {obj!r} is not a ModulePass subclass")
    pass_name = getattr(obj, "name", None)
    if not isinstance(pass_name, str) or not pass_name:
        raise PluginError(f"{where}: pass class {obj.__name__} has no 'name'")
    if name is not None and pass_name != name:
        raise PluginError(f"{where}: the entry point is named '{name}' but {obj.__name__}.name is '{pass_name}'")
    return obj


def _describe_entry_point(ep: EntryPoint) -> str:
    """`entry point 'name = module:Class' (group xl.passes, distribution dist 1.0)`."""
    dist = getattr(ep, "dist", None)
    source = f", distribution {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}{source})"


def _entry_point_factory(ep: EntryPoint) -> Callable[[], type[ModulePass]]:
    def factory() -> type[ModulePass]:
        where = _describe_entry_point(ep)
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - any import failure is the plugin's
            raise PluginError(f"{where}: cannot load it: {type(e).__name__}: {e}") from e
        return _check_pass(obj, where, ep.name)

    return factory


_ENTRY_POINTS: dict[tuple[str, ...], dict[str, Callable[[], type[ModulePass]]]] = {}


def entry_point_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Lazy factories for the passes of the installed `xl.passes` entry points (read once
    per `sys.path`: scanning the installed distributions costs about 1.5 ms, and every
    compile looks its passes up)."""
    key = tuple(sys.path)
    found = _ENTRY_POINTS.get(key)
    if found is None:
        found = _ENTRY_POINTS[key] = {ep.name: _entry_point_factory(ep) for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return dict(found)


def resolve_passes(
    factories: Mapping[str, Callable[[], type[ModulePass]]],
) -> tuple[dict[str, type[ModulePass]], dict[str, PluginError]]:
    """The pass classes of `factories` by name, and apart the `PluginError` of each one that
    cannot be loaded (an installed plugin whose import fails, or whose entry point does not
    name a pass): listing the passes leaves a broken plugin out instead of failing."""
    found: dict[str, type[ModulePass]] = {}
    broken: dict[str, PluginError] = {}
    for name, factory in factories.items():
        try:
            found[name] = factory()
        except PluginError as e:
            broken[name] = e
    return found, broken


def loaded_plugin_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Factories for the passes registered by `load_pass_plugin` so far."""
    return {name: (lambda cls=cls: cls) for name, cls in _loaded.items()}


def load_pass_plugin(path: str | Path) -> dict[str, type[ModulePass]]:
    """Runs the Python file `path` and registers every `ModulePass` subclass it defines
    with a `name` (classes it only imports are ignored); returns them by name."""
    from xl.passes import builtin_passes

    p = Path(path)
    if not p.is_file():
        raise PluginError(f"pass plugin '{path}' does not exist or is not a file")
    module_name = f"xl_pass_plugin_{p.stem}_{abs(hash(str(p.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, p)
    if spec is None or spec.loader is None:
        raise PluginError(f"pass plugin '{path}': not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - report the plugin's own failure plainly
        del sys.modules[module_name]
        raise PluginError(f"pass plugin '{path}': {type(e).__name__}: {e}") from e
    found: dict[str, type[ModulePass]] = {}
    for obj in vars(module).values():
        if (
            inspect.isclass(obj)
            and issubclass(obj, ModulePass)
            and obj.__module__ == module_name
            and isinstance(getattr(obj, "name", None), str)
        ):
            found[obj.name] = obj
    if not found:
        raise PluginError(f"pass plugin '{path}' defines no ModulePass subclass with a 'name'")
    clash = sorted(set(found) & set(builtin_passes()))
    if clash:
        raise PluginError(f"pass plugin '{path}': {', '.join(clash)} is already an xl pass")
    _loaded.update(found)
    return found
