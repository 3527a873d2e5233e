"""What `xl-opt` reports about its passes, as mlir-opt does: IR dumps and the timing tree.

IR dumps (`IRPrinting`, on stderr) have mlir-opt's headers, the pass's class name and its
pipeline name::

    // -----// IR Dump Before CanonicalizePass (canonicalize) //----- //
    // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
    // -----// IR Dump After AutodiffPass Failed (autodiff) //----- //

each followed by the whole module and a blank line. The flags select them as mlir-opt's do:
``--mlir-print-ir-before-all`` / ``--mlir-print-ir-before=PASS``,
``--mlir-print-ir-after-all`` / ``--mlir-print-ir-after=PASS`` (also after a pass that
fails), ``--mlir-print-ir-after-change`` (only the passes that changed the printed IR; on its
own it implies ``--mlir-print-ir-after-all``, where mlir-opt would print nothing) and
``--mlir-print-ir-after-failure`` (only the pass that fails, even with ``-after-all``). A
failed pass's dump shows the IR the pass got, so ``xl-opt dump.mlir -p PASS`` reproduces the
failure; a failure is an exception in the pass or IR that does not verify after it.

`Timing` (``--mlir-timing``) is mlir-opt's ``-mlir-timing`` report: wall time and share of the
total for the parser, each pass of the pipeline (with its verification nested under it), the
output, the rest (option parsing, setting up, ...) and the total::

    ===-------------------------------------------------------------------------===
                             ... Execution time report ...
    ===-------------------------------------------------------------------------===
      Total Execution Time: 0.0131 seconds

      ----Wall Time----  ----Name----
        0.0021 ( 16.0%)  Parser
        0.0002 (  1.5%)    Verifier
        0.0030 ( 22.9%)  CanonicalizePass
        0.0001 (  0.8%)    Verifier
        0.0009 (  6.9%)  Output
        0.0071 ( 54.2%)  Rest
        0.0131 (100.0%)  Total

With ``--split-input-file`` the rows add up over the chunks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

__all__ = ["IRPrinting", "Timing", "TimingRow", "dump_header"]


def dump_header(when: str, p: ModulePass, failed: bool = False) -> str:
    """mlir-opt's header of an IR dump: ``// -----// IR Dump After Name (name) //----- //``."""
    return f"// -----// IR Dump {when} {type(p).__name__}{' Failed' if failed else ''} ({p.name}) //----- //"


@dataclasses.dataclass
class IRPrinting:
    """Which IR dumps to print around each pass (see the module docstring)."""

    before_all: bool = False
    after_all: bool = False
    before: Collection[str] = ()
    """Pass names (`--mlir-print-ir-before=PASS`)."""
    after: Collection[str] = ()
    after_change: bool = False
    after_failure: bool = False

    def __post_init__(self) -> None:
        if self.after_change and not (self.after_all or self.after):
            self.after_all = True

    @property
    def enabled(self) -> bool:
        return bool(self.before_all or self.after_all or self.before or self.after or self.after_failure)

    def prints_before(self, p: ModulePass) -> bool:
        return self.before_all or p.name in self.before

    def prints_after(self, p: ModulePass) -> bool:
        """After `p` succeeds (and, with `after_change`, changed the IR)."""
        return not self.after_failure and (self.after_all or p.name in self.after)

    def prints_failure(self, p: ModulePass) -> bool:
        return self.after_failure or self.after_all or p.name in self.after

    def run(
        self,
        p: ModulePass,
        module: ModuleOp,
        apply: Callable[[], None],
        render: Callable[[ModuleOp], str],
        emit: Callable[[str], None],
    ) -> None:
        """`apply()` (the pass and the verification after it) with the dumps `p` asks for:
        `render` prints a module, `emit` writes a dump."""
        if self.prints_before(p):
            emit(f"{dump_header('Before', p)}\n{render(module)}\n")
        failure = self.prints_failure(p)
        got_text = render(module) if self.after_change and self.prints_after(p) else None
        got = module.clone() if failure and got_text is None else None
        try:
            apply()
        except BaseException:
            if failure:
                text = got_text if got_text is not None else render(got if got is not None else module)
                emit(f"{dump_header('After', p, failed=True)}\n{text}\n")
            raise
        if self.prints_after(p):
            text = render(module)
            if got_text is None or text != got_text:
                emit(f"{dump_header('After', p)}\n{text}\n")


@dataclasses.dataclass(eq=False)
class TimingRow:
    """A row of the timing tree: its wall time and its rows below."""

    name: str
    seconds: float = 0.0
    children: dict[object, TimingRow] = dataclasses.field(default_factory=dict)

    def row(self, name: str, key: object = None) -> TimingRow:
        """The row `name` below this one (`key` tells apart rows of the same name, as two
        runs of one pass in a pipeline); made on first use."""
        k = (name,) if key is None else key
        found = self.children.get(k)
        if found is None:
            found = self.children[k] = TimingRow(name)
        return found

    @contextmanager
    def timed(self) -> Iterator[TimingRow]:
        """Adds the wall time of the `with` body to this row (also when it raises)."""
        start = time.perf_counter()
        try:
            yield self
        finally:
            self.seconds += time.perf_counter() - start


_RULE = "===" + "-" * 73 + "==="
_TITLE = "... Execution time report ..."


class Timing:
    """The ``--mlir-timing`` tree of one run of the tool, started at `start`
    (`time.perf_counter()`)."""

    def __init__(self, start: float | None = None) -> None:
        self.start = time.perf_counter() if start is None else start
        self.root = TimingRow("Total")

    def report(self, end: float | None = None) -> str:
        """mlir-opt's report (see the module docstring), the total measured up to `end`."""
        total = (time.perf_counter() if end is None else end) - self.start
        total = max(total, sum(r.seconds for r in self.root.children.values()))
        lines = [
            _RULE,
            " " * ((80 - len(_TITLE)) // 2) + _TITLE,
            _RULE,
            f"  Total Execution Time: {total:.4f} seconds",
            "",
            "  ----Wall Time----  ----Name----",
        ]

        def line(seconds: float, name: str, depth: int) -> str:
            share = 100.0 * seconds / total if total > 0 else 0.0
            return f"{seconds:10.4f} ({share:5.1f}%)  {'  ' * depth}{name}"

        def add(row: TimingRow, depth: int) -> None:
            lines.append(line(row.seconds, row.name, depth))
            for child in row.children.values():
                add(child, depth + 1)

        for row in self.root.children.values():
            add(row, 0)
        rest = total - sum(r.seconds for r in self.root.children.values())
        lines.append(line(max(rest, 0.0), "Rest", 0))
        lines.append(line(total, "Total", 0))
        return "\n".join(lines) + "\n"
