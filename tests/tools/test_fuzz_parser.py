"""Mutation fuzz test of the parser and verifier behind `xl-opt` and `xl-run`.

Mutated valid programs (see `tests/helpers/fuzz_mlir.py`; its extended corpus, with frontend
programs using repeat / IPU copies / replicas / pipelining and programs lowered to the rt
dialect) must each end in a valid result or a clear error (exit status 1,
`file:line:col: error:` or `xl-opt: error:` / `xl-run: error:`), never a traceback and
never a hang; an input `xl-run` runs must give the same outputs and variables on the
optimised and the straightforward runtime plans. CI tries `XL_FUZZ_N` inputs (default
400, about 20 s); a longer run::

    XL_FUZZ_N=5000 XL_FUZZ_SEED=7 pytest tests/tools/test_fuzz_parser.py
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

import fuzz_mlir  # noqa: E402

BIN = Path(sys.executable).parent
N = int(os.environ.get("XL_FUZZ_N", "400"))
SEED = int(os.environ.get("XL_FUZZ_SEED", "0"))


def test_mutated_inputs_end_in_a_result_or_a_located_error(tmp_path: Path) -> None:
    """In-process runs in a worker process, so that a hang fails the test instead of the suite."""
    out = tmp_path / "findings.json"
    progress = tmp_path / "current.mlir"
    budget = 120 + N * 0.5
    try:
        r = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve().parents[1] / "helpers" / "fuzz_mlir.py"),
                "--n",
                str(N),
                "--seed",
                str(SEED),
                "--out",
                str(out),
                "--progress",
                str(progress),
                "--extended",
                "--differential",
            ],
            capture_output=True,
            text=True,
            timeout=budget,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    except subprocess.TimeoutExpired:
        last = progress.read_bytes().decode("latin-1") if progress.exists() else "?"
        pytest.fail(f"the fuzz worker did not finish in {budget:.0f} s; last input:\n{last}")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["runs"] == N
    assert report["stats"]["programs"] >= 20  # the corpus was found
    # the extended corpus: programs lowered to the rt dialect (each read back) for xl-run
    assert report["stats"]["lowered"] >= 20
    # the inputs xl-run ran were also run on both runtime plans (--differential)
    assert report["stats"].get("compared", 0) > 0
    findings = report["findings"]
    detail = "\n\n".join(
        f"{f['tool']} {f['kind']} ({f['source']}, {f['mutations']}):\n{f['detail']}\n--- input ---\n{f['input'][:2000]}"
        for f in findings[:5]
    )
    assert not findings, f"{len(findings)} of {N} mutated inputs failed:\n{detail}"
    # The mutations reach past the parser: some inputs still run, most are rejected.
    assert report["stats"]["ok"] > 0 and report["stats"]["error"] > N // 2


def test_mutated_inputs_with_the_installed_tools(tmp_path: Path) -> None:
    """A few mutated inputs through the real executables (process, exit status, stderr)."""
    rng = random.Random(SEED + 1)
    programs = fuzz_mlir.corpus(include_frontend=False)
    k = -1
    for k in range(6):
        name, text = programs[rng.randrange(len(programs))]
        data, muts = fuzz_mlir.mutate(text, rng)
        if k == 0:  # always one stray quote and one non-UTF-8 input
            data = text.encode()[: len(text) // 2] + b'"' + b"x" * 2000
        elif k == 1:
            data = b'graph.main {\n  %w = graph.variable "\xff" : tensor<2xf32>\n}\n'
        prog = tmp_path / f"m{k}.mlir"
        prog.write_bytes(data)
        tool = ("xl-opt", "xl-run")[k % 2]
        r = subprocess.run([BIN / tool, prog], capture_output=True, timeout=120)
        problem = fuzz_mlir._check_output(r.returncode, r.stderr)
        assert problem is None, f"{tool} on {name} {muts}: {problem}\n{r.stderr.decode(errors='replace')}"
    assert k == 5


def test_mutate_is_seeded_and_changes_the_input() -> None:
    text = (Path(fuzz_mlir.ROOT) / "examples" / "ir" / "linear.mlir").read_text()
    a = [fuzz_mlir.mutate(text, random.Random(3)) for _ in range(2)]
    assert a[0] == a[1]
    outs = {fuzz_mlir.mutate(text, random.Random(s))[0] for s in range(50)}
    assert text.encode() not in outs or len(outs) > 40
    assert len(outs) > 40


def test_check_output_classifies() -> None:
    ok = fuzz_mlir._check_output
    assert ok(0, b"") is None
    assert ok(1, b"p.mlir:3:7: error: expected ':'\n  x\n  ^\n") is None
    assert ok(1, b"xl-run: error: missing input for stream(s) x\n") is None
    assert ok(1, b"Traceback (most recent call last):\n") == "traceback"
    assert ok(1, b"something went wrong\n") == "unclear-error"
    assert ok(2, b"") == "exit status 2"


def test_plans_differ_compares_both_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The differential check of `--differential` passes on a program whose plans agree and
    reports a plan that computes something else."""
    import numpy as np

    import xl.compiler

    text = (Path(fuzz_mlir.ROOT) / "examples" / "ir" / "linear.mlir").read_text()
    argv = [str(tmp_path / "p.mlir"), *fuzz_mlir._inputs_for(text.encode(), tmp_path)]
    assert fuzz_mlir.plans_differ(text.encode(), argv) is None

    real = xl.compiler.compile_module

    def off_by_one(module, optimize=True, **kw):  # noqa: ANN001, ANN003, ANN202
        exe = real(module, optimize=optimize, **kw)
        if not optimize:
            run = exe.run
            exe.run = lambda inputs=None: {k: v + np.float32(1) for k, v in run(inputs).items()}
        return exe

    monkeypatch.setattr(xl.compiler, "compile_module", off_by_one)
    diff = fuzz_mlir.plans_differ(text.encode(), argv)
    assert diff is not None and diff.startswith("step 0 y: optimised")
