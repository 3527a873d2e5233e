"""NumPy kernels for the `rt.kernel` ops, registered by the op class they implement.

One module per area: `registry` (the registry and the run-time range checks), `buffers`
(the scratch, constants and call line of kernels with a plan template beside them), `core` (the
popxl tensor ops), `activation` (softmax, gelu and their gradients), `nn`, `norm` (group
normalisation), `random`, `remote`, `custom` (user ops with NumPy implementations), `rt` (the
`xl.*` kernels only `rt` passes make) and `collectives` (replica collectives, which receive
every local replica's arrays at once). Importing the package registers them all.

```python
@kernel(GeluOp)
def _gelu(p: dict[str, Any]) -> Kernel: ...
```

Contract: ``KERNELS[OpClass](props) -> fn`` (``kernel_factory("popxl.gelu")`` resolves
an `rt.kernel` name through the dialects, see `xl.dialects.rt_kernels`) where ``props`` is the op's properties as
plain Python values (see ``xl.dialects.popxl.op_props``) and ``fn(*ins, *outs)`` is
called with the input arrays followed by preallocated output arrays (right shape and
dtype) that it must fill in place. For ops that update operands in place (``written_operands``),
``outs`` are the written operands (the same arrays as in ``ins``) followed by results.
Factories run once at compile time; ``fn`` runs every step, so it does no lookups.

More rules:

- Ops with optional operands (scalar factors given as tensors, the optimiser
  updaters) read ``props["operand_segments"]`` (number of operands per operand
  definition, as ``op_props`` gives it; ``operandSegmentSizes`` is accepted too) to
  know which inputs are present (`operand_positions` of the op class). Without it,
  presence is resolved once from the argument count of the first call (optional
  operands matched greedily in order, `greedy_segments`).
- A result may share storage with a same-typed input only for the elementwise
  kernels (add ... sin, identity, gelu_grad, relu_grad, scaled_add) and softmax /
  softmax_grad; tests/runtime/test_kernels.py::test_alias_safe pins that. Other kernels need
  distinct result buffers (written operands of in-place ops excepted).
- Shapes are static per kernel instance: kernels that need shape-derived data
  compute it on the first call and keep it.
- Maths runs in the output dtype (float32 stays float32); state of another float
  dtype than its update (float16 moments, float32 gradients) is cast on store.
"""

from xl.runtime.kernels import activation, collectives, core, custom, nn, norm, random, remote, rt
from xl.runtime.kernels.registry import (
    KERNELS,
    DataRangeError,
    Kernel,
    KernelFactory,
    check_range,
    kernel,
    kernel_factory,
    op_label,
    operand,
)

__all__ = [
    "KERNELS",
    "DataRangeError",
    "Kernel",
    "KernelFactory",
    "activation",
    "check_range",
    "collectives",
    "core",
    "custom",
    "kernel",
    "kernel_factory",
    "nn",
    "norm",
    "op_label",
    "operand",
    "random",
    "remote",
    "rt",
]
