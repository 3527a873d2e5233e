"""Hypothesis profiles for the property tests.

- `xl-ci` (default): derandomised, no example database, bounded so CI stays reproducible
  and quick;
- `long`: `pytest --hypothesis-profile=long tests/programs/test_property_programs.py` tries
  thousands of programs with a random seed (printed on failure; `--hypothesis-seed=N`
  repeats a run).

Tests that set `max_examples` themselves keep their own count.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings

# No explain phase: it reruns a failing program hundreds of times to annotate lines.
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

settings.register_profile(
    "xl-ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=_SLOW_OK,
    phases=_PHASES,
)
settings.register_profile(
    "long", max_examples=3000, deadline=None, database=None, suppress_health_check=_SLOW_OK, phases=_PHASES
)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("xl-ci")
