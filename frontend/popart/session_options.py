"""`popart.SessionOptions`: the options object of PopART that PopXL programs reach through
`ir._pb_ir.getSessionOptions()`.

Every option PopART's Python module binds can be read and set, with PopART's defaults and
PopXL's settings (`virtualGraphMode = Manual`, `enableExplicitMainLoops`, ...); a name that
is no option is an `AttributeError` naming the closest options, a value of the wrong type a
`TypeError` naming the option. What a set option does on NumPy is one of:

- honoured: the replication options (`replicatedGraphCount`, `enableReplicatedGraphs`,
  `globalReplicationFactor`) read and set the `popxl.Ir`'s replication factor;
- recorded: kept and shown by `Session.options_report()`, without effect on what xl
  computes (IO tiles, engine / convolution / matmul options that only place or schedule work,
  caching, outlining, logging, ...);
- not honoured, could change the numbers (`enableStochasticRounding`, `partialsTypeMatMuls`
  or a `partialsType` of half precision, `syntheticDataMode`, `enableNonStableSoftmax`,
  `enableStableNorm`): recorded, shown by the report, and a `SessionOptionWarning` per option
  when a `popxl.Session` of the Ir is created.

```python
opts = ir._pb_ir.getSessionOptions()
opts.numIOTiles = 32                                        # recorded
opts.engineOptions["target.syncReplicasIndependently"] = "true"   # recorded
opts.replicatedGraphCount = 4                               # ir.replication_factor == 4
session = popxl.Session(ir, "ipu_hw")
print(session.options_report(print_report=False))
```
"""

from __future__ import annotations

import difflib
import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from popart import enums as E

__all__ = [
    "SessionOptions",
    "SessionOptionWarning",
    "TensorLocation",
    "TensorLocationSettings",
    "ExecutionPhaseSettings",
    "BatchSerializationSettings",
    "AccumulateOuterFragmentSettings",
    "AutomaticLossScalingSettings",
    "ReplicatedCollectivesSettings",
    "AutodiffSettings",
    "ExperimentalSettings",
    "DeveloperSettings",
]

HONOURED = "honoured"
RECORDED = "recorded"
NUMBERS = "numbers"  # recorded, not honoured, could change the numbers


class SessionOptionWarning(UserWarning):
    """A session option that could change the numbers on an IPU is not honoured by xl."""


@dataclass(frozen=True)
class _Field:
    """One option: its type, default and what it does on NumPy."""

    kind: Any  # bool, int, float, str, "strmap" (str -> str), "map", "list", "set", an Enum or _Struct class
    default: Any
    effect: str = RECORDED
    note: str = ""
    # for NUMBERS options: whether a value changes the numbers on an IPU
    changes: Callable[[Any], bool] | None = None

    def fresh_default(self) -> Any:
        if self.kind == "strmap":
            return _OptionsDict(dict(self.default))
        if self.kind == "map":
            return dict(self.default)
        if self.kind in ("list", "set"):
            return type(self.default)(self.default)
        if isinstance(self.kind, type) and issubclass(self.kind, _Struct):
            return self.kind()
        return self.default


def _is_half(value: Any) -> bool:
    return str(value).strip().lower() in ("half", "float16", "fp16")


def _partials_half(options: Mapping[str, str]) -> bool:
    return any(k == "partialsType" and _is_half(v) for k, v in options.items())


def _describe(value: Any) -> str:
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, _OptionsDict):
        return repr(dict(value))
    return repr(value)


def _check(owner: str, name: str, field: _Field, value: Any) -> Any:
    """`value` converted to the option's type, or a TypeError naming the option."""
    kind = field.kind
    where = f"{owner}.{name}"

    def bad(what: str) -> TypeError:
        return TypeError(f"{where} takes {what}, got {value!r} ({type(value).__name__})")

    if kind is bool:
        if type(value).__name__ == "bool_" or isinstance(value, bool):
            return bool(value)
        raise bad("a bool")
    if kind is int:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise bad("an int")
        return int(value)
    if kind is float:
        if isinstance(value, bool | str) or not hasattr(value, "__float__"):
            raise bad("a float")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise bad("a str")
        return value
    if kind == "strmap":
        if not isinstance(value, Mapping):
            raise bad("a dict of str to str")
        out = _OptionsDict()
        out._where = where  # before the items, which are checked
        for k, v in value.items():
            out[k] = v
        return out
    if kind == "map":
        if not isinstance(value, Mapping):
            raise bad("a dict")
        return dict(value)
    if kind in ("list", "set"):
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise bad(f"a {kind}")
        return list(value) if kind == "list" else set(value)
    if isinstance(kind, type) and issubclass(kind, Enum):
        if not isinstance(value, kind):
            raise bad(f"a popart.{kind.__name__}")
        return value
    if isinstance(kind, type) and issubclass(kind, _Struct):
        if not isinstance(value, kind):
            raise bad(f"a popart.{kind.__name__}")
        return value
    raise AssertionError(f"unknown option kind {kind!r}")  # pragma: no cover


