"""Static count of host transfers per stream, checked against `num_host_transfers`.

Each executed `rt.h2d` consumes the next transfer of its stream and each executed
`rt.d2h` fills the next one (`[num_host_transfers, ...]` host arrays). Loop trip counts
are static, so the number of executions per run is known at compile time, as a range
when a load or store sits in one branch of an `rt.if`.

What happens on a mismatch, with `N = num_host_transfers` (PopXL's
`docs/popxl/session.rst`, "Number of host transfers": more loads than transfers wrap
around):

- input stream loaded more than N times: loads after the N-th read transfer 0, 1, ...
  again (as PopXL): `HostTransferWarning`;
- input stream loaded fewer than N times: the last transfers are never read: warning;
- output stream stored fewer than N times: the transfers no store reaches are not set.
  PopXL runs such a program (BERT's SQuAD inference stores its output once with N = 10)
  and leaves them undefined; xl hands them out as zeros: warning;
- output stream stored more than N times, or fewer on some branch only: later stores
  overwrite the first transfers / some transfers may be left unset (zeros): warning.

```python
count_transfers(program)  # {("h2d", "x"): (lo, hi), ("d2h", "y"): (lo, hi)}
```
"""

from __future__ import annotations

import warnings

from xdsl.ir import Block

from xl.dialects import rt


class HostTransferWarning(UserWarning):
    """A stream is loaded or stored a different number of times than num_host_transfers."""


Counts = dict[tuple[str, str], tuple[int, int]]


def _add(into: Counts, other: Counts, times: int = 1) -> None:
    for k, (lo, hi) in other.items():
        a, b = into.get(k, (0, 0))
        into[k] = (a + lo * times, b + hi * times)


def count_block(block: Block) -> Counts:
    """(min, max) executions per stream of the ops in `block`, per execution of the block."""
    out: Counts = {}
    for op in block.ops:
        if isinstance(op, rt.H2DOp):
            _add(out, {("h2d", op.stream.data): (1, 1)})
        elif isinstance(op, rt.D2HOp):
            _add(out, {("d2h", op.stream.data): (1, 1)})
        elif isinstance(op, rt.LoopOp):
            _add(out, count_block(op.body.block), op.count.value.data)
        elif isinstance(op, rt.IfOp):
            then, other = count_block(op.then_region.block), count_block(op.else_region.block)
            both: Counts = {}
            for k in then.keys() | other.keys():
                (a, b), (c, d) = then.get(k, (0, 0)), other.get(k, (0, 0))
                both[k] = (min(a, c), max(b, d))
            _add(out, both)
    return out


def count_transfers(program: rt.ProgramOp) -> Counts:
    return count_block(program.body.block)


def _times(lo: int, hi: int) -> str:
    if lo == hi:
        return f"{lo} time{'s' if lo != 1 else ''}"
    return f"between {lo} and {hi} times (depending on a condition)"


def _span(a: int, b: int) -> str:
    return f"transfer {a}" if a == b else f"transfers {a}..{b}"


def check_transfers(program: rt.ProgramOp) -> None:
    """Warn (see the module docstring) for every mismatched stream."""
    n = program.num_host_transfers
    for (kind, name), (lo, hi) in sorted(count_transfers(program).items()):
        if lo == hi == n:
            continue
        if kind == "h2d":
            head = f'stream "{name}": host_load runs {_times(lo, hi)} per run but num_host_transfers is {n}'
            if hi > n:
                warnings.warn(
                    f"{head}: loads beyond the first {n} wrap around and read transfer 0, 1, ... again (as PopXL)",
                    HostTransferWarning,
                    stacklevel=3,
                )
            if lo < n:
                warnings.warn(
                    f"{head}: {_span(lo, n - 1)} of the input are never read",
                    HostTransferWarning,
                    stacklevel=3,
                )
        else:
            head = f'stream "{name}": host_store runs {_times(lo, hi)} per run but num_host_transfers is {n}'
            if hi < n:
                warnings.warn(
                    f"{head}: {_span(hi, n - 1)} of the output are not set by the program and hold "
                    "zeros (PopXL leaves them undefined)",
                    HostTransferWarning,
                    stacklevel=3,
                )
            if lo < min(hi, n):
                warnings.warn(
                    f"{head}: on some paths {_span(lo, min(hi, n) - 1)} of the output are not set (they keep zeros)",
                    HostTransferWarning,
                    stacklevel=3,
                )
            if hi > n:
                warnings.warn(
                    f"{head}: stores beyond the first {n} wrap around and overwrite transfer 0, 1, ...",
                    HostTransferWarning,
                    stacklevel=3,
                )
