"""xl dialects: `graph`, `popxl` (tensor ops), `call`, `ipu`, `pipeline`, `replica` (collectives)
and the lowered `rt`. `get_all_dialects()` registers them; `xl_context()` is an xDSL context
knowing them all (what the passes, the compiler, the frontend and the tools parse and run in).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.ir import Dialect

__all__ = ["get_all_dialects", "xl_context"]


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Lazy factories for every xl dialect, keyed by dialect name."""

    def get_graph() -> Dialect:
        from xl.dialects.graph import Graph

        return Graph

    def get_popxl() -> Dialect:
        from xl.dialects.popxl import Popxl

        return Popxl

    def get_call() -> Dialect:
        from xl.dialects.call import Call

        return Call

    def get_ipu() -> Dialect:
        from xl.dialects.ipu import Ipu

        return Ipu

    def get_pipeline() -> Dialect:
        from xl.dialects.pipeline import Pipeline

        return Pipeline

    def get_replica() -> Dialect:
        from xl.dialects.replica import Replica

        return Replica

    def get_rt() -> Dialect:
        from xl.dialects.rt import Rt

        return Rt

    return {
        "graph": get_graph,
        "popxl": get_popxl,
        "call": get_call,
        "ipu": get_ipu,
        "pipeline": get_pipeline,
        "replica": get_replica,
        "rt": get_rt,
    }


def xl_context(allow_unregistered: bool = False) -> Context:
    """An xDSL context with the builtin dialect loaded and every xl dialect registered."""
    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx
