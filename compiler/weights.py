"""Programs whose weights live outside the text, in an `.npz` keyed by variable name.

`externalize_variables(module, "prog.npz")` writes the initial value of every
`graph.variable` to `prog.npz` and returns a copy of the module in which those variables
have no value but the attribute `graph.external`, the name of the file::

    %w = graph.variable "fc1.weight" : tensor<784x512xf32> {graph.external = "prog.npz"}

`xl-run prog.mlir --vars prog.npz` gives them their values back; a variable marked
external that `--vars` does not provide is an error (`missing_external_variables`), never
a silent zero.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr

from xl.dialects.graph import EXTERNAL_ATTR, VariableOp
from xl.dialects.rt import StateOp

__all__ = [
    "EXTERNAL_ATTR",
    "external_variables",
    "externalize_variables",
    "missing_external_variables",
]


def externalize_variables(module: ModuleOp, path: str | os.PathLike[str]) -> ModuleOp:
    """Writes the variables' initial values to the `.npz` at `path` (keyed by variable
    name) and returns a copy of `module` that refers to them by name (see module docstring).
    Variables without a value in the IR are left as they are."""
    from xl.dialects.utils import dense_to_numpy

    module = module.clone()
    values: dict[str, np.ndarray] = {}
    file_name = os.path.basename(os.fspath(path))
    for op in module.walk():
        if not isinstance(op, VariableOp) or op.init is None:
            continue
        name = op.var_name.data
        if name in values:
            raise ValueError(f'to_mlir(weights=...): two variables are named "{name}"')
        values[name] = dense_to_numpy(op.init)
        op.init = None
        op.attributes[EXTERNAL_ATTR] = StringAttr(file_name)
    with open(path, "wb") as f:  # np.savez would append '.npz' to other names
        # numpy's stub: a **kwargs dict could name its allow_pickle parameter
        np.savez(f, **values)  # pyright: ignore[reportArgumentType]
    return module


def external_variables(module: ModuleOp) -> dict[str, VariableOp | StateOp]:
    """The variables marked `graph.external`, by name: `graph.variable`s, and the `rt.state`
    slots `lower-to-rt` makes of them (a lowered program keeps the mark)."""
    found: dict[str, VariableOp | StateOp] = {}
    for op in module.walk():
        if EXTERNAL_ATTR not in op.attributes:
            continue
        if isinstance(op, VariableOp):
            found[op.var_name.data] = op
        elif isinstance(op, StateOp):
            found[op.slot.data] = op
    return found


def missing_external_variables(
    module: ModuleOp, given: Mapping[str, object] | None
) -> list[tuple[str, VariableOp | StateOp]]:
    """(name, op) of the external variables `given` (the `--vars` values) does not provide."""
    provided = given or {}
    return [(name, op) for name, op in external_variables(module).items() if name not in provided]
