"""examples/progress_bar.py: the examples' progress output is bounded, on a terminal and in a log."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.narrow import narrow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from progress_bar import LOG_LINES, TTY_MININTERVAL, LogProgress, TerminalProgress, progress  # noqa: E402


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def redraws(text: str) -> int:
    """Updates written: a terminal bar starts each redraw with a carriage return; log lines end in a newline."""
    return text.count("\r") + text.count("\n")


def test_log_output_is_bounded_however_many_steps() -> None:
    out = io.StringIO()
    bar = progress(range(100_000), file=out)
    assert isinstance(bar, LogProgress)
    for i in bar:
        bar.set_description(f"Loss:{i}")
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text
    assert len(lines) == LOG_LINES
    # One line at each tenth, then the summary with the last description.
    assert [narrow(re.search(r"(\d+)/100000", line), re.Match).group(1) for line in lines] == [
        str(10_000 * k) for k in range(1, 11)
    ]
    assert lines[-1].startswith("Loss:99999: 100% 100000/100000 [")


def test_log_output_short_loop_and_early_stop() -> None:
    out = io.StringIO()
    for _ in progress(range(3), total=3, file=out):
        pass
    lines = out.getvalue().splitlines()
    assert [line.split(" [")[0] for line in lines] == [" 33% 1/3", " 66% 2/3", "100% 3/3"]

    out = io.StringIO()
    for i in progress(range(1000), total=1000, file=out):
        if i == 250:
            break
    lines = out.getvalue().splitlines()
    # 10%, 20% and the summary written when the loop stopped at step 250.
    assert [narrow(re.search(r"(\d+)/1000", line), re.Match).group(1) for line in lines] == ["100", "200", "250"]


def test_log_progress_rejects_no_lines() -> None:
    with pytest.raises(ValueError, match="lines must be at least 1"):
        LogProgress(range(3), lines=0)


def test_terminal_bar_redraws_at_a_bounded_rate() -> None:
    out = FakeTerminal()
    steps = 20_000
    start = time.perf_counter()
    bar = progress(range(steps), total=steps, file=out)
    assert isinstance(bar, TerminalProgress)
    for i in bar:
        bar.set_description(f"Loss:{i}")  # recorded for the next timed redraw, not drawn at once
    elapsed = time.perf_counter() - start
    text = out.getvalue()
    # The first draw, one per TTY_MININTERVAL, and the final one on close.
    assert redraws(text) <= elapsed / TTY_MININTERVAL + 3
    assert f"{steps}/{steps}" in text
    assert f"Loss:{steps - 1}" in text


def test_terminal_bar_line() -> None:
    out = FakeTerminal()
    bar = TerminalProgress(range(4), total=4, desc="Loss:0.5", file=out)
    for _ in bar:
        pass
    last = out.getvalue().split("\r")[-1]
    assert re.fullmatch(r"Loss:0\.5: 100%\|#{20}\| 4/4 \[00:00<00:00, [0-9.]+ it/s\]\n", last), last
    # A shorter line is padded over the longer one drawn before it.
    out = FakeTerminal()
    bar = TerminalProgress(range(2), total=2, desc="a long description", file=out)
    it = iter(bar)
    next(it)
    bar.set_description("short", refresh=True)
    first, second = out.getvalue().split("\r")[1:3]
    assert len(second) >= len(first) and second.rstrip().startswith("short:")


def test_examples_need_no_progress_package() -> None:
    """The bar is the project's own: the examples run without tqdm (not a dependency of xl)."""
    code = (
        "import sys; sys.modules['tqdm'] = None; sys.path.insert(0, sys.argv[1]); import io\n"
        "import progress_bar\n"
        "class T(io.StringIO):\n    def isatty(self): return True\n"
        "out = T(); print(sum(progress_bar.progress(range(5), file=out)), '5/5' in out.getvalue())"
    )
    r = subprocess.run([sys.executable, "-c", code, str(EXAMPLES)], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["10", "True"], r.stderr


def _uses_shared_bar(path: Path, seen: frozenset[str] = frozenset()) -> bool:
    """`path` imports `progress` from progress_bar, or from a sibling example that does
    (mnist_rts takes mnist_data_parallel's, which shows the bar on the printing instance)."""
    text = path.read_text()
    if "from progress_bar import progress" in text:
        return True
    for sibling in re.findall(r"^from (\w+) import [^\n]*\bprogress\b", text, re.M):
        other = EXAMPLES / f"{sibling}.py"
        if sibling not in seen and other.exists() and _uses_shared_bar(other, seen | {sibling}):
            return True
    return False


def test_every_training_example_uses_the_shared_bar() -> None:
    for path in sorted(EXAMPLES.glob("mnist*.py")):
        if path.name in ("mnist_data.py", "mnist_torch_reference.py"):
            continue
        assert _uses_shared_bar(path), path.name


def test_example_training_loop_writes_a_bounded_log(capsys: pytest.CaptureFixture[str]) -> None:
    import mnist

    steps = 40
    acc = mnist.main(["--max-steps", str(steps)])
    captured = capsys.readouterr()
    assert 0.0 <= acc <= 100.0
    # stderr is captured (not a terminal): plain lines, at most LOG_LINES per loop
    # (the training epoch and the 25 test batches) although 65 steps ran.
    assert "\r" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) <= 2 * LOG_LINES
    assert any(f"100% {steps}/{steps} [" in line for line in lines)
    assert any("100% 25/25 [" in line for line in lines)
    assert "Epoch 1/1" in captured.out
