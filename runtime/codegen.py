"""The code generator of the generated plan: `Gen`, the source and namespace of one step
function (names for shared callables, 0-d constants, precomputed views and scratch buffers),
`K`, what a template sees of a kernel, and the registry of templates by op class
(`@template(ReluOp)`, see `xl.runtime.plan_templates`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.ir import SSAValue

from xl.dialects.rt_kernels import KernelClass


class K:
    """What a template sees of a kernel: its name, the op class it implements and its
    in / out buffers."""

    __slots__ = ("cls", "ins", "name", "outs")

    def __init__(self, name: str, cls: KernelClass | None, ins: Sequence[SSAValue], outs: Sequence[SSAValue]):
        self.name = name
        self.cls = cls
        self.ins = tuple(ins)
        self.outs = tuple(outs)


class Gen:
    """Source and namespace of one generated step function."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {}
        self.lines: list[str] = []
        self.arrays: dict[SSAValue, np.ndarray] = {}
        self.names: dict[SSAValue, str] = {}
        self._ids = itertools.count()
        self._fns: dict[int, str] = {}
        self._consts: dict[tuple[str, np.dtype], str] = {}
        self._scratch: dict[tuple[int, tuple[int, ...], np.dtype], list[str]] = {}
        self._scratch_ids = itertools.count()
        self._in_use: dict[tuple[int, tuple[int, ...], np.dtype], int] = {}
        # the stream (worker) the kernel being generated runs on: scratch buffers are per
        # stream, so concurrent streams never share one (`xl.runtime.concurrent`)
        self.stream = 0

    # -- names -----------------------------------------------------------------------------
    def bind(self, obj: Any, hint: str = "k") -> str:
        name = f"{hint}{next(self._ids)}"
        self.ns[name] = obj
        return name

    def fn(self, f: Any) -> str:
        """A name for a shared callable (ufunc, function)."""
        key = id(f)
        name = self._fns.get(key)
        if name is None:
            base = getattr(f, "__name__", "f")
            name = self._fns[key] = self.bind(f, f"_{base}_")
        return name

    def buf(self, v: SSAValue) -> str:
        return self.names[v]

    def arr(self, v: SSAValue) -> np.ndarray:
        return self.arrays[v]

    def set_buffer(self, v: SSAValue, a: np.ndarray, hint: str = "b") -> None:
        self.arrays[v] = a
        self.names[v] = self.bind(a, hint)

    def const(self, value: float, dtype: Any) -> str:
        """A global name for a 0-d constant array of `dtype`.

        Passing a 0-d array of the operand's dtype to a ufunc gives the same result as a
        Python scalar (which NumPy converts to that dtype), without the conversion and its
        allocation on every call (~0.3 us faster).
        """
        dt = np.dtype(dtype)
        key = (repr(value), dt)
        name = self._consts.get(key)
        if name is None:
            arr = np.array(value, dtype=dt)
            arr.flags.writeable = False
            name = self._consts[key] = f"_k{len(self._consts)}"
            self.ns[name] = arr
        return name

    def view(self, a: np.ndarray) -> str:
        """A name for a precomputed array (typically a view of a buffer)."""
        return self.bind(a, "v")

    # -- scratch: temporaries inside one kernel, shared by the kernels of a stream ------------
    def scratch(self, shape: Sequence[int], dtype: Any) -> tuple[np.ndarray, str]:
        key = (self.stream, tuple(shape), np.dtype(dtype))
        i = self._in_use.get(key, 0)
        pool = self._scratch.setdefault(key, [])
        if i == len(pool):
            # named in creation order: every replica's plan has the same source
            name = f"s_{next(self._scratch_ids)}"
            self.ns[name] = np.zeros(key[1], key[2])
            pool.append(name)
        self._in_use[key] = i + 1
        name = pool[i]
        return self.ns[name], name

    def release_scratch(self) -> None:
        self._in_use.clear()


def as_view(a: np.ndarray, shape: Sequence[int]) -> np.ndarray | None:
    """`a` reshaped to `shape` as a view of the same memory, or None if that needs a copy.

    Every view a template precomputes at compile time goes through this: a reshape that
    silently copies would bind a snapshot taken at compile time.
    """
    try:
        return np.reshape(a, tuple(shape), copy=False)
    except ValueError:
        return None


# Kernel templates: (gen, op, in names, out names, props) -> source lines, or None

Template = Callable[[Gen, K, list[str], list[str], dict[str, Any]], "list[str] | None"]
TEMPLATES: dict[KernelClass, Template] = {}


def template(*classes: KernelClass) -> Callable[[Template], Template]:
    """Register the decorated function as the template of each op class."""

    def deco(f: Template) -> Template:
        for cls in classes:
            if cls in TEMPLATES:
                raise TypeError(f"a plan template for {cls.name} is registered twice")
            TEMPLATES[cls] = f
        return f

    return deco
