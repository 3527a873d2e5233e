"""The `popart` compatibility module: `ir._pb_ir.getSessionOptions()` / `popart.SessionOptions`
(every option readable and settable with a value of its type, wrong types and unknown names
refused), the honoured replication options against NumPy, one `SessionOptionWarning` per
option that could change the numbers, the recorded ones in `session.options_report()` and a
log line, `session._pb_session`, the enums and `versionString`."""

from __future__ import annotations

import logging
import warnings
from enum import Enum

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops
from popart import enums
from popart.session_options import _FIELDS, _POPXL_SETS, NUMBERS, _Struct

# A value of each option that could change the numbers on an IPU, for every such option of the
# table (test_every_numbers_option_has_a_sample fails when one is added without a sample here).
CHANGING = {
    "enableStochasticRounding": True,
    "partialsTypeMatMuls": "half",
    "convolutionOptions": {"partialsType": "half"},
    "matmulOptions": {"partialsType": "float16"},
    "syntheticDataMode": popart.SyntheticDataMode.RandomNormal,
    "enableNonStableSoftmax": True,
    "enableStableNorm": True,
}
# ... and a value of the same options that does not
HARMLESS = {
    "partialsTypeMatMuls": "float",
    "convolutionOptions": {"availableMemoryProportion": "0.3"},
    "matmulOptions": {"partialsType": "float"},
    "syntheticDataMode": popart.SyntheticDataMode.Off,
}


def _sample(name: str, field) -> object:
    """A valid value of the option's type, other than its default where it can be."""
    kind, default = field.kind, field.default
    if kind is bool:
        return not default
    if kind is int:
        return default + 3
    if kind is float:
        return default + 0.5
    if kind is str:
        return default + "x"
    if kind == "strmap":
        return {"some.option": "true"}
    if kind == "map":
        return {"t0": 2}
    if kind == "list":
        return [1, 2]
    if kind == "set":
        return {"a"}
    if isinstance(kind, type) and issubclass(kind, Enum):
        members = list(kind)
        return next((m for m in members if m != default), members[0])
    assert isinstance(kind, type) and issubclass(kind, _Struct), name
    return kind()


def _wrong(field) -> object:
    """A value of another type than the option's."""
    kind = field.kind
    if kind is str or kind in ("strmap", "map", "list", "set"):
        return 3
    return "not-a-value"


def _program(ir: popxl.Ir) -> tuple[popxl.HostToDeviceStream, popxl.DeviceToHostStream, popxl.DeviceToHostStream]:
    """y = x @ w and the replicas' sum of y."""
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        w = popxl.variable(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, name="w")
        y = ops.host_load(xs) @ w
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
        total = ops.collectives.replicated_all_reduce(y, "add")
        ts = popxl.d2h_stream(total.shape, total.dtype, "total")
        ops.host_store(ts, total)
    return xs, ys, ts


def test_version_and_enums() -> None:
    assert popart.versionString().startswith("3.4.0") and "xl" in popart.versionString()
    assert popart.versionNumber() == (3, 4, 0)
    for name in enums.__all__:  # every enum of the module, at top level, members as PopART names them
        cls = getattr(popart, name)
        assert cls is getattr(enums, name) and issubclass(cls, Enum) and list(cls), name
        m = next(iter(cls))
        assert repr(m) == f"<{name}.{m.name}: {m.value}>"
    assert popart.VirtualGraphMode.Manual.name == "Manual"
    assert popart.RecomputationType.NoRecompute.value == 0
    assert popart.BatchSerializationTransformContext.Fwd is popart.BatchSerializationTransformContext.Forward
    with pytest.raises(popart.popart_exception):
        raise popart.popart_internal_exception("x")
    assert not isinstance(object(), popart.DeviceInfo)
    with pytest.raises(TypeError, match="no IPU devices"):
        popart.DeviceInfo()


def test_every_option_reads_and_sets_with_its_type() -> None:
    """Derived from the option table: each option has its default, takes a value of its type
    (read back equal) and refuses another type with a TypeError naming it."""
    opts = popart.SessionOptions()
    for name, field in _FIELDS.items():
        value = getattr(opts, name)
        if isinstance(field.kind, type) and issubclass(field.kind, _Struct):
            assert isinstance(value, field.kind)
        elif field.kind in ("strmap", "map", "list", "set"):
            assert value == field.default
        else:
            assert value == field.default, name
        new = _sample(name, field)
        setattr(opts, name, new)
        got = getattr(opts, name)
        assert (got is new) if isinstance(new, _Struct) else (got == new), name
        with pytest.raises(TypeError, match=f"SessionOptions.{name} takes"):
            setattr(opts, name, _wrong(field))
    assert set(opts.changed()) >= {
        n for n, f in _FIELDS.items() if not isinstance(f.kind, type) or not issubclass(f.kind, _Struct)
    }


