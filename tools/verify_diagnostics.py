"""`--verify-diagnostics` with MLIR's semantics: the input says which diagnostics it expects.

Annotations are comments in the input::

    // expected-error {{substring of the message}}        on this line
    // expected-error @+1 {{...}}                          N lines below (@-N: above)
    // expected-warning @above {{...}}                     the nearest line above / below
    // expected-note @below {{...}}                        that holds no annotation
    // expected-error @unknown {{...}}                     a diagnostic without a location
    // expected-error-re {{value %{{[a-z]+}} is undefined}}  a regular expression

A diagnostic matches an annotation of the same severity on its line whose text is a
substring of its message. With the `-re` forms (`expected-error-re`, `expected-warning-re`,
`expected-note-re`, `expected-remark-re`) the text is literal except inside `{{...}}`, which
is a regular expression (MLIR's syntax); the whole is searched for in the message. Every
diagnostic must match an annotation and every annotation a diagnostic; otherwise each
mismatch is reported located (``file:line:col: error: unexpected error: ...`` /
``expected error "..." was not produced``) and the tool fails.

An annotation the verifier does not understand is refused where it is written, never
skipped: an unknown kind (`expected-remarks`, `expected-error-regex`), a bad target
(`@+x`), a missing or unterminated `{{...}}`, an invalid regular expression.

Verification stops at the first failing op, so each `--split-input-file` chunk produces at
most one error.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["SEVERITIES", "Diagnostic", "Expectation", "check_diagnostics", "parse_expectations"]

SEVERITIES = ("error", "warning", "note", "remark")
"""The severities an annotation can announce (MLIR's); xl's tools report errors."""

_KNOWN = {*SEVERITIES, *(f"{s}-re" for s in SEVERITIES)}

_ATTEMPT = re.compile(r"expected-(?P<kind>[A-Za-z][\w-]*)(?=\s*(?:@|\{\{|$))")
"""Something written as an annotation: `expected-<kind>` followed by a target, `{{` or the
end of the line (other mentions of the words, in prose, are not annotations)."""

_ANNOTATION = re.compile(
    r"expected-(?P<sev>error|warning|note|remark)(?P<re>-re)?"
    r"(?:\s*@(?P<where>above|below|unknown|[+-]\d+))?"
    r"\s*\{\{"
)
"""The head of a well-formed annotation, up to its opening `{{`."""

_KNOWN_TEXT = (
    "expected-error, expected-warning, expected-note and expected-remark, each also with -re for a regular expression"
)


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
    """The annotation's text as written (for messages)."""
    line: int | None
    """The line the diagnostic is expected at (None: `@unknown`)."""
    annotation_line: int
    annotation_col: int
    matched: bool = False
    pattern: re.Pattern[str] | None = None
    """For the `-re` forms: the regular expression searched for in the message."""

    def matches(self, d: Diagnostic) -> bool:
        if self.severity != d.severity or self.line != d.line:
            return False
        if self.pattern is not None:
            return self.pattern.search(d.message) is not None
        return self.text in d.message


class _BadAnnotation(ValueError):
    """An annotation that cannot be read; the message says why."""


def _regex_body(line: str, start: int) -> tuple[str, str, int]:
    """The text of a `-re` annotation from `start` (just after its opening `{{`): the text
    as written, the regular expression it stands for, and the index after its closing `}}`.

    Outside `{{...}}` characters are literal; inside they are a regular expression, which
    ends at the first `}}` where its own braces (`{2}`, `{1,3}`) are balanced."""
    parts: list[str] = []
    i = start
    while i < len(line):
        if line.startswith("}}", i):
            return line[start:i].strip(), "".join(parts).strip(), i + 2
        if line.startswith("{{", i):
            j, depth = i + 2, 0
            while j < len(line) and not (depth == 0 and line.startswith("}}", j)):
                if line[j] == "\\":
                    j += 1
                elif line[j] == "{":
                    depth += 1
                elif line[j] == "}":
                    depth -= 1
                j += 1
            if j >= len(line):
                raise _BadAnnotation("a '{{' regular expression without its closing '}}'")
            group = line[i + 2 : j]
            if not group:
                raise _BadAnnotation("an empty '{{}}' regular expression")
            parts.append(f"(?:{group})")
            i = j + 2
            continue
        parts.append(re.escape(line[i]))
        i += 1
    raise _BadAnnotation("no closing '}}' after the message")


def _read_annotation(line: str, pos: int) -> tuple[re.Match[str], str, re.Pattern[str] | None, int]:
    """The annotation written at `pos`: its head, its text, its pattern (`-re`) and the
    index after it; `_BadAnnotation` saying what is wrong otherwise."""
    kind = _ATTEMPT.match(line, pos)
    assert kind is not None
    if kind.group("kind") not in _KNOWN:
        raise _BadAnnotation(f"unknown annotation 'expected-{kind.group('kind')}' (known: {_KNOWN_TEXT})")
    head = _ANNOTATION.match(line, pos)
    if head is None:
        raise _BadAnnotation(
            f"malformed expected-{kind.group('kind')} annotation: expected "
            "'@above', '@below', '@unknown', '@+N' or '@-N', then '{{message}}'"
        )
    if head.group("re") is None:
        end = line.find("}}", head.end())
        if end < 0:
            raise _BadAnnotation(
                f"malformed expected-{kind.group('kind')} annotation: no closing '}}}}' after the message"
            )
        return head, line[head.end() : end].strip(), None, end + 2
    try:
        text, regex, after = _regex_body(line, head.end())
    except _BadAnnotation as e:
        raise _BadAnnotation(f"malformed expected-{kind.group('kind')} annotation: {e}") from None
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise _BadAnnotation(f"expected-{kind.group('kind')}: invalid regular expression: {e}") from None
    return head, text, pattern, after


def parse_expectations(text: str, file: str, line_offset: int = 0) -> tuple[list[Expectation], list[str]]:
    """The annotations of `text` (lines numbered from `line_offset + 1`), and located
    messages for those it cannot read (see the module docstring)."""
    lines = text.split("\n")

    def attempts(ln: str) -> list[re.Match[str]]:
        comment = ln.find("//")
        return [] if comment < 0 else [m for m in _ATTEMPT.finditer(ln) if m.start() > comment]

    found = [attempts(ln) for ln in lines]
    annotated = {i for i, ms in enumerate(found) if ms}
    out: list[Expectation] = []
    errors: list[str] = []
    for i, ln in enumerate(lines):
        skip_to = 0
        for m in found[i]:
            if m.start() < skip_to:  # inside the text of the previous annotation
                continue
            col = m.start() + 1
            where_text = f"{file}:{i + 1 + line_offset}:{col}"
            try:
                head, message, pattern, skip_to = _read_annotation(ln, m.start())
            except _BadAnnotation as e:
                errors.append(f"{where_text}: error: {e}")
                skip_to = len(ln)
                continue
            where = head.group("where")
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
            if target is not None and not 0 <= target < len(lines):
                errors.append(
                    f"{where_text}: error: expected-{head.group('sev')}{head.group('re') or ''} "
                    f"@{where} refers to a line outside the input"
                )
                continue
            out.append(
                Expectation(
                    head.group("sev"),
                    message,
                    None if target is None else target + 1 + line_offset,
                    i + 1 + line_offset,
                    col,
                    pattern=pattern,
                )
            )
    return out, errors


def check_diagnostics(diagnostics: list[Diagnostic], expectations: list[Expectation], file: str) -> list[str]:
    """The located mismatch messages (empty: every diagnostic was expected and produced)."""
    problems: list[str] = []
    for d in diagnostics:
        match = next((x for x in expectations if not x.matched and x.matches(d)), None)
        if match is not None:
            match.matched = True
            continue
        where = f"{d.file or file}:{d.line}:{d.col or 1}: " if d.line is not None else ""
        prefix = where or f"{file}: "
        problems.append(f"{prefix}error: unexpected {d.severity}: {d.message}")
    for x in expectations:
        if not x.matched:
            at = "" if x.line is not None else " (at an unknown location)"
            what = f"{x.severity} matching" if x.pattern is not None else x.severity
            problems.append(
                f'{file}:{x.annotation_line}:{x.annotation_col}: error: expected {what} "{x.text}" was not produced{at}'
            )
    return problems
