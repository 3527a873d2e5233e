"""Each op's name is written once: as the `name = "..."` of its class.

Passes, the runtime, the compiler and the frontend refer to an op by its class
(`isinstance`, registration by class, `GeluOp.name` in a message), never by spelling its
name again, so renaming an op or adding one touches one place. The check walks the Python
syntax tree of every source module under dialects/, passes/, runtime/, compiler/ and
frontend/ and looks for string constants equal to the name of a registered op (every op of
every dialect in `get_all_dialects()` plus the kernels only `rt` passes make,
`RT_KERNEL_OPS`): such a constant, or a piece of an f-string equal to one, may appear in
the module defining the op's class only. A docstring or a longer message is not a constant
equal to a name and is not counted.
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections import defaultdict
from pathlib import Path

from xdsl.ir import Operation

from xl.dialects import get_all_dialects
from xl.dialects.rt_kernels import RT_KERNEL_OPS

SOURCE_ROOT = Path(__file__).resolve().parents[2]
SOURCE_FOLDERS = ("dialects", "passes", "runtime", "compiler", "frontend")


def registered_ops() -> dict[str, type[Operation]]:
    """Every op class the dialects register, by op name."""
    ops: dict[str, type[Operation]] = {}
    for factory in get_all_dialects().values():
        for cls in factory().operations:
            ops[cls.name] = cls
    for cls in RT_KERNEL_OPS:
        ops[cls.name] = cls
    return ops


def defining_file(cls: type[Operation]) -> Path:
    path = inspect.getsourcefile(cls) or sys.modules[cls.__module__].__file__
    assert path is not None, cls
    return Path(path).resolve()


def name_constants(path: Path, names: set[str]) -> list[tuple[str, int]]:
    """(op name, line) of every string constant of `path` (f-string pieces included) equal
    to one of `names`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.value, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]


def test_scan_finds_the_defining_constants() -> None:
    """The scan sees each class's `name = "..."` (so a clean result is not a blind scan)."""
    ops = registered_ops()
    assert len(ops) > 150, "the dialects register fewer ops than expected"
    for name in ("popxl.gelu", "replica.all_reduce", "ipu.remote_load", "rt.state", "xl.fused"):
        assert [n for n, _ in name_constants(defining_file(ops[name]), {name})] == [name]


def test_each_op_name_is_a_string_constant_in_one_file() -> None:
    ops = registered_ops()
    names = set(ops)
    files = sorted(p for folder in SOURCE_FOLDERS for p in (SOURCE_ROOT / folder).rglob("*.py"))
    assert files, f"no sources under {SOURCE_ROOT}"
    elsewhere: dict[str, list[str]] = defaultdict(list)
    for path in files:
        resolved = path.resolve()
        for name, line in name_constants(path, names):
            if resolved != defining_file(ops[name]):
                elsewhere[name].append(f"{path.relative_to(SOURCE_ROOT)}:{line}")
    assert not elsewhere, (
        "op names spelled outside the module defining their class (use the class: isinstance, "
        "`SomeOp.name`):\n" + "\n".join(f"  {n}: {', '.join(w)}" for n, w in sorted(elsewhere.items()))
    )
