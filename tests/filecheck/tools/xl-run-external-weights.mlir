// Variables whose values live in an .npz (Ir.to_mlir(weights="prog.npz") writes such text):
// the text keeps them by name, xl-opt prints them back unchanged, xl-run --vars gives them
// their values, and running without them is a located error, never zeros.
// RUN: xl-opt %s | filecheck %s --check-prefix=ROUNDTRIP
// RUN: xl-opt %s | xl-opt - | filecheck %s --check-prefix=ROUNDTRIP
// RUN: python -c "import numpy as np; np.savez('%t.prog.npz', w=np.array([[1, 2], [3, 4]], np.float32), b=np.array([10, 20], np.float32)); np.save('%t.x.npy', np.array([1, -1], np.float32))"
// RUN: xl-run %s x=%t.x.npy --vars %t.prog.npz | filecheck %s --check-prefix=OUT
// RUN: not xl-run %s x=%t.x.npy 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: python -c "import numpy as np; np.savez('%t.only_w.npz', w=np.ones((2, 2), np.float32))"
// RUN: not xl-run %s x=%t.x.npy --vars %t.only_w.npz 2>&1 | filecheck %s --check-prefix=PARTIAL

graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.main attributes {num_host_transfers = 1 : i64} {
  %w = graph.variable "w" : tensor<2x2xf32> {graph.external = "prog.npz"}
  %b = graph.variable "b" : tensor<2xf32> {graph.external = "prog.npz"}
  %x = graph.host_load @x : tensor<2xf32>
  %xw = popxl.matmul %x, %w : (tensor<2xf32>, tensor<2x2xf32>) -> tensor<2xf32>
  %y = popxl.add %xw, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %y : tensor<2xf32>
}

// ROUNDTRIP: %w = graph.variable "w" : tensor<2x2xf32> {graph.external = "prog.npz"}
// ROUNDTRIP: %b = graph.variable "b" : tensor<2xf32> {graph.external = "prog.npz"}

// [1, -1] @ [[1, 2], [3, 4]] + [10, 20] = [8, 18]
// OUT: y = [ 8., 18.]

// MISSING:      external-weights.mlir:15:3: error: graph.variable "w": its value is not in the program but in "prog.npz" (written by to_mlir(weights=...)): run with --vars prog.npz (1 more external variable missing)
// MISSING-NEXT:   %w = graph.variable "w" : tensor<2x2xf32> {graph.external = "prog.npz"}
// MISSING-NOT:  Traceback

// PARTIAL: external-weights.mlir:16:3: error: graph.variable "b": --vars '{{.*}}only_w.npz' has no value for this external variable
