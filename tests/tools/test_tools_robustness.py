"""xl-opt / xl-run on bad input: linear time, located errors, no tracebacks; SSA dominance."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import FileLineColLoc
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from tests.helpers.tool_runner import xl_opt as _xl_opt
from tests.helpers.tool_runner import xl_run as _xl_run
from xl.dialects.dominance import DominanceError
from xl.tools import run
from xl.tools.context import xl_context
from xl.tools.diagnostics import LocatedError, verify_located
from xl.tools.parse import XlLexer, parse_source

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
LINEAR = ROOT / "examples" / "ir" / "linear.mlir"


# -- linear time ---------------------------------------------------------------------------

STRAY_QUOTES = [
    'graph.main {\n  %w = graph.variable "w' + "a" * 10_000 + "\n}\n",  # unterminated name
    '"' + "a" * 10_000,  # at the start of the input (the first token)
    'graph.h2d_stream @"x' + "b" * 10_000,  # in a symbol name
    'graph.main {\n  %w = graph.variable "w" = dense<1.0> : tensor<2xf32> {a = "'
    + "\\n" * 5_000,  # escapes, never closed
    "graph.main {\n" + '  %x = graph.constant dense<1.0> : tensor<f32> {s = "ab\n' * 500 + "}",
]


@pytest.mark.parametrize("text", STRAY_QUOTES, ids=range(len(STRAY_QUOTES)))
def test_stray_quote_parses_in_linear_time(text: str) -> None:
    """xDSL's string regex backtracks exponentially (40 characters: days); ours is linear."""
    t0 = time.perf_counter()
    with pytest.raises(ParseError) as info:
        parse_source(xl_context(), text, "q.mlir")
    assert time.perf_counter() - t0 < 5.0
    assert "string literal" in info.value.msg or "expected" in info.value.msg.lower()


def test_stray_quote_tools_finish_in_subprocess(tmp_path: Path) -> None:
    """The installed tools on a 10 KB unterminated string: a located error, well in time."""
    prog = tmp_path / "quote.mlir"
    prog.write_text(STRAY_QUOTES[0])
    for tool in ("xl-opt", "xl-run"):
        t0 = time.perf_counter()
        r = subprocess.run([BIN / tool, prog], capture_output=True, text=True, timeout=120)
        elapsed = time.perf_counter() - t0
        assert r.returncode == 1, r.stderr
        assert r.stderr.startswith(f"{prog}:2:23: error: End of file reached before closing"), r.stderr
        assert "Traceback" not in r.stderr
        assert elapsed < 30, f"{tool} took {elapsed:.1f} s"  # process start-up included


@pytest.mark.parametrize(
    "literal",
    ['""', '"abc"', r'"a\"b"', r'"tab\there"', r'"\\"', r'"\41\42"', r'"caf\C3\A9"', r'"\FF"'],
)
def test_lexer_accepts_the_same_strings_as_xdsl(literal: str) -> None:
    def lex(lexer_cls: type[MLIRLexer]) -> tuple[MLIRTokenKind, str]:
        tok = lexer_cls(Input(literal + " x", "s")).lex()
        return tok.kind, tok.text

    assert lex(XlLexer) == lex(MLIRLexer)
    assert lex(XlLexer)[1] == literal


# -- xl-opt: located errors ----------------------------------------------------------------


def test_parse_keeps_locations_on_ops() -> None:
    module = parse_source(xl_context(), LINEAR.read_text(), "linear.mlir")
    locs = {op.name: op.location for op in module.walk() if op.name != "builtin.module"}
    add = locs["popxl.add"]
    assert isinstance(add, FileLineColLoc)
    assert (add.filename.data, add.line.data, add.column.data) == ("linear.mlir", 6, 3)
    main = locs["graph.main"]
    assert isinstance(main, FileLineColLoc) and main.line.data == 9