def test_unknown_option_and_wrong_items() -> None:
    opts = popart.SessionOptions()
    with pytest.raises(AttributeError, match=r"has no option 'numIOTile' \(did you mean 'numIOTiles'"):
        opts.numIOTile = 32
    with pytest.raises(AttributeError, match="has no option 'enableStochasticRoundings'"):
        _ = opts.enableStochasticRoundings
    with pytest.raises(TypeError, match=r"SessionOptions.engineOptions: keys and values must be str"):
        opts.engineOptions["target.extendedMemory"] = True
    with pytest.raises(TypeError, match="takes a popart.VirtualGraphMode"):
        opts.virtualGraphMode = popart.SyntheticDataMode.Off
    with pytest.raises(TypeError, match="ExecutionPhaseSettings.phases takes an int"):
        opts.executionPhaseSettings.phases = "2"
    with pytest.raises(AttributeError, match="popart.ExecutionPhaseSettings has no option 'phase'"):
        opts.executionPhaseSettings.phase = 2
    opts.engineOptions["target.syncReplicasIndependently"] = "true"  # in place, as PopART's module
    opts.executionPhaseSettings.phases = 3
    opts.weightTensorLocationSettings.location.storage = popart.TensorStorage.OffChip
    assert opts.engineOptions == {"target.syncReplicasIndependently": "true"}
    changed = opts.changed()
    assert changed["executionPhaseSettings.phases"] == 3
    assert changed["weightTensorLocationSettings.location.storage"] is popart.TensorStorage.OffChip


def test_ir_options_are_one_object_with_popxl_settings() -> None:
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    assert opts is ir._pb_ir.getSessionOptions()
    assert opts is not popxl.Ir()._pb_ir.getSessionOptions()
    for name, value in _POPXL_SETS.items():
        assert getattr(opts, name) == value, name
    assert opts.outlineThreshold == 1.0 and opts.cachePath == "session_cache" and opts.numIOTiles == 0
    with pytest.raises(AttributeError, match=r"stand-in for PopART's Ir .* has no 'getTensor'.*getAllGraphs"):
        ir._pb_ir.getTensor("x")


def test_all_graphs_are_counted() -> None:
    """`ir._pb_ir.getAllGraphs()`: the main graph and each subgraph, as upstream's tests count
    them (a graph, then its gradient graph)."""
    import popxl_addons as addons

    ir = popxl.Ir()
    assert [g.id for g in ir._pb_ir.getAllGraphs()] == [ir.main_graph.id] == [ir._pb_ir.getMainGraph().id]
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32))
        g = ir.create_graph(lambda t: t * 2, x)
        assert len(ir._pb_ir.getAllGraphs()) == 2
        addons.autodiff(g)
        graphs = ir._pb_ir.getAllGraphs()
    assert len(graphs) == 3 and len(set(graphs)) == 3 and g.id in {h.id for h in graphs}
    with pytest.raises(AttributeError, match="stand-in for PopART's Graph has no 'getOps'"):
        graphs[1].getOps()


@pytest.mark.parametrize("how", ["replicatedGraphCount", "globalReplicationFactor"])
def test_replication_options_are_honoured(how: str) -> None:
    """Setting the replica count on the options replicates the program: four replicas, the
    all-reduce of their results equals NumPy's sum."""
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    assert not opts.enableReplicatedGraphs and opts.replicatedGraphCount == 1
    opts.enableReplicatedGraphs = True
    setattr(opts, how, 4)
    assert ir.replication_factor == 4 and opts.getGlobalReplicationFactor() == 4 and opts.enableReplicatedGraphs
    xs, ys, ts = _program(ir)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    with warnings.catch_warnings():
        warnings.simplefilter("error", popart.SessionOptionWarning)
        session = popxl.Session(ir)
    with session:
        out = session.run({xs: x})
    np.testing.assert_allclose(out[ys], x @ w, rtol=1e-6)
    np.testing.assert_allclose(out[ts], np.stack([(x @ w).sum(0)] * 4), rtol=1e-5)
    assert f"{how} = 4" in session.options_report(print_report=False)
    with pytest.raises(RuntimeError, match="cannot be changed after a Session was created"):
        opts.replicatedGraphCount = 2
    ir2 = popxl.Ir(replication=2)
    opts2 = ir2._pb_ir.getSessionOptions()
    assert opts2.enableReplicatedGraphs and opts2.replicatedGraphCount == 2
    opts2.enableReplicatedGraphs = False
    assert ir2.replication_factor == 1
    with pytest.raises(ValueError, match="replicatedGraphCount must be >= 1"):
        opts2.replicatedGraphCount = 0


