"""Run by tests/examples/test_remote_mpi.py, in one process or as 2 MPI instances of 2 replicas each
(`POPDIST_NUM_TOTAL_REPLICAS=4`): phased RTS round trips over remote buffers and a resident
replica-sharded variable; each instance writes `result_<instance offset>.json` into the folder
given as the first argument (not stdout: two instances' long lines interleave in mpirun's
output)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import popxl
import popxl.ops as ops


def main() -> None:
    ir = popxl.Ir(replication="popdist")
    replicas = ir.replication_factor
    rng = np.random.default_rng(0)
    before = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2)]
    with ir.main_graph, popxl.in_sequence():
        buf = popxl.replica_sharded_buffer((4, 6), popxl.float32, entries=2)
        handles = [popxl.remote_replica_sharded_variable(b, buf, i) for i, b in enumerate(before)]
        v, shard = popxl.replica_sharded_variable(np.arange(8, dtype=np.float32), name="r")
        ops.var_updates.accumulate_(shard, popxl.constant(1.0))
        stream = popxl.h2d_stream((4, 6), popxl.float32, "d")
        d = ops.host_load(stream)
        for i in range(2):
            w = ops.remote_load(buf, i)
            full = ops.collectives.replicated_all_gather(w) + d
            ops.remote_store(buf, i, ops.collectives.replicated_reduce_scatter(full))
    data = rng.standard_normal((replicas, 4, 6)).astype(np.float32)
    with popxl.Session(ir) as s:
        first, local = s._exe.local_replicas.start, s._local_replicas
        mine = data[first : first + local]
        s.run({stream: mine if local > 1 else mine[0]})
        layers = [s.get_tensor_data(h).tolist() for h in handles]
        s.write_variable_data(v, np.full(8, 7.0, np.float32))
        s.run({stream: mine if local > 1 else mine[0]})
        sharded = s.get_tensor_data(v).tolist()
        layers2 = [s.get_tensor_data(h).tolist() for h in handles]
    out = Path(sys.argv[1]) / f"result_{first}.json"
    out.write_text(json.dumps({"layers": layers, "layers2": layers2, "sharded": sharded}))


if __name__ == "__main__":
    main()
