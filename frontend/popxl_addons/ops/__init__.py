"""`addons.ops`: cross-entropy losses and host IO helpers."""

from popxl_addons.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.ops.host_io import host_load, host_store

__all__ = ["cross_entropy", "cross_entropy_with_grad", "host_load", "host_store"]
