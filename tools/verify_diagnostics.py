"""`--verify-diagnostics` with MLIR's semantics: the input says which diagnostics it expects.

Annotations are comments in the input::

    // expected-error {{substring of the message}}        on this line
    // expected-error @+1 {{...}}                          N lines below (@-N: above)
    // expected-warning @above {{...}}                     the nearest line above / below
    // expected-note @below {{...}}                        that holds no annotation
    // expected-error @unknown {{...}}                     a diagnostic without a location

A diagnostic matches an annotation of the same severity on its line whose text is a
substring of its message. Every diagnostic must match an annotation and every annotation
a diagnostic; otherwise each mismatch is reported located (``file:line:col: error:
unexpected error: ...`` / ``expected error "..." was not produced``) and the tool fails.

Verification stops at the first failing op, so each `--split-input-file` chunk produces at
most one error.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Diagnostic", "Expectation", "check_diagnostics", "parse_expectations"]

_ANNOTATION = re.compile(
    r"expected-(?P<sev>error|warning|note)"
    r"(?:\s*@(?P<where>above|below|unknown|[+-]\d+))?"
    r"\s*\{\{(?P<text>.*?)\}\}"
)
_MALFORMED = re.compile(r"expected-(?:error|warning|note)(?:\s*@\S*)?\s*(?:\{\{(?!.*\}\})|$)")
"""A designator not followed by a complete `{{...}}` (other mentions of the words are prose)."""


@dataclasses.dataclass
class Diagnostic:
    """One diagnostic the tool produced: `line`/`col` None when it has no location."""

    severity: str
    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None


@dataclasses.dataclass
class Expectation:
    severity: str
    text: str
    line: int | None
    """The line the diagnostic is expected at (None: `@unknown`)."""
    annotation_line: int
    annotation_col: int
    matched: bool = False


def parse_expectations(text: str, file: str, line_offset: int = 0) -> tuple[list[Expectation], list[str]]:
    """The annotations of `text` (lines numbered from `line_offset + 1`), and located
    messages for malformed ones (a designator without `{{...}}`, a target out of range)."""
    lines = text.split("\n")
    annotated = {i for i, ln in enumerate(lines) if _ANNOTATION.search(ln) or _MALFORMED.search(ln)}
    out: list[Expectation] = []
    errors: list[str] = []
    for i, ln in enumerate(lines):
        if i not in annotated:
            continue
        comment = ln.find("//")
        found = False
        for m in _ANNOTATION.finditer(ln):
            if comment < 0 or m.start() < comment:
                continue
            found = True
            where = m.group("where")
            target: int | None
            if where is None:
                target = i
            elif where == "unknown":
                target = None
            elif where == "above":
                target = next((j for j in range(i - 1, -1, -1) if j not in annotated), -1)
            elif where == "below":
                target = next((j for j in range(i + 1, len(lines)) if j not in annotated), -1)
            else:
                target = i + int(where)
            col = m.start() + 1
            if target is not None and not 0 <= target < len(lines):
                errors.append(
                    f"{file}:{i + 1 + line_offset}:{col}: error: expected-{m.group('sev')} "
                    f"@{where} refers to a line outside the input"
                )
                continue
            out.append(
                Expectation(
                    m.group("sev"),
                    m.group("text").strip(),
                    None if target is None else target + 1 + line_offset,
                    i + 1 + line_offset,
                    col,
                )
            )
        m2 = _MALFORMED.search(ln)
        if not found and m2 is not None:
            if comment >= 0 and m2.start() > comment:
                errors.append(
                    f"{file}:{i + 1 + line_offset}:{m2.start() + 1}: error: "
                    f"malformed {m2.group(0).split()[0].split('@')[0]} annotation: expected "
                    "'@above', '@below', '@unknown', '@+N' or '@-N', then '{{message}}'"
                )
    return out, errors


def check_diagnostics(diagnostics: list[Diagnostic], expectations: list[Expectation], file: str) -> list[str]:
    """The located mismatch messages (empty: every diagnostic was expected and produced)."""
    problems: list[str] = []
    for d in diagnostics:
        match = next(
            (
                x
                for x in expectations
                if not x.matched and x.severity == d.severity and x.line == d.line and x.text in d.message
            ),
            None,
        )
        if match is not None:
            match.matched = True
            continue
        where = f"{d.file or file}:{d.line}:{d.col or 1}: " if d.line is not None else ""
        prefix = where or f"{file}: "
        problems.append(f"{prefix}error: unexpected {d.severity}: {d.message}")
    for x in expectations:
        if not x.matched:
            at = "" if x.line is not None else " (at an unknown location)"
            problems.append(
                f"{file}:{x.annotation_line}:{x.annotation_col}: error: expected "
                f'{x.severity} "{x.text}" was not produced{at}'
            )
    return problems
