"""Build-time context (popxl/context.py): current graph, placement, tile set, name scopes.

All state is module-level (one thread builds IR at a time, as in PopXL).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from popxl.tensorlocation import ExecutionContext

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.ir import Ir

__all__ = [
    "Context",
    "DebugContext",
    "debug_context_frame_offset",
    "gcg",
    "get_current_context",
    "get_current_graph",
    "get_ir",
    "op_debug_context",
    "get_main_graph",
    "gir",
    "gmg",
    "in_sequence",
    "io_tiles",
    "ipu",
    "name_scope",
]


class _State:
    def __init__(self) -> None:
        self.graphs: list[Graph] = []
        self.ipus: list[int | None] = []
        self.tile_sets: list[str] = []
        self.scopes: list[str] = []
        self.in_sequence: list[bool | str] = []
        # public functions being called, outermost first (e.g. "ops.add"), for messages
        self.calls: list[str] = []
        # op_debug_context: the op functions being called, innermost last; the extra frames
        # between them and the user's line (debug_context_frame_offset)
        self.debug: list[DebugContext] = []
        self.frame_offset = 0
        self.execution_context: list[ExecutionContext] = []


_state = _State()


def _push_graph(g: Graph) -> None:
    if _state.graphs and _state.graphs[-1].ir is not g.ir:
        # as PopXL: the graphs of one `with` nest belong to one Ir
        raise RuntimeError(
            f"Cannot enter graph {g.name!r} of {g.ir!r} inside graph {_state.graphs[-1].name!r} of "
            f"another Ir ({_state.graphs[-1].ir!r}): graphs of different Irs cannot be nested"
        )
    _state.graphs.append(g)


def _pop_graph(g: Graph) -> None:
    if not _state.graphs or _state.graphs[-1] is not g:
        raise RuntimeError(f"Graph context stack corrupted while exiting {g!r}")
    _state.graphs.pop()


class NoGraphSelectedError(RuntimeError, ValueError):
    """Building IR with no `with graph:` active (a RuntimeError, as in PopXL, and a ValueError)."""


def get_current_graph() -> Graph:
    """The graph new ops are added to (the innermost `with graph:`)."""
    if not _state.graphs:
        who = f"{_state.calls[0]}: " if _state.calls else ""
        raise NoGraphSelectedError(
            f"{who}Trying to access a graph, but no graph has been selected. "
            "Use `with ir.main_graph:` (or `with graph:`) to select one."
        )
    return _state.graphs[-1]


def get_main_graph() -> Graph:
    """The main graph of the Ir of the current graph (`popxl.gmg()`); NoGraphSelectedError outside `with graph:`."""
    return get_current_graph().ir.main_graph


def get_ir() -> Ir:
    """The Ir of the current graph (`popxl.gir()`); NoGraphSelectedError outside `with graph:`."""
    return get_current_graph().ir


gcg = get_current_graph
gmg = get_main_graph
gir = get_ir


def _current_ipu() -> int | None:
    return _state.ipus[-1] if _state.ipus else None


def _current_tile_set() -> str | None:
    return _state.tile_sets[-1] if _state.tile_sets else None


def _scoped(name: str) -> str:
    if not _state.scopes:
        return name
    return "/".join(_state.scopes) + "/" + name


@contextmanager
def ipu(ipu: int | None) -> Iterator[None]:
    """Ops created inside run on virtual IPU `ipu` (attribute `ipu.id`). `None` creates
    them without a placement, as upstream (not recommended: `ops.ipu_copy` then cannot
    infer their IPU)."""
    if ipu is not None and (not isinstance(ipu, int) or isinstance(ipu, bool) or ipu < 0):
        raise ValueError(f"popxl.ipu: expected a non-negative integer or None, got {ipu!r}")
    _state.ipus.append(ipu)
    try:
        yield
    finally:
        _state.ipus.pop()


@contextmanager
def io_tiles() -> Iterator[None]:
    """Ops created inside run on the IO tiles (attribute `ipu.tile_set = "io"`)."""
    _state.tile_sets.append("io")
    try:
        yield
    finally:
        _state.tile_sets.pop()


@contextmanager
def name_scope(name: str) -> Iterator[None]:
    """Prefix `name/` to the names of tensors created inside."""
    if not isinstance(name, str):
        raise TypeError(f"popxl.name_scope: expected a str, got {type(name).__name__}")
    _state.scopes.append(name)
    try:
        yield
    finally:
        _state.scopes.pop()


class in_sequence:
    """Force ops created inside to run in creation order (context manager and decorator).

    In xl, program order within a graph is always execution order, so this only
    validates `mode` (True, False or 'pass') and records it.
    """

    def __init__(self, mode: bool | str = True):
        if mode is None:
            raise TypeError("`None` cannot be passed to `popxl.in_sequence`: its mode must be True, False or 'pass'")
        if not (isinstance(mode, bool) or mode == "pass"):
            raise ValueError(f"popxl.in_sequence: mode must be True, False or 'pass', got {mode!r}")
        self.mode = mode

    def __enter__(self) -> in_sequence:
        _state.in_sequence.append(self.mode)
        return self

    def __exit__(self, *exc: object) -> None:
        _state.in_sequence.pop()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with in_sequence(mode):
                return fn(*args, **kwargs)

        return wrapper


@dataclass(frozen=True)
class DebugContext:
    """The debug context of an op function being called (`op_debug_context`): its `name`
    (with the name scopes, "scope/name"), the `api` name and the user's call site
    (`file`, `line`, `function`), which `debug_context_frame_offset` moves out of helper
    functions."""

    name: str
    api: str
    file: str
    line: int
    function: str


def _call_site(depth: int) -> tuple[str, int, str]:
    """(file, line, function) of the frame `depth` levels above the caller."""
    frame = inspect.currentframe()
    for _ in range(depth + 1):
        if frame is None or frame.f_back is None:
            break
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0, "<unknown>")
    return (os.path.realpath(frame.f_code.co_filename), frame.f_lineno, frame.f_code.co_name)


@contextmanager
def debug_context_frame_offset(i: int) -> Iterator[int]:
    """Within this context (or a function it decorates) the call site an `op_debug_context`
    records is `i` frames further out: a helper that calls op functions for its caller
    decorates itself with `@debug_context_frame_offset(1)` so the ops point at the
    caller's line. Yields the total offset."""
    if isinstance(i, bool) or not isinstance(i, int):
        raise TypeError(f"debug_context_frame_offset: expected an int, got {type(i).__name__}")
    # one more frame for the decorator's (or with-statement's) own frame
    _state.frame_offset += i + 1
    try:
        yield _state.frame_offset
    finally:
        _state.frame_offset -= i + 1


