"""An installed pass plugin whose import fails, as one missing a dependency
(tests/filecheck/tools/xl-opt-broken-plugin.mlir)."""

raise ImportError("broken_plugin needs the 'nonexistent-dependency' package")
