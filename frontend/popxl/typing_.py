"""`popxl.typing_`: `NewAliasAnnotation`, an annotation that type checkers read as a type
and that code can tell apart at run time (popxl_addons marks a module's named inputs with
one).

```python
Id = NewAliasAnnotation("Id", int)

def fn(x: Id): ...

inspect.signature(fn).parameters["x"].annotation is Id  # True
```
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar, cast

__all__ = ["NewAliasAnnotation"]

T = TypeVar("T")


def NewAliasAnnotation(name: str, tp: T) -> T:  # noqa: N802 (PopXL's name)
    """An alias of `tp` for annotations: static checkers see `tp`; at run time it is a
    unique object named `name`, which raises NotImplementedError when called (use `tp`
    itself to make values)."""
    if not isinstance(name, str):
        raise TypeError(f"NewAliasAnnotation: name must be a str, got {type(name).__name__}")

    def symbol(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"{name} should only be used as an annotation. Try using the associated type alias instead: {tp}"
        )

    symbol.__name__ = name
    symbol.__qualname__ = name
    return cast(T, symbol)  # static checkers see `tp`; at run time it is `symbol`
