"""Session.run's input shapes: `[num_host_transfers, replicas, *shape]` with size-1 dims
dropped, and PopXL's leniency for streams of one element, whose data may carry any size-1
dims ((10, 1) for 10 transfers of a scalar, () for one transfer of a (1,) stream)."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops


def _doubling(shape: tuple[int, ...], transfers: int, replicas: int = 1):
    ir = popxl.Ir(replication=replicas)
    ir.num_host_transfers = transfers
    with ir.main_graph:
        x_in = popxl.h2d_stream(shape, popxl.float32, name="x")
        y_out = popxl.d2h_stream(shape, popxl.float32, name="y")
        with popxl.in_sequence():
            for _ in range(transfers):
                ops.host_store(y_out, ops.host_load(x_in) * 2.0)
    return ir, x_in, y_out


@pytest.mark.parametrize(
    ("shape", "transfers", "replicas", "given"),
    [
        ((), 10, 1, (10, 1)),  # popxl_addons' pipelining test feeds its scalar stream so
        ((), 10, 1, (10, 1, 1)),
        ((1,), 1, 1, ()),  # a (1,) condition stream fed a 0-d array
        ((1, 1), 1, 1, (1,)),
        ((), 3, 2, (3, 2, 1)),
        ((1,), 1, 2, (2,)),
    ],
)
def test_one_element_streams_take_size_one_dims(
    shape: tuple[int, ...], transfers: int, replicas: int, given: tuple[int, ...]
) -> None:
    ir, x_in, y_out = _doubling(shape, transfers, replicas)
    data = np.arange(1, int(np.prod(given)) + 1, dtype=np.float32).reshape(given)
    with popxl.Session(ir, "cpu") as s:
        out = s.run({x_in: data})[y_out]
        want_shape = s._full_input_shape(shape)
    np.testing.assert_array_equal(out, (data * 2).reshape(want_shape))


@pytest.mark.parametrize(
    ("shape", "transfers", "replicas", "given"),
    [
        ((), 10, 1, (10, 2)),  # two elements per transfer
        ((), 10, 1, (5, 2)),  # the transfers dim must stay
        ((3,), 1, 1, (3, 1)),  # leniency is for one-element streams only (as PopXL)
        ((1,), 4, 1, (2, 2)),
        ((), 3, 2, (3, 1, 2)),
    ],
)
def test_other_shapes_are_refused(
    shape: tuple[int, ...], transfers: int, replicas: int, given: tuple[int, ...]
) -> None:
    ir, x_in, _ = _doubling(shape, transfers, replicas)
    with popxl.Session(ir, "cpu") as s, pytest.raises(ValueError, match="input for stream 'x' has shape"):
        s.run({x_in: np.zeros(given, np.float32)})
