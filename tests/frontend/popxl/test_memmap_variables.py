"""Variables created from an `np.memmap` keep it as their host storage (no copy, as PopXL):
the Session reads and writes the file through it, `get_tensor_data` returns it,
`weights_to_host` flushes it, a read-only one disables copying back; PopXL's checks
(C order, no downcast, matching dtype) and its warning for non-const groupings."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

import popxl
from popxl import ops
from xl.dialects.graph import VariableOp
from xl.dialects.ipu import RemoteVariableOp, ReplicaShardedVariableOp


def _onchip(data: np.ndarray, rg: Any = None):
    w = popxl.variable(data, name="w", replica_grouping=rg)
    return w, lambda _t: None, w


def _remote(data: np.ndarray, rg: Any = None):
    shape = data.shape[1:] if rg is not None and rg.num_groups > 1 else data.shape
    rb = popxl.remote_buffer(shape, popxl.float32)
    w = popxl.remote_variable(data, rb, 0, name="w", replica_grouping=rg)
    return w, lambda t: ops.remote_store(rb, 0, t), ops.remote_load(rb, 0)


def _remote_sharded(data: np.ndarray, rg: Any = None):
    rb = popxl.replica_sharded_buffer(data.shape, popxl.float32)
    w = popxl.remote_replica_sharded_variable(data, rb, 0, name="w")
    return w, lambda t: ops.remote_store(rb, 0, t), ops.remote_load(rb, 0)


def _sharded(data: np.ndarray, rg: Any = None):
    w, shard = popxl.replica_sharded_variable(data, name="w")
    return w, lambda _t: None, shard


MAKERS = {"variable": _onchip, "remote": _remote, "remote_sharded": _remote_sharded, "sharded": _sharded}


def _file(tmp_path: Path, values: np.ndarray, mode: Literal["w+", "r"] = "w+", **kw: Any) -> np.memmap:
    mm = np.memmap(tmp_path / "w.bin", dtype=values.dtype, shape=values.shape, mode="w+", **kw)
    mm[...] = values
    mm.flush()
    if mode != "w+":
        del mm
        mm = np.memmap(tmp_path / "w.bin", dtype=values.dtype, shape=values.shape, mode=mode, **kw)
    return mm


@pytest.mark.parametrize("kind", MAKERS)
def test_memmap_is_the_host_storage(tmp_path: Path, kind: str) -> None:
    start = np.arange(24, dtype=np.float32).reshape(4, 6) / 4
    mm = _file(tmp_path, start)
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        w, store, t = MAKERS[kind](mm, None)
        ops.add_(t, popxl.constant(np.float32(1.5)))
        store(t)
    # the IR keeps no copy of the value; the program text still carries it
    var_ops = [
        op for op in ir._module.walk() if isinstance(op, VariableOp | RemoteVariableOp | ReplicaShardedVariableOp)
    ]
    assert [op.init for op in var_ops] == [None]
    assert "dense<" in ir.to_mlir()
    with popxl.Session(ir, "ipu_model") as s:
        assert s.get_tensor_data(w) is mm
        s.run()
        s.run()
    got = s.get_tensor_data(w)
    assert got is mm
    np.testing.assert_array_equal(mm, start + 3.0)
    # weights_to_host (on exit) flushed the file: a fresh mapping sees the new values
    np.testing.assert_array_equal(np.fromfile(tmp_path / "w.bin", np.float32).reshape(4, 6), start + 3.0)
    # writes go through to the file too
    with popxl.Session(ir, "ipu_model") as s2:
        s2.write_variable_data(w, np.zeros((4, 6), np.float32))
    np.testing.assert_array_equal(np.fromfile(tmp_path / "w.bin", np.float32), np.zeros(24))


@pytest.mark.parametrize("kind", MAKERS)
def test_read_only_memmap(tmp_path: Path, kind: str) -> None:
    start = np.ones((4, 2), np.float32)
    mm = _file(tmp_path, start, mode="r")
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        w, store, t = MAKERS[kind](mm, None)
        ops.add_(t, popxl.constant(np.float32(1.0)))
        store(t)
    s = popxl.Session(ir, "ipu_model")
    assert not s.weights_to_host_on_exit
    with s:
        s.run()
        with pytest.raises(RuntimeError, match="read-only memmap"):
            s.weights_to_host()
    np.testing.assert_array_equal(s.get_tensor_data(w), start)


@pytest.mark.parametrize("kind", MAKERS)
def test_memmap_checks(tmp_path: Path, kind: str) -> None:
    make = MAKERS[kind]
    with popxl.Ir(replication=2).main_graph:
        f32 = np.memmap(tmp_path / "a.bin", np.float32, "w+", shape=(4,))
        with pytest.raises(ValueError, match=r"^When passing a memory-mapped NumPy array, the `dtype` parameter"):
            popxl.variable(f32, dtype=popxl.float16)
        fortran = np.memmap(tmp_path / "b.bin", np.float32, "w+", shape=(4, 4), order="F")
        with pytest.raises(
            ValueError, match=r"^When passing a memory-mapped NumPy array, it must already be in C-ordered"
        ):
            make(fortran, None)
        f64 = np.memmap(tmp_path / "c.bin", np.float64, "w+", shape=(4,))
        with pytest.raises(
            ValueError, match=r"^When passing a memory-mapped NumPy array, the dtype None is not supported"
        ):
            make(f64, None)


@pytest.mark.parametrize("kind", ["variable", "remote"])
def test_non_const_grouping_copies_with_a_warning(tmp_path: Path, kind: str, capfd: pytest.CaptureFixture[str]) -> None:
    ir = popxl.Ir(replication=4)
    rg = ir.replica_grouping_from_assignments([0, 1, 1, 0])
    assert not rg.is_const
    start = np.stack([np.full(3, 1.0, np.float32), np.full(3, 10.0, np.float32)])
    mm = _file(tmp_path, start)
    capfd.readouterr()
    with ir.main_graph, popxl.in_sequence():
        w, store, t = MAKERS[kind](mm, rg)
        ops.add_(t, popxl.constant(np.float32(1.0)))
        store(t)
    assert "you have passed np.memmap data and a non-const replica grouping" in capfd.readouterr().err
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        got = s.get_tensor_data(w)
    assert got is not mm
    np.testing.assert_array_equal(got, start + 1.0)
    np.testing.assert_array_equal(mm, start)  # a copy: the file is not written
