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
- a bad pipeline (unknown pass or option; an option value that needs double quotes is
  named with the spec to write, `xl.tools.pipeline_spec`) or an unreadable input file.

With ``--split-input-file`` every chunk is processed, even after one fails, as
``mlir-opt`` does. ``--verify-diagnostics`` has MLIR's semantics: the diagnostics
must be exactly those announced by ``// expected-error {{...}}`` annotations (also
``expected-error-re`` with regular expressions, `xl.tools.verify_diagnostics`); every
mismatch, and every annotation it cannot read, is reported located and the tool exits 1.
Any file extension is read as textual IR; ``-`` (or no file) reads stdin. ``--traceback``
re-raises internal errors for debugging.

Discoverability and conventions: ``--list-passes`` (or ``-p help``) describes every pass
with its options, ``--list-dialects`` the dialects and their ops, ``--version`` prints the
xl and xDSL versions; ``-o -`` is stdout. mlir-opt's flags work as there:
``--pass-pipeline='builtin.module(cse,canonicalize)'``, the IR dumps
``--mlir-print-ir-before-all`` / ``-after-all`` (alias ``--print-ir-after-all``) /
``-after-change`` / ``-after-failure`` / ``--mlir-print-ir-before=PASS`` /
``--mlir-print-ir-after=PASS`` and the ``--mlir-timing`` report (`xl.tools.instrument`);
they, ``--time-passes`` and ``--print-between-passes`` write to stderr. An installed plugin
that cannot be imported is left out of ``--list-passes`` with a warning. ``--elide-elementsattrs-if-larger=N``
prints dense values of more than N elements as ``dense_resource<__elided__>``.
``--load-pass-plugin FILE.py`` adds the passes a file defines; installed packages add
passes through the ``xl.passes`` entry-point group (`xl.passes.plugins`).
``--emit=dot`` (or ``-t dot``) writes a Graphviz picture of the program instead of its text
(`xl.compiler.dot`), at any level (``rt`` included); ``--emit=svg`` renders it with Graphviz
``dot`` when that is installed.
"""

from __future__ import annotations

import argparse
import contextlib
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
from xl.passes.plugins import load_pass_plugin, resolve_passes
from xl.tools.diagnostics import (
    LocatedError,
    SourceText,
    clip_context,
    format_located,
    locate,
    verify_located,
)
from xl.tools.instrument import IRPrinting, Timing, dump_header
from xl.tools.parse import as_parse_error, parse_source
from xl.tools.pipeline_spec import describe_pipeline_error, pipeline_error_column, unwrap_pass_pipeline
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

    _printing: IRPrinting = IRPrinting()
    """The IR dumps to print around the passes (`--mlir-print-ir-*`)."""

    _timing: Timing | None = None
    """The `--mlir-timing` tree, when asked for."""

    def __init__(
        self,
        description: str = "xl modular optimizer driver",
        args: Sequence[str] | None = None,
        start: float | None = None,
    ) -> None:
        self._start = time.perf_counter() if start is None else start
        """When the tool started (the `--mlir-timing` total counts from here)."""
        super().__init__(description, args)

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
        """The pass pipeline of `-p` or `--pass-pipeline='builtin.module(...)'` (mlir-opt's
        form), and what to report around its passes (`xl.tools.instrument`): IR dumps and
        `--time-passes` on stderr (stdout carries the program, so `xl-opt ... | xl-run -`
        works), `--mlir-timing`. `-p help` lists the passes instead."""
        self._load_plugins()
        args = self.args
        if args.emit is not None:
            args.target = args.emit
        if args.target == "svg":
            from xl.compiler.dot import DotNotInstalledError, dot_program

            if dot_program() is None:
                raise DotNotInstalledError(
                    "--emit=svg needs the Graphviz 'dot' program, which is not installed; "
                    "--emit=dot writes the DOT text"
                )
        if args.pass_pipeline is not None:
            if args.passes.strip():
                raise ValueError(
                    "give the passes either with -p or with --pass-pipeline='builtin.module(...)', not both"
                )
            args.passes = unwrap_pass_pipeline(args.pass_pipeline)
        if args.passes.strip() == "help":
            args.list_passes = True
            args.passes = ""
        for flag, names in (
            ("--mlir-print-ir-before", args.mlir_print_ir_before),
            ("--mlir-print-ir-after", args.mlir_print_ir_after),
        ):
            unknown = sorted(set(names) - set(self.available_passes))
            if unknown:
                raise ValueError(f"{flag}: no pass named {', '.join(repr(n) for n in unknown)} (see --list-passes)")
        self._printing = IRPrinting(
            before_all=args.mlir_print_ir_before_all,
            after_all=args.print_ir_after_all,
            before=set(args.mlir_print_ir_before),
            after=set(args.mlir_print_ir_after),
            after_change=args.mlir_print_ir_after_change,
            after_failure=args.mlir_print_ir_after_failure,
        )
        if args.mlir_timing:
            self._timing = Timing(self._start)
        try:
            self.pipeline = PassPipeline.parse_spec(self.available_passes, args.passes)
        except ArgSpecParseError as e:
            spec = args.passes if args.pass_pipeline is None else args.pass_pipeline
            flag = "-p" if args.pass_pipeline is None else "--pass-pipeline"
            hint = describe_pipeline_error(args.passes, pipeline_error_column(e), args.pass_pipeline is not None)
            if hint is None:
                raise
            raise ValueError(f"{flag} '{spec}': {hint}") from None

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
        """`--list-passes`: xl's passes (description and options), plugin passes, xDSL's.
        A plugin pass that cannot be loaded is left out with a one-line warning on stderr."""
        xl_names = set(builtin_passes())
        builtin = [n for n in sorted(self.available_passes) if n in xl_names]
        extra = [
            n
            for n in sorted(self.available_passes)
            if n not in xl_names and n not in self.xdsl_pass_names and n != TestFailPass.name
        ]
        out = ["xl passes:"]
        out += [describe_pass(self.available_passes[n]()) for n in builtin]
        plugins, broken = resolve_passes({n: self.available_passes[n] for n in extra})
        for name, error in broken.items():  # an installed plugin that does not import: left out
            _eprint(f"{PROG}: warning: pass '{name}' left out: {error}")
        if plugins:
            out.append("")
            out.append("plugin passes (entry points 'xl.passes', --load-pass-plugin):")
            out += [describe_pass(cls) for cls in plugins.values()]
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
            "--pass-pipeline",
            default=None,
            metavar="'builtin.module(PASSES)'",
            help="the pass pipeline in mlir-opt's form, e.g. 'builtin.module(inline,cse,lower-to-rt)' "
            "(the same passes as -p 'inline,cse,lower-to-rt')",
        )
        arg_parser.add_argument(
            "--mlir-print-ir-before-all",
            default=False,
            action="store_true",
            help="print the IR before every pass, on stderr (as mlir-opt)",
        )
        arg_parser.add_argument(
            "--mlir-print-ir-after-all",
            "--print-ir-after-all",
            dest="print_ir_after_all",
            default=False,
            action="store_true",
            help="print the IR after every pass, on stderr (as mlir-opt); after a pass that fails, the IR it got",
        )
        arg_parser.add_argument(
            "--mlir-print-ir-before",
            type=_pass_names,
            action="extend",
            default=[],
            metavar="PASS[,PASS]",
            help="print the IR before these passes, on stderr",
        )
        arg_parser.add_argument(
            "--mlir-print-ir-after",
            type=_pass_names,
            action="extend",
            default=[],
            metavar="PASS[,PASS]",
            help="print the IR after these passes, on stderr",
        )
        arg_parser.add_argument(
            "--mlir-print-ir-after-change",
            default=False,
            action="store_true",
            help="with --mlir-print-ir-after-all / --mlir-print-ir-after: only after the passes that "
            "changed the IR (on its own: after every pass that changed it)",
        )
        arg_parser.add_argument(
            "--mlir-print-ir-after-failure",
            default=False,
            action="store_true",
            help="print the IR the failing pass got (exception or invalid IR after it), on stderr",
        )
        arg_parser.add_argument(
            "--mlir-timing",
            default=False,
            action="store_true",
            help="print mlir-opt's execution time report on stderr: wall time and share of the "
            "parser, each pass (its verification below it), the output and the total",
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
        """The passes of the pipeline, each followed by verification (`verify_located`:
        short, located messages), remembering which pass (or which check) is running for
        error notes; with the IR dumps (`xl.tools.instrument.IRPrinting`), `--time-passes`
        lines, `--print-between-passes` and `--mlir-timing` rows asked for."""
        args = self.args
        passes: tuple[ModulePass, ...] = self.pipeline.passes
        verify = not args.disable_verify
        self._stage = "while verifying the input"
        if verify:
            with self._timed("Parser", "Verifier"):
                self._verify(prog)
        for i, p in enumerate(passes):
            row = (type(p).__name__, ("pass", i))

            def apply(p: ModulePass = p, row: tuple[str, object] = row) -> None:
                start = time.perf_counter()
                with self._timed(row):
                    self._stage = f"in pass '{p.name}'"
                    p.apply(self.ctx, prog)
                    self._stage = f"while verifying the IR after pass '{p.name}'"
                    if verify:
                        with self._timed(row, "Verifier"):
                            self._verify(prog)
                if args.time_passes:
                    _eprint(f"Pass {p.name} took {time.perf_counter() - start:.6f} seconds")

            self._printing.run(p, prog, apply, self._render, _eprint)
            if args.print_between_passes and i + 1 < len(passes) and not self._printing.prints_after(p):
                _eprint(f"{dump_header('After', p)}\n{self._render(prog)}\n")
        self._stage = None

    def _render(self, module: ModuleOp) -> str:
        """`module` as IR dumps print it (`--print-op-generic`, `--elide-elementsattrs-if-larger`)."""
        return print_op(
            module,
            elide_larger_than=self.args.elide_elementsattrs_if_larger,
            print_generic_format=self.args.print_op_generic,
        )

    def _timed(self, *path: str | tuple[str, object]) -> contextlib.AbstractContextManager[object]:
        """Adds the time of a `with` body to the `--mlir-timing` row at `path` (names from
        the top, or (name, key) to tell apart rows of one name) and to the rows above it."""
        if self._timing is None:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        row = self._timing.root
        for step in path:
            name, key = (step, None) if isinstance(step, str) else step
            row = row.row(name, key)
            stack.enter_context(row.timed())
        return stack

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
            if self._timing is not None:  # also after a failure, as mlir-opt
                _eprint(self._timing.report().rstrip("\n"))
        if self.args.shrink:
            print("Failure, can't shrink")
            return 1
        return 1 if failed else 0

    def _process(self, chunk: IO[bytes], file_extension: str, offset: int, out: IO[str]) -> None:
        self._stage = "while parsing the input"
        with self._timed("Parser"):
            module = self.parse_chunk(chunk, file_extension, offset)
        self._stage = None
        if module is not None:
            self.apply_passes(module)
            self._stage = "while printing the result"
            with self._timed("Output"):
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


def _pass_names(text: str) -> list[str]:
    """`--mlir-print-ir-before=cse,dce`: the pass names of a comma-separated list."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected pass names, e.g. cse or cse,canonicalize")
    return names


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
    start = time.perf_counter()
    try:
        tool = XlOptMain(description="xl modular optimizer driver", args=argv, start=start)
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
