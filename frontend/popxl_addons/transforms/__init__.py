"""`addons.transforms`: autodiff, autodiff_with_accumulation, recompute_graph, pipelining, ...

The transforms live in their own modules; whichever are present are re-exported here
(upstream does `from .autodiff import *` etc.). A missing one raises AttributeError on use.
"""

from __future__ import annotations

import importlib
from typing import Any

# (module, names) pairs re-exported when the module exists
_EXPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("autodiff", ("autodiff", "autodiff_with_accumulation", "remap_grad_info", "recompute_graph")),
    ("accumulate", ("autodiff_with_accumulation",)),
    ("recompute", ("recompute_graph",)),
    ("pipelining", ("pipelined_execution",)),
    ("batch_serialisation", ("batch_serialise", "batch_serialise_fwd_and_grad", "batch_serial_buffer", "RemoteHandle")),
    ("repeat_graph", ()),
)

__all__: list[str] = []


def _load(modname: str) -> Any:
    try:
        return importlib.import_module(f"{__name__}.{modname}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{modname}":
            return None
        raise


for _mod, _names in _EXPORTS:
    _m = _load(_mod)
    if _m is None:
        continue
    for _n in _names:
        if hasattr(_m, _n):
            globals()[_n] = getattr(_m, _n)
            if _n not in __all__:
                __all__.append(_n)


def __getattr__(name: str) -> Any:
    # late-added transform modules (or functions defined after this package was imported)
    for mod, names in _EXPORTS:
        if name in names:
            m = _load(mod)
            if m is not None and hasattr(m, name):
                globals()[name] = getattr(m, name)
                return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
