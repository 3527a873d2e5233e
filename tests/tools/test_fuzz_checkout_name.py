"""The fuzzer (`tests/helpers/fuzz_mlir.py`, run as a script by `tests/tools/test_fuzz_parser.py`) imports
the installed `xl` whatever the checkout folder is called.

`git clone` of a repository called xl makes a folder `xl`; when the script put the checkout's
parent folder on `sys.path`, `import xl` found that folder instead of the package. Here the
script and its corpus sit in a folder named `xl` (as in such a clone) and must run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fuzzer_runs_from_a_checkout_named_xl(tmp_path: Path) -> None:
    checkout = tmp_path / "xl"
    for pattern in (
        "tests/helpers/fuzz_mlir.py",
        "tests/helpers/plan_tolerance.py",
        "tests/filecheck/**/*.mlir",
        "examples/ir/*.mlir",
    ):
        for src in ROOT.glob(pattern):
            dst = checkout / src.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    out = tmp_path / "findings.json"
    script = checkout / "tests" / "helpers" / "fuzz_mlir.py"
    r = subprocess.run(
        [sys.executable, str(script), "--n", "20", "--seed", "1", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["runs"] == 20 and report["stats"]["programs"] >= 20
    assert not report["findings"], report["findings"][:3]
