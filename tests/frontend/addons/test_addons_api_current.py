"""The current (SDK 3.4) popxl.addons API: upstream's module paths and names, the collectives'
result names that tutorials order tensors by, `shard_over_dict` / `shard_over` buffers against
NumPy, memory-mapped variables (`memmap_dir`, `read_only_if_exists`), TaskSession's session
state in `session_info.json`, `add_recompute_inputs` against finite differences of NumPy,
`GIT_COMMIT`, `OrderedDict`."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from functools import partial

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.remote import load_remote, named_variable_buffers, store_remote
from popxl_addons.task_session import TaskSession, initialise_memmap_dir_from_checkpoint
from popxl_addons.utils import OrderedDict, suffix_graph_name

# Upstream's module paths and the names its tests, tutorials and applications import from them
# (graphcore/popxl-addons tests, graphcore/examples nlp/*/popxl and tutorials/popxl), with the
# xl object each must be. The C++-backed ops and layers (layers.layer_norm_distributed,
# linear_gq, linear_fp8, ops.cross_entropy_sharded_loss, rotary_pos_embed, ...) and
# popxl_addons.patterns are not here: they are the applications' issue.
UPSTREAM_PATHS = {
    "popxl_addons.transforms.autodiff": {"autodiff": "popxl_addons.autodiff",
                                         "autodiff_with_accumulation": "popxl_addons.autodiff_with_accumulation"},
    "popxl_addons.transforms.recomputation": {"recompute_graph": "popxl_addons.recompute_graph",
                                              "add_recompute_inputs": "popxl_addons.transforms.add_recompute_inputs"},
    "popxl_addons.transforms.use_fc_pass": {"enable_fc_pass": "popxl_addons.enable_fc_pass",
                                            "disable_fc_pass": "popxl_addons.disable_fc_pass"},
    "popxl_addons.transforms.available_memory_proportion": {
        "set_available_memory_proportion_by_ipu": "popxl_addons.set_available_memory_proportion_by_ipu",
        "set_graph_available_memory_proportion_by_ipu": "popxl_addons.set_graph_available_memory_proportion_by_ipu"},
    "popxl_addons.transforms.batch_serialisation": {"batch_serialise": "popxl_addons.batch_serialise",
                                                    "batch_serial_buffer": "popxl_addons.batch_serial_buffer",
                                                    "batch_serialise_fwd_and_grad": "popxl_addons.batch_serialise_fwd_and_grad",
                                                    "RemoteHandle": "popxl_addons.transforms.RemoteHandle"},
    "popxl_addons.transforms.repeat_graph": {"repeat_graph": None},
    "popxl_addons.ops.streams": {"host_load": "popxl_addons.host_load", "host_store": "popxl_addons.host_store"},
    "popxl_addons.remote": {n: None for n in ("NamedRemoteBuffers", "create_remote_buffer", "load_remote",
                                              "load_remote_graph", "named_variable_buffers", "store_remote",
                                              "store_remote_graph", "named_buffers")},
    "popxl_addons.rts": {n: None for n in ("all_gather_replica_sharded_graph", "reduce_replica_sharded_graph",
                                           "reduce_replica_sharded_tensor", "replica_sharded_spec",
                                           "gather_replica_sharded_tensor")},
    "popxl_addons.named_replica_grouping": {n: None for n in ("NamedReplicaGrouping", "fill_none_group",
                                                              "get_ild_replica_grouping")},
    "popxl_addons.task_session": {"TaskSession": "popxl_addons.TaskSession"},
    "popxl_addons.utils": {"OrderedDict": "popxl_addons.OrderedDict", "WeightsDict": "popxl_addons.WeightsDict",
                           "timer": "popxl_addons.timer"},
    "popxl_addons.module": {"Module": "popxl_addons.Module", "NameScopeMeta": None, "create_grad_graph_info": None},
    "popxl_addons.variable_factory": {"NamedVariableFactories": "popxl_addons.NamedVariableFactories",
                                      "VariableFactory": "popxl_addons.VariableFactory"},
    "popxl_addons.optimizers.adam": {"AdamOptimizerStep": None},
    "popxl_addons.testing_utils": {n: None for n in ("TensorInput", "ops_of_type", "run_module")},
}  # fmt: skip


def _resolve(dotted: str) -> object:
    mod, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(mod), name)


@pytest.mark.parametrize("path", sorted(UPSTREAM_PATHS))
def test_upstream_module_paths(path: str) -> None:
    module = importlib.import_module(path)
    for name, same_as in UPSTREAM_PATHS[path].items():
        obj = getattr(module, name)
        if same_as is not None:
            assert obj is _resolve(same_as), f"{path}.{name}"
    star: dict[str, object] = {}
    exec(f"from {path} import *", star)  # noqa: S102  (upstream programs star-import these)


def test_git_commit_and_utils() -> None:
    here = os.path.dirname(addons.__file__)
    try:
        out = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=here, capture_output=True, text=True)
    except OSError:
        pytest.skip("git is not installed")
    expected = out.stdout.strip() if out.returncode == 0 else None
    assert addons.GIT_COMMIT == expected
    from popxl_addons import GIT_COMMIT

    assert GIT_COMMIT == expected
    d = OrderedDict([("b", 1), ("a", 2)])
    assert d.idx(0) == 1 and d.idx(-1) == 2 and repr(d) == "{\nb: 1,\na: 2,\n}" and repr(OrderedDict()) == "{}"
    with pytest.raises(IndexError, match="index 2 out of range for 2 items"):
        d.idx(2)
    assert suffix_graph_name("fwd_subgraph(3)", "recomp") == "fwd_recomp"
    with addons.timer() as t:
        pass
    assert t["seconds"] >= 0


def test_collective_results_are_named_after_their_inputs() -> None:
    """Tutorial 5 zips `NamedTensors.tensors` (sorted by tensor name) of shards and unsharded
    variables with gradients sorted by key: the shards must sort like their variables.
    Before, the results had generic names and `fc4.bias` (unsharded) sorted first."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        names = ["fc1.bias", "fc1.weight", "fc4.bias", "fc4.weight"]
        vs = {n: popxl.variable(np.zeros((8,) if "bias" in n else (4, 8), np.float32), name=n) for n in names}
        shards = {n: (v if n == "fc4.bias" else ops.collectives.replica_sharded_slice(v)) for n, v in vs.items()}
        packed = NamedTensors.pack(list(shards), list(shards.values()))
        assert [t.name for t in packed.tensors] == [
            "fc1.bias_sharded_slice", "fc1.weight_sharded_slice", "fc4.bias", "fc4.weight_sharded_slice",
        ]  # fmt: skip
        w = vs["fc1.weight"]
        assert ops.collectives.replicated_reduce_scatter(w).name == "fc1.weight_reduce_scattered"
        assert ops.collectives.replicated_all_gather(w).name == "fc1.weight_all_gathered"
        assert ops.collectives.replicated_all_reduce(w).name == "fc1.weight_all_reduce"
        assert ops.collectives.replicated_slice(w, axis=1).name == "fc1.weight_replicated_slice"
        assert ops.collectives.replica_sharded_slice(w).name.startswith("fc1.weight_sharded_slice_")  # made unique


