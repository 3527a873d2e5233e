"""Which one-IPU plan `compile_program` builds: the serial plan is generated once, with the
savings of blocks and lanes estimated on the way (`build_replica(serial=True)`); the plan
for several threads is built only when they beat OpenBLAS's own threads.

The estimate must be what the plan for `parts` threads counts, and the lines must be the
serial plan's (`parts=1`), on a program where blocks and lanes do occur (the GPT example's
training step with the thresholds lowered) and on one where they do not.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from xl.dialects import rt
from xl.runtime import executable, parallel_kernels
from xl.runtime.executable import compile_program
from xl.runtime.parallel_kernels import ParallelStep
from xl.runtime.plan import PlanBuilder, build_replica
from xl.runtime.streams import StreamIn, StreamOut

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _gpt_program() -> rt.ProgramOp:
    sys.path.insert(0, str(EXAMPLES))
    import gpt_char

    cfg = gpt_char.Config(vocab_size=40, seq_len=16, hidden=32, heads=2, layers=2, batch=8, dropout=0.1, seed=3)
    program = gpt_char.train_program(cfg)[0]._exe.program
    assert program is not None
    return program


def _build(program: rt.ProgramOp, parts: int, serial: bool = False) -> PlanBuilder:
    return build_replica(program, StreamIn, StreamOut, 0, {}, None, parts, serial=serial)[0]


@pytest.mark.parametrize("lowered", [True, False], ids=["blocks-and-lanes", "defaults"])
def test_estimate_is_the_threaded_plans_and_lines_the_serial_plans(
    lowered: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if lowered:  # the attention and MLP kernels split, products run side by side
        monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 1024)
        monkeypatch.setattr(parallel_kernels, "LANE_MIN_COST", 2000)
    program = _gpt_program()
    threaded, serial, estimate = _build(program, 2), _build(program, 1), _build(program, 2, serial=True)
    if lowered:
        assert threaded.split_kernels and threaded.lane_functions and threaded.parallel_gain > 0
    assert (estimate.parallel_gain, estimate.blas_gain) == (threaded.parallel_gain, threaded.blas_gain)
    assert estimate.g.lines == serial.g.lines and estimate.helpers == serial.helpers
    assert not estimate.split_kernels and not estimate.lane_functions
    assert [i.name for i in estimate.infos] == [i.name for i in serial.infos]


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    builds: list[tuple[int, bool]] = []
    real = executable.build_replica

    def counted(*args, **kwargs):
        builds.append((args[6], kwargs.get("serial", False)))
        return real(*args, **kwargs)

    monkeypatch.setattr(executable, "build_replica", counted)
    return builds


def test_serial_plan_is_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks and lanes lose to BLAS threads here (the defaults): one build, the serial
    plan, whose source is that of the plan compiled for one thread."""
    program = _gpt_program()
    builds = _count_builds(monkeypatch)
    exe = compile_program(program, optimize=True, workers=2)
    assert len(builds) == 1
    assert not isinstance(exe.replicas[0].step, ParallelStep)
    one = compile_program(program, optimize=True, workers=1)
    assert exe.sources == one.sources


def test_threaded_plan_is_built_when_it_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 1024)
    monkeypatch.setattr(parallel_kernels, "LANE_MIN_COST", 2000)
    monkeypatch.setattr(parallel_kernels, "PARALLEL_OVER_BLAS", 0.0)
    program = _gpt_program()
    builds = _count_builds(monkeypatch)
    exe = compile_program(program, optimize=True, workers=2)
    assert builds == [(2, True), (2, False)]
    assert isinstance(exe.replicas[0].step, ParallelStep) and "_par(" in exe.sources[0]
    feed = {name: np.zeros(exe.full_shape(shape), dtype) for name, (shape, dtype) in exe.h2d_streams.items()}
    exe.run(feed)