def test_every_numbers_option_has_a_sample() -> None:
    assert set(CHANGING) == {n for n, f in _FIELDS.items() if f.effect == NUMBERS}


@pytest.mark.parametrize("name", sorted(CHANGING))
def test_unhonoured_option_warns_once_when_a_session_is_created(name: str, caplog) -> None:
    """One SessionOptionWarning naming the option; the program computes what it computes
    without the option (NumPy); the report lists it as not honoured."""
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    value = CHANGING[name]
    if isinstance(value, dict):
        getattr(opts, name).update(value)
    else:
        setattr(opts, name, value)
    opts.numIOTiles = 32  # recorded: no warning of its own
    xs, ys, _ = _program(ir)
    with caplog.at_level(logging.INFO, logger="popart"), pytest.warns(popart.SessionOptionWarning) as record:
        session = popxl.Session(ir)
    ours = [w for w in record if issubclass(w.category, popart.SessionOptionWarning)]
    assert len(ours) == 1 and name in str(ours[0].message) and "does not honour" in str(ours[0].message)
    assert "numIOTiles" in caplog.text and name not in caplog.text.split("recorded", 1)[-1]
    x = np.ones((2, 3), np.float32)
    with session:
        y = session.run({xs: x})[ys]
    np.testing.assert_allclose(y, x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 10), rtol=1e-6)
    report = session.options_report(print_report=False)
    bad_part = report.split("NOT honoured", 1)[1].split("recorded, no effect", 1)[0]
    assert name in bad_part and "numIOTiles = 32" in report.split("recorded, no effect", 1)[1]


@pytest.mark.parametrize("name", sorted(HARMLESS))
def test_harmless_values_do_not_warn(name: str) -> None:
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    value = HARMLESS[name]
    if isinstance(value, dict):
        getattr(opts, name).update(value)
    else:
        setattr(opts, name, value)
    _program(ir)
    with warnings.catch_warnings():
        warnings.simplefilter("error", popart.SessionOptionWarning)
        session = popxl.Session(ir)
    assert name in session.options_report(print_report=False).split("recorded, no effect", 1)[1]


def test_published_settings_run_and_are_reported(capsys) -> None:
    """What the published programs set (IO tiles, engine options, matmul partials, stochastic
    rounding): accepted, reported, two warnings, and the numbers are NumPy's."""
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    opts.numIOTiles = 64
    opts.engineOptions["target.syncReplicasIndependently"] = "true"
    opts.engineOptions["target.extendedMemory"] = "true"
    opts.partialsTypeMatMuls = "half"
    opts.enableStochasticRounding = True
    xs, ys, _ = _program(ir)
    with pytest.warns(popart.SessionOptionWarning) as record:
        session = popxl.Session(ir)
    messages = sorted(str(w.message).split(":")[1] for w in record if w.category is popart.SessionOptionWarning)
    assert messages == [" enableStochasticRounding = True", " partialsTypeMatMuls = 'half'"]
    assert session._pb_session.getSessionOptions() is opts
    session._pb_session.setEngineIsLoaded(False)
    assert session._pb_session.getEngineIsLoaded() is False
    with pytest.raises(AttributeError, match="has no 'writeWeights'"):
        session._pb_session.writeWeights(None)
    session.options_report()
    printed = capsys.readouterr().out
    assert "numIOTiles = 64" in printed and "target.extendedMemory" in printed and "set by PopXL" in printed
    x = np.full((2, 3), 0.5, np.float32)
    with session:
        y = session.run({xs: x})[ys]
    np.testing.assert_allclose(y, x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 10), rtol=1e-6)


def test_no_options_no_report_noise() -> None:
    ir = popxl.Ir()
    _program(ir)
    with warnings.catch_warnings():
        warnings.simplefilter("error", popart.SessionOptionWarning)
        session = popxl.Session(ir)
    report = session.options_report(print_report=False)
    assert report.count("(none)") == 3