def test_print_debuginfo_prints_real_locations() -> None:
    code, out, err = _xl_opt(str(LINEAR), "--print-debuginfo")
    assert code == 0, err
    assert f'loc("{LINEAR}":5:3)' in out  # popxl.matmul
    assert out.count("loc(unknown)") == out.count("{graph.name") + 1  # block args + module


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            'graph.main {\n  %w = graph.variable "w" = dense<1.0> : tensor<99999999999999999999xf32>\n}\n',
            "2:3",
            "number too large",
        ),
        (
            'graph.main {\n  %w = graph.variable "w" = dense<[1.0]> : tensor<1xcomplex<f32>>\n}\n',
            "2:3",
            "malformed input (internal AssertionError)",
        ),
        (
            "graph.h2d_stream @x : tensor<2xbf16>\ngraph.main {\n"
            "  %x = graph.host_load @x : tensor<2xbf16>\n"
            "  %y = popxl.exp %x : (tensor<2xbf16>) -> tensor<2xbf16>\n}\n",
            "4:3",
            "popxl.exp: element type bf16 has no NumPy dtype",
        ),
        (
            "graph.main {\n  %x = graph.constant dense<1.0> : tensor<2xf32>\n"
            "  %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
            "  %z = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>\n}\n",
            "3:3",
            "popxl.add: operand #1 (%z) is used before its definition: defined later, by popxl.neg at line 4",
        ),
    ],
    ids=["overflow", "complex-assert", "bf16", "dominance"],
)
def test_xl_opt_errors_are_located(tmp_path: Path, text: str, where: str, message: str) -> None:
    prog = tmp_path / "p.mlir"
    prog.write_text(text)
    code, out, err = _xl_opt(str(prog))
    assert code == 1
    first = err.splitlines()[0]
    assert first == f"{prog}:{where}: error: {message}" or first.startswith(f"{prog}:{where}: error: {message}"), err
    line = int(where.split(":")[0])
    assert err.splitlines()[1] == text.splitlines()[line - 1]
    assert "Traceback" not in err


def test_non_utf8_bytes_report_the_line(tmp_path: Path) -> None:
    prog = tmp_path / "bytes.mlir"
    prog.write_bytes(b'graph.main {\n  %w = graph.variable "w\xe9" : tensor<2xf32>\n}\n')
    for tool in (_xl_opt, _xl_run):
        code, _, err = tool(str(prog))
        assert code == 1
        assert err.startswith(f"{prog}:2:25: error: invalid UTF-8 byte 0xe9"), err


def _mnist_text() -> str:
    sys.path.insert(0, str(ROOT / "examples"))
    import mnist as mnist_example

    np.random.seed(0)
    session, *_ = mnist_example.train_program(4, "cpu", 0.05)
    return session.ir.to_mlir()


def test_verifier_error_in_a_big_program_is_short(tmp_path: Path) -> None:
    """The MNIST training program (megabytes of weights) with one bad op: a short message
    naming that op and its line, not the module in generic form."""
    text = _mnist_text()
    assert len(text) > 1_000_000
    lines = text.split("\n")
    # Declare the image stream with another shape: graph.host_load (in graph.main, after
    # the megabytes of weights) no longer verifies.
    s = next(k for k, ln in enumerate(lines) if "graph.h2d_stream @image" in ln)
    lines[s] = lines[s].replace("tensor<4x28x28xf32>", "tensor<4x28x27xf32>")
    i = next(k for k, ln in enumerate(lines) if "graph.host_load @image" in ln)
    bad_line = lines[i]
    prog = tmp_path / "mnist_bad.mlir"
    prog.write_text("\n".join(lines))
    code, out, err = _xl_opt(str(prog))
    assert code == 1 and out == ""
    assert len(err) < 2000, len(err)
    col = len(bad_line) - len(bad_line.lstrip()) + 1
    assert err.startswith(f"{prog}:{i + 1}:{col}: error: graph.host_load: stream @image carries (4, 28, 27) float32"), (
        err[:300]
    )
    assert bad_line in err
    code, _, err_run = _xl_run(str(prog))
    assert code == 1 and len(err_run) < 2000 and err_run.startswith(f"{prog}:{i + 1}:{col}: error:")


def test_verify_error_after_a_pass_names_the_new_op() -> None:
    code, out, err = _xl_opt(str(LINEAR), "-p", "xl-test-fail{kind=verify}")
    assert code == 1
    assert "error: graph.main: 'num_host_transfers' must be a positive integer" in err
    assert "note: while verifying the IR after pass 'xl-test-fail'" in err
    assert len(err) < 2000


# -- SSA dominance --------------------------------------------------------------------------

DOMINANCE_CASES = {
    "main": (
        "graph.main {\n  %x = graph.constant dense<1.0> : tensor<2xf32>\n"
        "  %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
        "  %z = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>\n}\n",
        "popxl.add",
    ),
    "graph": (
        'graph.graph @g(%a: tensor<2xf32> {graph.name = "a"}) -> tensor<2xf32> {\n'
        "  %c = popxl.add %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
        "  %b = popxl.neg %a : (tensor<2xf32>) -> tensor<2xf32>\n"
        "  graph.output %c : tensor<2xf32>\n}\n",
        "popxl.add",
    ),
    "self": (
        "graph.main {\n  %x = graph.constant dense<1.0> : tensor<2xf32>\n"
        "  %y = popxl.add %x, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n}\n",
        "popxl.add",
    ),
    "inplace": (
        'graph.main {\n  %w = graph.variable "w" : tensor<2xf32>\n'
        "  popxl.scaled_add_ %w, %d {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()\n"
        "  %d = popxl.neg %w : (tensor<2xf32>) -> tensor<2xf32>\n}\n",
        "popxl.scaled_add_",
    ),
    "rt": (
        "rt.program {\n  %a = rt.alloc : memref<2xf32>\n"
        '  rt.kernel "popxl.neg"(%b) -> (%a) : (memref<2xf32>) -> memref<2xf32>\n'
        "  %b = rt.alloc : memref<2xf32>\n}\n",
        "rt.kernel",
    ),
}


@pytest.mark.parametrize("case", sorted(DOMINANCE_CASES))
def test_use_before_definition_fails_python_verify(case: str) -> None:
    text, user = DOMINANCE_CASES[case]
    module = Parser(xl_context(), text).parse_module()  # xDSL's own parser accepts it
    with pytest.raises(VerifyException, match=rf"{user}: operand #\d .* before its definition"):
        module.verify()
    with pytest.raises(LocatedError) as info:
        verify_located(parse_source(xl_context(), text, "d.mlir"))
    assert info.value.op is not None and info.value.op.name == user
    assert str(info.value).startswith(f"d.mlir:{2 if case == 'graph' else 3}:3: ")


def test_dominance_error_carries_the_using_op() -> None:
    text, _ = DOMINANCE_CASES["main"]
    module = Parser(xl_context(), text).parse_module()
    main = next(op for op in module.walk() if op.name == "graph.main")
    with pytest.raises(DominanceError) as info:
        main.verify_()
    assert info.value.op.name == "popxl.add" and info.value.operand_index == 1


def test_dominance_in_nested_regions() -> None:
    """Values defined before a region op are visible inside it; later ones, and values of
    a sibling region, are not."""
    from xl.dialects.dominance import verify_dominance

    ok = (
        "rt.program {\n  %a = rt.alloc : memref<2xf32>\n"
        "  rt.loop 3 {\n"
        '    rt.kernel "popxl.neg"(%a) -> (%a) : (memref<2xf32>) -> memref<2xf32>\n  }\n}\n'
    )
    bad = (
        "rt.program {\n"
        "  rt.loop 3 {\n"
        '    rt.kernel "popxl.neg"(%a) -> (%a) : (memref<2xf32>) -> memref<2xf32>\n  }\n'
        "  %a = rt.alloc : memref<2xf32>\n}\n"
    )
    prog = Parser(xl_context(), ok).parse_module()
    prog.verify()
    prog = Parser(xl_context(), bad).parse_module()
    with pytest.raises(DominanceError, match="rt.kernel: operand #0 \\(%a\\)"):
        verify_dominance(next(op for op in prog.walk() if op.name == "rt.program"))


def test_frontend_programs_satisfy_dominance() -> None:
    """The frontend builds programs in order: its verify path (with the check) accepts them."""
    text = _mnist_text()
    parse_source(xl_context(), text, "mnist.mlir").verify()


# -- xl-run: no tracebacks -------------------------------------------------------------------


