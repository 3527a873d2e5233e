"""`popxl.remote_replica_sharded_variable` with a buffer whose entries hold no shard of the
value: the variable is built, as in PopXL (which checks the buffer when the program is
compiled), sharded over its replica group, and a `popxl.Session` refuses the program naming
the variable and the buffer. A buffer that holds the shards over a divisor of the group size
still stores them: each replica loads its piece of the flattened, zero-padded value."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popxl
import popxl.ops as ops

# (replicas, replica_grouping kwargs, value shape, buffer entry shape), entries fitting no
# shard count; the first two are PopXL's test_replica_grouping cases at a small scale
NO_SHARD = [
    (2, {"stride": 1, "group_size": 2}, (5, 3, 7, 7), (74,)),
    (4, {}, (5, 3, 7, 7), (3, 7, 7)),
    (4, {"stride": 1, "group_size": 2}, (6, 5), (4,)),
    (4, {"stride": 2, "group_size": 2}, (3, 3), (7,)),
    (4, {"stride": 1, "group_size": 1}, (2, 3), (5,)),
]


@pytest.mark.parametrize("retrieval_mode", ["one_per_group", "all_replicas"])
@pytest.mark.parametrize(("replicas", "grouping", "shape", "entry"), NO_SHARD)
def test_entries_without_a_shard_build_and_a_session_refuses(
    replicas: int, grouping: dict[str, int], shape: tuple[int, ...], entry: tuple[int, ...], retrieval_mode: str
) -> None:
    group_size = grouping.get("group_size", replicas)
    groups = replicas // group_size
    host = (groups, *shape) if groups > 1 else shape
    data = np.random.default_rng(0).random(host, dtype=np.float32)
    ir = popxl.Ir()
    ir.replication_factor = replicas
    with ir.main_graph:
        rg = ir.replica_grouping(**grouping)
        buffer = popxl.RemoteBuffer(entry, popxl.float32, entries=1)
        v = popxl.remote_replica_sharded_variable(
            data, buffer, 0, name="v1", replica_grouping=rg, retrieval_mode=retrieval_mode
        )
        assert v.shape == shape and v.shape_on_host == host and v.retrieval_mode == retrieval_mode
        assert buffer.meta_shape == shape and buffer.tensor_shape == entry  # the buffer is left as given
    elements = int(np.ceil(np.prod(shape) / group_size)) if group_size > 1 else int(np.prod(shape))
    what = f"over {group_size} replicas have {elements} elements" if group_size > 1 else "element counts differ"
    with pytest.raises(ValueError, match=rf'"v1".*{what}'):
        popxl.Session(ir, "ipu_model")


@pytest.mark.parametrize(("replicas", "shards", "shape"), [(4, 2, (3, 5)), (4, 4, (7,)), (8, 2, (2, 2, 3))])
def test_entries_of_a_divisor_hold_each_replicas_piece(replicas: int, shards: int, shape: tuple[int, ...]) -> None:
    value = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    piece = -(-value.size // shards)
    ir = popxl.Ir()
    ir.replication_factor = replicas
    with ir.main_graph:
        buffer = popxl.RemoteBuffer((piece,), popxl.float32, entries=1)
        v = popxl.remote_replica_sharded_variable(value, buffer, 0, name="w")
        out = popxl.d2h_stream((piece,), popxl.float32, "out")
        ops.host_store(out, ops.remote_load(buffer, 0))
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[out]
        full = session.get_tensor_data(v)
    padded = np.concatenate([value.reshape(-1), np.zeros(piece * shards - value.size, np.float32)])
    want = np.stack([padded[(r % shards) * piece : (r % shards + 1) * piece] for r in range(replicas)])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(full, value)
