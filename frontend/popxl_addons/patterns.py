"""`popxl_addons.patterns`: `apply_pre_alias_patterns` (upstream's module path).

Upstream sets PopART's pattern level on the Ir and applies PopART's pre-alias patterns to
every graph: graph rewrites that keep every value. The one programs rely on is
`OpToIdentityPattern`: it turns the tensor-parallel all-reduces whose forward is an
identity (`replicated_all_reduce_identical_inputs`, and the gradient of
`..._identical_grad_inputs`) into identities, which PopART cannot run otherwise. On xl
those ops already are identities in their kernels and their gradient rules (before or
after autodiff), and the compile of a `Session` simplifies the program itself, so there
is nothing left for the patterns to do: the call checks its arguments, as upstream's
would fail on them, and changes nothing.

```python
apply_pre_alias_patterns(ir, level="default")
```
"""

from __future__ import annotations

from typing import Literal

import popxl

__all__ = ["apply_pre_alias_patterns", "patterns_level"]

patterns_level: dict[str, str] = {
    "no_patterns": "NoPatterns",
    "minimal": "Minimal",
    "default": "Default",
    "all": "All",
}
"""The levels `apply_pre_alias_patterns` takes, with the name of PopART's
`PatternsLevel` each stands for."""


def apply_pre_alias_patterns(
    ir: popxl.Ir, level: Literal["no_patterns", "minimal", "default", "all"] = "default"
) -> None:
    """Apply the pre-alias patterns of `level` to every graph of `ir` (upstream: PopART's
    graph rewrites). On xl the graphs need none of them (see the module docstring): `ir`
    and `level` are checked (TypeError / ValueError) and the program is left as it is.

    Args:
        ir: the Ir whose graphs the patterns would rewrite.
        level: `"no_patterns"` (none), `"minimal"` (those PopART needs), `"default"` or
            `"all"`.
    """
    what = "popxl_addons.patterns.apply_pre_alias_patterns"
    if not isinstance(ir, popxl.Ir):
        raise TypeError(f"{what}: ir must be a popxl.Ir, got {type(ir).__name__}")
    if not isinstance(level, str) or level not in patterns_level:
        raise ValueError(f"{what}: level must be one of {', '.join(map(repr, patterns_level))}, got {level!r}")
