"""The counters that synchronise the streams of a concurrent step, and its abort flag.

Each stream `s` has a monotonic counter `c[s]`, bumped by the generated code after the ops
another stream waits for (`xl.runtime.stream_emit`); a bump takes a lock only when someone
is waiting (`notifier`). `wait(s, target)` blocks until stream `s` has bumped `target`
times. A failing stream sets the abort flag and wakes every waiter (`abort`): the others
stop at their next wait with `Aborted`, the caller gets the original exception, and the
next run starts clean (`reset`).

```python
sync = Sync(2)
step0 = finishing(stream0, sync, 0)  # marks stream 0 done (and aborts the others on failure)
```
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from xl.runtime.errors import PlanError

WAIT_POLL_S = 0.05  # a waiting stream re-checks the abort flag this often


class Aborted(Exception):
    """Another stream failed: this one stops at its next wait."""


class Sync:
    """The per-stream counters of one replica's concurrent step, and the abort flag."""

    def __init__(self, streams: int) -> None:
        self.c = [0] * streams
        self.conds = [threading.Condition(threading.Lock()) for _ in range(streams)]
        self.waiting = [0] * streams
        self.done = [False] * streams
        self.aborted = False

    def reset(self) -> None:
        for s in range(len(self.c)):
            self.c[s] = 0
            self.done[s] = False
        self.aborted = False

    def finished(self, s: int) -> None:
        """Stream `s` has run to its end (or failed): wake whoever waits for it."""
        self.done[s] = True
        with self.conds[s]:
            self.conds[s].notify_all()

    def notifier(self, s: int) -> Callable[[], None]:
        """Wake the waiters on stream `s` (called after `s` bumped its counter)."""
        cond, waiting = self.conds[s], self.waiting

        def notify() -> None:
            if waiting[s]:
                with cond:
                    cond.notify_all()

        return notify

    def wait(self, s: int, target: int) -> None:
        """Block until stream `s` has bumped its counter `target` times (or an abort)."""
        c, cond = self.c, self.conds[s]
        with cond:
            self.waiting[s] += 1
            try:
                while c[s] < target:
                    if self.aborted:
                        raise Aborted()
                    if self.done[s]:  # cannot happen by construction: never hang on it
                        raise PlanError(
                            f"runtime: internal error: a stream waits for stream {s} to reach "
                            f"{target}, but it ended at {c[s]}"
                        )
                    cond.wait(WAIT_POLL_S)
            finally:
                self.waiting[s] -= 1

    def abort(self) -> None:
        self.aborted = True
        for cond in self.conds:
            with cond:
                cond.notify_all()


def finishing(fn: Callable[[], None], sync: Sync, s: int) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except BaseException:
            sync.abort()  # the other streams stop at their next wait
            raise
        finally:
            sync.finished(s)

    return run