def _no_option(owner: str, name: str, fields: Iterable[str]) -> AttributeError:
    close = difflib.get_close_matches(name, list(fields), n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    return AttributeError(f"{owner} has no option {name!r}{hint}")


class _OptionsDict(dict):
    """A `dict[str, str]` option (engineOptions, convolutionOptions, ...): set in place, as
    PopART's Python module allows (`opts.engineOptions["debug.x"] = "true"`)."""

    _where = "SessionOptions"

    def _check_item(self, key: Any, value: Any) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"{self._where}: keys and values must be str, got {key!r}: {value!r}")

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check_item(key, value)
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


class _Struct:
    """A settings struct of PopART (ExecutionPhaseSettings, TensorLocation, ...): its fields
    are checked like the options; keyword (or positional, in field order) arguments."""

    _FIELDS: dict[str, _Field] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        object.__setattr__(self, "_values", {k: f.fresh_default() for k, f in cls._FIELDS.items()})
        object.__setattr__(self, "_set", {})
        names = list(cls._FIELDS)
        if len(args) > len(names):
            raise TypeError(f"popart.{cls.__name__} takes at most {len(names)} arguments, got {len(args)}")
        for k, v in zip(names, args):
            setattr(self, k, v)
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise _no_option(f"popart.{type(self).__name__}", name, type(self)._FIELDS)

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self)
        field = cls._FIELDS.get(name)
        if field is None:
            raise _no_option(f"popart.{cls.__name__}", name, cls._FIELDS)
        value = _check(f"popart.{cls.__name__}", name, field, value)
        self._values[name] = value
        self._set[name] = value

    def changed(self) -> dict[str, Any]:
        """The fields set since construction, with nested structs' as `a.b`."""
        out = {}
        for k, v in self._values.items():
            if isinstance(v, _Struct):
                out.update({f"{k}.{sk}": sv for sk, sv in v.changed().items()})
            elif k in self._set or (isinstance(v, _OptionsDict | list | set) and v):
                out[k] = v
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={_describe(v)}" for k, v in self._values.items())
        return f"popart.{type(self).__name__}({inner})"


class TensorLocation(_Struct):
    _FIELDS = {
        "storage": _Field(E.TensorStorage, E.TensorStorage.OnChip),
        "loadTileSet": _Field(E.TileSet, E.TileSet.Compute),
        "storageTileSet": _Field(E.TileSet, E.TileSet.Compute),
        "replicatedTensorSharding": _Field(E.ReplicatedTensorSharding, E.ReplicatedTensorSharding.Off),
        "shardingDomain": _Field("list", []),
    }


class TensorLocationSettings(_Struct):
    _FIELDS = {
        "location": _Field(TensorLocation, None),
        "minElementsForOffChip": _Field(int, 2),
        "minElementsForReplicatedTensorSharding": _Field(int, 8192),
    }


class ExecutionPhaseSettings(_Struct):
    _FIELDS = {
        "phases": _Field(int, 0),
        "stages": _Field(int, 2),
        "weightIOSchedule": _Field(E.ExecutionPhaseIOSchedule, E.ExecutionPhaseIOSchedule.Preload),
        "activationIOSchedule": _Field(E.ExecutionPhaseIOSchedule, E.ExecutionPhaseIOSchedule.Preload),
        "optimizerStateIOSchedule": _Field(E.ExecutionPhaseIOSchedule, E.ExecutionPhaseIOSchedule.OnDemand),
        "accumulatorIOSchedule": _Field(E.ExecutionPhaseIOSchedule, E.ExecutionPhaseIOSchedule.Preload),
        "schedule": _Field(E.ExecutionPhaseSchedule, E.ExecutionPhaseSchedule.Interleaving),
    }


