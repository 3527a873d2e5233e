"""Every program of the IR fuzzer's extended corpus (`tests/helpers/fuzz_mlir.py`) runs the same
through `xl-run` as its printed rt lowering.

Each graph-level program that lowers is printed after the default pipeline + `rt-optimize`
(and outlined with runs of 2+ ops), read back, and run again by `xl-run` (which applies
`rt-optimize` once more): the two runs must end the same way (both succeed, or both fail)
and give the same outputs bit for bit over two steps. This catches what the printed rt form
loses (a discardable mark such as `graph.external`, an attribute the printer drops, a value
the parser reads differently) and `rt-optimize` applied to its own output changing results.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

import fuzz_mlir  # noqa: E402


@pytest.fixture(scope="module")
def corpus() -> dict[str, str]:
    return dict(fuzz_mlir.corpus(extended=True))


def _run(text: str, inputs_of: str, folder: Path) -> tuple[int | None, dict[str, np.ndarray] | str]:
    prog = folder / "p.mlir"
    prog.write_text(text)
    out = folder / "out.npz"
    args = fuzz_mlir._inputs_for(inputs_of.encode(), folder)
    code, _, err, _ = fuzz_mlir.run_in_process("xl-run", [str(prog), *args, "-o", str(out), "--steps", "2"])
    if code != 0:
        return code, err.decode(errors="replace")
    with np.load(out) as f:
        return code, dict(f)


def test_lowered_programs_run_like_their_source(corpus: dict[str, str], tmp_path: Path) -> None:
    pairs = [(name, tag) for name in corpus for tag in ("@rt", "@rt-outlined") if name + tag in corpus]
    assert len(pairs) >= 40, "the corpus has fewer lowered programs than expected"
    failures = []
    ran = 0
    sources: dict[str, tuple[int | None, dict[str, np.ndarray] | str]] = {}  # each source run once
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # host-transfer warnings of some corpus programs
        for name, tag in pairs:
            if name not in sources:
                sources[name] = _run(corpus[name], corpus[name], tmp_path)
            code0, res0 = sources[name]
            code1, res1 = _run(corpus[name + tag], corpus[name], tmp_path)
            if code0 != code1:
                failures.append(f"{name}{tag}: exit {code0} for the source, {code1} lowered: {res0 if code0 else res1}")
                continue
            if code0 != 0:
                continue
            assert isinstance(res0, dict) and isinstance(res1, dict)
            ran += 1
            if sorted(res0) != sorted(res1):
                failures.append(f"{name}{tag}: outputs {sorted(res0)} vs {sorted(res1)}")
            for k in res0:
                if k in res1 and not np.array_equal(res0[k], res1[k], equal_nan=True):
                    failures.append(f"{name}{tag}: {k} = {res0[k].ravel()[:6]} vs {res1[k].ravel()[:6]} lowered")
    assert not failures, "\n".join(failures)
    assert ran >= 30, f"only {ran} lowered programs ran"
