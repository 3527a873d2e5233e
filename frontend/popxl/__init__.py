"""popxl on xl: PopXL's Python API recording MLIR-style IR (xDSL) run by a NumPy runtime.

```python
import popxl, popxl.ops as ops
ir = popxl.Ir()
with ir.main_graph:
    x = popxl.variable(np.ones((2, 2), np.float32), name="x")
    ...
with popxl.Session(ir, "ipu_model") as s:
    s.run()
```
"""

from popxl import dtypes, fp8_utils, ops, transforms, utils
from popxl.context import (
    gcg,
    get_current_graph,
    get_ir,
    get_main_graph,
    gir,
    gmg,
    in_sequence,
    io_tiles,
    ipu,
    name_scope,
)
from popxl.dtypes import (
    bool,
    complex64,
    complex128,
    double,
    dtype,
    float,
    float8_143,
    float8_152,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from popxl.graph import Graph
from popxl.ir import Ir
from popxl.module import Module
from popxl.remote_buffer import (
    RemoteBuffer,
    ReplicatedTensorSharding,
    TensorLocation,
    TensorStorage,
    remote_buffer,
    replica_sharded_buffer,
)
from popxl.replica_grouping import ReplicaGrouping
from popxl.session import Session
from popxl.streams import DeviceToHostStream, HostToDeviceStream, d2h_stream, h2d_stream
from popxl.tensor import (
    Constant,
    Tensor,
    TensorByRef,
    TensorSpec,
    Variable,
    constant,
    graph_input,
    graph_output,
    remote_replica_sharded_variable,
    remote_variable,
    replica_sharded_variable,
    variable,
)
from popxl.tensorlocation import ExecutionContext, TileSet
from popxl.utils import create_seeds

__all__ = [
    # context
    "get_current_graph",
    "get_main_graph",
    "get_ir",
    "gcg",
    "gmg",
    "gir",
    "in_sequence",
    "name_scope",
    "ipu",
    "io_tiles",
    # dtypes
    "dtype",
    "dtypes",
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "half",
    "float8_143",
    "float8_152",
    "float16",
    "float",
    "float32",
    "double",
    "float64",
    "complex64",
    "complex128",
    # core
    "Graph",
    "Ir",
    "Module",
    "ReplicaGrouping",
    "Session",
    "create_seeds",
    "RemoteBuffer",
    "remote_buffer",
    "HostToDeviceStream",
    "DeviceToHostStream",
    "h2d_stream",
    "d2h_stream",
    "Tensor",
    "Variable",
    "Constant",
    "TensorSpec",
    "TensorByRef",
    "variable",
    "constant",
    "graph_input",
    "graph_output",
    "remote_variable",
    "remote_replica_sharded_variable",
    "replica_sharded_variable",
    "replica_sharded_buffer",
    "TensorStorage",
    "TensorLocation",
    "ReplicatedTensorSharding",
    "TileSet",
    "ExecutionContext",
    "ops",
    "transforms",
    "utils",
    "fp8_utils",
]
