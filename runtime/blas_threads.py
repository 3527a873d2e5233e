"""OpenBLAS's thread count while worker threads run kernels at the same time.

OpenBLAS's thread count is one per process: while the streams of a concurrent step run, it
is set (threadpoolctl) to `max(1, cores // workers)` threads and restored to the caller's
setting after the step. (`xl.runtime.blas` is the accumulating gemm called through CBLAS.)

```python
libs = BlasThreads.libs()  # threadpoolctl's BLAS controllers, [] without threadpoolctl
saved = [lib.num_threads for lib in libs]
```
"""

from __future__ import annotations

from typing import Any


class BlasThreads:
    """OpenBLAS's (process-wide) thread count, through threadpoolctl, read once."""

    _controller: Any = None

    @classmethod
    def libs(cls) -> list[Any]:
        if cls._controller is None:
            try:
                from threadpoolctl import ThreadpoolController

                cls._controller = ThreadpoolController().select(user_api="blas")
            except Exception:  # threadpoolctl missing or failing: leave BLAS alone
                cls._controller = ()
        return list(getattr(cls._controller, "lib_controllers", ()))
