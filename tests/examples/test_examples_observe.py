"""The examples' observation options (examples/observe.py): every example program takes
`--profile`, `--profile-steps`, `--memory-report`, `--liveness` and `--json`; a short MNIST run
with all of them writes a trace whose kernels carry shapes and FLOPs, prints the tables and the
memory report as JSON, and draws the liveness picture."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

# the example programs: the files of examples/ run as scripts that build popxl programs
PROGRAMS = sorted(
    p.stem
    for p in EXAMPLES.glob("*.py")
    if '__name__ == "__main__"' in (text := p.read_text()) and "import popxl" in text
)
FLAGS = ("--profile", "--profile-steps", "--memory-report", "--liveness", "--json")


def _main(name: str, argv: list[str]) -> tuple[int, str, str]:
    """`python examples/<name>.py argv...` in process: (exit code, stdout, stderr)."""
    module = __import__(name)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            module.main(argv)
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_programs_are_found() -> None:
    assert {"mnist", "mnist_rts", "gpt_char", "mnist_pipeline", "mnist_phased"} <= set(PROGRAMS)
    assert "mnist_torch_reference" not in PROGRAMS and "observe" not in PROGRAMS


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_example_takes_the_options(name: str) -> None:
    code, out, _ = _main(name, ["--help"])
    assert code == 0
    for flag in FLAGS:
        assert re.search(rf"^\s+{flag}\b", out, re.M), (name, flag, out)


def test_mnist_with_every_option(tmp_path: Path) -> None:
    trace, picture = tmp_path / "trace.json", tmp_path / "live.svg"
    argv = [
        "--max-steps",
        "4",
        "--test-batch-size",
        "1000",
        "--device",
        "cpu",
        "--profile",
        str(trace),
        "--profile-steps",
        "2",
    ]
    code, out, err = _main("mnist", [*argv, "--memory-report", "--liveness", str(picture), "--json"])
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    (memory,) = [d["memory"] for d in docs if "memory" in d]
    (profile,) = [d["profile"] for d in docs if "profile" in d]
    # the memory report of the training program: one IPU, the four layers as modules
    (ipu,) = memory["ipus"]
    assert ipu["variables"] == 4 * (784 * 512 + 512 + 2 * (512 * 512 + 512) + 512 * 10 + 10)
    assert {m["module"] for m in memory["modules"]} == {"fc1", "fc2", "fc3", "fc4"}
    assert sum(t["bytes"] for t in ipu["peak_tensors"]) == ipu["activations_peak"]
    # the profile: runs 2 and 3 of 4 (the first is a warm-up), with FLOPs
    assert profile["steps"] == 2 and profile["trace"] == str(trace)
    rows = {r["key"]: r for r in profile["type"]["rows"]}
    assert rows["HostLoad"]["count"] == 2 * 2  # images and labels, each step
    assert profile["type"]["flops"] > 0
    data = json.loads(trace.read_text())
    steps = [e for e in data["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"]
    kernels = [e for e in data["traceEvents"] if e["ph"] == "X" and e["cat"] not in ("step", "graph call")]
    assert len({(e["ts"], e["dur"]) for e in steps}) == 2
    assert all("Input Dims" in e["args"] for e in kernels if not e["name"].startswith("HostLoad"))
    flops = sum(e["args"].get("flops", 0) for e in kernels)
    assert flops == profile["type"]["flops"]
    assert picture.read_text().startswith("<svg") and "liveness written to" in out


def test_mnist_text_tables_and_bad_paths(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    quick = ["--test-batch-size", "1000", "--device", "cpu"]
    code, out, err = _main("mnist", ["--max-steps", "3", *quick, "--profile", str(trace)])
    assert code == 0, err
    assert f"profile of 2 training steps: trace written to {trace}" in out
    assert re.search(r"^Op type +Count +Total +Mean +% +FLOPs +FLOP/s$", out, re.M), out
    assert re.search(r"^Call site +Count", out, re.M)
    code, _, err = _main("mnist", ["--max-steps", "1", "--device", "cpu", "--profile", str(tmp_path / "no" / "t.json")])
    assert code == 2 and "--profile" in err and "does not exist" in err
    code, _, err = _main("mnist", ["--device", "cpu", "--liveness", str(tmp_path / "live.pdf")])
    assert code == 2 and "must end in .svg or .png" in err
    code, out, err = _main("mnist", ["--max-steps", "1", *quick, "--profile", str(trace)])
    assert code == 0 and "no training step profiled" in out
