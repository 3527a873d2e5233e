"""TaskSession: checkpoints (npz per tensor + json, atomic writes), load with missing /
mismatched tensors, load_from_session, dataloader state, max_checkpoints."""

import json
import os

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons.layers import Linear
from popxl_addons.task_session import TaskSession


class MockModel(addons.Module):
    def __init__(self, hidden=30):
        super().__init__()
        self.l1 = Linear(hidden)
        self.l2 = Linear(10)
        self.l3 = Linear(2)

    def build(self, x):
        return self.l3(self.l2(self.l1(x)))


def build_session(seed=0, hidden=30, **kw):
    np.random.seed(seed)
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = addons.InputStreams(x=((4, 100), popxl.float32))
        x = ops.host_load(x_in.x)
        facts, g = MockModel(hidden).create_graph(x)
        variables = facts.init()
        (y,) = g.bind(variables).call(x)
        # a training-like in-place update so that the state changes each run
        ops.var_updates.accumulate_(variables.l3.bias, ops.mean(y, axis=0))
        y_out = addons.OutputStreams(y=((4, 2), popxl.float32))
        ops.host_store(y_out.y, y)
    return TaskSession(x_in, y_out, variables, ir=ir, device_desc="cpu", **kw), x_in


class Loader:
    def __init__(self):
        self.position = 0

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, d):
        self.position = d["position"]


def test_save_load_roundtrip(tmp_path):
    session, x_in = build_session(seed=0)
    session.dataloader = Loader()
    session.dataloader.position = 17
    data = np.random.default_rng(0).random((4, 100)).astype(np.float32)
    with session:
        session.run({x_in.x: data})
        saved = session.get_named_tensors_data().to_dict()
        session.save_checkpoint(str(tmp_path))
    files = sorted(os.listdir(tmp_path / "model"))
    assert files == sorted(f"{k}.npz" for k in session.state.keys_flat()) and len(files) == 6
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]
    meta = json.loads((tmp_path / "session_state.json").read_text())
    assert meta["format_version"] == 1 and meta["dataloader"] == {"position": 17}
    assert meta["tensors"]["l1.weight"] == {"shape": [100, 30], "dtype": "float32"}

    session2, x2 = build_session(seed=1)  # other initial weights
    session2.dataloader = Loader()
    before = session2.get_named_tensors_data().to_dict()
    assert not np.array_equal(before["l1.weight"], saved["l1.weight"])
    session2.load_checkpoint(str(tmp_path), report_missing="error")
    after = session2.get_named_tensors_data().to_dict()
    for k, v in saved.items():
        np.testing.assert_array_equal(after[k], v)
    assert session2.dataloader.position == 17
    # both sessions now compute the same outputs
    with session, session2:
        np.testing.assert_array_equal(
            session.run({x_in.x: data})[session.outputs.y], session2.run({x2.x: data})[session2.outputs.y]
        )


def test_missing_and_mismatched_tensors(tmp_path, caplog):
    session, _ = build_session()
    with session:
        session.save_checkpoint(str(tmp_path))
    os.remove(tmp_path / "model" / "l2.weight.npz")
    session2, _ = build_session(seed=3)
    with pytest.raises(ValueError, match=r"Model tensors not in the checkpoint.*l2\.weight"):
        session2.load_checkpoint(str(tmp_path), report_missing="error")
    # 'warn' logs and loads the rest; 'none' is silent
    with caplog.at_level("WARNING", logger="popxl_addons"):
        session2.load_checkpoint(str(tmp_path), report_missing="warn")
    assert "l2.weight" in caplog.text
    np.testing.assert_array_equal(
        session2.get_tensor_data(session2.state.l1.weight), session.get_tensor_data(session.state.l1.weight)
    )
    # a checkpoint of another shape names the tensor and both shapes, writes nothing
    other, _ = build_session(hidden=20)
    before = other.get_named_tensors_data().to_dict()
    with pytest.raises(
        ValueError, match=r"tensor 'l1\.bias' .* is \(30,\) float32, the session's variable is \(20,\) float32"
    ):
        other.load_checkpoint(str(tmp_path), report_missing="none")
    for k, v in other.get_named_tensors_data().to_dict().items():
        np.testing.assert_array_equal(v, before[k])  # l3.* fit, but nothing was written
    with pytest.raises(ValueError, match="report_missing must be one of"):
        other.load_checkpoint(str(tmp_path), report_missing="loud")
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        other.load_checkpoint(str(tmp_path / "nowhere"))
    (tmp_path / "session_state.json").write_text("{broken")
    with pytest.raises(ValueError, match="session_state.json is not valid JSON"):
        session2.load_checkpoint(str(tmp_path))


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    session, _ = build_session()
    session.save_checkpoint(str(tmp_path))
    path = tmp_path / "model" / "l1.weight.npz"
    old = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        session.save_checkpoint(str(tmp_path))
    assert path.read_bytes() == old
    assert not [f for f in os.listdir(tmp_path / "model") if f.startswith(".tmp-")]


def test_load_from_session_and_max_checkpoints(tmp_path):
    src, _ = build_session(seed=5)
    dst, _ = build_session(seed=6)
    dst.load_from_session(src)
    for k, v in src.get_named_tensors_data().to_dict().items():
        np.testing.assert_array_equal(dst.get_named_tensors_data().to_dict()[k], v)
    s, _ = build_session(max_checkpoints=2)
    for i in range(3):
        s.save_checkpoint(str(tmp_path / f"step{i}"))
    assert not (tmp_path / "step0").exists()
    assert (tmp_path / "step1" / "session_state.json").exists() and (tmp_path / "step2").exists()
    with pytest.raises(ValueError, match="max_checkpoints"):
        build_session(max_checkpoints=0)
    with pytest.raises(TypeError, match="state must be a NamedTensors"):
        TaskSession([], [], {"a": 1}, ir=popxl.Ir())  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


def test_wandb_paths_refused(tmp_path):
    s, _ = build_session()
    with pytest.raises(ValueError, match="wandb:// checkpoints"):
        s.save_checkpoint("wandb://run/ckpt")
    with pytest.raises(ValueError, match="wandb:// checkpoints"):
        s.load_checkpoint("wandb://run/ckpt")


def test_every_exported_name_resolves():
    import popxl_addons.layers as layers
    import popxl_addons.ops as aops

    for mod in (addons, layers, aops, addons.array_munging, addons.performance_utils, addons.testing_utils):
        for name in mod.__all__:
            assert getattr(mod, name) is not None, (mod.__name__, name)


def test_write_variables_pb_timer_weights_dict(caplog):
    s, _ = build_session()
    w = addons.WeightsDict({s.state.l1.bias: np.arange(30, dtype=np.float32)})
    assert isinstance(w, dict)
    addons.write_variables_pb(s, w)
    np.testing.assert_array_equal(s.get_tensor_data(s.state.l1.bias), np.arange(30))
    with caplog.at_level("INFO", logger="popxl_addons"):
        with addons.timer("compile") as t:
            sum(range(1000))
    assert t["seconds"] >= 0 and "compile duration:" in caplog.text
