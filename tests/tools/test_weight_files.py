"""Every dtype xl supports survives every way weights are saved and loaded, bit for bit.

The dtypes come from the registry (`xl.dialects.utils.DTYPES`, which popxl's dtypes must be
part of), so a dtype added later is covered without editing this file. The values are arbitrary
bit patterns (NaNs with any sign and payload, infinities, negative zero, subnormals; float8's one
NaN) plus each float type's special values, in shapes from 0-d to 3-d, empty ones included.
The paths, each compared bit for bit with what went in:

- `xl.compiler.weights.save_arrays` / `load_arrays` (what every path below uses);
- `Ir.to_mlir(weights="w.npz")` + `xl-run prog.mlir --vars w.npz --save-vars out.npz`;
- `Ir.to_mlir()` (values in the text) + `xl-run --save-vars`;
- `Session`: the initial value read back, `write_variables_data` then `get_tensor_data`;
- `TaskSession.save_checkpoint` + `load_checkpoint` into another session.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popxl
import popxl_addons as addons
from popxl.fp8_utils import host_float8
from xl.compiler.weights import DTYPES_MEMBER, load_arrays, save_arrays
from xl.dialects.utils import DTYPES
from xl.tools import run as xl_run

IDS = [dt.name for dt in DTYPES]


def test_popxl_dtypes_are_xl_dtypes() -> None:
    """The registry this file walks covers every popxl dtype that can hold data."""
    names = [n for n in popxl.dtypes.__all__ if isinstance(getattr(popxl.dtypes, n), popxl.dtypes.dtype)]
    for name in names:
        d = getattr(popxl.dtypes, name)
        if d.name.startswith("complex"):  # no NumPy runtime: refused wherever used
            continue
        assert d._compute_np() in DTYPES, d


def special_values(dt: np.dtype) -> np.ndarray:
    """The values a float type treats specially, as the dtype can hold them."""
    if dt.kind == "b":
        return np.array([False, True])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.array([info.min, -1 if dt.kind == "i" else 1, 0, info.max], dt)
    finfo = ml_dtypes.finfo(dt) if dt.kind == "V" else np.finfo(dt)
    values = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, finfo.max, finfo.min, finfo.smallest_subnormal]
    with np.errstate(over="ignore", invalid="ignore"):  # float8 has no inf: NaN
        return np.array(values, np.float64).astype(dt)


@st.composite
def arrays_of(draw: st.DrawFn, dt: np.dtype) -> np.ndarray:
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    n = int(np.prod(shape))
    if dt.kind == "b":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(shape)
    bits = draw(st.binary(min_size=n * dt.itemsize, max_size=n * dt.itemsize))
    arr = np.frombuffer(bits, dt).reshape(shape).copy()
    if n and draw(st.booleans()):  # also the special values, at drawn places
        special = special_values(dt)
        where = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=min(n, len(special))))
        arr.reshape(-1)[where] = special[: len(where)]
    return arr


def one_of_each() -> st.SearchStrategy[dict[str, np.ndarray]]:
    """A value of every xl dtype, keyed by dtype name."""
    return st.fixed_dictionaries({dt.name: arrays_of(dt) for dt in DTYPES})


def assert_same_bits(got: Any, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.tobytes() == want.tobytes(), f"{what}: {got!r} != {want!r} (bits differ)"


def all_special_values() -> dict[str, np.ndarray]:
    return {dt.name: special_values(dt) for dt in DTYPES}


# -- the helper --------------------------------------------------------------------------------


@settings(max_examples=40)
@given(values=one_of_each())
def test_save_and_load_arrays_keep_every_bit(values: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    save_arrays(buf, values)
    buf.seek(0)
    loaded = load_arrays(buf)
    assert sorted(loaded) == sorted(values)
    for name, want in values.items():
        assert_same_bits(loaded[name], want, name)


def test_a_weight_file_is_an_ordinary_npz(tmp_path: Path) -> None:
    """NumPy reads the file without pickle; float8 arrays are their bits, named in one member."""
    path = tmp_path / "w"  # written under the name given (np.savez would add .npz)
    f8 = special_values(np.dtype(ml_dtypes.float8_e4m3fnuz))
    save_arrays(path, {"f8": f8, "x": np.arange(3, dtype=np.float32)})
    with np.load(path, allow_pickle=False) as z:
        assert sorted(z.files) == sorted(["f8", "x", DTYPES_MEMBER])
        assert z["f8"].dtype == np.uint8 and z["f8"].tobytes() == f8.tobytes()
    # only float8 needs the member: files of NumPy dtypes are as np.savez writes them
    save_arrays(path, {"x": np.arange(3, dtype=np.float32)})
    with np.load(path, allow_pickle=False) as z:
        assert z.files == ["x"]


def test_load_arrays_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, w=np.zeros(2, np.uint8), **{DTYPES_MEMBER: np.array('{"w": "float4"}')})  # pyright: ignore[reportArgumentType]  (numpy's stub: **kwargs could name allow_pickle)
    with pytest.raises(ValueError, match=r"bad.npz': array \"w\" has dtype 'float4', which xl does not know"):
        load_arrays(path)
    np.savez(path, w=np.zeros(2, np.uint16), **{DTYPES_MEMBER: np.array('{"w": "float8_e4m3fnuz"}')})  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match=r"array \"w\" \(uint16\) is not the bits of a float8_e4m3fnuz array"):
        load_arrays(path)
    np.save(tmp_path / "one.npy", np.zeros(2))
    with pytest.raises(ValueError, match=r"one.npy' holds one array \(.npy\), not arrays by name"):
        load_arrays(tmp_path / "one.npy")
    with pytest.raises(ValueError, match="reserved"):
        save_arrays(path, {DTYPES_MEMBER: np.zeros(1)})


# -- the program paths ---------------------------------------------------------------------------


def program(values: dict[str, np.ndarray]) -> tuple[popxl.Ir, dict[str, popxl.Variable]]:
    """A program holding one variable per value (name = dtype name), doing nothing else."""
    ir = popxl.Ir()
    with ir.main_graph:
        variables = {
            name: popxl.variable(v, popxl.dtypes.dtype.as_dtype(v.dtype), name=name) for name, v in values.items()
        }
    return ir, variables


def xl_run_save_vars(tmp: Path, text: str, *args: str) -> dict[str, np.ndarray]:
    prog, out = tmp / "prog.mlir", tmp / "out.npz"
    prog.write_text(text)
    code = xl_run.main([str(prog), *args, "--save-vars", str(out)])
    assert code == 0
    return load_arrays(out)


def check_program_paths(values: dict[str, np.ndarray], tmp: Path) -> None:
    ir, variables = program(values)
    # weights in a file, read by xl-run, saved by xl-run
    weights = tmp / "w.npz"
    saved = xl_run_save_vars(tmp, ir.to_mlir(weights=str(weights)), "--vars", str(weights))
    for name, want in values.items():
        assert_same_bits(load_arrays(weights)[name], want, f"to_mlir(weights=...) {name}")
        assert_same_bits(saved[name], want, f"xl-run --vars / --save-vars {name}")
    # weights in the text
    saved = xl_run_save_vars(tmp, ir.to_mlir())
    for name, want in values.items():
        assert_same_bits(saved[name], want, f"to_mlir() + xl-run --save-vars {name}")
    # a Session: its initial values, then values written and read back (after a run); it
    # returns float8 data in the host format (PopXL's structured uint8 dtype), the same bits
    session = popxl.Session(ir, "cpu")
    for name, want in values.items():
        assert_same_bits(session.get_tensor_data(variables[name]), host_float8(want), f"Session initial {name}")
    flipped = {name: flip(v) for name, v in values.items()}
    with session:
        session.write_variables_data({variables[n]: v for n, v in flipped.items()})
        session.run({})
        for name, want in flipped.items():
            assert_same_bits(session.get_tensor_data(variables[name]), host_float8(want), f"Session written {name}")
    # a TaskSession checkpoint, loaded into another session of the same program
    ckpt = str(tmp / "ckpt")
    src = addons.TaskSession([], [], addons.NamedTensors.from_dict(variables), ir=ir, device_desc="cpu")
    src.write_variables_data({variables[n]: v for n, v in flipped.items()})
    src.save_checkpoint(ckpt)
    ir2, variables2 = program({n: np.zeros_like(v) for n, v in values.items()})
    dst = addons.TaskSession([], [], addons.NamedTensors.from_dict(variables2), ir=ir2, device_desc="cpu")
    dst.load_checkpoint(ckpt, report_missing="error")
    for name, want in flipped.items():
        assert_same_bits(dst.get_tensor_data(variables2[name]), host_float8(want), f"TaskSession checkpoint {name}")


def flip(v: np.ndarray) -> np.ndarray:
    """Other values of the same dtype and shape: every bit inverted (bools negated)."""
    if v.dtype == np.bool_:
        return ~v
    return (~v.view(f"u{v.dtype.itemsize}")).view(v.dtype)


def test_special_values_on_every_path(tmp_path: Path) -> None:
    check_program_paths(all_special_values(), tmp_path)


@settings(max_examples=8)
@given(values=one_of_each())
def test_random_values_on_every_path(values: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> None:
    check_program_paths(values, tmp_path_factory.mktemp("paths"))
