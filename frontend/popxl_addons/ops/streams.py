"""`popxl_addons.ops.streams` (upstream's module path): `host_load` / `host_store`, a stream
and its transfer in one call, defined in `popxl_addons.ops.host_io`."""

from popxl_addons.ops.host_io import host_load, host_store

__all__ = ["host_load", "host_store"]
