"""The fenced code blocks of the Markdown docs, and a runner that executes them as a reader would.

A block's info string is its language, then optional words:

- `file=NAME`: the block is the file NAME; it is written to the scratch folder before any
  block runs (the doc's own tests use it, or later blocks read it);
- `not-run: REASON`: not executed; the reason is required;
- `exit=N` (shell blocks): the block ends with exit status N (a command shown failing);
- `requires=PROGRAM`: run only when PROGRAM is installed (e.g. Graphviz `dot`);
- `output` (a `text` block): the standard output of the block before it, where `...`
  stands for any text (a line of only `...`: any lines), as doctest's ELLIPSIS.

Runnable: every `python` block, every shell block (`bash`, `sh`, `console`) that runs
`xl-opt` or `xl-run`, and every shell block followed by an `output` block. The blocks of one document run in order in one scratch folder (with
`examples`, `tests` and `docs` linked from the checkout) and one Python namespace, so a
block may use what an earlier one defined or wrote.

    python tests/helpers/doc_blocks.py BLOCKS.json RESULTS.json   # the runner, in the scratch folder
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
SHELLS = ("bash", "sh", "console")
TOOLS = re.compile(r"(^|[\s|;&(])(xl-opt|xl-run)\b")


@dataclass
class Block:
    """One fenced block of a document."""

    doc: str  # path relative to the checkout
    line: int  # the line of the opening fence (1-based)
    lang: str
    text: str
    attrs: dict[str, str] = field(default_factory=dict)
    not_run: str | None = None  # the reason, for a block marked `not-run:`
    output_follows: bool = False  # the next block is its `output`

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def file(self) -> str | None:
        return self.attrs.get("file")

    @property
    def runnable(self) -> bool:
        """Run by `run_blocks`: a python block, or a shell block using xl-opt / xl-run, that is
        neither a file nor marked `not-run`."""
        if self.not_run is not None or self.file is not None:
            return False
        if self.lang == "python":
            return True
        return self.lang in SHELLS and (self.output_follows or TOOLS.search(self.text) is not None)

    @property
    def is_output(self) -> bool:
        return "output" in self.attrs


def parse_info(info: str) -> tuple[str, dict[str, str], str | None]:
    """`python file=x.py` -> ("python", {"file": "x.py"}, None); `bash not-run: why` -> reason "why"."""
    info = info.strip()
    lang, _, rest = info.partition(" ")
    not_run = None
    if "not-run:" in rest:
        rest, _, reason = rest.partition("not-run:")
        not_run = reason.strip()
    elif re.search(r"(^|\s)not-run(\s|$)", rest):
        not_run = ""  # marked without a reason: test_every_unrun_block_says_why refuses it
        rest = re.sub(r"(^|\s)not-run(\s|$)", " ", rest)
    attrs = {}
    for word in rest.split():
        key, _, value = word.partition("=")
        attrs[key] = value
    return lang, attrs, not_run


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of `doc`, in order."""
    text = doc.read_text()
    out = []
    for m in _FENCE.finditer(text):
        lang, attrs, not_run = parse_info(m.group(1))
        line = text.count("\n", 0, m.start()) + 1
        rel = str(doc.resolve().relative_to(ROOT)) if doc.resolve().is_relative_to(ROOT) else str(doc)
        out.append(Block(rel, line, lang, m.group(2), attrs, not_run))
    for before, after in zip(out, out[1:]):
        before.output_follows = after.is_output
    return out


def output_matches(expected: str, got: str) -> bool:
    """`got` (a block's standard output) matches the `output` block `expected`: the same
    lines, trailing blanks ignored, `...` standing for any text and a line of `...` for any lines."""

    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip("\n").splitlines()]

    parts = []
    for line in lines(expected):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.fullmatch("".join(parts), "\n".join(lines(got)) + "\n") is not None


@dataclass
class Result:
    """What running one block gave."""

    where: str
    ok: bool
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    skipped: str | None = None


def prepare(scratch: Path, doc_blocks: list[Block]) -> None:
    """The scratch folder: `examples`, `tests`, `docs` linked from the checkout, and the doc's files."""
    for name in ("examples", "tests", "docs"):
        link = scratch / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    for b in doc_blocks:
        if b.file is not None:
            (scratch / b.file).write_text(b.text)


def run_blocks(doc_blocks: list[Block], scratch: Path, timeout: float = 900) -> list[Result]:
    """Run the runnable blocks of one document in order in `scratch` (a subprocess; see the module docstring)."""
    prepare(scratch, doc_blocks)
    todo = [asdict(b) for b in doc_blocks if b.runnable]
    (scratch / ".blocks.json").write_text(json.dumps(todo))
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), ".blocks.json", ".results.json"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the block runner failed:\n{proc.stdout}\n{proc.stderr}")
    return [Result(**r) for r in json.loads((scratch / ".results.json").read_text())]


def _run_python(block: Block, namespace: dict) -> Result:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compile(block.text, block.where, "exec"), namespace)
    except BaseException:  # a failing block is reported with its traceback (SystemExit too)
        return Result(block.where, False, out.getvalue(), err.getvalue() + traceback.format_exc())
    return Result(block.where, True, out.getvalue(), err.getvalue())


def _run_shell(block: Block) -> Result:
    needs = block.attrs.get("requires")
    if needs and shutil.which(needs) is None:
        return Result(block.where, True, skipped=f"{needs} is not installed")
    expected = int(block.attrs.get("exit", "0"))
    proc = subprocess.run(
        ["bash", "-c", "set -eo pipefail\n" + block.text], capture_output=True, text=True, timeout=600
    )
    ok = proc.returncode == expected and "Traceback (most recent call last)" not in proc.stderr
    return Result(block.where, ok, proc.stdout, proc.stderr, proc.returncode)


def _main(blocks_json: str, results_json: str) -> None:
    todo = [Block(**b) for b in json.loads(Path(blocks_json).read_text())]
    namespace: dict = {"__name__": "__main__"}
    results = []
    for block in todo:
        result = _run_python(block, namespace) if block.lang == "python" else _run_shell(block)
        results.append(result)
        if not result.ok:
            break  # later blocks may need what this one should have made
    Path(results_json).write_text(json.dumps([asdict(r) for r in results]))


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
