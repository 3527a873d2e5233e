"""Weight files: arrays by name in an `.npz`, and programs whose weights live in one.

`save_arrays(path, {"w": w, ...})` / `load_arrays(path)` are what every weight file of xl is
written and read with (`Ir.to_mlir(weights=...)`, `xl-run --vars` / `--save-vars` / `-o`, the
checkpoints of `popxl_addons.TaskSession`). They keep every xl dtype (`xl.dialects.utils.DTYPES`)
bit for bit. NumPy's `.npy` format has no name for ml_dtypes' float8 types (`np.savez` writes them
as raw bytes, `|V1`, and reads them back as such): such an array is stored as its bits (an
unsigned int array of the same item size) and its dtype's name is recorded in the member
`__xl_dtypes__` (a JSON object, name -> dtype), so the file is still an ordinary `.npz`::

    save_arrays("w.npz", {"w": np.zeros(3, ml_dtypes.float8_e4m3fnuz)})
    load_arrays("w.npz")["w"].dtype  # float8_e4m3fnuz

`externalize_variables(module, "prog.npz")` writes the initial value of every
`graph.variable` to `prog.npz` and returns a copy of the module in which those variables
have no value but the attribute `graph.external`, the name of the file::

    %w = graph.variable "fc1.weight" : tensor<784x512xf32> {graph.external = "prog.npz"}

`xl-run prog.mlir --vars prog.npz` gives them their values back; a variable marked
external that `--vars` does not provide is an error (`missing_external_variables`), never
a silent zero.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import IO

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr

from xl.dialects.graph import EXTERNAL_ATTR, VariableOp
from xl.dialects.rt import StateOp
from xl.dialects.utils import DTYPES

__all__ = [
    "DTYPES_MEMBER",
    "EXTERNAL_ATTR",
    "external_variables",
    "externalize_variables",
    "load_arrays",
    "missing_external_variables",
    "save_arrays",
]

DTYPES_MEMBER = "__xl_dtypes__"
"""The `.npz` member naming the dtypes `.npy` cannot describe (see the module docstring)."""

_BY_NAME: dict[str, np.dtype] = {dt.name: dt for dt in DTYPES}

FilePath = str | os.PathLike[str]


def _npy_keeps(dtype: np.dtype) -> bool:
    """Whether the `.npy` header describes `dtype` (read back as the same dtype)."""
    descr = np.lib.format.dtype_to_descr(dtype)
    return np.lib.format.descr_to_dtype(descr) == dtype


def save_arrays(file: FilePath | IO[bytes], arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` (name -> array) to the `.npz` `file` (a path, written as given: no
    `.npz` is appended; or a binary file object), every xl dtype bit for bit."""
    out: dict[str, np.ndarray] = {}
    named: dict[str, str] = {}
    for name, value in arrays.items():
        if name == DTYPES_MEMBER:
            raise ValueError(f"save_arrays: {DTYPES_MEMBER!r} is reserved for the dtypes of the file")
        arr = np.asarray(value)
        if not _npy_keeps(arr.dtype):
            if arr.dtype not in DTYPES:
                raise ValueError(f'save_arrays: array "{name}" has dtype {arr.dtype}, which xl does not support')
            named[name] = arr.dtype.name
            arr = np.ascontiguousarray(arr).reshape(arr.shape).view(f"u{arr.dtype.itemsize}")
        out[name] = arr
    if named:
        out[DTYPES_MEMBER] = np.array(json.dumps(named, sort_keys=True))
    if isinstance(file, str | os.PathLike):
        with open(file, "wb") as f:  # np.savez would append '.npz' to other names
            np.savez(f, **out)  # pyright: ignore[reportArgumentType]  (numpy's stub: **kwargs could name allow_pickle)
    else:
        np.savez(file, **out)  # pyright: ignore[reportArgumentType]


def load_arrays(file: FilePath | IO[bytes]) -> dict[str, np.ndarray]:
    """The arrays of the `.npz` `file` by name, with the dtypes `save_arrays` recorded
    (`ValueError` naming the file when it is no `.npz` or names a dtype xl does not know)."""
    where = os.fspath(file) if isinstance(file, str | os.PathLike) else getattr(file, "name", "the .npz")
    data = np.load(file, allow_pickle=False)
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"'{where}' holds one array (.npy), not arrays by name (.npz)")
    with data:
        arrays = {k: data[k] for k in data.files}
    named_text = arrays.pop(DTYPES_MEMBER, None)
    if named_text is None:
        return arrays
    try:
        named = json.loads(str(named_text))
        assert isinstance(named, dict)
    except (ValueError, AssertionError):
        raise ValueError(f"'{where}': member {DTYPES_MEMBER!r} is not a JSON object of dtype names") from None
    for name, dtype_name in named.items():
        dt = _BY_NAME.get(dtype_name)
        if dt is None:
            raise ValueError(f"'{where}': array \"{name}\" has dtype {dtype_name!r}, which xl does not know")
        if name not in arrays:
            raise ValueError(f"'{where}': {DTYPES_MEMBER!r} names array \"{name}\", which the file does not hold")
        bits = arrays[name]
        if bits.dtype != np.dtype(f"u{dt.itemsize}"):
            raise ValueError(f"'{where}': array \"{name}\" ({bits.dtype}) is not the bits of a {dtype_name} array")
        arrays[name] = bits.view(dt)
    return arrays


def externalize_variables(module: ModuleOp, path: FilePath) -> ModuleOp:
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
    save_arrays(path, values)
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