class BatchSerializationSettings(_Struct):
    _FIELDS = {
        "factor": _Field(int, 0),
        "concatOnVirtualGraphChange": _Field(bool, True),
        "concatOnExecutionPhaseChange": _Field(bool, True),
        "concatOnPipelineStageChange": _Field(bool, True),
        "transformContext": _Field(E.BatchSerializationTransformContext, E.BatchSerializationTransformContext.Forward),
        "method": _Field(E.BatchSerializationMethod, E.BatchSerializationMethod.UnrollDynamic),
        "batchSchedule": _Field(E.BatchSerializationBatchSchedule, E.BatchSerializationBatchSchedule.Isomorphic),
    }


class AccumulateOuterFragmentSettings(_Struct):
    _FIELDS = {
        "schedule": _Field(E.AccumulateOuterFragmentSchedule, E.AccumulateOuterFragmentSchedule.Serial),
        "excludedVirtualGraphs": _Field("list", []),
    }


class AutomaticLossScalingSettings(_Struct):
    _FIELDS = {
        "enabled": _Field(bool, False),
        "binEdgeLocation": _Field(float, 0.125),
        "thresholdUpperCountProportion": _Field(float, 1e-7),
        "toTrackTensors": _Field("list", []),
        "updatePeriod": _Field(int, 1),
        "gradientTensorTrackingMethod": _Field(
            E.GradientTensorTrackingMethod, E.GradientTensorTrackingMethod.AllNonViewChangingGradientTensors
        ),
    }


class ReplicatedCollectivesSettings(_Struct):
    _FIELDS = {
        "prepareScheduleForMergingCollectives": _Field(bool, False),
        "mergeAllReduceCollectives": _Field(bool, False),
        "mergeReduceScatterCollectives": _Field(bool, False),
        "mergeAllGatherCollectives": _Field(bool, False),
    }


class AutodiffSettings(_Struct):
    _FIELDS = {"stitchStrategy": _Field(E.AutodiffStitchStrategy, E.AutodiffStitchStrategy.RecomputeAllNonInputs)}


class ExperimentalSettings(_Struct):
    _FIELDS = {"customTransformApplierSettings": _Field("strmap", {})}


class DeveloperSettings(_Struct):
    _FIELDS = {"timePartitionLoggerThresholdPercentage": _Field(float, 1.0)}


_HALF_NOTE = "on an IPU, float16 matmuls / convolutions then accumulate their partials in float16; xl does not"

