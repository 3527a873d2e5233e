"""Pass pipeline specs as users write them, and what to tell them when one does not parse.

`unwrap_pass_pipeline` reads mlir-opt's form, the passes inside their anchor op
(``--pass-pipeline='builtin.module(cse,canonicalize)'``), and gives xDSL's form
(``cse,canonicalize``, what ``-p`` takes). Every xl pass runs on the whole module, so the
only anchor is ``builtin.module``; a nested pipeline on other ops (``func.func(cse)``) is
refused with a message saying so.

`describe_pipeline_error` turns xDSL's pipeline parse error into one message. Its common
case is an option value that needs double quotes: xDSL's lexer reads unquoted values as
numbers or names of letters, digits, ``_`` and ``-`` only, so ``autodiff{graph=Net_subgraph(0)}``
stops at ``(`` with "Unknown token"; the message names the option and gives the spec to
write, ``autodiff{graph="Net_subgraph(0)"}``::

    >>> message = describe_pipeline_error("autodiff{graph=Net_subgraph(0)}", 27)
    >>> print(message.split(": ", 1)[1])
    write graph="Net_subgraph(0)", as in 'autodiff{graph="Net_subgraph(0)"}'
"""

from __future__ import annotations

import re

from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError

__all__ = [
    "describe_pipeline_error",
    "pipeline_error_column",
    "quote_option_values",
    "unwrap_pass_pipeline",
]

_ANCHOR = re.compile(r"\s*builtin\.module\s*\((?P<body>.*)\)\s*", re.S)
_NESTED = re.compile(r"(?P<name>[A-Za-z_][\w.$-]*)\s*\($")

# What xDSL's pipeline lexer reads as one value without quotes (xdsl.utils.arg_spec).
_BARE_VALUE = re.compile(
    r"[-+]?[0-9]+(\.[0-9]*([eE][-+]?[0-9]+)?)?"  # a number
    r"|[A-Za-z0-9_-]+"  # a name
    r'|"(\\[nfvtr"\\]|[^\n\f\v\r"\\])*"'  # a string literal
)


