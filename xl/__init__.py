"""xl: PopXL and popxl.addons as an MLIR-style compiler on xDSL, running on NumPy.

The user-facing APIs are the `popxl` and `popxl_addons` packages; this package holds the
compiler: `xl.dialects`, `xl.passes`, `xl.runtime` and the `xl-opt` / `xl-run` tools
(`xl.tools`). `xl.__version__` is the distribution's version (setuptools reads it from here).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