# name -> field. PopART's defaults; the options PopXL's Ir sets are in _POPXL_SETS.
_FIELDS: dict[str, _Field] = {
    # replication: honoured on the Ir
    "enableReplicatedGraphs": _Field(bool, False, HONOURED, "replication_factor > 1"),
    "replicatedGraphCount": _Field(int, 1, HONOURED, "the replicas of this instance"),
    "globalReplicationFactor": _Field(int, 1, HONOURED, "Ir.replication_factor"),
    "globalReplicaOffset": _Field(int, 0, RECORDED, "set by the launch (popdist)"),
    "enableDistributedReplicatedGraphs": _Field(bool, False, RECORDED, "set by the launch (popdist)"),
    # could change the numbers on an IPU: warned about
    "enableStochasticRounding": _Field(
        bool, False, NUMBERS, "stochastic rounding of float16 results on an IPU; xl rounds to nearest", bool
    ),
    "partialsTypeMatMuls": _Field(str, "", NUMBERS, _HALF_NOTE, _is_half),
    "convolutionOptions": _Field("strmap", {}, NUMBERS, _HALF_NOTE, _partials_half),
    "matmulOptions": _Field("strmap", {}, NUMBERS, _HALF_NOTE, _partials_half),
    "syntheticDataMode": _Field(
        E.SyntheticDataMode,
        E.SyntheticDataMode.Off,
        NUMBERS,
        "an IPU replaces the host data with synthetic data; xl streams the host data",
        lambda v: v != E.SyntheticDataMode.Off,
    ),
    "enableNonStableSoftmax": _Field(
        bool, False, NUMBERS, "an IPU computes softmax without subtracting the maximum; xl subtracts it", bool
    ),
    "enableStableNorm": _Field(bool, False, NUMBERS, "an IPU computes norms in a more stable form", bool),
    # recorded: no effect on what xl computes
    "numIOTiles": _Field(int, 0, RECORDED, "IO tiles place transfers, not results"),
    "engineOptions": _Field("strmap", {}, RECORDED, "Poplar engine options"),
    "lstmOptions": _Field("strmap", {}),
    "reportOptions": _Field("strmap", {}),
    "gclOptions": _Field("strmap", {}),
    "tensorLocationSettingsOverride": _Field("map", {}),
    "updatableNamedBuffers": _Field("list", []),
    "logDir": _Field(str, ""),
    "dotChecks": _Field("set", set()),
    "firstDotOp": _Field(int, 0),
    "finalDotOp": _Field(int, 10000),
    "dotOpNames": _Field(bool, False),
    "exportPoplarComputationGraph": _Field(bool, False),
    "exportPoplarVertexGraph": _Field(bool, False),
    "separateCallOpPdfs": _Field(bool, True),
    "enableOutlining": _Field(bool, True),
    "enableOutliningCopyCostPruning": _Field(bool, True),
    "outlineThreshold": _Field(float, 1.0),
    "outlineSequenceBreakCost": _Field(float, 10000.0),
    "autoRecomputation": _Field(E.RecomputationType, E.RecomputationType.NoRecompute),
    "mergeVarUpdate": _Field(E.MergeVarUpdateType, E.MergeVarUpdateType.Off),
    "mergeVarUpdateMemThreshold": _Field(int, 1000000),
    "looseThresholdAtPeak": _Field(int, 8000),
    "rearrangeAnchorsOnHost": _Field(bool, True),
    "rearrangeStreamsOnHost": _Field(bool, False),
    "enablePrefetchDatastreams": _Field(bool, True),
    "defaultBufferingDepth": _Field(int, 1),
    "bufferingDepthMap": _Field("map", {}),
    "enableGradientAccumulation": _Field(bool, False, RECORDED, "PopXL programs accumulate explicitly"),
    "accumulationFactor": _Field(int, 1, RECORDED, "PopXL programs accumulate explicitly"),
    "accumulationAndReplicationReductionType": _Field(E.ReductionType, E.ReductionType.Sum),
    "meanAccumulationAndReplicationReductionStrategy": _Field(E.MeanReductionStrategy, E.MeanReductionStrategy.Post),
    "virtualGraphMode": _Field(E.VirtualGraphMode, E.VirtualGraphMode.Off),
    "virtualGraphSplitRatios": _Field("list", []),
    "enablePipelining": _Field(bool, False, RECORDED, "PopXL programs pipeline explicitly"),
    "instrumentWithHardwareCycleCounter": _Field(bool, False),
    "hardwareInstrumentations": _Field("set", {E.Instrumentation.Outer}),
    "disableGradAccumulationTensorStreams": _Field(bool, False),
    "disableOptimizerStateTensorStreams": _Field(bool, False),
    "compileEngine": _Field(bool, True),
    "constantWeights": _Field(bool, True),
    "enableEngineCaching": _Field(bool, False),
    "enableVariablesCaching": _Field(bool, True),
    "cachePath": _Field(str, "session_cache"),
    "enableFloatingPointChecks": _Field(bool, False, RECORDED, "floating point exceptions on an IPU"),
    "_enableRngStateManagement": _Field(bool, False),
    "executionPhaseSettings": _Field(ExecutionPhaseSettings, None),
    "accumulateOuterFragmentSettings": _Field(AccumulateOuterFragmentSettings, None),
    "explicitRecomputation": _Field(bool, False),
    "aliasZeroCopy": _Field(bool, False),
    "batchSerializationSettings": _Field(BatchSerializationSettings, None),
    "autodiffSettings": _Field(AutodiffSettings, None),
    "delayVarUpdates": _Field(bool, True),
    "scheduleNonWeightUpdateGradientConsumersEarly": _Field(bool, False),
    "enableFullyConnectedPass": _Field(bool, True),
    "enableSerializedMatmuls": _Field(bool, True),
    "experimentalSettings": _Field(ExperimentalSettings, None),
    "customCodelets": _Field("list", []),
    "customCodeletCompileFlags": _Field(str, ""),
    "timeLimitScheduler": _Field(float, 1e9),
    "swapLimitScheduler": _Field(int, 1000000),
    "serializedPoprithmsShiftGraphsDir": _Field(str, ""),
    "kahnTieBreaker": _Field(str, "greedy"),
    "transitiveClosureOptimizationThreshold": _Field(int, 100000),
    "decomposeGradSum": _Field(bool, False),
    "replicatedCollectivesSettings": _Field(ReplicatedCollectivesSettings, None),
    "groupHostSync": _Field(bool, False),
    "strictOpVersions": _Field(bool, True),
    "opxAliasChecking": _Field(bool, False),
    "opxModifyChecking": _Field(bool, False),
    "useHostCopyOps": _Field(bool, False),
    "enableEfficientOverlapIOTopoCons": _Field(bool, False),
    "enableLoadAndOffloadRNGState": _Field(bool, False),
    "activationTensorLocationSettings": _Field(TensorLocationSettings, None),
    "weightTensorLocationSettings": _Field(TensorLocationSettings, None),
    "optimizerStateTensorLocationSettings": _Field(TensorLocationSettings, None),
    "accumulatorTensorLocationSettings": _Field(TensorLocationSettings, None),
    "automaticLossScalingSettings": _Field(AutomaticLossScalingSettings, None),
    "developerSettings": _Field(DeveloperSettings, None),
    "enableSupportedDataTypeCasting": _Field(bool, True),
    "enableExplicitMainLoops": _Field(bool, False),
    "enableExplicitIR": _Field(bool, False),
    "groupNormStridedChannelGrouping": _Field(bool, False),
    "compilationProgressTotal": _Field(int, 100),
    "enableMergeExchange": _Field(bool, True),
    "ensureFp32LossScaleTensor": _Field(bool, False),
    "enableInplaceAmbiguityChecking": _Field(bool, False),
    "createImplicitPipeliningFwdOnlyProgram": _Field(bool, False),
    "throwIfLog2ScaleTensorNotInRange": _Field(bool, True),
    "enableConstantFoldingOfMultipleConsumers": _Field(bool, True),
    "useLoopCandidateCreator": _Field(bool, False),
    "stashAllTensorsInferencePipeline": _Field(bool, False),
    "subgraphCopyingStrategy": _Field(E.SubgraphCopyingStrategy, E.SubgraphCopyingStrategy.OnEnterAndExit),
}

