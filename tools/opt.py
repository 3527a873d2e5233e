"""`xl-opt`: run xl and xDSL passes on textual IR, like `mlir-opt` / `xdsl-opt`.

    xl-opt prog.mlir -p 'inline,canonicalize,cse,lower-to-rt'
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.xdsl_opt_main import xDSLOptMain

from xl.dialects import get_all_dialects
from xl.passes import get_all_passes


class XlOptMain(xDSLOptMain):
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)


def main(args: Sequence[str] | None = None) -> None:
    XlOptMain(description="xl modular optimizer driver", args=args).run()


if __name__ == "__main__":
    main()
