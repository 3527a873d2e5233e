"""`Session.get_tensor_data` returns the value at the time of the call (bug P3: the array
returned was the session's own host buffer, overwritten by later runs)."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops


def test_values_read_after_each_run_are_snapshots() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.array([1.0, 3.0], np.float32), name="w")
        c = popxl.constant(np.array([5, 6], np.int32), name="c")
        ops.add_(w, w)
    with popxl.Session(ir, "cpu") as s:
        seen = []
        for _ in range(3):
            s.run({})
            seen.append(s.get_tensor_data(w))
        many = s.get_tensors_data([w])[w]
        cval = s.get_tensor_data(c)
        cval[0] = 99  # the caller's copy; the program's constant is unchanged
        again = s.get_tensor_data(c)
    np.testing.assert_array_equal(np.stack(seen), [[2.0, 6.0], [4.0, 12.0], [8.0, 24.0]])
    np.testing.assert_array_equal(many, [8.0, 24.0])
    np.testing.assert_array_equal(again, [5, 6])
    # writing an array read earlier does not write the variable
    seen[0][:] = -1.0
    with s:
        np.testing.assert_array_equal(s.get_tensor_data(w), [8.0, 24.0])
