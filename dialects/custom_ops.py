"""The NumPy implementations of users' custom ops, by the op type name their program uses.

A PopXL program may call an op written in C++ for PopART (a `cppimport`-built binding,
e.g. a rotary position embedding). xl cannot run C++ PopART ops; instead the user
registers a NumPy implementation under the op's type name, and the program's calls
become `popxl.custom` ops (`xl.dialects.popxl_custom`) carrying that name and the op's
attributes. The runtime kernel of `popxl.custom` and the gradient rule read the
registration made here (the frontend registers through `popxl.custom_ops.custom_op`).

A definition says what the op computes on NumPy arrays:

- `forward(*inputs, **attributes)`: the output array, or a tuple of `num_outputs` arrays.
- `grad(*output_grads, *inputs, **attributes)` (optional): one entry per input, the
  gradient of the loss with respect to that input, or None for "no gradient" (zeros).
  Without it, `autodiff` refuses a graph where a gradient must flow through the op.
- `output_specs(input_specs, attributes)` (optional): the `(shape, numpy dtype)` of each
  output from the `(shape, numpy dtype)` of each input; by default every output has the
  shape and dtype of input 0.

```python
import numpy as np
from xl.dialects.custom_ops import CustomOpDefinition, register_custom_op

register_custom_op(CustomOpDefinition("Scale2", forward=lambda x: 2 * x, grad=lambda dy, x: (2 * dy,)))
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CustomOpDefinition",
    "CustomOpError",
    "Spec",
    "custom_op_definition",
    "register_custom_op",
    "registered_custom_ops",
    "unregister_custom_op",
]

Spec = tuple[tuple[int, ...], np.dtype]
"""A tensor's `(shape, dtype)`."""


class CustomOpError(LookupError):
    """A custom op type that has no NumPy implementation registered (or a bad registration)."""


@dataclass(frozen=True)
class CustomOpDefinition:
    """A custom op's NumPy implementation (see the module's docstring)."""

    op_type: str
    forward: Callable[..., Any]
    grad: Callable[..., Any] | None = None
    num_outputs: int = 1
    output_specs: Callable[[Sequence[Spec], dict[str, Any]], Sequence[Spec]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.op_type, str) or not self.op_type:
            raise CustomOpError(f"custom op: the op type must be a non-empty string, got {self.op_type!r}")
        if not callable(self.forward):
            raise CustomOpError(f"custom op {self.op_type!r}: forward must be callable, got {self.forward!r}")
        if self.grad is not None and not callable(self.grad):
            raise CustomOpError(f"custom op {self.op_type!r}: grad must be callable or None, got {self.grad!r}")
        if not isinstance(self.num_outputs, int) or isinstance(self.num_outputs, bool) or self.num_outputs < 1:
            raise CustomOpError(
                f"custom op {self.op_type!r}: num_outputs must be an int >= 1, got {self.num_outputs!r}"
            )

    def specs(self, inputs: Sequence[Spec], attributes: dict[str, Any]) -> list[Spec]:
        """The `(shape, dtype)` of each output."""
        if self.output_specs is None:
            if not inputs:
                raise CustomOpError(f"custom op {self.op_type!r}: no inputs; give output_specs to say what it makes")
            return [inputs[0]] * self.num_outputs
        out = [(tuple(int(d) for d in s), np.dtype(dt)) for s, dt in self.output_specs(list(inputs), attributes)]
        if len(out) != self.num_outputs:
            raise CustomOpError(
                f"custom op {self.op_type!r}: output_specs gave {len(out)} outputs, num_outputs is {self.num_outputs}"
            )
        return out

    def run_forward(self, inputs: Sequence[np.ndarray], attributes: dict[str, Any]) -> list[np.ndarray]:
        """`forward` on `inputs`, as a list of `num_outputs` arrays."""
        out = self.forward(*inputs, **attributes)
        outs = list(out) if isinstance(out, tuple | list) else [out]
        if len(outs) != self.num_outputs:
            raise CustomOpError(
                f"custom op {self.op_type!r}: forward returned {len(outs)} arrays, num_outputs is {self.num_outputs}"
            )
        return [np.asarray(o) for o in outs]

    def run_grad(
        self, output_grads: Sequence[np.ndarray], inputs: Sequence[np.ndarray], attributes: dict[str, Any]
    ) -> list[np.ndarray | None]:
        """`grad` on the output gradients and the inputs: one entry (array or None) per input."""
        if self.grad is None:
            raise CustomOpError(f"custom op {self.op_type!r} has no gradient registered (give grad=...)")
        out = self.grad(*output_grads, *inputs, **attributes)
        outs = list(out) if isinstance(out, tuple | list) else [out]
        if len(outs) != len(inputs):
            raise CustomOpError(
                f"custom op {self.op_type!r}: grad returned {len(outs)} entries, the op has {len(inputs)} inputs "
                "(one gradient or None per input)"
            )
        return [None if g is None else np.asarray(g) for g in outs]


_REGISTRY: dict[str, CustomOpDefinition] = {}


def register_custom_op(definition: CustomOpDefinition, replace: bool = False) -> CustomOpDefinition:
    """Registers `definition` under its op type (CustomOpError if the name is taken, unless
    `replace`)."""
    if not isinstance(definition, CustomOpDefinition):
        raise CustomOpError(f"register_custom_op: expected a CustomOpDefinition, got {type(definition).__name__}")
    old = _REGISTRY.get(definition.op_type)
    if old is not None and old is not definition and not replace:
        raise CustomOpError(f"custom op {definition.op_type!r} is already registered (pass replace=True to replace it)")
    _REGISTRY[definition.op_type] = definition
    return definition


def unregister_custom_op(op_type: str) -> None:
    """Forgets the implementation of `op_type` (no error if there is none)."""
    _REGISTRY.pop(op_type, None)


def registered_custom_ops() -> tuple[str, ...]:
    """The op types with an implementation, sorted."""
    return tuple(sorted(_REGISTRY))


def custom_op_definition(op_type: str) -> CustomOpDefinition:
    """The implementation registered for `op_type` (CustomOpError naming the registered ones)."""
    d = _REGISTRY.get(op_type)
    if d is None:
        known = ", ".join(registered_custom_ops()) or "none"
        raise CustomOpError(
            f"custom op {op_type!r} has no NumPy implementation registered (registered: {known}); "
            "define it with popxl.custom_ops.custom_op(...) (see docs/custom_ops.md)"
        )
    return d