@pytest.mark.parametrize("shard_over", [1, 2, 4])
def test_shard_over_dict_buffers_against_numpy(shard_over: int) -> None:
    """A variable in a buffer sharded over `shard_over` of 4 replicas: replica r loads shard
    r % shard_over of the flattened value; the Session reads the full value back."""
    ir = popxl.Ir(replication=4)
    data = np.arange(32, dtype=np.float32).reshape(4, 8)
    bias = np.arange(3, dtype=np.float32)
    with ir.main_graph:
        facts = addons.NamedVariableFactories.from_dict(
            {"w": addons.VariableFactory(lambda: data, popxl.float32, "w"),
             "b": addons.VariableFactory(lambda: bias, popxl.float32, "b")}
        )  # fmt: skip
        bufs = named_variable_buffers(facts, entries=2, shard_over_dict={"w": shard_over, "b": 1})
        assert bufs.w.tensor_shape == ((32 // shard_over,) if shard_over > 1 else (4, 8))
        assert bufs.w.entries == 2 and bufs.b.tensor_shape == (3,) and bufs.b.meta_shape == ()
        v = facts.init_remote(bufs, 1, "layer")
        loaded = load_remote(bufs, 1)
        outs = {k: popxl.d2h_stream(t.shape, t.dtype, k) for k, t in loaded.to_dict().items()}
        for k, t in loaded.to_dict().items():
            ops.host_store(outs[k], t)
    with popxl.Session(ir) as s:
        res = s.run()
        np.testing.assert_array_equal(s.get_tensor_data(v.w), data)
    for r in range(4):
        want = data.reshape(-1).reshape(shard_over, -1)[r % shard_over] if shard_over > 1 else data
        np.testing.assert_array_equal(res[outs["w"]][r], want)
        np.testing.assert_array_equal(res[outs["b"]][r], bias)


def test_shard_over_dict_forms() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        facts = addons.NamedVariableFactories.from_dict(
            {"a": addons.VariableFactory(np.zeros((4, 2), np.float32)), "c": addons.VariableFactory(np.zeros(6))}
        )
        assert all(b.meta_shape for b in named_variable_buffers(facts).to_dict().values())  # True: whole group
        assert not any(b.meta_shape for b in named_variable_buffers(facts, shard_over_dict=False).to_dict().values())
        assert named_variable_buffers(facts, shard_over_dict=1).a.meta_shape == ()
        partial_ = named_variable_buffers(facts, shard_over_dict={"c": 1})  # a: not named -> the whole group
        assert partial_.a.meta_shape == (4, 2) and partial_.c.meta_shape == ()
        three = addons.NamedVariableFactories.from_dict({"t": addons.VariableFactory(np.zeros(3))})
        with pytest.raises(ValueError, match=r"variable 't': .*cannot shard a tensor of 3 elements \(3,\) over 2"):
            named_variable_buffers(three)


def test_variable_factory_default_grouping() -> None:
    """Upstream's default: the Ir's grouping of all replicas (tutorials read
    `f.replica_grouping.group_size` for every factory)."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        f = addons.VariableFactory(np.zeros(2))
        assert f.replica_grouping == ir.replica_grouping() and f.replica_grouping.group_size == 4
        with pytest.raises(ValueError, match="shard_over=8 is larger than the replica group size 4"):
            addons.VariableFactory(np.zeros(8), shard_over=8)
    outside = addons.VariableFactory(np.zeros(2))  # no graph: resolved when used
    assert outside.replica_grouping is None
    with ir.main_graph:
        assert outside.replica_grouping == ir.replica_grouping()


def test_variable_factory_takes_torch_tensors_that_require_grad() -> None:
    """Upstream converts factory data through popxl.utils.to_numpy (detaching torch tensors);
    layer tests hand factories the weights of a torch module."""
    torch = pytest.importorskip("torch")
    weight = torch.nn.Linear(3, 5).weight  # requires grad
    expected = weight.detach().numpy().copy()
    ir = popxl.Ir()
    with ir.main_graph:
        facts = addons.NamedVariableFactories.from_dict({"w": addons.VariableFactory(lambda: weight, name="w")})
        variables = facts.init()
    assert variables.w.dtype == popxl.float32 and variables.w.shape == (5, 3)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.get_tensor_data(variables.w), expected)


class _Scale(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", partial(np.random.normal, 0, 1, (3, 4)), popxl.float32)
        return x @ w


def _memmap_program(memmap_dir: str, read_only: bool = False, remote: bool = False):
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        x = ops.host_load(xs)
        facts, g = _Scale().create_graph(x)
        bufs = named_variable_buffers(facts) if remote else None
        if bufs is not None:
            variables = facts.init_remote(bufs, 0, "model", memmap_dir=memmap_dir, read_only_if_exists=read_only)
            weights = load_remote(bufs)
        else:
            variables = facts.init("model", memmap_dir=memmap_dir, read_only_if_exists=read_only)
            weights = variables
        (y,) = g.bind(weights).call(x)
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
        ops.var_updates.accumulate_(weights.w, popxl.constant(np.ones((3, 4), np.float32)))
        if bufs is not None:
            store_remote(bufs, weights)
    return ir, xs, ys, variables


@pytest.mark.parametrize("remote", [False, True])
def test_memmap_variables(tmp_path, remote: bool) -> None:
    """`memmap_dir`: the initial value lives in `<dir>/<name>.npy` (raw, upstream's layout);
    a second program finds the file and starts from it; `read_only_if_exists` opens it
    read-only; a file of another size is refused naming it."""
    np.random.seed(0)
    ir, xs, ys, variables = _memmap_program(str(tmp_path), remote=remote)
    path = tmp_path / "model.w.npy"
    assert path.exists() and path.stat().st_size == 3 * 4 * 4
    w0 = np.fromfile(path, np.float32).reshape(3, 4)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with popxl.Session(ir) as s:
        np.testing.assert_array_equal(s.get_tensor_data(variables.w), w0)
        np.testing.assert_allclose(s.run({xs: x})[ys], x @ w0, rtol=1e-6)
    # the session kept the variable in the file: its update (+1) went there on exit
    np.testing.assert_array_equal(np.fromfile(path, np.float32).reshape(3, 4), w0 + 1)
    np.random.seed(1)  # other random weights: the file wins
    ir2, xs2, ys2, variables2 = _memmap_program(str(tmp_path), read_only=True, remote=remote)
    with popxl.Session(ir2) as s2:
        np.testing.assert_array_equal(s2.get_tensor_data(variables2.w), w0 + 1)
    mm = addons.VariableFactory(np.zeros((3, 4), np.float32), popxl.float32).next_memmap(
        str(tmp_path), "model.w", read_only_if_exists=True
    )
    assert isinstance(mm, np.memmap) and mm.mode == "r"
    with pytest.raises(ValueError, match=r"model\.w\.npy has 48 bytes; the variable \(\(2, 2\) float32\) needs 16"):
        addons.VariableFactory(np.zeros((2, 2), np.float32)).next_memmap(str(tmp_path), "model.w")


class _Model(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", partial(np.full, (4, 2), 0.5), popxl.float32)
        return x @ w


def _task_session(**kw) -> tuple[TaskSession, popxl.HostToDeviceStream]:
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((3, 4), popxl.float32, "x")
        facts, g = _Model().create_graph(xs.spec)
        variables = facts.init()
        (y,) = g.bind(variables).call(ops.host_load(xs))
        ops.var_updates.accumulate_(variables.w, popxl.constant(np.ones((4, 2), np.float32)))
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    return TaskSession([xs], [ys], variables, ir=ir, device_desc="cpu", **kw), xs


class _FileLoader:
    """Upstream's dataloader protocol: save(path) / resume(filename=path)."""

    def __init__(self) -> None:
        self.position = 0

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(str(self.position))

    def resume(self, filename: str) -> None:
        with open(filename) as f:
            self.position = int(f.read())


def test_task_session_state_and_session_info(tmp_path) -> None:
    session, xs = _task_session()
    assert session.session_state == {"steps": 0}
    session.add_session_state_info({"total_steps": 10, "lr": [0.1, 0.01]})
    with pytest.raises(TypeError, match="the value of 'bad' is not JSON-serialisable"):
        session.add_session_state_info({"bad": object()})
    with pytest.raises(ValueError, match="must implement save and resume"):
        session.dataloader = object()
    session.dataloader = _FileLoader()
    session.dataloader.position = 42
    x = np.ones((3, 4), np.float32)
    with session:
        for _ in range(3):
            session.run({xs: x})
        session.session_state["total_steps"] = 7
        session.save_checkpoint(str(tmp_path))
    assert session.session_state["steps"] == 3
    info = json.loads((tmp_path / "session_info.json").read_text())
    assert info == {"steps": 3, "total_steps": 7, "lr": [0.1, 0.01]}
    assert (tmp_path / "dataloader.bin").read_text() == "42"

    other, _ = _task_session()
    other.dataloader = _FileLoader()
    other.add_session_state_info({"total_steps": 0, "lr": [], "extra": 1})
    with pytest.raises(ValueError, match=r"Session state keys not in .*session_info.json: \['extra'\]"):
        other.load_checkpoint(str(tmp_path), report_missing="error")
    other.load_checkpoint(str(tmp_path), report_missing="none")
    assert other.session_state == info and other.dataloader.position == 42
    np.testing.assert_array_equal(other.get_tensor_data(other.state.w), np.full((4, 2), 0.5) + 3)
    os.remove(tmp_path / "session_info.json")  # upstream: a checkpoint without it loads with steps 0
    third, _ = _task_session()
    third.load_checkpoint(str(tmp_path), report_missing="error")
    assert third.session_state == {"steps": 0}


def test_initialise_memmap_dir_from_checkpoint(tmp_path) -> None:
    (tmp_path / "ckpt" / "model").mkdir(parents=True)
    np.arange(4, dtype=np.float32).tofile(tmp_path / "ckpt" / "model" / "a.w.npy")
    (tmp_path / "ckpt" / "model" / "b.npz").write_bytes(b"")
    initialise_memmap_dir_from_checkpoint(str(tmp_path / "ckpt"), str(tmp_path / "mm"))
    assert os.listdir(tmp_path / "mm") == ["a.w.npy"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        initialise_memmap_dir_from_checkpoint(str(tmp_path / "none"), str(tmp_path / "mm"))


def test_add_recompute_inputs_against_finite_differences() -> None:
    """A hand-written recomputation graph from `add_recompute_inputs` (as upstream's
    recompute_graph builds it): calls the forward graph on the new inputs, then the gradient
    graph with the recomputed activations. Its gradient of sum(tanh(x @ w) * dy) equals
    finite differences of the NumPy function."""
    from popxl_addons.graph import BoundGraph
    from popxl_addons.transforms.recomputation import add_recompute_inputs

    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((2, 3)).astype(np.float32)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    dy0 = rng.standard_normal((2, 4)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        fwd = ir.create_graph(lambda x, w: ops.tanh(x @ w), popxl.TensorSpec((2, 3), popxl.float32),
                              popxl.TensorSpec((3, 4), popxl.float32))  # fmt: skip
        bwd = addons.autodiff(fwd)
        info = bwd.grad_graph_info
        recomp = ir.create_empty_graph("my_recomp")
        with recomp:
            fwd_inputs, grad_inputs, expected = add_recompute_inputs(info)
            call_info = BoundGraph(info.forward_graph, fwd_inputs).call_with_info()
            grad_inputs.update(info.inputs_dict(call_info))
            outs = BoundGraph(info.graph, grad_inputs).call_with_info().outputs
            for t in outs:
                popxl.graph_output(t)
        assert [e.connection_type.name for e in expected] == ["FwdGrad", "Fwd", "Fwd"]
        # the gradient's input, then the forward inputs in the order of their connections
        order = [e.fwd_tensor.name for e in expected[1:]]
        assert [t.name for t in recomp.inputs][1:] == order
        assert sorted(order) == ["w", "x"]
        values = {"x": popxl.variable(x0), "w": popxl.variable(w0)}
        dy = popxl.variable(dy0)
        dx, dw = ops.call(recomp, dy, *[values[n] for n in order])
        s_dx, s_dw = popxl.d2h_stream(dx.shape, dx.dtype, "dx"), popxl.d2h_stream(dw.shape, dw.dtype, "dw")
        ops.host_store(s_dx, dx)
        ops.host_store(s_dw, dw)
    with popxl.Session(ir) as s:
        res = s.run()

    def f(x: np.ndarray, w: np.ndarray) -> float:
        return float((np.tanh(x @ w) * dy0).sum())

    def numeric(arg: int) -> np.ndarray:
        base = [x0.astype(np.float64), w0.astype(np.float64)]
        g = np.zeros_like(base[arg])
        for i in np.ndindex(g.shape):
            hi = [b.copy() for b in base]
            lo = [b.copy() for b in base]
            hi[arg][i] += 1e-5
            lo[arg][i] -= 1e-5
            g[i] = (f(*hi) - f(*lo)) / 2e-5
        return g

    np.testing.assert_allclose(res[s_dx], numeric(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res[s_dw], numeric(1), rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match="expected a GradGraphInfo"):
        add_recompute_inputs(bwd)  # bad input: the test checks its error
