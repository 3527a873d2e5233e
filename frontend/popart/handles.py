"""The PopART objects PopXL programs reach through `ir._pb_ir` and `session._pb_session`.

xl has no PopART IR or session behind a `popxl.Ir` / `popxl.Session`; these stand-ins
carry what programs use of them: the Ir's `SessionOptions` (`getSessionOptions()`, one
object per Ir) and the session calls of upstream's application code
(`setEngineIsLoaded`). Anything else is an `AttributeError` saying what the stand-in has.

`check_session(session)` runs when a `popxl.Session` is created: one
`SessionOptionWarning` for each option set to a value that could change the numbers on an
IPU and that xl does not honour, and one log line (logger `popart`, INFO) listing the
options recorded without effect.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from popart.session_options import SessionOptions, SessionOptionWarning

__all__ = ["PbIr", "PbGraph", "PbSession", "session_options_of", "check_session"]

logger = logging.getLogger("popart")

_OPTIONS: weakref.WeakKeyDictionary[Any, SessionOptions] = weakref.WeakKeyDictionary()


def session_options_of(ir: Any, create: bool = True) -> SessionOptions | None:
    """The `SessionOptions` of `ir` (made on first use when `create`)."""
    opts = _OPTIONS.get(ir)
    if opts is None and create:
        opts = SessionOptions._for_ir(ir)
        _OPTIONS[ir] = opts
    return opts


class _Handle:
    _what = "handle"
    _has: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"xl's stand-in for PopART's {self._what} has no {name!r}: xl has no PopART objects behind "
            f"popxl; it provides {', '.join(self._has)}"
        )


class PbGraph(_Handle):
    """A graph of `ir._pb_ir.getAllGraphs()`: its `id` (the graph's name) and, for the main
    graph (`getMainGraph()`), `tensor_id in graph`. PopART's op objects (`getOps()`) are
    not provided."""

    _what = "Graph"
    _has = ("id", "tensor_id in graph (main graph)")

    def __init__(self, graph_id: str, tensor_ids: Callable[[], Iterable[str]] | None = None) -> None:
        self.id = graph_id
        self._tensor_ids = tensor_ids

    def __contains__(self, tensor_id: object) -> bool:
        """Whether the main graph has a tensor of id `tensor_id`: one of its tensors, or a host
        stream of the Ir (PopART's streams are tensors of the main graph)."""
        if self._tensor_ids is None:
            raise TypeError(f"xl's stand-in for PopART's graph {self.id!r} lists tensors of the main graph only")
        return tensor_id in set(self._tensor_ids())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PbGraph) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<PopART Graph stand-in {self.id!r}>"


class PbIr(_Handle):
    """`ir._pb_ir`: the session options and the graphs of the Ir."""

    _what = "Ir (ir._pb_ir)"
    _has = ("getSessionOptions()", "getAllGraphs()", "getMainGraph()")

    def __init__(self, ir: Any) -> None:
        self._ir_ref = weakref.ref(ir)

    def _the_ir(self) -> Any:
        ir = self._ir_ref()
        if ir is None:
            raise RuntimeError("ir._pb_ir: its popxl.Ir no longer exists")
        return ir

    def getSessionOptions(self) -> SessionOptions:
        """The Ir's options (the same object at every call)."""
        opts = session_options_of(self._the_ir())
        assert opts is not None
        return opts

    def getMainGraph(self) -> PbGraph:
        ref = self._ir_ref

        def tensor_ids() -> Iterable[str]:
            ir = ref()
            if ir is None:
                raise RuntimeError("ir._pb_ir: its popxl.Ir no longer exists")
            return [*(t.id for t in ir.main_graph.tensors), *ir._h2d, *ir._d2h]  # every stream created

        return PbGraph(self._the_ir().main_graph.id, tensor_ids)

    def getAllGraphs(self) -> list[PbGraph]:
        """The main graph and every subgraph of the Ir (as PopART's, which programs count)."""
        from xl.dialects.graph import graphs_by_name

        ir = self._the_ir()
        return [self.getMainGraph(), *(PbGraph(name) for name in graphs_by_name(ir._module))]

    def __repr__(self) -> str:
        ir = self._ir_ref()
        return f"<PopART Ir stand-in of {ir!r}>"


class PbSession(_Handle):
    """`session._pb_session`: the session options and the engine-loaded flag upstream's
    application code sets after detaching (nothing to load on NumPy)."""

    _what = "session (session._pb_session)"
    _has = ("getSessionOptions()", "setEngineIsLoaded(bool)", "getEngineIsLoaded()")

    def __init__(self, session: Any) -> None:
        self._session_ref = weakref.ref(session)
        self._engine_is_loaded = True

    def getSessionOptions(self) -> SessionOptions:
        session = self._session_ref()
        if session is None:
            raise RuntimeError("session._pb_session: its popxl.Session no longer exists")
        opts = session_options_of(session.ir)
        assert opts is not None
        return opts

    def setEngineIsLoaded(self, loaded: bool) -> None:
        """Recorded (xl has no engine to load)."""
        if not isinstance(loaded, bool):
            raise TypeError(f"setEngineIsLoaded: expected a bool, got {loaded!r}")
        self._engine_is_loaded = loaded

    def getEngineIsLoaded(self) -> bool:
        return self._engine_is_loaded


def check_session(session: Any) -> None:
    """Warn about the options of `session.ir` that xl does not honour although they could
    change the numbers (one `SessionOptionWarning` each), and log the recorded ones."""
    opts = session_options_of(session.ir, create=False)
    if opts is None:
        return
    bad = opts.not_honoured()
    for why in bad.values():
        warnings.warn(
            f"popart.SessionOptions: {why}. xl does not honour it: the numbers can differ from an IPU's "
            "(session.options_report() lists every option set)",
            SessionOptionWarning,
            stacklevel=3,
        )
    recorded = [k for k in opts.changed() if k not in bad]
    if recorded:
        logger.info("popart.SessionOptions set and recorded (see session.options_report()): %s", ", ".join(recorded))