@pytest.fixture()
def x_npy(tmp_path: Path) -> Path:
    path = tmp_path / "x.npy"
    np.save(path, np.ones((2, 4), np.float32))
    return path


def test_xl_run_still_runs(x_npy: Path, tmp_path: Path) -> None:
    code, out, err = _xl_run(str(LINEAR), f"x={x_npy}", "-o", str(tmp_path / "out.npz"))
    assert code == 0, err
    w = np.array([[1, 0, -1], [0.5, 0.5, 0.5], [2, -2, 0], [0, 1, 1]], np.float32)
    expected = np.ones((2, 4), np.float32) @ w + np.array([0.1, 0.2, 0.3], np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["{linear}", "x={x}", "-o", "{tmp}/nodir/out.npz"],
            "-o '{tmp}/nodir/out.npz': folder '{tmp}/nodir' does not exist",
        ),
        (["{linear}", "x={x}", "--save-vars", "{tmp}"], "--save-vars '{tmp}' is a directory"),
        (["{tmp}"], "'{tmp}' is a directory, not a textual program"),
        (["{linear}", "x={tmp}"], "input '{tmp}' is a directory, expected a .npy or .npz file"),
        (["{linear}", "x={x}", "-p", "lower-to-rt{"], "-p 'lower-to-rt{': Expected argument name here (column 13)"),
        (["{linear}", "x={x}", "-p", "inline{remove-dead=2}"], "-p 'inline{remove-dead=2}': "),
        (["{linear}", "x={x}", "-p", "autodiff"], "autodiff: the 'graph' option"),
        (["{tmp}/none.mlir"], "file '{tmp}/none.mlir' does not exist"),
    ],
    ids=["outdir", "varsdir", "dir", "input-dir", "pipe-syntax", "pipe-option", "pass-error", "nofile"],
)
def test_xl_run_errors(tmp_path: Path, x_npy: Path, args: list[str], message: str) -> None:
    def fill(a: str) -> str:
        return a.replace("{linear}", str(LINEAR)).replace("{x}", str(x_npy)).replace("{tmp}", str(tmp_path))

    code, out, err = _xl_run(*[fill(a) for a in args])
    assert code == 1
    assert err.startswith("xl-run: error: " + fill(message)), err
    assert "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("decl", "message"),
    [
        ("%x = graph.constant dense<1> : tensor<2xsi32>", "element type si32 is not supported"),
        ("%x = graph.constant dense<1.0> : tensor<2xbf16>", "element type bf16 is not supported"),
        (
            '%x = graph.variable "v" = dense<[(1.0, 2.0)]> : tensor<1xcomplex<f32>>',
            "element type complex<f32> is not supported",
        ),
        (
            '%x = graph.variable "v" : tensor<1000000x1000000x100xf32>',
            "needs 363.8 TiB, more than the memory of this machine",
        ),
        ('%x = graph.variable "v" : tensor<99999999999999999999xf32>', "more than the memory of this machine"),
    ],
    ids=["si32", "bf16", "complex", "too-large", "huge-dim"],
)
def test_xl_run_reports_the_op_for_unrunnable_types(tmp_path: Path, decl: str, message: str) -> None:
    prog = tmp_path / "t.mlir"
    prog.write_text(f"graph.main {{\n  {decl}\n}}\n")
    code, _, err = _xl_run(str(prog))
    assert code == 1
    first, line, caret = err.splitlines()[:3]
    assert first.startswith(f"{prog}:2:3: error: {decl.split()[2]}: ") and message in first, err
    assert line == f"  {decl}" and caret == "  ^"


def test_xl_run_traceback_flag(tmp_path: Path) -> None:
    with pytest.raises(run.RunError, match="does not exist"):
        _xl_run(str(tmp_path / "none.mlir"), "--traceback")


def test_xl_run_subprocess_error_has_no_traceback(tmp_path: Path) -> None:
    prog = tmp_path / "t.mlir"
    prog.write_text("graph.main {\n  %x = graph.constant dense<1.0> : tensor<2xbf16>\n}\n")
    r = subprocess.run([BIN / "xl-run", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{prog}:2:3: error: graph.constant: element type bf16")
