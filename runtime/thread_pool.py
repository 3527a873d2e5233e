"""The process-wide pool of worker threads that run the streams of concurrent steps.

Workers are daemon threads started on first use and kept: `take_workers(n)` hands `n` idle
ones to a step, `give_back` returns them, so every executable reuses them (never a thread
per step or per executable). A job is `(fn, index, done, errstate)`: the worker runs `fn`
under the caller's NumPy error handling and puts `(index, exception or None)` on `done`
(unless `done` is None).

```python
workers = take_workers(1)
try:
    workers[0].jobs.put((fn, 1, done, np.geterr()))
    ...  # the caller's own part, then done.get()
finally:
    give_back(workers)
```
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np


class Worker:
    """A persistent daemon thread of the process's pool, running the stream functions it
    is given (with the queue its result goes to)."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.thread = threading.Thread(target=_serve, args=(self.jobs,), name=name, daemon=True)
        self.thread.start()


# a stream function, its index, where its result goes (None: the function reports it
# itself), the caller's NumPy error handling
Job = tuple[Callable[[], None], int, "queue.SimpleQueue[Any] | None", Any]


def _serve(jobs: queue.SimpleQueue[Job]) -> None:
    while True:
        fn, s, done, errstate = jobs.get()
        try:
            with np.errstate(**errstate):  # (per thread: np.seterr of the caller applies)
                fn()
        except BaseException as e:  # handed to the caller's thread
            if done is not None:
                done.put((s, e))
        else:
            if done is not None:
                done.put((s, None))


_IDLE: list[Worker] = []  # the pool's workers no step is using
_POOL_LOCK = threading.Lock()
_WORKER_NUMBERS = itertools.count(1)  # the names of the workers started


def take_workers(n: int) -> list[Worker]:
    """`n` idle workers of the process-wide pool, for one step: started on first use and
    kept (`give_back`), so every concurrent executable reuses them (no thread per step, none
    per executable). Steps running at the same time (executables run from several threads)
    never share a worker: a stream queued behind another step's stream on a shared worker
    could wait for a stream of its own step queued behind a stream of the other step that
    waits for it (a deadlock)."""
    with _POOL_LOCK:
        taken = [_IDLE.pop() for _ in range(min(n, len(_IDLE)))]
        while len(taken) < n:
            taken.append(Worker(f"xl worker {next(_WORKER_NUMBERS)}"))
        return taken


def give_back(workers: list[Worker]) -> None:
    """Return the workers of a finished step to the pool."""
    with _POOL_LOCK:
        _IDLE.extend(reversed(workers))
