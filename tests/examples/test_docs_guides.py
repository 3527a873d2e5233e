"""The code in the docs runs as written.

Every guide (docs/*.md) and README.md: each `python` block, and each shell block that runs
`xl-opt` or `xl-run`, is executed in order in a scratch folder (`tests/helpers/doc_blocks.py` says
how blocks are marked: `file=NAME`, `not-run: REASON`, `exit=N`, `requires=PROGRAM`,
`output`), and must succeed; an `output` block must equal what the block before it printed.
A block left out says why, and every guide runs something.

docs/extending.md in more depth: every fenced block whose info string names a file
(```python file=NAME```) is written to a scratch folder; then the lit test of the pass guide
runs under lit with the guide's lit.cfg, the pass is found through the guide's entry point,
the Session example prints what NumPy computes, and the op and kernel of the op guide are
built and checked.
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

from tests.helpers import doc_blocks

ROOT = Path(__file__).resolve().parents[2]
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


# -- every guide and README.md: the blocks run ---------------------------------------------------

DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# Guides whose blocks are files that their own tests run: extending.md (this file's tests above),
# custom_ops.md (tests/frontend/popxl/test_custom_ops.py runs its binding module).
FILE_GUIDES = {"docs/extending.md", "docs/custom_ops.md"}


def _rel(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def _check_results(blocks: list[doc_blocks.Block], results: list[doc_blocks.Result]) -> None:
    by_where = {r.where: r for r in results}
    for r in results:
        assert r.ok, (
            f"{r.where}: the block failed (exit {r.returncode}):\n--- stdout\n{r.stdout[-4000:]}\n"
            f"--- stderr\n{r.stderr[-4000:]}"
        )
    ran = [b for b in blocks if b.runnable]
    assert [b.where for b in ran] == [r.where for r in results]
    for i, b in enumerate(blocks):
        if b.is_output:
            assert i > 0 and blocks[i - 1].runnable, f"{b.where}: an output block must follow a block that runs"
            got = by_where[blocks[i - 1].where]
            if got.skipped:
                continue
            assert doc_blocks.output_matches(b.text, got.stdout), (
                f"{b.where}: the block before printed\n{got.stdout}\ninstead of\n{b.text}"
            )


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_doc_blocks_run(doc: Path, tmp_path: Path) -> None:
    blocks = doc_blocks.blocks(doc)
    if not any(b.runnable for b in blocks):
        pytest.skip(f"{_rel(doc)} has no block to run (its files are run by its own tests)")
    _check_results(blocks, doc_blocks.run_blocks(blocks, tmp_path))


def test_every_guide_runs_something() -> None:
    for doc in (ROOT / "docs").glob("*.md"):
        blocks = doc_blocks.blocks(doc)
        if _rel(doc) in FILE_GUIDES:
            assert any(b.file for b in blocks), f"{_rel(doc)} has no file block for its tests"
        else:
            assert any(b.runnable for b in blocks), f"{_rel(doc)} has no block that runs"


def test_every_unrun_block_says_why() -> None:
    for doc in DOCS:
        for b in doc_blocks.blocks(doc):
            if b.not_run is not None:
                assert len(b.not_run.split()) >= 3, f"{b.where}: `not-run:` needs a reason, got {b.not_run!r}"


RULES = """# A guide

```python
x = 2 + 3
print(x)
```

```text output
5
```

```python file=data.txt
hello
```

```bash
xl-opt --version | cut -d' ' -f1 > tool.txt && cat data.txt tool.txt
```

```text output
hello
xl-opt
```

```bash exit=1
xl-opt nosuch.mlir
```

```python not-run: a fragment that names nothing defined
undefined_name()
```

```bash
pip install nothing-at-all  # shown, not run: no xl tool in it
```

```bash
echo "3 steps in 1.25 s"; echo "a line"; echo "last"
```

```text output
3 steps in ... s
...
last
```

```python
assert x == 5 and open("tool.txt").read() == "xl-opt\\n"
```
"""


def test_block_rules(tmp_path: Path) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text(RULES)
    blocks = doc_blocks.blocks(doc)
    assert [(b.lang, b.runnable) for b in blocks] == [
        ("python", True),
        ("text", False),
        ("python", False),
        ("bash", True),
        ("text", False),
        ("bash", True),
        ("python", False),
        ("bash", False),
        ("bash", True),
        ("text", False),
        ("python", True),
    ]
    assert blocks[2].file == "data.txt" and blocks[6].not_run == "a fragment that names nothing defined"
    assert blocks[0].line == 3 and blocks[0].where.endswith("guide.md:3")
    scratch = tmp_path / "run"
    scratch.mkdir()
    results = doc_blocks.run_blocks(blocks, scratch)
    _check_results(blocks, results)
    assert results[2].returncode == 1 and "nosuch.mlir" in results[2].stderr
    # a failing block stops the run and is reported at its line; a wrong output is a failure
    doc.write_text(RULES.replace("x = 2 + 3", "x = 2 + 3\nraise ValueError('boom')"))
    blocks = doc_blocks.blocks(doc)
    results = doc_blocks.run_blocks(blocks, tmp_path / "run")
    assert len(results) == 1 and not results[0].ok and "ValueError: boom" in results[0].stderr
    with pytest.raises(AssertionError, match=r"guide\.md:3: the block failed"):
        _check_results(blocks, results)
    doc.write_text(RULES.replace("```text output\n5\n", "```text output\n6\n"))
    blocks = doc_blocks.blocks(doc)
    with pytest.raises(AssertionError, match=r"guide\.md:8: the block before printed"):
        _check_results(blocks, doc_blocks.run_blocks(blocks, tmp_path / "run"))


@pytest.mark.parametrize(
    ("expected", "got", "match"),
    [
        ("a\nb", "a\nb\n", True),
        ("a  \nb", "a\nb   ", True),  # trailing blanks
        ("a\nb", "a\nc", False),
        ("a\nb", "a\nb\nc", False),  # an extra line
        ("took ... s", "took 1.5 s", True),
        ("took ... s", "took 1.5 ms", False),  # " s" is not there
        ("took ... s", "took 1.5", False),
        ("a\n...\nz", "a\nz", True),  # any lines, none too
        ("a\n...\nz", "a\nb\nc\nz", True),
        ("a\n...\nz", "a\nb\nc", False),
        ("x = 1.0 (...)", "x = 1.0 (a.b)", True),
        ("x = 1.0", "x = 1x0", False),  # no regex from the text
    ],
)
def test_output_matching(expected: str, got: str, match: bool) -> None:
    assert doc_blocks.output_matches(expected, got) is match


def test_info_strings() -> None:
    assert doc_blocks.parse_info("python file=x.py") == ("python", {"file": "x.py"}, None)
    assert doc_blocks.parse_info("bash exit=1 requires=dot") == ("bash", {"exit": "1", "requires": "dot"}, None)
    assert doc_blocks.parse_info("python not-run: needs the application's package") == (
        "python",
        {},
        "needs the application's package",
    )
    assert doc_blocks.parse_info("python not-run")[2] == ""  # no reason: test_every_unrun_block_says_why refuses it
    assert doc_blocks.parse_info("text output") == ("text", {"output": ""}, None)
