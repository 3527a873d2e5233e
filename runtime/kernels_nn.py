"""NumPy kernels of the popxl neural-network ops, registered by op class (see `xl.runtime.kernels`)."""

from __future__ import annotations
