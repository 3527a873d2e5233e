"""`popart`: what PopXL programs use of PopART's Python module, for xl.

PopXL programs import PopART for a few things around their PopXL code: its version
(`popart.versionString()`), the session options (`ir._pb_ir.getSessionOptions()`, the
same object as `popart.SessionOptions`) with the enums they set on them
(`popart.VirtualGraphMode`, ...), a `popart.DeviceInfo` check and the exception types.
xl runs programs on NumPy: the options are checked, honoured where they mean something on
NumPy (replication) and otherwise recorded; see `popart.session_options` and
`popxl.Session.options_report()`. Of PopART's IR classes, `popart._internal.ir` gives a
graph's ops by PopART op class (`graph._pb_graph.getOps()`); its ONNX builder is not provided.

```python
import popart, popxl

ir = popxl.Ir()
opts = ir._pb_ir.getSessionOptions()
opts.numIOTiles = 32
opts.partialsTypeMatMuls = "half"    # SessionOptionWarning when a Session is created
print(popart.versionString())
```
"""

from __future__ import annotations

from popart import enums, session_options
from popart.enums import *  # noqa: F403  (PopART's enums at top level, as its module has them)
from popart.errors import (
    OutOfMemoryException,
    popart_exception,
    popart_internal_exception,
    poplar_application_runtime_error,
    poplar_exception,
    poplar_runtime_error,
)
from popart.session_options import (
    AccumulateOuterFragmentSettings,
    AutodiffSettings,
    AutomaticLossScalingSettings,
    BatchSerializationSettings,
    DeveloperSettings,
    ExecutionPhaseSettings,
    ExperimentalSettings,
    ReplicatedCollectivesSettings,
    SessionOptions,
    SessionOptionWarning,
    TensorLocation,
    TensorLocationSettings,
)

# The PopART release whose Python API this module follows (the last one, SDK 3.4).
POPART_API_VERSION = (3, 4, 0)
__version__ = ".".join(str(v) for v in POPART_API_VERSION)


def versionString() -> str:
    """PopART's version string: the API release followed, and that it is xl's."""
    import xl

    return f"{__version__} (xl {xl.__version__}, on NumPy)"


def versionNumber() -> tuple[int, int, int]:
    """(major, minor, point) of the PopART API release followed."""
    return POPART_API_VERSION


def packageHash() -> str:
    """The commit of the xl checkout (`popxl_addons.GIT_COMMIT`), or "" outside a checkout."""
    import popxl_addons

    return popxl_addons.GIT_COMMIT or ""


class DeviceInfo:
    """PopART's device type. xl runs on NumPy and makes no devices; programs that check
    `isinstance(x, popart.DeviceInfo)` get False for what xl's Session holds."""

    def __init__(self) -> None:
        raise TypeError("popart.DeviceInfo: xl has no IPU devices (sessions run on NumPy)")


__all__ = [
    "enums",
    "session_options",
    "versionString",
    "versionNumber",
    "packageHash",
    "DeviceInfo",
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
    "popart_exception",
    "popart_internal_exception",
    "poplar_exception",
    "poplar_runtime_error",
    "poplar_application_runtime_error",
    "OutOfMemoryException",
]
__all__ += enums.__all__
