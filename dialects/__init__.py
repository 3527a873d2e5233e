"""xl dialects: `graph`, `popxl` (tensor ops), `call`, `ipu`, `pipeline`, `replica` (collectives)
and the lowered `rt`."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


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
