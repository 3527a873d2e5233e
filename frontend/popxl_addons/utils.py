"""Small helpers of popxl_addons (popxl_addons/utils.py): `timer`, `WeightsDict`."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = ["timer", "WeightsDict", "overrides", "truncated_normal"]


class WeightsDict(dict):
    """{popxl Variable: host data}: what a layer's `torch_mapping` returns and
    `Session.write_variables_data` takes."""


def truncated_normal(shape: Any, std: float = 0.02, bound: float = 2.0) -> np.ndarray:
    """Normal samples (mean 0, standard deviation `std`) limited to `[-bound * std,
    bound * std]` by redrawing the others (scipy's `truncnorm.rvs(-bound, bound,
    scale=std)`), from NumPy's global random state as upstream."""
    shape = tuple(int(d) for d in np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
    out = np.random.standard_normal(shape)
    bad = np.abs(out) > bound
    while bad.any():
        out[bad] = np.random.standard_normal(int(bad.sum()))
        bad = np.abs(out) > bound
    return out * std


logger = logging.getLogger("popxl_addons")


@contextmanager
def timer(title: str) -> Iterator[dict[str, float]]:
    """Log `"<title> duration: <s> s"` (logger 'popxl_addons', INFO) for the block; the
    yielded dict gets `"seconds"` at the end."""
    result: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield result
    finally:
        result["seconds"] = time.perf_counter() - start
        logger.info("%s duration: %.3f s", title, result["seconds"])


def overrides(cls: type, base: type, method: str) -> bool:
    """Whether `cls` defines `method` differently from `base`."""
    return getattr(cls, method, None) is not getattr(base, method, None)
