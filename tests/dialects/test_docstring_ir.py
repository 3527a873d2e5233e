"""Every ```mlir block in the docstrings of the xl modules parses.

The blocks are examples of the IR a dialect or pass reads and writes; they are read with
the xl context, one top-level op at a time, so a fragment may use values defined outside
it (`%y = popxl.add %a, %b : ...`). A block showing a rewrite is split at its `// after`
(`// canonicalizes to`, ...) comment lines and each side is parsed on its own. A side
that elides IR with `...` cannot parse; only the modules in `ELIDED` may still do that.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError

from xl.tools.context import xl_context

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dialects", "passes", "runtime", "tools")  # xl.dialects, xl.passes, ...
BLOCK = re.compile(r"```mlir\n(.*?)```", re.S)
SPLIT = re.compile(r"^[ \t]*//[ \t]*(?:after|canonicali[sz]es to|becomes|rewritten to|=>)[^\n]*$", re.M | re.I)
# Modules whose examples still elide IR with `...` (owned by the runtime work; issue 10 phase 2).
ELIDED = {"passes/rt_fold_update.py", "passes/rt_fuse_elementwise.py", "passes/rt_reuse_buffers.py",
          "passes/outline.py"}  # fmt: skip


def _blocks() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).glob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), rel)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                doc = ast.get_docstring(node, clean=True)
                if not doc:
                    continue
                line = getattr(node, "lineno", 1)
                for k, m in enumerate(BLOCK.finditer(doc)):
                    out.append((f"{rel}:{line}#{k}", m.group(1)))
    return out


BLOCKS = _blocks()


def parse_fragment(text: str) -> int:
    """Parses the top-level ops of `text`; returns how many there are."""
    parser = Parser(xl_context(), text)
    n = 0
    while parser.parse_optional_operation() is not None:
        n += 1
    if parser._current_token.kind.name != "EOF":  # noqa: SLF001
        parser.raise_error("expected an operation")
    return n


def test_there_are_examples() -> None:
    assert len(BLOCKS) > 100
    files = {b[0].split(":")[0] for b in BLOCKS}
    assert {"dialects/popxl.py", "dialects/graph.py", "dialects/rt.py", "passes/autodiff.py"} <= files


@pytest.mark.parametrize(("where", "text"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_docstring_ir_parses(where: str, text: str) -> None:
    parts = [p for p in SPLIT.split(text) if p.strip()]
    assert parts, f"{where}: empty ```mlir block"
    for part in parts:
        if "..." in part:
            if where.split(":")[0] in ELIDED:
                continue
            pytest.fail(f"{where}: the example elides IR with '...'; write it out in full")
        try:
            n = parse_fragment(part)
        except Exception as e:  # noqa: BLE001 - report the docstring it comes from
            pytest.fail(f"{where}: the ```mlir example does not parse:\n{e}")
        assert n > 0, f"{where}: no operation in the ```mlir example"


def test_parse_fragment_rejects_bad_ir() -> None:
    with pytest.raises(Exception, match="function type expected"):
        parse_fragment("%y = popxl.add %a, %b : ...")
    with pytest.raises(ParseError):
        parse_fragment("graph.main {num_host_transfers = 1 : i64} {\n}")
    assert parse_fragment("%y = popxl.add %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>") == 1
