"""An installed pass plugin (tests/filecheck/tools/xl-opt-broken-plugin.mlir): listed by
`xl-opt --list-passes` next to a broken one."""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class HelloPluginPass(ModulePass):
    """Leave the module as it is (a plugin pass that loads)."""

    name = "hello-plugin"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pass
