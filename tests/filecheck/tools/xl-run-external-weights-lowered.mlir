// RUN: xl-opt %s -p inline,lower-to-rt | filecheck %s --check-prefix=RT
// RUN: xl-opt %s -p inline,lower-to-rt | xl-opt - | filecheck %s --check-prefix=RT
// RUN: python -c "import numpy as np; np.savez('%t.prog.npz', w=np.array([[1, 2], [3, 4]], np.float32)); np.save('%t.x.npy', np.array([1, -1], np.float32))"
// RUN: xl-opt %s -p inline,lower-to-rt | not xl-run - x=%t.x.npy 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: xl-opt %s -p inline,lower-to-rt,rt-optimize | not xl-run - x=%t.x.npy 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: xl-opt %s -p inline,lower-to-rt | xl-run - x=%t.x.npy --vars %t.prog.npz | filecheck %s --check-prefix=OUT

// A variable whose value is in an .npz (graph.external, from to_mlir(weights=...)) keeps the
// mark when the program is lowered to the rt dialect: `xl-opt -p lower-to-rt | xl-run -`
// without --vars is an error at the rt.state, as for the graph-level program (it used to run
// silently with zero weights).

graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.main attributes {num_host_transfers = 1 : i64} {
  %w = graph.variable "w" : tensor<2x2xf32> {graph.external = "prog.npz"}
  %x = graph.host_load @x : tensor<2xf32>
  %y = popxl.matmul %x, %w : (tensor<2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
  graph.host_store @y, %y : tensor<2xf32>
}

// RT:      %w = rt.state "w" : memref<2x2xf32> {graph.external = "prog.npz"}

// MISSING:      <stdin>:{{[0-9]+}}:{{[0-9]+}}: error: rt.state "w": its value is not in the program but in "prog.npz" (written by to_mlir(weights=...)): run with --vars prog.npz
// MISSING-NEXT:   %w = rt.state "w" : memref<2x2xf32> {graph.external = "prog.npz"}
// MISSING-NOT:  y =

// [1, -1] @ [[1, 2], [3, 4]]
// OUT: y = [-2., -2.]
