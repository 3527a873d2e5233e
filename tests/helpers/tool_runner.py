"""Run `xl-opt` / `xl-run` in process and capture what they print (for the tool tests)."""

from __future__ import annotations

import contextlib
import io

from xl.tools import opt, run


def xl_opt(*argv: str) -> tuple[int, str, str]:
    """`xl-opt argv...`: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            opt.main(list(argv))
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def xl_run(*argv: str) -> tuple[int, str, str]:
    """`xl-run argv...`: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run.main(list(argv))
    return code, out.getvalue(), err.getvalue()
