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

Discoverability and conventions: ``--list-passes`` (or ``-p help``) describes every pass
with its options, ``--list-dialects`` the dialects and their ops, ``--version`` prints the
xl and xDSL versions; ``-o -`` is stdout; ``--time-passes``, ``--print-between-passes``
and ``--print-ir-after-all`` write to stderr. ``--elide-elementsattrs-if-larger=N``
prints dense values of more than N elements as ``dense_resource<__elided__>``.
``--load-pass-plugin FILE.py`` adds the passes a file defines; installed packages add
passes through the ``xl.passes`` entry-point group (`xl.passes.plugins`).
``--emit=dot`` (or ``-t dot``) writes a Graphviz picture of the program instead of its text
(`xl.compiler.dot`), at any level (``rt`` included); ``--emit=svg`` renders it with Graphviz
``dot`` when that is installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import os
import re
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass, PassPipeline
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

from xl.compiler.elide import print_op, shorten_message
from xl.dialects import get_all_dialects
from xl.passes import builtin_passes, get_all_passes
from xl.passes.plugins import load_pass_plugin
from xl.tools.diagnostics import (
    LocatedError,
    SourceText,
    clip_context,
    format_located,
    locate,
    verify_located,
)
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
    idx = content.rfind(needle, line_start, span.start)  # pyright: ignore[reportArgumentType]
    if idx < 0:
        return span
    # A plain Span: `span` may be a StringLiteral, which only holds quoted text.
    # Span is generic in its input's content type (str or bytes); the new span reuses `span.input`
    if idx > 0 and content[idx - 1 : idx] in ('"', b'"'):
        return Span(idx - 1, idx + len(name) + 1, span.input, span.line_offset)  # pyright: ignore[reportArgumentType]
    return Span(idx, idx + len(name), span.input, span.line_offset)  # pyright: ignore[reportArgumentType]


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
        out += clip_context(context[1].rstrip("\n")) + "\n"
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
    msg = shorten_message(str(e))
    if isinstance(e, OSError) and e.strerror and e.filename:
        return f"{PROG}: error: cannot read '{e.filename}': {e.strerror}"
    if not isinstance(e, DiagnosticException | ValueError | ArgSpecParseError):
        msg = f"{type(e).__name__}: {msg}"
    lines = [f"{PROG}: error: {msg.rstrip()}"]
    for note in getattr(e, "__notes__", ()):
        lines.append(shorten_message(str(note).rstrip()))
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
    `internal` a RuntimeError, `verify` leaves IR that does not verify, `verify-constant`
    adds to graph.main a `graph.constant` holding the largest dense value of the program
    with a wrong result type (its error message must not print the value).
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
        if self.kind == "verify-constant":
            from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f32

            from xl.dialects.graph import ConstantOp, MainGraphOp

            dense = [
                a
                for o in op.walk()
                for a in (*o.properties.values(), *o.attributes.values())
                if isinstance(a, DenseIntOrFPElementsAttr)
            ]
            main = next((o for o in op.walk() if isinstance(o, MainGraphOp)), None)
            if not dense or main is None:
                raise ValueError(f"{self.name}: the program has no dense value or no graph.main")
            value = max(dense, key=lambda a: math.prod(a.get_shape()))
            bad = ConstantOp.create(properties={"value": value}, result_types=[TensorType(f32, [1])])
            main.body.block.add_op(bad)
            return
        raise ValueError(f"{self.name}: unknown kind '{self.kind}'")


def version_text(prog: str) -> str:
    """`prog`, the xl version and the xDSL version, for `--version`."""
    from importlib.metadata import PackageNotFoundError, version

    import xl

    try:
        xdsl_version = version("xdsl")
    except PackageNotFoundError:  # pragma: no cover - xdsl is a dependency
        xdsl_version = "unknown"
    return f"{prog} (xl) {xl.__version__}, xDSL {xdsl_version}"


