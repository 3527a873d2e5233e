"""Print the oldest xDSL release the project's dependency range accepts (`xdsl>=0.74,<0.76` -> 0.74.0).

    python .ci/xdsl_lower_bound.py pyproject.toml

`.ci/run` installs it after the tests have passed on the newest release in the range, and runs
the tests again, so both ends of the range stay tested.
"""

from __future__ import annotations

import re
import sys
import tomllib


def lower_bound(pyproject: str) -> str:
    with open(pyproject, "rb") as f:
        deps: list[str] = tomllib.load(f)["project"]["dependencies"]
    specs = [d for d in deps if re.match(r"xdsl\b", d)]
    if len(specs) != 1:
        raise SystemExit(f"{pyproject}: expected one xdsl dependency, found {specs}")
    low = re.search(r">=\s*([0-9][0-9.]*)", specs[0])
    if low is None:
        raise SystemExit(f"{pyproject}: the xdsl dependency {specs[0]!r} has no lower bound (>=)")
    version = low.group(1)
    return version + ".0" * max(0, 2 - version.count("."))


if __name__ == "__main__":
    print(lower_bound(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"))