def op_debug_context(name: str | Callable[..., Any]) -> Any:
    """Decorator of op functions, `@op_debug_context` or `@op_debug_context("name")`: while
    the function runs, `get_current_context().debug_context` is a `DebugContext` naming it
    (with the current name scopes) and the user's line that called it (the frame outside
    any `debug_context_frame_offset`). Upstream hands this to PopART's debug info; xl keeps
    it on the context for tools that want to attribute ops to source lines."""
    if not callable(name) and not isinstance(name, str):
        raise TypeError(f"op_debug_context: expected a function or a name, got {type(name).__name__}")

    def outer(fn: Callable[..., Any], api: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            file, line, function = _call_site(_state.frame_offset + 1)
            path = "/".join((*_state.scopes, api))
            _state.debug.append(DebugContext(path, api, file, line, function))
            try:
                return fn(*args, **kwargs)
            finally:
                _state.debug.pop()

        return wrapper

    if callable(name):
        return outer(name, getattr(name, "__name__", "op"))
    return lambda fn: outer(fn, name)


@contextmanager
def _execution_context(execution_context: ExecutionContext) -> Iterator[ExecutionContext]:
    """Ops created within run in `execution_context` (PopART's fragments of a program).
    xl runs a graph's ops in program order, so only `Normal` (and `Subgraph`, what ops of
    subgraphs are in anyway) are accepted; another context (the weights / optimizer
    transfer fragments, after the accumulation loop) is a NotImplementedError rather than
    ops silently moved into the main program."""
    if not isinstance(execution_context, ExecutionContext):
        raise TypeError(
            f"_execution_context: expected a popxl.ExecutionContext, got {type(execution_context).__name__}"
        )
    if execution_context not in (ExecutionContext.Normal, ExecutionContext.Subgraph):
        raise NotImplementedError(
            f"_execution_context: xl runs every op of a graph in program order; ops in the "
            f"{execution_context.name} context are not supported"
        )
    _state.execution_context.append(execution_context)
    try:
        yield execution_context
    finally:
        _state.execution_context.pop()


class Context:
    """A read-only view of the build-time context (upstream's `popxl.context.Context`, the
    object `get_current_context()` returns): the current graph, its Ir and main graph, the
    virtual IPU, tile set, name scopes and `in_sequence` mode that ops created now get.

    ```python
    with ir.main_graph, popxl.ipu(1):
        ctx = popxl.context.get_current_context()
        ctx.graph.ir is ir, ctx.ipu_id  # True, 1
    ```
    """

    @property
    def graph(self) -> Graph:
        """The graph new ops go to (NoGraphSelectedError when none is selected)."""
        return get_current_graph()

    @property
    def main_graph(self) -> Graph:
        """The main graph of the current Ir (`popxl.get_main_graph()`)."""
        return get_main_graph()

    @property
    def ir(self) -> Ir:
        """The current Ir (`popxl.get_ir()`)."""
        return get_ir()

    @property
    def ipu_id(self) -> int:
        """The virtual IPU of `popxl.ipu(...)`, 0 outside one (as upstream)."""
        ipu = _current_ipu()
        return 0 if ipu is None else ipu

    @property
    def io_tile_set(self) -> bool:
        """Whether ops created now go to the IO tiles (`popxl.io_tiles()`)."""
        return _current_tile_set() == "io"

    @property
    def name_scopes(self) -> list[str]:
        """The `popxl.name_scope` names, outermost first (a copy)."""
        return list(_state.scopes)

    @property
    def in_sequence(self) -> bool | str | None:
        """The innermost `popxl.in_sequence` mode, None outside one."""
        return _state.in_sequence[-1] if _state.in_sequence else None

    @property
    def debug_context(self) -> DebugContext | None:
        """The innermost `op_debug_context` being run (None outside op functions)."""
        return _state.debug[-1] if _state.debug else None

    @property
    def execution_context(self) -> ExecutionContext:
        """The execution context of ops created now (`Normal` unless `_execution_context`)."""
        return _state.execution_context[-1] if _state.execution_context else ExecutionContext.Normal

    def _get_op_settings(self, name: str) -> OpSettings:
        """The settings PopART bindings' `createOpInGraph` takes (upstream: placement,
        name scope, debug info): here the name and the placement, which the op gets from
        the context when it is built."""
        return OpSettings(name, self.ipu_id, _current_tile_set(), tuple(_state.scopes))

    def _op_created(self, op: object) -> None:
        """Upstream tells the graph's op-created hooks about an op a binding made; xl's
        custom ops (`popxl.custom_ops`) are built through the graph, which already did."""

    def __repr__(self) -> str:
        graph = _state.graphs[-1].name if _state.graphs else None
        return f"Context(graph={graph!r}, ipu_id={self.ipu_id}, io_tile_set={self.io_tile_set})"


@dataclass(frozen=True)
class OpSettings:
    """What `Context._get_op_settings(name)` returns (PopART's `Op::Settings`, as custom ops'
    bindings receive it)."""

    name: str
    ipu: int
    tile_set: str | None
    name_scopes: tuple[str, ...]


_context = Context()


def get_current_context() -> Context:
    """The build-time context (upstream's `popxl.context.get_current_context`); one object
    whose properties read the current state (`ctx.graph`, `ctx.ir`, `ctx.ipu_id`, ...)."""
    return _context