class XlOptMain(xDSLOptMain):
    version_format = version_text(PROG).replace("{", "{{").replace("}", "}}")

    _stage: str | None = None
    """What runs while the current chunk is processed, for error notes."""

    _line_offset: int = 0
    """First line of the current chunk in the input file (`--split-input-file`)."""

    _source: SourceText | None = None
    """The text of the current chunk, to show the line a located error points at."""

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
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
        self.xdsl_pass_names = sorted(self.available_passes)
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)
        self.register_pass(TestFailPass.name, lambda: TestFailPass)

    def register_all_targets(self) -> None:
        """`mlir` (textual IR), `dot` and `svg` (Graphviz pictures, `xl.compiler.dot`): xDSL's
        other targets (riscv-asm, wgsl, ...) have no meaning for xl programs."""
        from xl.compiler.dot import DotTarget, SvgTarget

        super().register_all_targets()
        self.available_targets = {
            "mlir": self.available_targets["mlir"],
            "dot": lambda: DotTarget,
            "svg": lambda: SvgTarget,
        }

    def setup_pipeline(self) -> None:
        """xDSL's pipeline with a callback that writes `--time-passes`,
        `--print-between-passes` and `--print-ir-after-all` to stderr (stdout carries the
        program, so `xl-opt ... | xl-run -` works). `-p help` lists the passes instead."""
        self._load_plugins()
        if self.args.emit is not None:
            self.args.target = self.args.emit
        if self.args.target == "svg":
            from xl.compiler.dot import DotNotInstalledError, dot_program

            if dot_program() is None:
                raise DotNotInstalledError(
                    "--emit=svg needs the Graphviz 'dot' program, which is not installed; "
                    "--emit=dot writes the DOT text"
                )
        if self.args.passes.strip() == "help":
            self.args.list_passes = True
            self.args.passes = ""
        start = time.perf_counter()
        args = self.args

        def callback(previous: ModulePass | None, module: ModuleOp, next_pass: ModulePass | None) -> None:
            nonlocal start
            if args.time_passes and previous is not None:
                _eprint(f"Pass {previous.name} took {time.perf_counter() - start:.6f} seconds")
            if previous is not None and (
                args.print_ir_after_all or (args.print_between_passes and next_pass is not None)
            ):
                text = print_op(
                    module,
                    elide_larger_than=args.elide_elementsattrs_if_larger,
                    print_generic_format=args.print_op_generic,
                )
                _eprint(f"// -----// IR Dump After {previous.name} //----- //\n{text}\n")
            if args.time_passes and next_pass is not None:
                start = time.perf_counter()

        self.pipeline = PassPipeline.parse_spec(self.available_passes, args.passes, callback)

    def _load_plugins(self) -> None:
        for path in self.args.load_pass_plugin or ():
            for name, cls in load_pass_plugin(path).items():
                self.register_pass(name, (lambda c=cls: c))

    def output_resulting_program(self, prog: ModuleOp) -> str:
        limit = self.args.elide_elementsattrs_if_larger
        if limit is None or self.args.target != "mlir":
            return super().output_resulting_program(prog)
        return (
            print_op(
                prog,
                elide_larger_than=limit,
                print_generic_format=self.args.print_op_generic,
                print_debuginfo=self.args.print_debuginfo,
            )
            + "\n"
        )

    def list_passes(self) -> str:
        """`--list-passes`: xl's passes (description and options), plugin passes, xDSL's."""
        xl_names = set(builtin_passes())
        builtin = [n for n in sorted(self.available_passes) if n in xl_names]
        extra = [
            n
            for n in sorted(self.available_passes)
            if n not in xl_names and n not in self.xdsl_pass_names and n != TestFailPass.name
        ]
        out = ["xl passes:"]
        out += [describe_pass(self.available_passes[n]()) for n in builtin]
        if extra:
            out.append("")
            out.append("plugin passes (entry points 'xl.passes', --load-pass-plugin):")
            out += [describe_pass(self.available_passes[n]()) for n in extra]
        out.append("")
        out.append("xDSL passes (see xDSL's documentation):")
        out.append(
            textwrap.fill(
                ", ".join(self.xdsl_pass_names), 88, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
            )
        )
        return "\n".join(out)

    def list_dialects(self) -> str:
        """`--list-dialects`: xl's dialects with their ops, then xDSL's dialect names."""
        out = ["xl dialects:"]
        xl_dialects = get_all_dialects()
        for name, factory in xl_dialects.items():
            dialect = factory()
            ops = sorted(op.name for op in dialect.operations)
            doc = _first_line(sys.modules[type(dialect).__module__].__doc__)
            module_doc = _first_line(getattr(sys.modules.get(_dialect_module(dialect)), "__doc__", ""))
            out.append(f"  {name}: {module_doc or doc}")
            out.append(
                textwrap.fill(
                    ", ".join(ops), 88, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False
                )
            )
        others = sorted(n for n in self.ctx.registered_dialect_names if n not in xl_dialects)
        out.append("")
        out.append("xDSL dialects (also accepted in the input):")
        out.append(
            textwrap.fill(", ".join(others), 88, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
        )
        return "\n".join(out)

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
            self._source = SourceText(name, text.decode("utf-8"), self._line_offset)
            return module

        self.available_frontends["mlir"] = parse_mlir

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        xl_names = sorted(builtin_passes())
        for action in arg_parser._actions:
            if "-p" in action.option_strings:
                action.help = (
                    "pass pipeline, e.g. 'inline,canonicalize,cse,lower-to-rt' "
                    "('-p help' or --list-passes describes every pass). xl passes: "
                    + ", ".join(xl_names)
                    + ". xDSL passes: "
                    + ", ".join(self.xdsl_pass_names)
                )
            elif "-t" in action.option_strings:
                action.help = (
                    "output format: mlir (textual IR, the default), dot (a Graphviz picture "
                    "of the program), svg (rendered by Graphviz 'dot', when installed)"
                )
            elif "-o" in action.option_strings:
                action.help = "output file ('-' or none: stdout)"
            elif "input_file" == action.dest:
                action.help = "textual IR, any extension ('-' or none: stdin)"
            elif "--print-between-passes" in action.option_strings:
                action.help = "print the IR between passes, on stderr"
            elif "--time-passes" in action.option_strings:
                action.help = "print how long each pass takes, on stderr"
            elif "--verify-diagnostics" in action.option_strings:
                action.help = (
                    "check that the diagnostics are exactly those announced by "
                    "'// expected-error {{...}}' annotations (MLIR's semantics)"
                )
            elif "--version" in action.option_strings:
                action.help = "print the xl and xDSL versions"
        arg_parser.add_argument(
            "--print-ir-after-all",
            default=False,
            action="store_true",
            help="print the IR after every pass, on stderr",
        )
        arg_parser.add_argument(
            "--elide-elementsattrs-if-larger",
            "--mlir-elide-elementsattrs-if-larger",
            type=_non_negative_int,
            default=None,
            metavar="N",
            help="print dense attributes with more than N elements as "
            "dense_resource<__elided__> (for reading; such text does not parse back)",
        )
        arg_parser.add_argument(
            "--emit",
            choices=("mlir", "dot", "svg"),
            default=None,
            help="what to write after the passes (as -t): mlir (textual IR, the default), dot "
            "(Graphviz DOT: ops as nodes, tensors as edges, a cluster per graph and per virtual "
            "IPU, calls linked to their graphs; any level, rt included), svg (DOT rendered by "
            "Graphviz 'dot', which must be installed)",
        )
        arg_parser.add_argument(
            "--list-passes",
            default=False,
            action="store_true",
            help="list the passes with their descriptions and options, then exit",
        )
        arg_parser.add_argument(
            "--list-dialects",
            default=False,
            action="store_true",
            help="list the dialects and their ops, then exit",
        )
        arg_parser.add_argument(
            "--load-pass-plugin",
            action="append",
            metavar="FILE.py",
            help="load the ModulePass subclasses (with a 'name') defined in FILE.py; repeatable",
        )
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

    def run(self) -> int:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Processes every chunk; returns the exit status (0 ok, 1 some chunk failed)."""
        if self.args.list_passes or self.args.list_dialects:
            if self.args.list_passes:
                print(self.list_passes())
            if self.args.list_dialects:
                print(self.list_dialects())
            return 0
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

    def _run_verifying(self, chunk: IO[bytes], file_extension: str, offset: int, out: IO[str]) -> bool:
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


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of elements, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _first_line(doc: str | None, limit: int = 100) -> str:
    """The first paragraph of `doc` on one line, cut after its first sentence if long."""
    para = " ".join((doc or "").strip().split("\n\n", 1)[0].split())
    if len(para) > limit and ". " in para:
        para = para.split(". ", 1)[0] + "."
    return para


def _dialect_module(dialect: object) -> str:
    ops = list(getattr(dialect, "operations", ()))
    return ops[0].__module__ if ops else ""


def describe_pass(cls: type[ModulePass]) -> str:
    """`  name: first docstring line`, then one line per option: `name: type = default`."""
    desc = _first_line(cls.__doc__)
    usage = None
    if desc.startswith(f"`{cls.name}") or "module docstring" in desc:
        # A usage line or a pointer: the description is the module's first sentence.
        m = re.match(r"`(" + re.escape(cls.name) + r"\{[^`]*\})`", desc)
        usage = m.group(1) if m else None
        module_doc = _first_line(getattr(sys.modules.get(cls.__module__), "__doc__", ""))
        module_doc = re.sub(r"^`[^`]*`:\s*", "", module_doc)
        desc = module_doc[:1].upper() + module_doc[1:] if module_doc else desc
    lines = [f"  {cls.name}: {desc or '(no description)'}"]
    if usage:
        lines.append(f"      usage: {usage}")
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default = repr(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = repr(f.default_factory())
            else:
                default = "(required)"
            type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            lines.append(f"      {f.name.replace('_', '-')}: {type_name} = {default}")
    return "\n".join(lines)


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
