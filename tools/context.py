"""An xDSL context that knows the builtin dialects and every xl dialect."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin

from xl.dialects import get_all_dialects


def xl_context(allow_unregistered: bool = False) -> Context:
    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx
