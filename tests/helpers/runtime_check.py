"""Run a popxl program through every execution path and return the results.

`run_all(ir, feeds)` runs the same program with the straightforward plan
(`compile_module(..., optimize=False)`), the optimised plan (`optimize=True`) and through
`popxl.Session`, feeding each dict of host data (stream name -> array) in turn, and
returns per path the outputs of each run (stream name -> array) and the final
variables (name -> array). Tests compare every path against NumPy computed
independently, never one path against another only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

import popxl
from xl.compiler import compile_module

PATHS = ("plain", "optimized", "session")

Runs = list[dict[str, np.ndarray]]
# Expected outputs per run: arrays or NumPy scalars (compared with assert_allclose).
Expected = Sequence[Mapping[str, np.ndarray | np.number]]


def run_all(
    ir: popxl.Ir, feeds: list[dict[str, np.ndarray]] | None = None
) -> dict[str, tuple[Runs, dict[str, np.ndarray]]]:
    feeds = feeds or [{}]
    out: dict[str, tuple[Runs, dict[str, np.ndarray]]] = {}
    for path, opt in (("plain", False), ("optimized", True)):
        ex = compile_module(ir._module, optimize=opt)
        runs = [{k: v.copy() for k, v in ex.run(f).items()} for f in feeds]
        out[path] = (runs, {k: v.copy() for k, v in ex.state.items()})
    streams = {s.name: s for s in ir.get_all_h2d_streams()}
    with popxl.Session(ir, "cpu") as session:
        runs = []
        for f in feeds:
            res = session.run({streams[k]: v for k, v in f.items()})
            runs.append({s.name: np.array(v) for s, v in res.items()})
        state = {v.name: np.array(session.get_tensor_data(v)) for v in ir.main_graph.variables}
    out["session"] = (runs, state)
    return out


def check_all(
    ir: popxl.Ir,
    expected: Expected,
    feeds: list[dict[str, np.ndarray]] | None = None,
    state: dict[str, np.ndarray] | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-6,
) -> None:
    """Assert that every path gives `expected` outputs per run (and `state` at the end)."""
    for path, (runs, st) in run_all(ir, feeds).items():
        assert len(runs) == len(expected)
        for k, (got, want) in enumerate(zip(runs, expected)):
            assert set(got) == set(want), (path, sorted(got), sorted(want))
            for name, arr in want.items():
                np.testing.assert_allclose(
                    got[name], arr, rtol=rtol, atol=atol, err_msg=f"{path}: run {k}, stream {name}"
                )
        for name, arr in (state or {}).items():
            np.testing.assert_allclose(st[name], arr, rtol=rtol, atol=atol, err_msg=f"{path}: variable {name}")
