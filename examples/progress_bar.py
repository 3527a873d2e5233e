"""Progress bars for the example programs, at a bounded refresh rate.

    from progress_bar import progress
    bar = progress(training_data, total=len(training_data))
    for data, labels in bar:
        ...
        bar.set_description(f"Loss:{loss:0.4f}")

On a terminal this is a one-line bar redrawn in place at most every `TTY_MININTERVAL`
seconds (`set_description` records the text for the next redraw instead of redrawing at
once, which would be one redraw per step). When the bar's stream (stderr by default) is not
a terminal, e.g. a log file or a pipe, it writes plain lines instead: one at each
`100 / LOG_LINES` percent of `total` and a summary when the loop ends, so a log gets at most
`LOG_LINES` lines per loop however many steps it has. Neither needs a package beyond the
standard library.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import Generic, TextIO, TypeVar

__all__ = ["progress", "TerminalProgress", "LogProgress", "TTY_MININTERVAL", "LOG_LINES"]

T = TypeVar("T")

# Seconds between two redraws of a terminal bar.
TTY_MININTERVAL = 0.5
# Most lines per loop when the output is not a terminal (the last one is the summary).
LOG_LINES = 10
# Characters of a terminal bar's bar.
BAR_WIDTH = 20


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class TerminalProgress(Generic[T]):
    """A one-line bar redrawn in place (a carriage return, then the line) at most every
    `mininterval` seconds, and once more when the loop ends::

        Loss:0.1234:  42%|########            | 420/1000 [00:03<00:04, 120.50 it/s]
    """

    def __init__(
        self,
        iterable: Iterable[T],
        total: int | None = None,
        desc: str = "",
        file: TextIO | None = None,
        mininterval: float = TTY_MININTERVAL,
    ):
        self.iterable = iterable
        if total is None and isinstance(iterable, Sized):
            total = len(iterable)
        self.total = total
        self.desc = desc
        self.file = file
        self.mininterval = mininterval
        self.n = 0
        self._start = time.perf_counter()
        self._last_draw = self._start
        self._drawn = 0
        self._closed = False

    def __len__(self) -> int:
        if self.total is None:
            raise TypeError("TerminalProgress: the length of this loop is unknown")
        return self.total

    def set_description(self, desc: str | None = None, refresh: bool = False) -> None:
        self.desc = desc or ""
        if refresh:
            self._draw()

    def _line(self) -> str:
        elapsed = time.perf_counter() - self._start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        prefix = f"{self.desc}: " if self.desc else ""
        if not self.total:
            return f"{prefix}{self.n} it [{_clock(elapsed)}, {rate:.2f} it/s]"
        done = min(self.n / self.total, 1.0)
        filled = int(done * BAR_WIDTH)
        remaining = (self.total - self.n) / rate if rate > 0 else 0.0
        return (
            f"{prefix}{int(100 * done):3d}%|{'#' * filled}{' ' * (BAR_WIDTH - filled)}| {self.n}/{self.total} "
            f"[{_clock(elapsed)}<{_clock(remaining)}, {rate:.2f} it/s]"
        )

    def _draw(self, end: str = "") -> None:
        line = self._line()
        out = self.file if self.file is not None else sys.stderr
        # Spaces over what is left of a longer previous line.
        out.write("\r" + line + " " * max(self._drawn - len(line), 0) + end)
        out.flush()
        self._drawn = len(line)
        self._last_draw = time.perf_counter()

    def __iter__(self) -> Iterator[T]:
        self._draw()
        try:
            for item in self.iterable:
                yield item
                self.n += 1
                if time.perf_counter() - self._last_draw >= self.mininterval:
                    self._draw()
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._draw(end="\n")

    def __enter__(self) -> TerminalProgress[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LogProgress(Generic[T]):
    """A progress report in plain lines for logs: at most `lines` lines, the last a summary."""

    def __init__(
        self,
        iterable: Iterable[T],
        total: int | None = None,
        desc: str = "",
        file: TextIO | None = None,
        lines: int = LOG_LINES,
    ):
        if lines < 1:
            raise ValueError(f"LogProgress: lines must be at least 1, got {lines}")
        self.iterable = iterable
        if total is None and isinstance(iterable, Sized):
            total = len(iterable)
        self.total = total
        self.desc = desc
        self.file = file
        self.lines = lines
        self.n = 0
        self._start = time.perf_counter()
        self._closed = False

    def __len__(self) -> int:
        if self.total is None:
            raise TypeError("LogProgress: the length of this loop is unknown")
        return self.total

    def set_description(self, desc: str | None = None, refresh: bool = False) -> None:
        self.desc = desc or ""

    def _write(self, text: str) -> None:
        out = self.file if self.file is not None else sys.stderr
        out.write(text + "\n")
        out.flush()

    def _line(self) -> str:
        elapsed = time.perf_counter() - self._start
        rate = f", {self.n / elapsed:.1f} it/s" if elapsed > 0 else ""
        if self.total:
            where = f"{100 * self.n // self.total:3d}% {self.n}/{self.total}"
        else:
            where = f"{self.n}"
        prefix = f"{self.desc}: " if self.desc else ""
        return f"{prefix}{where} [{elapsed:.1f}s{rate}]"

    def __iter__(self) -> Iterator[T]:
        # Steps after which a line is written: the ends of the first `lines - 1` of `lines`
        # equal parts of `total` (the summary written by `close` is the last line).
        marks: set[int] = set()
        if self.total:
            marks = {-(-self.total * k // self.lines) for k in range(1, self.lines)} - {self.total}
        try:
            for item in self.iterable:
                yield item
                self.n += 1
                if self.n in marks:
                    self._write(self._line())
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._write(self._line())

    def __enter__(self) -> LogProgress[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_terminal(stream: TextIO | None) -> bool:
    out = stream if stream is not None else sys.stderr
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


def progress(
    iterable: Iterable[T],
    total: int | None = None,
    desc: str = "",
    file: TextIO | None = None,
) -> TerminalProgress[T] | LogProgress[T]:
    """A progress bar over `iterable` that writes a bounded number of updates to `file`.

    `file` defaults to stderr. A terminal gets a bar redrawn at most every
    `TTY_MININTERVAL` seconds; anything else gets at most `LOG_LINES` plain lines.
    """
    if _is_terminal(file):
        return TerminalProgress(iterable, total=total, desc=desc, file=file, mininterval=TTY_MININTERVAL)
    return LogProgress(iterable, total=total, desc=desc, file=file)
