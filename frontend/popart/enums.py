"""The enums of PopART's Python module (`popart.VirtualGraphMode.Manual`, ...), with the names
and members PopART binds. Each is an `enum.Enum` (members print as `Name.Member`); members
of another enum or plain ints are refused where a `SessionOptions` field takes one.

`BatchSerializationTransformContext.Fwd` / `Bwd` are aliases of `Forward` / `Backward`, as
in PopART.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "InitType",
    "TensorRemapType",
    "TileSet",
    "ExchangeStrategy",
    "ReplicatedStreamMode",
    "AnchorReturnTypeId",
    "ReductionType",
    "MeanReductionStrategy",
    "ScatterReduction",
    "WeightDecayMode",
    "SGDAccumulatorAndMomentum",
    "AdamMode",
    "AdaptiveMode",
    "GradientTensorTrackingMethod",
    "BatchSerializationTransformContext",
    "BatchSerializationMethod",
    "BatchSerializationBatchSchedule",
    "AutodiffStitchStrategy",
    "SubgraphCopyingStrategy",
    "PatternsLevel",
    "RecomputationType",
    "RecomputeType",
    "TensorStorage",
    "ReplicatedTensorSharding",
    "ExecutionPhaseIOSchedule",
    "ExecutionPhaseSchedule",
    "AccumulateOuterFragmentSchedule",
    "SyncPattern",
    "MergeVarUpdateType",
    "VirtualGraphMode",
    "SyntheticDataMode",
    "IrSerializationFormat",
    "Instrumentation",
    "DeviceType",
    "DeviceConnectionType",
    "DeviceSelectionCriterion",
    "VariableRetrievalMode",
    "RecoveryAction",
]


class PopartEnum(Enum):
    """Base of the enums: `repr` as PopART's bindings print them."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"


class InitType(PopartEnum):
    NoInit = 0
    Zero = 1


class TensorRemapType(PopartEnum):
    FwdBwdReverse = 0
    FwdBwd = 1
    Fwd = 2


class TileSet(PopartEnum):
    Compute = 0
    IO = 1


class ExchangeStrategy(PopartEnum):
    JustInTime = 0
    OverlapInnerLoop = 1
    OverlapLoops = 2
    OverlapStep = 3


class ReplicatedStreamMode(PopartEnum):
    Replicate = 0
    Broadcast = 1


class AnchorReturnTypeId(PopartEnum):
    Final = 0
    EveryN = 1
    All = 2
    Sum = 3


class ReductionType(PopartEnum):
    Mean = 0
    NoReduction = 1
    Sum = 2


class MeanReductionStrategy(PopartEnum):
    Running = 0
    Post = 1


class ScatterReduction(PopartEnum):
    Sum = 0
    Max = 1
    Min = 2
    Mul = 3
    NoReduction = 4


class WeightDecayMode(PopartEnum):
    Decay = 0
    L2Regularization = 1


class SGDAccumulatorAndMomentum(PopartEnum):
    Combined = 0
    Separate = 1


class AdamMode(PopartEnum):
    Adam = 0
    AdamNoBias = 1
    Lamb = 2
    LambNoBias = 3
    AdaMax = 4


class AdaptiveMode(PopartEnum):
    AdaGrad = 0
    RMSProp = 1
    CenteredRMSProp = 2
    AdaDelta = 3


class GradientTensorTrackingMethod(PopartEnum):
    ConvAndMatmulGradients = 0
    AllNonViewChangingGradientTensors = 1
    GradientsOfUserSpecifiedTensors = 2


class BatchSerializationTransformContext(PopartEnum):
    Forward = 0
    Backward = 1
    Fwd = 0
    Bwd = 1


class BatchSerializationMethod(PopartEnum):
    UnrollDynamic = 0
    UnrollStatic = 1
    Loop = 2


class BatchSerializationBatchSchedule(PopartEnum):
    Scheduler = 0
    Isomorphic = 1
    OverlapOnIo = 2
    OverlapOnCompute = 3


class AutodiffStitchStrategy(PopartEnum):
    RecomputeMinimal = 0
    RecomputeAllNonInputs = 1
    AddFwdOutputs = 2
    SafeAddFwdOutputs = 3


class SubgraphCopyingStrategy(PopartEnum):
    OnEnterAndExit = 0
    JustInTime = 1


class PatternsLevel(PopartEnum):
    All = 0
    Default = 1
    Minimal = 2
    NoPatterns = 3


class RecomputationType(PopartEnum):
    NoRecompute = 0
    Standard = 1
    NormOnly = 2
    RecomputeAll = 3
    Pipeline = 4


class RecomputeType(PopartEnum):
    Undefined = 0
    Checkpoint = 1
    Recompute = 2
    Recomputed = 3


class TensorStorage(PopartEnum):
    OnChip = 0
    OffChip = 1


class ReplicatedTensorSharding(PopartEnum):
    Off = 0
    On = 1


class ExecutionPhaseIOSchedule(PopartEnum):
    Preload = 0
    OnDemand = 1


class ExecutionPhaseSchedule(PopartEnum):
    Interleaving = 0
    Batch = 1
    BatchClusteredIO = 2


class AccumulateOuterFragmentSchedule(PopartEnum):
    Scheduler = 0
    Serial = 1
    OverlapCycleOptimized = 2
    OverlapMemoryOptimized = 3


class SyncPattern(PopartEnum):
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class MergeVarUpdateType(PopartEnum):
    Off = 0
    All = 1
    AutoTight = 2
    AutoLoose = 3


class VirtualGraphMode(PopartEnum):
    Off = 0
    Manual = 1
    Auto = 2
    ExecutionPhases = 3


class SyntheticDataMode(PopartEnum):
    Off = 0
    Zeros = 1
    RandomNormal = 2
    RandomUniform = 3


class IrSerializationFormat(PopartEnum):
    JSON = 0


class Instrumentation(PopartEnum):
    Outer = 0
    Inner = 1


class DeviceType(PopartEnum):
    IpuModel = 0
    Cpu = 1
    Ipu = 2
    OfflineIpu = 3
    Sim = 4


class DeviceConnectionType(PopartEnum):
    Always = 0
    OnDemand = 1
    Never = 2


class DeviceSelectionCriterion(PopartEnum):
    First = 0
    Random = 1


class VariableRetrievalMode(PopartEnum):
    OnePerGroup = 0
    AllReduceReplicas = 1
    AllReplicas = 2


class RecoveryAction(PopartEnum):
    IPU_RESET = 0
    LINK_RESET = 1
    PARTITION_RESET = 2
    FULL_RESET = 3