# PopXL's Ir sets these on its options (xl's programs are the explicit programs they ask for)
_POPXL_SETS: dict[str, Any] = {
    "virtualGraphMode": E.VirtualGraphMode.Manual,
    "useHostCopyOps": True,
    "aliasZeroCopy": True,
    "enableExplicitMainLoops": True,
    "explicitRecomputation": True,
    "enableInplaceAmbiguityChecking": True,
    "enableVariablesCaching": False,
    "decomposeGradSum": True,
}

_REPLICATION = ("enableReplicatedGraphs", "replicatedGraphCount", "globalReplicationFactor")


class SessionOptions:
    """PopART's session options (see the module documentation). `popart.SessionOptions()`
    makes a free-standing one; `ir._pb_ir.getSessionOptions()` returns the Ir's, whose
    replication options read and set the Ir's replication factor and which
    `popxl.Session` checks when it is created."""

    def __init__(self) -> None:
        values = {k: f.fresh_default() for k, f in _FIELDS.items()}
        for k, v in values.items():
            if isinstance(v, _OptionsDict):
                v._where = f"popart.SessionOptions.{k}"
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_set", {})  # name -> value, in the order the program set them
        object.__setattr__(self, "_ir_ref", None)
        object.__setattr__(self, "_warned", set())
        # as PopART's constructor: POPXL_CACHE_DIR (else POPART_CACHE_DIR) turns engine
        # caching on at that path (recorded: xl compiles into memory)
        cache = os.environ.get("POPXL_CACHE_DIR") or os.environ.get("POPART_CACHE_DIR")
        if cache:
            values["enableEngineCaching"] = True
            values["cachePath"] = cache

    # -- binding to an Ir ----------------------------------------------------------------
    @classmethod
    def _for_ir(cls, ir: Any) -> SessionOptions:
        opts = cls()
        opts._values.update(_POPXL_SETS)
        object.__setattr__(opts, "_ir_ref", weakref.ref(ir))
        return opts

    def _ir(self) -> Any:
        ref = self._ir_ref
        return ref() if ref is not None else None

    # -- options ----------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values")
        if values is None or name not in values:
            raise _no_option("popart.SessionOptions", name, _FIELDS)
        ir = self._ir()
        if ir is not None and name in _REPLICATION:
            if name == "enableReplicatedGraphs":
                return ir.replication_factor > 1
            if name == "replicatedGraphCount":
                return ir.instance_replication_factor
            return ir.replication_factor
        return values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        field = _FIELDS.get(name)
        if field is None:
            raise _no_option("popart.SessionOptions", name, _FIELDS)
        value = _check("popart.SessionOptions", name, field, value)
        ir = self._ir()
        if ir is not None and name in _REPLICATION:
            self._set_replication(ir, name, value)
        self._values[name] = value
        self._set[name] = value

    @staticmethod
    def _set_replication(ir: Any, name: str, value: Any) -> None:
        if name == "enableReplicatedGraphs":
            if not value and ir.replication_factor > 1:
                ir.replication_factor = 1
            return
        if value < 1:
            raise ValueError(f"popart.SessionOptions.{name} must be >= 1, got {value}")
        if name == "replicatedGraphCount":  # the replicas of one instance
            instances = ir.replication_factor // ir.instance_replication_factor
            ir.replication_factor = value * instances
        else:
            ir.replication_factor = value

    def getGlobalReplicationFactor(self) -> int:
        """All replicas: the Ir's replication factor (for a free-standing options object,
        `globalReplicationFactor` when distributed, else `replicatedGraphCount` when
        replicated graphs are on, else 1, as PopART)."""
        ir = self._ir()
        if ir is not None:
            return int(ir.replication_factor)
        if self._values["enableDistributedReplicatedGraphs"]:
            return int(self._values["globalReplicationFactor"])
        return int(self._values["replicatedGraphCount"]) if self._values["enableReplicatedGraphs"] else 1

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *_FIELDS})

    # -- what was set ------------------------------------------------------------------------
    def changed(self) -> dict[str, Any]:
        """The options the program set (or filled in place), in order, nested struct fields
        as `struct.field`; PopXL's own settings are not included."""
        out: dict[str, Any] = {}
        for name in self._set:
            current = self._values[name]
            if isinstance(current, _Struct):
                out.update({f"{name}.{k}": v for k, v in current.changed().items()} or {name: current})
            else:
                out[name] = current
        for name, value in self._values.items():
            if name in out or name in self._set:
                continue
            if isinstance(value, _Struct):
                out.update({f"{name}.{k}": v for k, v in value.changed().items()})
            elif isinstance(value, _OptionsDict | dict) and value:
                out[name] = value
        return out

    def _field_of(self, key: str) -> _Field:
        return _FIELDS[key.split(".", 1)[0]]

    def not_honoured(self) -> dict[str, str]:
        """`{option: why}` for the options set to a value that could change the numbers on
        an IPU and that xl does not honour."""
        out = {}
        for key, value in self.changed().items():
            field = self._field_of(key)
            if field.effect == NUMBERS and field.changes is not None and field.changes(value):
                out[key] = f"{key} = {_describe(value)}: {field.note}"
        return out

    def report(self) -> str:
        """A text table of the options set: honoured, recorded (no effect on NumPy), and
        not honoured although they could change the numbers; then PopXL's settings."""
        rows: dict[str, list[str]] = {HONOURED: [], RECORDED: [], NUMBERS: []}
        bad = self.not_honoured()
        for key, value in self.changed().items():
            field = self._field_of(key)
            shown = _describe(getattr(self, key) if key in _REPLICATION else value)
            line = f"  {key} = {shown}" + (f"  ({field.note})" if field.note else "")
            if key in bad:
                rows[NUMBERS].append(line)
            elif field.effect == HONOURED:
                rows[HONOURED].append(line)
            else:
                rows[RECORDED].append(line)
        ir = self._ir()
        lines = ["PopART session options" + (f" of Ir {ir.id}" if ir is not None else "") + " (xl runs on NumPy)"]
        titles = {
            HONOURED: "honoured:",
            RECORDED: "recorded, no effect on what xl computes:",
            NUMBERS: "NOT honoured, could change the numbers on an IPU (xl computes as without them):",
        }
        for kind in (HONOURED, NUMBERS, RECORDED):
            lines.append(titles[kind])
            lines.extend(rows[kind] or ["  (none)"])
        if ir is not None:
            lines.append("set by PopXL: " + ", ".join(f"{k} = {_describe(v)}" for k, v in _POPXL_SETS.items()))
        return "\n".join(lines)

    def __repr__(self) -> str:
        changed = ", ".join(f"{k}={_describe(v)}" for k, v in self.changed().items())
        return f"popart.SessionOptions({changed})"
