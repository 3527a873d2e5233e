"""docs/extending.md: the code of its guides runs as written.

Every fenced block whose info string names a file (```python file=NAME```) is written to a
scratch folder; then the lit test of the pass guide runs under lit with the guide's
lit.cfg, the pass is found through the guide's entry point, the Session example prints
what NumPy computes, and the op and kernel of the op guide are built and checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "extending.md"
_BLOCK = re.compile(r"^```(\w+) file=(\S+)\n(.*?)^```$", re.M | re.S)


LIT = "import lit.main; lit.main.main()"


def guide_files() -> dict[str, str]:
    return {m.group(2): m.group(3) for m in _BLOCK.finditer(GUIDE.read_text())}


@pytest.fixture(scope="module")
def guide_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("guide")
    for name, text in guide_files().items():
        (d / name).write_text(text)
    return d


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env


def _run(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=300)


def test_the_guide_has_its_files() -> None:
    assert set(guide_files()) == {
        "fold_double_neg.py",
        "fold-double-neg.mlir",
        "lit.cfg",
        "pyproject.toml",
        "run_in_session.py",
        "softsign_op.py",
        "softsign_kernel.py",
    }


def test_pass_lit_test_passes(guide_dir: Path) -> None:
    r = _run([sys.executable, "-c", LIT, "-v", "fold-double-neg.mlir"], guide_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS: my-passes :: fold-double-neg.mlir" in r.stdout


def test_pass_lit_test_can_fail(guide_dir: Path, tmp_path: Path) -> None:
    """The guide's lit test checks something: without the fold it fails."""
    for name in ("lit.cfg", "fold_double_neg.py"):
        (tmp_path / name).write_text((guide_dir / name).read_text())
    text = (guide_dir / "fold-double-neg.mlir").read_text()
    (tmp_path / "no-fold.mlir").write_text(text.replace("-p fold-double-neg,dce", "-p dce"))
    r = _run([sys.executable, "-c", LIT, "-v", "no-fold.mlir"], tmp_path)
    assert r.returncode != 0 and "FAIL: my-passes :: no-fold.mlir" in r.stdout


def test_entry_point_from_the_guide(guide_dir: Path, tmp_path: Path) -> None:
    """The guide's pyproject entry point, installed as a distribution on sys.path, makes
    xl-opt and the Python registry know the pass without --load-pass-plugin."""
    project = tomllib.loads((guide_dir / "pyproject.toml").read_text())["project"]
    eps = project["entry-points"]["xl.passes"]
    site = tmp_path / "site"
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("[xl.passes]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    (site / "fold_double_neg.py").write_text((guide_dir / "fold_double_neg.py").read_text())
    r = _run(["xl-opt", "--list-passes"], tmp_path, PYTHONPATH=str(site))
    assert r.returncode == 0, r.stderr
    plugins = r.stdout.split("plugin passes", 1)[1].split("xDSL passes", 1)[0]
    assert "fold-double-neg: Fold `popxl.neg(popxl.neg(x))` into `x`" in plugins
    r = _run(
        ["xl-opt", str(guide_dir / "fold-double-neg.mlir"), "-p", "fold-double-neg,dce"],
        tmp_path,
        PYTHONPATH=str(site),
    )
    assert r.returncode == 0, r.stderr
    assert "popxl.neg" not in r.stdout and "graph.host_store @y, %x" in r.stdout
    code = "from xl.passes import get_all_passes; print(get_all_passes()['fold-double-neg']().__name__)"
    r = _run([sys.executable, "-c", code], tmp_path, PYTHONPATH=str(site))
    assert r.stdout.strip() == "FoldDoubleNegPass", r.stderr


def test_session_example_prints_numpy_result(guide_dir: Path) -> None:
    r = _run([sys.executable, "run_in_session.py"], guide_dir, PYTHONPATH=str(guide_dir))
    assert r.returncode == 0, r.stderr
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert r.stdout.strip() == str((-(-x) + 1.0).tolist())  # noqa: B002 (the guide's program negates twice)


OP_CHECK = """
import numpy as np
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from softsign_op import SoftsignOp
import softsign_kernel  # registers the kernel
from xl.runtime.kernels import KERNELS

block = Block(arg_types=[TensorType(f32, [2, 3])])
op = SoftsignOp.make([block.args[0]])
block.add_op(op)
op.verify()
assert op.result.type == TensorType(f32, [2, 3]), op.result.type
print(op)
k = KERNELS[SoftsignOp]({})
x = np.array([[-3.0, -1.0, 0.0], [0.5, 2.0, 10.0]], np.float32)
out = np.empty_like(x)
k(x, out)
np.testing.assert_allclose(out, x / (1 + np.abs(x)), rtol=1e-6)
bad = SoftsignOp.create(operands=[block.args[0]], result_types=[TensorType(f32, [3])])
block.add_op(bad)
try:
    bad.verify()
except VerifyException as e:
    print("rejected:", str(e).splitlines()[0])
"""


def test_op_guide_builds_verifies_and_computes(guide_dir: Path) -> None:
    r = _run([sys.executable, "-c", OP_CHECK], guide_dir, PYTHONPATH=str(guide_dir))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert re.fullmatch(r"%\d+ = popxl.softsign %\d+ : \(tensor<2x3xf32>\) -> tensor<2x3xf32>", lines[0]), lines[0]
    assert lines[-1].startswith("rejected:")
