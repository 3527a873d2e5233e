"""`xl-opt`: run xl and xDSL passes on textual IR, like `mlir-opt` / `xdsl-opt`.

    xl-opt prog.mlir -p 'inline,canonicalize,cse,lower-to-rt'

Errors are reported as diagnostics, never as Python tracebacks, and make the tool
exit with status 1:

- parse errors as ``file:line:col: error: message`` followed by the source line
  and a caret under the offending text, also for bytes that are not UTF-8 and for
  literals xDSL cannot represent (the parser is `xl.tools.parse`: linear time on any
  input, and every op keeps its source location for ``--print-debuginfo``);
- verifier errors (before the first pass and after every pass) as
  ``file:line:col: error: message`` at the failing op (or, for an op created by a
  pass, at the nearest enclosing op from the input, with the failing op shown);
- exceptions raised inside a pass as ``xl-opt: error: message``, their
  ``__notes__`` and the name of the pass;
- a bad pipeline (unknown pass or option) or an unreadable input file.

With ``--split-input-file`` every chunk is processed, even after one fails, as
``mlir-opt`` does. ``--verify-diagnostics`` has MLIR's semantics: the diagnostics
must be exactly those announced by ``// expected-error {{...}}`` annotations
(`xl.tools.verify_diagnostics`); every mismatch is reported located and the tool
exits 1. Any file extension is read as textual IR; ``-`` (or no file) reads stdin.
``--traceback`` re-raises internal errors for debugging.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import re
import sys
from collections.abc import Sequence
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    MultipleSpansParseError,
    ParseError,
    PassFailedException,
    ShrinkException,
)
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from xl.dialects import get_all_dialects
from xl.passes import get_all_passes
from xl.tools.diagnostics import LocatedError, SourceText, format_located, locate, verify_located
from xl.tools.parse import as_parse_error, parse_source
from xl.tools.verify_diagnostics import Diagnostic, check_diagnostics, parse_expectations

PROG = "xl-opt"


_UNREGISTERED = re.compile(r"^Operation (\S+) is not registered$")


def _point_at_op_name(e: ParseError) -> Span[str] | Span[bytes]:
    """xDSL reports an unknown op after its name; point at the name instead."""
    span = e.span
    m = _UNREGISTERED.match(e.msg)
    if m is None:
        return span
    content = span.input.content
    name = m.group(1)
    needle: str | bytes = name.encode() if isinstance(content, bytes) else name
    line_start = span.input.get_start_of_line(span.start)
    idx = content.rfind(needle, line_start, span.start)  # type: ignore[arg-type]
    if idx < 0:
        return span
    # A plain Span: `span` may be a StringLiteral, which only holds quoted text.
    if idx > 0 and content[idx - 1 : idx] in ('"', b'"'):
        return Span(idx - 1, idx + len(name) + 1, span.input, span.line_offset)
    return Span(idx, idx + len(name), span.input, span.line_offset)


def _parse_message(e: ParseError) -> str:
    """xDSL's message, made whole where xDSL leaves it a fragment."""
    msg = e.msg.strip()
    if e.msg.startswith(" in block definition"):
        return "expected an operation, a block label or '}' here"
    return msg or "syntax error"


def format_parse_error(e: ParseError) -> str:
    """MLIR-style: ``file:line:col: error: msg``, then the source line and a caret."""
    span = _point_at_op_name(e)
    context = span.print_with_context(None).split("\n", 1)
    out = f"{span.get_location()}: error: {_parse_message(e)}\n"
    if len(context) > 1:
        out += context[1]
    if isinstance(e, MultipleSpansParseError):
        if e.ref_text is not None:
            out += e.ref_text + "\n"
        for span, msg in e.refs:
            out += span.print_with_context(msg)
    return out.rstrip("\n")


def format_exception(e: BaseException) -> str:
    """``xl-opt: error: message`` plus the exception's ``__notes__``, one per line."""
    if not str(e).strip():
        return f"{PROG}: error: internal {type(e).__name__} (no message)" + "".join(
            f"\n{str(n).rstrip()}" for n in getattr(e, "__notes__", ())
        )
    msg = str(e)
    if isinstance(e, OSError) and e.strerror and e.filename:
        return f"{PROG}: error: cannot read '{e.filename}': {e.strerror}"
    if not isinstance(e, DiagnosticException | ValueError | ArgSpecParseError):
        msg = f"{type(e).__name__}: {msg}"
    lines = [f"{PROG}: error: {msg.rstrip()}"]
    for note in getattr(e, "__notes__", ()):
        lines.append(str(note).rstrip())
    return "\n".join(lines)


