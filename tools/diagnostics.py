"""Located diagnostics for `xl-opt` and `xl-run`: short messages that point at the source.

`verify_located(module)` verifies like `module.verify()` (the same op verifiers, the same
structural checks) but reports the first failure as a `LocatedError` naming the failing op
and its `loc("file":line:col)` from the parser (`xl.tools.parse`), instead of printing the
whole module in generic form (megabytes for a trained network). An op created by a pass has
no source location: the nearest enclosing op that has one is used, and the failing op is
shown on its own.

`format_located` renders it MLIR-style::

    prog.mlir:5:3: error: popxl.add: operand #1 (%z) is used before its definition: ...
      %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      ^
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator

import numpy as np
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp, TensorType
from xdsl.ir import Attribute, Operation
from xdsl.traits import IsTerminator, NoTerminator
from xdsl.utils.exceptions import VerifyException

from xl.dialects.utils import numpy_dtype
from xl.runtime.executable import MAX_REPLICAS, too_many_replicas

__all__ = [
    "LocatedError",
    "SourceText",
    "check_runnable_types",
    "format_located",
    "locate",
    "verify_located",
]

MAX_OP_TEXT = 400
"""Characters of an op's printed form shown in a message (its regions are never shown)."""


@dataclasses.dataclass
class LocatedError(Exception):
    """An error about `op` (None: about the whole input), with its source location if known."""

    message: str
    op: Operation | None = None

    def __str__(self) -> str:
        loc = locate(self.op) if self.op is not None else None
        prefix = f"{loc[0]}:{loc[1]}:{loc[2]}: " if loc else ""
        return f"{prefix}{self.message}"


@dataclasses.dataclass
class SourceText:
    """The text a module was parsed from, to show the line an error points at."""

    name: str
    text: str
    line_offset: int = 0

    def line(self, file: str, line: int) -> str | None:
        if file != self.name:
            return None
        index = line - 1 - self.line_offset
        lines = self.text.split("\n")
        if 0 <= index < len(lines):
            return lines[index].rstrip("\r")
        return None


def locate(op: Operation) -> tuple[str, int, int] | None:
    """(file, line, col) of `op`, or of its nearest enclosing op that has a location."""
    cur: Operation | None = op
    while cur is not None:
        loc = cur.location
        if isinstance(loc, FileLineColLoc):
            return loc.filename.data, loc.line.data, loc.column.data
        cur = cur.parent_op()
    return None


MAX_LINE_SHOWN = 160
"""Characters of a source line shown under an error (a line of weights can be megabytes)."""


def clip_context(text: str, width: int = MAX_LINE_SHOWN) -> str:
    """Source lines (each optionally followed by a line of carets) cut to a window of
    `width` characters around the caret, with `...` where text was left out."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        carets = lines[i + 1] if i + 1 < len(lines) else None
        if carets is not None and carets.strip() and set(carets.strip()) == {"^"}:
            if len(line) > width:
                start = len(carets) - len(carets.lstrip())
                lo = max(0, min(start - width // 2, len(line) - width))
                prefix = "..." if lo > 0 else ""
                suffix = "..." if lo + width < len(line) else ""
                shown = line[lo : lo + width]
                n = min(len(carets.strip()), width - (start - lo))
                line = prefix + shown + suffix
                carets = " " * (start - lo + len(prefix)) + "^" * max(n, 1)
            out += [line, carets]
            i += 2
            continue
        out.append(line if len(line) <= width else line[:width] + "...")
        i += 1
    return "\n".join(out)


def op_text(op: Operation) -> str:
    """`op` in generic form without its regions, large constants elided, cut to
    `MAX_OP_TEXT` characters."""
    from xl.compiler.elide import MESSAGE_ELIDE_LIMIT, print_op

    shallow = op.clone_without_regions() if op.regions else op
    text = print_op(shallow, elide_larger_than=MESSAGE_ELIDE_LIMIT, print_generic_format=True)
    text = text.strip()
    if len(text) > MAX_OP_TEXT:
        text = text[:MAX_OP_TEXT] + " ..."
    return text


def format_located(e: LocatedError, source: SourceText | None = None, prog: str = "xl-opt") -> str:
    """`file:line:col: error: message`, the source line and a caret (see module docstring)."""
    loc = locate(e.op) if e.op is not None else None
    if loc is None:
        out = f"{prog}: error: {e.message}"
        if e.op is not None:
            out += f"\n  {op_text(e.op)}"
        return out
    file, line, col = loc
    out = f"{file}:{line}:{col}: error: {e.message}"
    own = isinstance(e.op.location, FileLineColLoc) if e.op is not None else False
    src = source.line(file, line) if source is not None else None
    if src is not None:
        out += "\n" + clip_context(f"{src}\n{' ' * (col - 1)}^")
    if not own and e.op is not None:
        out += f"\nnote: in {e.op.name} (created by a pass, inside the op above):\n  {op_text(e.op)}"
    return out


def _op_message(op: Operation, e: BaseException) -> str:
    from xl.compiler.elide import shorten_message

    msg = shorten_message(str(e).strip()) or type(e).__name__
    if not isinstance(e, VerifyException | TypeError | ValueError):
        msg = f"{msg} (internal {type(e).__name__})"
    if not msg.startswith(op.name):
        msg = f"{op.name}: {msg}"
    return msg


def _walk(op: Operation) -> Iterator[Operation]:
    """Nested ops before their parent, as xDSL verifies (inner errors are reported first)."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.ops:
                yield from _walk(child)
    yield op


