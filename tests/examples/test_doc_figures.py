"""The figures README.md and the guides state in prose are what the code prints today.

The commands the docs show with their output (`output` blocks: gpt_char's first losses, the
memory reports of the pipelined and the phased MNIST) are run and compared by
tests/examples/test_docs_guides.py; here each sentence that quotes a figure is compared with that
output block, or with the program itself when the docs show no command for it:

- seed 003's pipelined MNIST: variables, stashes and activation peaks per IPU, against the
  rows of `mnist_pipeline.py --memory-report`;
- the phased MNIST: resident and remote MiB, phased and unphased, against the summary line of
  `mnist_phased.py --memory-report` (bytes);
- gpt_char: the first loss and the last mean of the examples table, against the printed
  600-step run, whose first step is the first line of the short run that is executed;
- the MNIST training program's size as text, with and without its weights.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.helpers import doc_blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _one(pattern: str) -> tuple[re.Match[str], Path]:
    """The one place in README.md and docs/*.md where `pattern` matches (whitespace: any)."""
    found = [(m, doc) for doc in DOCS for m in re.finditer(pattern, doc.read_text(), flags=re.S)]
    assert len(found) == 1, f"{pattern!r}: found {len(found)} times in {[str(d.name) for _, d in found]}"
    return found[0]


def _output_after(doc: Path, command: str) -> str:
    """The `output` block that follows the shell block running `command` in `doc`."""
    blocks = doc_blocks.blocks(doc)
    for before, after in zip(blocks, blocks[1:]):
        if before.lang in doc_blocks.SHELLS and command in before.text and after.is_output:
            return after.text
    raise AssertionError(f"{doc.name} shows no output of {command!r}")


def _close(stated: str, value: float) -> bool:
    """`stated` (a decimal as written) is `value` rounded to the digits it shows."""
    decimals = len(stated.split(".")[1]) if "." in stated else 0
    return abs(float(stated) - value) <= 0.5 * 10**-decimals + 1e-12


def test_pipelined_mnist_memory_figures() -> None:
    m, doc = _one(
        r"pipelined MNIST: IPU 0 holds (\S+\s\S+) of\s+variables, (\S+\s\S+) of\s+stashes and a\s+(\S+\s\S+) activation"
        r"\s+peak; IPU 1 (\S+\s\S+) of\s+variables and a\s+(\S+\s\S+) peak"
    )
    stated = [" ".join(g.split()) for g in m.groups()]
    table = _output_after(doc, "examples/mnist_pipeline.py --memory-report")
    rows = {line.split()[0]: line.split() for line in table.splitlines() if re.match(r"^\s*[01] ", line)}
    cell = lambda ipu, column: " ".join(rows[ipu][1 + 2 * column : 3 + 2 * column])  # noqa: E731
    # columns: variables, stashes, remote, constants, activations (peak), ...
    assert stated == [cell("0", 0), cell("0", 1), cell("0", 4), cell("1", 0), cell("1", 4)], (stated, rows)


def test_phased_mnist_memory_figures() -> None:
    m, doc = _one(
        r"the phased step keeps (\S+)\s+MiB resident \(bounded by its largest phase, fc1\) and (\S+) MiB remote,"
        r"\s+against (\S+) MiB resident"
    )
    out = _output_after(doc, "examples/mnist_phased.py --memory-report")
    got = re.search(r"phased: resident (\d+) B, remote (\d+) B; unphased: resident (\d+) B", out)
    assert got, out
    for stated, nbytes in zip(m.groups(), got.groups()):
        assert _close(stated, int(nbytes) / 2**20), (stated, int(nbytes) / 2**20)


def test_gpt_char_figures() -> None:
    m, _ = _one(r"loss (\S+) -> (\S+) \(mean of the last 50 of 600 steps\)")
    first, last_mean = m.groups()
    run, doc = _one(r"```text\n(step +1 .*?step +600 [^\n]*)\n```")
    lines = run.group(1).splitlines()
    step1 = re.fullmatch(r"step +1  loss (\S+)  \(mean of last 1: \S+\)", lines[0])
    step600 = re.fullmatch(r"step +600  loss \S+  \(mean of last 50: (\S+)\)", lines[-1])
    assert step1 and step600, lines
    assert _close(first, float(step1.group(1))) and _close(last_mean, float(step600.group(1)))
    short = _output_after(doc, "examples/gpt_char.py --steps 2")  # executed by test_docs_guides
    assert lines[0] in short.splitlines(), "the 600-step run starts where the short run does"


def test_mnist_program_size_as_text(tmp_path: Path) -> None:
    m, _ = _one(r"The MNIST training\s+program is (\S+) MB of text with its weights and under (\d+) KB without them")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import mnist
    finally:
        sys.path.pop(0)
    session, _, _, _ = mnist.train_program(8, "cpu", 0.05)
    with_weights = len(session.ir.to_mlir())
    without = len(session.ir.to_mlir(weights=str(tmp_path / "w.npz")))
    assert _close(m.group(1), with_weights / 1e6), with_weights
    assert without < int(m.group(2)) * 1000, without


@pytest.mark.parametrize(
    ("stated", "value", "ok"),
    [("5.57", 5.5699, True), ("5.57", 5.5649, False), ("5.1", 5.104, True), ("16", 16.4, True)],
)
def test_rounding_rule(stated: str, value: float, ok: bool) -> None:
    assert _close(stated, value) is ok