def unwrap_pass_pipeline(spec: str) -> str:
    """The passes of ``builtin.module(PASSES)`` (mlir-opt's ``--pass-pipeline``), as ``-p``
    takes them; a `ValueError` saying what to write for any other form."""
    m = _ANCHOR.fullmatch(spec)
    if m is None:
        body = spec.strip()
        raise ValueError(
            f"--pass-pipeline '{spec}': the passes go inside their anchor op, as for mlir-opt: "
            f"--pass-pipeline='builtin.module({body})' (or -p '{body}')"
        )
    body = m.group("body")
    depth, quoted = 0, False
    for i, ch in enumerate(body):
        if quoted:
            quoted = ch != '"' or body[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "(" and depth == 0:
            nested = _NESTED.search(body[: i + 1])
            name = nested.group("name") if nested else "("
            raise ValueError(
                f"--pass-pipeline '{spec}': '{name}(...)': xl's passes run on the whole module, so "
                "a pipeline has no nested anchors; list the passes in builtin.module(...) "
                "(e.g. builtin.module(inline,cse))"
            )
    return body


def pipeline_error_column(e: ArgSpecParseError) -> int | None:
    """The 1-based column xDSL's pipeline parse error points at (None if it has none)."""
    m = re.search(r"pass-pipeline:\d+:(\d+)", str(e.args[0] if e.args else e))
    return int(m.group(1)) if m else None


def _options_blocks(spec: str) -> list[tuple[str, int, int]]:
    """(pass name, start, end) of every `{...}` options block: `spec[start:end]` is the
    text between the braces (to the end of `spec` if the block is not closed)."""
    blocks: list[tuple[str, int, int]] = []
    i = 0
    while i < len(spec):
        if spec[i] != "{":
            i += 1
            continue
        name = re.search(r"([A-Za-z0-9_.-]*)\s*$", spec[:i])
        start = j = i + 1
        parens, quoted = 0, False
        while j < len(spec):
            ch = spec[j]
            if quoted:
                quoted = ch != '"' or spec[j - 1] == "\\"
            elif ch == '"':
                quoted = True
            elif ch in "([":
                parens += 1
            elif ch in ")]":
                parens -= 1
            elif ch == "}" and parens <= 0:
                break
            j += 1
        blocks.append((name.group(1) if name else "", start, j))
        i = j + 1
    return blocks


def _options(text: str, offset: int) -> list[tuple[int, int]]:
    """(start, end) of each `key=value` option of an options block (split at whitespace
    outside parentheses, brackets and quotes)."""
    spans: list[tuple[int, int]] = []
    parens, quoted, start = 0, False, None
    for i, ch in enumerate(text):
        if quoted:
            quoted = ch != '"' or text[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch in "([":
            parens += 1
        elif ch in ")]":
            parens -= 1
        if ch.isspace() and not quoted and parens <= 0:
            if start is not None:
                spans.append((offset + start, offset + i))
                start = None
        elif start is None:
            start = i
    if start is not None:
        spans.append((offset + start, offset + len(text)))
    return spans


def _split_values(value: str) -> list[str]:
    """The comma-separated items of an option value (commas inside parentheses, brackets
    and quotes kept)."""
    items: list[str] = []
    parens, quoted, start = 0, False, 0
    for i, ch in enumerate(value):
        if quoted:
            quoted = ch != '"' or value[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch in "([":
            parens += 1
        elif ch in ")]":
            parens -= 1
        elif ch == "," and parens <= 0:
            items.append(value[start:i])
            start = i + 1
    items.append(value[start:])
    return items


def _quoted(item: str) -> str:
    if _BARE_VALUE.fullmatch(item):
        return item
    return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quote_option_values(spec: str) -> tuple[str, list[tuple[str, str, str]]]:
    """`spec` with every option value that xDSL cannot read unquoted put in double quotes,
    and the options changed as (pass name, key, the `key=value` to write)."""
    out: list[str] = []
    changed: list[tuple[str, str, str]] = []
    last = 0
    for pass_name, start, end in _options_blocks(spec):
        for o_start, o_end in _options(spec[start:end], start):
            option = spec[o_start:o_end]
            key, eq, value = option.partition("=")
            if not eq or not value:
                continue
            fixed = ",".join(_quoted(v) for v in _split_values(value))
            if fixed != value:
                out.append(spec[last:o_start])
                out.append(f"{key}={fixed}")
                last = o_end
                changed.append((pass_name, key, f"{key}={fixed}"))
    out.append(spec[last:])
    return "".join(out), changed


def describe_pipeline_error(spec: str, column: int | None, anchored: bool = False) -> str | None:
    """What to tell the user about a pipeline that xDSL failed to parse at `column`
    (1-based), when there is more to say than xDSL's "Unknown token": an option value that
    needs double quotes, with the spec to write (inside `builtin.module(...)` if
    `anchored`). None otherwise."""
    fixed, changed = quote_option_values(spec)
    if not changed:
        return None
    try:
        list(parse_pipeline(fixed))
    except ArgSpecParseError:
        return None
    pass_name, key, write = changed[0]
    if column is not None:  # the option the error points at, if several need quotes
        for block_pass, start, end in _options_blocks(spec):
            if start <= column - 1 <= end:
                for o_start, o_end in _options(spec[start:end], start):
                    if o_start <= column - 1 <= o_end:
                        key_at = spec[o_start:o_end].partition("=")[0]
                        for c in changed:
                            if c[0] == block_pass and c[1] == key_at:
                                pass_name, key, write = c
    if anchored:
        fixed = f"builtin.module({fixed})"
    return (
        f"the value of option '{key}' of pass '{pass_name}' needs double quotes (an unquoted value is "
        f"a number or a name of letters, digits, '_' and '-'): write {write}, as in '{fixed}'"
    )
