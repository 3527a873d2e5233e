// RUN: python -c "import numpy as np; np.save('%t.x.npy', np.array([1, -1], np.float32))"
// RUN: env PYTHONWARNINGS=default xl-run %s x=%t.x.npy 2>&1 | filecheck %s

// A warning of the runtime is one `xl-run: warning:` line, not Python's warning format (the
// path and line of xl's source that raised it, then that source line). lit.cfg sets
// PYTHONWARNINGS=ignore for every test: this one turns warnings back on.

graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.main attributes {num_host_transfers = 1 : i64} {
  %x = graph.host_load @x : tensor<2xf32>
  graph.host_store @y, %x : tensor<2xf32>
  %d = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %d : tensor<2xf32>
}

// CHECK-NOT:  .py:
// CHECK:      xl-run: warning: stream "y": host_store runs 2 times per run but num_host_transfers is 1: stores beyond the first 1 wrap around
// CHECK-NOT:  .py:
// CHECK-NOT:  return
// CHECK:      y = [ 2., -2.]
