"""`popxl.transforms`: graph transforms (autodiff, ...)."""

from __future__ import annotations

import importlib.util

__all__: list[str] = []

if importlib.util.find_spec("popxl.transforms.autodiff") is not None:
    from popxl.transforms import autodiff as _autodiff_mod
    from popxl.transforms.autodiff import *

    __all__ += list(getattr(_autodiff_mod, "__all__", ["autodiff"]))

from popxl.transforms.merge_exchange import io_tile_exchange, merge_exchange  # noqa: E402

__all__ += ["io_tile_exchange", "merge_exchange"]
