"""xl-opt's mlir-opt flags through the installed entry point, checked against independent
runs: `--mlir-timing` rows against a pass that sleeps a known time and against the wall
time of the process, `--mlir-print-ir-after-change` against the printed IR of each prefix
of the pipeline, `--mlir-print-ir-after-failure` against the IR the failing pass got (the
dump reproduces the failure). The output formats are pinned by the lit tests
tests/filecheck/tools/xl-opt-mlir-*.mlir."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.tool_runner import xl_opt

ROOT = Path(__file__).resolve().parents[2]

SLEEP = 0.15

SLEEPY_PLUGIN = f'''
import time
from dataclasses import dataclass

from xdsl.passes import ModulePass


@dataclass(frozen=True)
class SleepPass(ModulePass):
    """Sleep {SLEEP} s, change nothing."""

    name = "test-sleep"

    def apply(self, ctx, op) -> None:
        time.sleep({SLEEP})
'''

PROGRAM = """graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %a = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %b = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %a : tensor<2xf32>
  graph.host_store @y, %b : tensor<2xf32>
}
"""

ROW = re.compile(r"^ +(?P<s>[0-9]+\.[0-9]{4}) \( *(?P<pct>[0-9]+\.[0-9])%\)  (?P<indent> *)(?P<name>\S.*)$")


def _xl_opt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(["xl-opt", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _rows(report: str) -> list[tuple[float, float, int, str]]:
    """(seconds, percent, depth, name) of each row of a timing report."""
    out = []
    for line in report.splitlines():
        m = ROW.match(line)
        if m:
            out.append((float(m.group("s")), float(m.group("pct")), len(m.group("indent")) // 2, m.group("name")))
    return out


def test_mlir_timing_measures_each_pass(tmp_path: Path) -> None:
    plugin = tmp_path / "sleepy.py"
    plugin.write_text(SLEEPY_PLUGIN)
    prog = tmp_path / "p.mlir"
    prog.write_text(PROGRAM + "// -----\n" + PROGRAM)  # two chunks: the rows add up over both
    start = time.perf_counter()
    r = _xl_opt(
        str(prog),
        "--split-input-file",
        "--load-pass-plugin",
        str(plugin),
        "-p",
        "cse,test-sleep,canonicalize",
        "--mlir-timing",
        cwd=tmp_path,
    )
    wall = time.perf_counter() - start
    assert r.returncode == 0, r.stderr
    assert "Execution time report" not in r.stdout
    total = float(re.search(r"Total Execution Time: ([0-9.]+) seconds", r.stderr).group(1))  # pyright: ignore[reportOptionalMemberAccess]
    assert 0 < total <= wall
    rows = _rows(r.stderr)
    top = [(s, name) for s, _, depth, name in rows if depth == 0]
    assert [name for _, name in top] == [
        "Parser",
        "CommonSubexpressionElimination",
        "SleepPass",
        "CanonicalizePass",
        "Output",
        "Rest",
        "Total",
    ]
    # The sleeping pass ran once per chunk: its row holds both sleeps and is the largest.
    seconds = dict((name, s) for s, name in top)
    assert 2 * SLEEP <= seconds["SleepPass"] < 2 * SLEEP + 0.5
    assert seconds["SleepPass"] == max(s for s, name in top if name not in ("Total", "Rest"))
    # The rows of the top level add up to the total (each rounded to 0.1 ms), the shares
    # are of the total, and a row holds at least its rows below (the verification).
    assert abs(sum(s for s, name in top if name != "Total") - total) <= 1e-4 * len(top)
    assert seconds["Total"] == pytest.approx(total, abs=1e-4)
    for s, pct, _, _ in rows:
        assert pct == pytest.approx(100 * s / total, abs=0.06 + 100 * 1e-4 / total)
    for i, (s, _, depth, name) in enumerate(rows):
        below = []
        for s2, _, d2, _ in rows[i + 1 :]:
            if d2 <= depth:
                break
            if d2 == depth + 1:
                below.append(s2)
        if name in ("Parser", "CommonSubexpressionElimination", "SleepPass", "CanonicalizePass"):
            assert len(below) == 1, name  # its Verifier
        assert sum(below) <= s + 1e-4 * (len(below) + 1)


def _dumps(stderr: str) -> list[tuple[str, str]]:
    """(header, module text) of each IR dump on stderr."""
    parts = re.split(r"^(// -----// IR Dump .*//----- //)\n", stderr, flags=re.M)
    return [(parts[i], parts[i + 1].split("\n\n", 1)[0] + "\n") for i in range(1, len(parts), 2)]


def test_after_change_dumps_exactly_the_passes_that_changed_the_ir() -> None:
    prog = str(ROOT / "examples" / "ir" / "linear.mlir")
    passes = ["canonicalize", "cse", "inline", "dce", "cse", "canonicalize", "lower-to-rt", "dce"]
    # The printed IR after each prefix of the pipeline, from separate runs (in process).
    printed = []
    for i in range(len(passes) + 1):
        code, out, err = xl_opt(prog, "-p", ",".join(passes[:i]))
        assert code == 0, err
        printed.append(out.rstrip("\n") + "\n")
    changed = [i for i in range(len(passes)) if printed[i + 1] != printed[i]]
    assert 0 < len(changed) < len(passes)  # the test needs both kinds
    code, _, err = xl_opt(prog, "-p", ",".join(passes), "--mlir-print-ir-after-change")
    assert code == 0, err
    dumps = _dumps(err)
    assert [h.split(" (")[1].split(")")[0] for h, _ in dumps] == [passes[i] for i in changed]
    for (_, text), i in zip(dumps, changed, strict=True):
        assert text == printed[i + 1]


def test_failure_dump_is_the_ir_the_pass_got_and_reproduces_the_failure(tmp_path: Path) -> None:
    prog = tmp_path / "p.mlir"
    prog.write_text(PROGRAM)
    code, _, err = xl_opt(str(prog), "-p", "cse,autodiff{graph=nosuch}", "--mlir-print-ir-after-failure")
    assert code == 1
    ((header, text),) = _dumps(err)
    assert header == "// -----// IR Dump After AutodiffPass Failed (autodiff) //----- //"
    assert text == xl_opt(str(prog), "-p", "cse")[1].rstrip("\n") + "\n"
    error = err.split("\n\n", 1)[1]
    assert error.startswith("xl-opt: error: autodiff: no graph @nosuch in the module")
    dump = tmp_path / "dump.mlir"
    dump.write_text(text)
    code, _, again = xl_opt(str(dump), "-p", "autodiff{graph=nosuch}")
    assert code == 1 and again == error
