"""xl passes, one per file; `get_all_passes()` is the registry used by xl-opt and the Python API."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Lazy factories for every xl pass, keyed by its kebab-case name."""

    def get_autodiff() -> type[ModulePass]:
        from xl.passes.autodiff import AutodiffPass

        return AutodiffPass

    def get_inline() -> type[ModulePass]:
        from xl.passes.inline import InlinePass

        return InlinePass

    def get_lower_to_rt() -> type[ModulePass]:
        from xl.passes.lower_to_rt import LowerToRtPass

        return LowerToRtPass

    return {
        "autodiff": get_autodiff,
        "inline": get_inline,
        "lower-to-rt": get_lower_to_rt,
    }