def _only_comments(text: bytes) -> bool:
    return all(not line.strip() or line.lstrip().startswith(b"//") for line in text.splitlines())


def _eprint(text: str) -> None:
    sys.stdout.flush()
    print(text, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class TestFailPass(ModulePass):
    """Fails on purpose, to test how xl-opt reports errors (like MLIR's `test-*` passes).

    `kind`: `value` raises a ValueError with a note, `diagnostic` a PassFailedException,
    `internal` a RuntimeError, `verify` leaves IR that does not verify.
    """

    name = "xl-test-fail"
    kind: str = "value"
    message: str = "test failure"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.kind == "value":
            e = ValueError(self.message)
            e.__notes__ = [f"note: raised by {self.name}"]  # add_note() needs Python 3.11
            raise e
        if self.kind == "diagnostic":
            raise PassFailedException(self.message)
        if self.kind == "internal":
            raise RuntimeError(self.message)
        if self.kind == "verify":
            from xl.dialects.graph import MainGraphOp

            bad = MainGraphOp()
            bad.attributes["num_host_transfers"] = IntegerAttr(0, i64)
            op.body.block.add_op(bad)
            return
        raise ValueError(f"{self.name}: unknown kind '{self.kind}'")


class XlOptMain(xDSLOptMain):
    version_format = "xl-opt built on xdsl version {xdsl_version}"

    _stage: str | None = None
    """What runs while the current chunk is processed, for error notes."""

    _line_offset: int = 0
    """First line of the current chunk in the input file (`--split-input-file`)."""

    _source: SourceText | None = None
    """The text of the current chunk, to show the line a located error points at."""

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        self._line_offset = start_offset
        self._source = None
        return super().parse_chunk(chunk, file_extension, start_offset)

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        """The input (`-` or none: stdin), always read as textual IR whatever its extension
        (`-f` still picks another frontend)."""
        name = self.args.input_file
        if name is None or name == "-":
            return sys.stdin.buffer, "mlir"
        if os.path.isdir(name):
            raise ValueError(f"'{name}' is a directory, not a textual program")
        return open(name, "rb"), "mlir"

    def get_input_name(self) -> str:
        name = self.args.input_file
        return "<stdin>" if name is None or name == "-" else name

    def prepare_output(self) -> IO[str]:
        """`-o FILE`, or stdout for no `-o` and for `-o -`."""
        if self.args.output_file is None or self.args.output_file == "-":
            return sys.stdout
        return open(self.args.output_file, "w")

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)
        self.register_pass(TestFailPass.name, lambda: TestFailPass)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()

        def parse_mlir(io: IO[bytes]) -> ModuleOp:
            text = io.read()
            if _only_comments(text):  # as mlir-opt: empty input is an empty module
                return ModuleOp([])
            name = self.get_input_name()
            module = parse_source(
                self.ctx,
                text,
                name,
                allow_implicit_module=not self.args.no_implicit_module,
                line_offset=self._line_offset,
            )
            self._source = SourceText(
                name, text.decode("utf-8"), self._line_offset
            )
            return module

        self.available_frontends["mlir"] = parse_mlir

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--traceback",
            default=False,
            action="store_true",
            help="Re-raise internal errors with a Python traceback (for debugging xl).",
        )

    # -- running -------------------------------------------------------------------
    def apply_passes(self, prog: ModuleOp) -> None:
        """`PassPipeline.apply`, remembering which pass (or which check) is running.

        Verification is `verify_located` (short, located messages); xDSL's callback
        still does `--time-passes` and `--print-between-passes`."""
        pipeline = self.pipeline
        passes: tuple[ModulePass, ...] = pipeline.passes
        callback = pipeline.callback
        verify = not self.args.disable_verify
        self.args.disable_verify = True  # the callback must not verify a second time
        try:
            self._stage = "while verifying the input"
            if verify:
                self._verify(prog)
            if callback is not None:
                callback(None, prog, passes[0] if passes else None)
            for i, p in enumerate(passes):
                self._stage = f"in pass '{p.name}'"
                p.apply(self.ctx, prog)
                self._stage = f"while verifying the IR after pass '{p.name}'"
                if verify:
                    self._verify(prog)
                if callback is not None:
                    callback(p, prog, passes[i + 1] if i + 1 < len(passes) else None)
        finally:
            self.args.disable_verify = not verify
        self._stage = None

    def _verify(self, prog: ModuleOp) -> None:
        """`verify_located`; with `--verify-diagnostics`, xDSL's own diagnostic (message and
        the IR with the failing op marked), which lit tests check."""
        verify_located(prog)

    def _report(self, e: BaseException) -> None:
        if isinstance(e, LocatedError):
            text = format_located(e, self._source, PROG)
        else:
            text = format_exception(e)
        if self._stage is not None:
            text += f"\n{PROG}: note: {self._stage}"
        _eprint(text)

    def run(self) -> int:  # type: ignore[override]
        """Processes every chunk; returns the exit status (0 ok, 1 some chunk failed)."""
        chunks, file_extension = self.prepare_input()
        output_stream = self.prepare_output()
        failed = False
        try:
            for i, (chunk, offset) in enumerate(chunks):
                if i > 0:
                    output_stream.write("// -----\n")
                if self.args.verify_diagnostics:
                    failed |= not self._run_verifying(chunk, file_extension, offset, output_stream)
                else:
                    failed |= not self._run_chunk(chunk, file_extension, offset, output_stream)
        except ShrinkException:
            assert self.args.shrink
            print("Success, can shrink")
            return 0
        finally:
            if output_stream is not sys.stdout:
                output_stream.close()
        if self.args.shrink:
            print("Failure, can't shrink")
            return 1
        return 1 if failed else 0

    def _process(self, chunk: IO[bytes], file_extension: str, offset: int, out: IO[str]) -> None:
        self._stage = "while parsing the input"
        module = self.parse_chunk(chunk, file_extension, offset)
        self._stage = None
        if module is not None:
            self.apply_passes(module)
            self._stage = "while printing the result"
            out.write(self.output_resulting_program(module))
        out.flush()

    def _run_chunk(self, chunk: IO[bytes], file_extension: str, offset: int, out: IO[str]) -> bool:
        """One chunk, errors reported on stderr; False if it failed."""
        self._stage = None
        try:
            self._process(chunk, file_extension, offset, out)
        except ParseError as e:
            e.span = dataclasses.replace(e.span, line_offset=offset)
            if self.args.parsing_diagnostics:
                print(e)
                return True
            if self.args.traceback:
                raise
            _eprint(format_parse_error(e))
            return False
        except DiagnosticException as e:
            if self.args.traceback:
                raise
            if (located := as_parse_error(e)) is not None:
                located.span = dataclasses.replace(located.span, line_offset=offset)
                _eprint(format_parse_error(located))
            else:
                self._report(e)
            return False
        except LocatedError as e:
            if self.args.traceback:
                raise
            self._report(e)
            return False
        except (ShrinkException, BrokenPipeError):
            raise
        except Exception as e:
            if self.args.traceback:
                raise
            self._report(e)
            return False
        finally:
            chunk.close()
        return True

    def _run_verifying(
        self, chunk: IO[bytes], file_extension: str, offset: int, out: IO[str]
    ) -> bool:
        """`--verify-diagnostics`: the chunk's diagnostics must be exactly the ones its
        `expected-*` annotations announce (`xl.tools.verify_diagnostics`)."""
        data = chunk.read()
        chunk.close()
        name = self.get_input_name()
        text = data.decode("utf-8", errors="replace")
        expectations, problems = parse_expectations(text, name, offset)
        diagnostics: list[Diagnostic] = []
        self._stage = None
        try:
            self._process(io.BytesIO(data), file_extension, offset, out)
        except (ShrinkException, BrokenPipeError):
            raise
        except Exception as e:
            if self.args.traceback:
                raise
            diagnostics.append(_as_diagnostic(e, offset))
        problems += check_diagnostics(diagnostics, expectations, name)
        for p in problems:
            _eprint(p)
        return not problems


def _as_diagnostic(e: BaseException, offset: int) -> Diagnostic:
    """What the tool would report for `e`, as a `Diagnostic` with its location."""
    parse_error = e if isinstance(e, ParseError) else as_parse_error(e)
    if parse_error is not None:
        span = dataclasses.replace(_point_at_op_name(parse_error), line_offset=offset)
        loc = span.get_location()
        return Diagnostic("error", _parse_message(parse_error), loc.file, loc.line, int(loc.col))
    if isinstance(e, LocatedError):
        where = locate(e.op) if e.op is not None else None
        if where is not None:
            return Diagnostic("error", e.message, *where)
        return Diagnostic("error", e.message)
    return Diagnostic("error", format_exception(e).removeprefix(f"{PROG}: error: "))


def main(args: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if args is None else args)
    debug = "--traceback" in argv
    try:
        tool = XlOptMain(description="xl modular optimizer driver", args=argv)
        status = tool.run()
    except BrokenPipeError:  # `xl-opt ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    except (Exception, ArgSpecParseError) as e:
        if debug:
            raise
        _eprint(format_exception(e))
        status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
