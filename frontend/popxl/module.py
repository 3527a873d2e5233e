"""`popxl.Module` (popxl/module.py): a callable whose `build` creates ops."""

from __future__ import annotations

from typing import Any

__all__ = ["Module"]


class Module:
    """Subclass and override `build`. Calling the module calls `build` in the current
    graph (inlining); `ir.create_graph(module, ...)` makes a subgraph from it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build(*args, **kwargs)

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Create the module's ops in the current graph and return its outputs (override it)."""
        raise NotImplementedError(f"{type(self).__qualname__} must override build()")