def _structure(op: Operation) -> None:
    """xDSL's structural checks of `Operation.verify` / `Block.verify` for one op (with
    xDSL's messages)."""
    for region in op.regions:
        if len(region.blocks) == 1 and not op.has_trait(NoTerminator):
            block = region.block
            last = block.last_op
            if last is None:
                raise VerifyException(
                    f"Operation {op.name} contains empty block in single-block region "
                    "that expects at least a terminator"
                )
            if not last.has_trait(IsTerminator):
                raise LocatedError(
                    f"Operation {last.name} terminates block in single-block region but is not a terminator",
                    last,
                )
    if op.successors:
        raise VerifyException(f"{op.name}: block successors are not supported in xl")


_REDEFINITION = re.compile(r'^Redefinition of symbol "(.*)"$')


def _redefinition(op: Operation, e: VerifyException) -> Operation | None:
    """For xDSL's symbol-table error, the op that redefines the symbol (MLIR reports it there)."""
    m = _REDEFINITION.match(str(e).strip())
    if m is None:
        return None
    seen = 0
    for region in op.regions:
        for block in region.blocks:
            for child in block.ops:
                name = child.properties.get("sym_name") or child.attributes.get("sym_name")
                if getattr(name, "data", None) == m.group(1):
                    seen += 1
                    if seen == 2:
                        return child
    return None


def verify_located(module: Operation) -> None:
    """`module.verify()` with the first failure raised as a short `LocatedError`."""
    for op in _walk(module):
        try:
            _structure(op)
            op.verify_()
        except LocatedError:
            raise
        except VerifyException as e:
            culprit = getattr(e, "op", None) or _redefinition(op, e)
            if isinstance(culprit, Operation):
                raise LocatedError(_op_message(culprit, e), culprit) from None
            raise LocatedError(_op_message(op, e), op) from None
        except (RecursionError, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - a verifier that crashes is still about `op`
            raise LocatedError(_op_message(op, e), op) from None


def _tensor_types(op: Operation) -> Iterator[Attribute]:
    for v in op.results:
        yield v.type
    for v in op.operands:
        yield v.type
    for region in op.regions:
        for block in region.blocks:
            for a in block.args:
                yield a.type


def max_tensor_bytes() -> int:
    """The physical memory of this machine (256 TiB when unknown): no tensor can be larger."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 1 << 48


def _size(nbytes: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if nbytes < 1024 or unit == "EiB":
            return f"{nbytes:.4g} {unit}" if unit != "bytes" else f"{nbytes} bytes"
        nbytes /= 1024  # pyright: ignore[reportAssignmentType]
    raise AssertionError("unreachable")


def _int_attr(op: Operation, key: str) -> int:
    a = op.attributes.get(key)
    value = getattr(getattr(a, "value", None), "data", 1)
    return value if isinstance(value, int) else 1


def check_runnable_types(module: ModuleOp) -> None:
    """Every tensor has an element type the NumPy runtime has kernels for and a size that
    can be allocated, and the replicas fit; otherwise a `LocatedError` naming the first op
    at fault."""
    seen: set[Attribute] = set()
    limit = max_tensor_bytes()
    for op in module.walk():
        if op.name in ("graph.main", "rt.program"):
            reps = _int_attr(op, "replication_factor")
            if reps > MAX_REPLICAS:
                raise LocatedError(f"{op.name}: replication_factor {reps} is {too_many_replicas()}", op)
        for t in _tensor_types(op):
            if t in seen or not isinstance(t, TensorType):
                continue
            seen.add(t)
            elem = t.get_element_type()
            try:
                itemsize = numpy_dtype(elem).itemsize
            except TypeError:
                raise LocatedError(
                    f"{op.name}: element type {elem} is not supported by the NumPy runtime "
                    f"(supported: f16, f32, f64, i1, i8/16/32/64 and ui8/16/32/64)",
                    op,
                ) from None
            shape = t.get_shape()
            if any(d < 0 for d in shape):
                raise LocatedError(f"{op.name}: {t} has a dynamic or negative dimension", op)
            nbytes = int(np.prod([int(d) for d in shape], dtype=object)) * itemsize
            if nbytes > limit:
                raise LocatedError(
                    f"{op.name}: {t} needs {_size(nbytes)}, more than the memory of this machine ({_size(limit)})",
                    op,
                )
