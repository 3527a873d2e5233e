"""Small helpers of popxl_addons (popxl_addons/utils.py): `timer`, `WeightsDict`,
`OrderedDict`, `null_context`, `suffix_graph_name`."""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from popxl.bridge import check_int

__all__ = ["timer", "WeightsDict", "OrderedDict", "overrides", "truncated_normal", "null_context", "suffix_graph_name"]

_K = TypeVar("_K")
_V = TypeVar("_V")


class OrderedDict(collections.OrderedDict[_K, _V]):
    """An `OrderedDict` with `idx(i)` (the i-th value) and a one-item-per-line repr."""

    def idx(self, idx: int) -> _V:
        """The value at position `idx` (negative counts from the end)."""
        idx = check_int(idx, "OrderedDict.idx", "idx")
        values = list(self.values())
        try:
            return values[idx]
        except IndexError:
            raise IndexError(f"OrderedDict.idx: index {idx} out of range for {len(values)} items") from None

    def __repr__(self) -> str:
        if not self:
            return "{}"
        return "{\n" + "".join(f"{k}: {v},\n" for k, v in self.items()) + "}"


@contextmanager
def null_context() -> Iterator[None]:
    """A context manager that does nothing."""
    yield


def suffix_graph_name(name: str, suffix: str) -> str:
    """`name` without its `_subgraph(N)` parts, then `_<suffix>`."""
    base = re.sub(r"_subgraph\(\d+\)", "", name)
    return f"{base}_{suffix}"


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
def timer(title: str | None = None, log_to_wandb: bool = True) -> Iterator[dict[str, float]]:
    """Log `"<title> duration: <s> s"` (logger 'popxl_addons', INFO) for the block; the
    yielded dict gets `"seconds"` at the end. `log_to_wandb` is accepted for upstream's
    signature (xl logs to Weights & Biases never)."""
    result: dict[str, float] = {}
    start = time.perf_counter()
    logger.info("Starting %s", title or "")
    try:
        yield result
    finally:
        result["seconds"] = time.perf_counter() - start
        logger.info("%s: %.3f s", f"{title} duration" if title else "Duration", result["seconds"])


def overrides(cls: type, base: type, method: str) -> bool:
    """Whether `cls` defines `method` differently from `base`."""
    return getattr(cls, method, None) is not getattr(base, method, None)
