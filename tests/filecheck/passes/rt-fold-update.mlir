// RUN: xl-opt %s -p rt-fold-update --split-input-file | filecheck %s

// An SGD step on a weight gradient x^T @ dy becomes one accumulating gemm; the
// transpose becomes a flag and, unused now, disappears with the gradient buffer.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "w" : memref<4x3xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %dy = rt.alloc : memref<2x3xf32>
  rt.h2d "dy", %dy : memref<2x3xf32>
  %xt = rt.alloc : memref<4x2xf32>
  rt.kernel "popxl.transpose"(%x) -> (%xt) {perm = array<i64: 1, 0>} : (memref<2x4xf32>) -> memref<4x2xf32>
  %dw = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%xt, %dy) -> (%dw) : (memref<4x2xf32>, memref<2x3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.scaled_add_"(%w, %dw) -> (%w) {a = 1.000000e+00 : f64, b = -5.000000e-02 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
}

// CHECK:      rt.program
// CHECK-NEXT:   %w = rt.state "w" : memref<4x3xf32>
// CHECK-NEXT:   %x = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:   rt.h2d "x", %x : memref<2x4xf32>
// CHECK-NEXT:   %dy = rt.alloc : memref<2x3xf32>
// CHECK-NEXT:   rt.h2d "dy", %dy : memref<2x3xf32>
// CHECK-NEXT:   rt.kernel "xl.gemm_acc"(%x, %dy, %w) -> (%w) {alpha = -5.000000e-02 : f64, beta = 1.000000e+00 : f64, trans_a = true, trans_b = false} : (memref<2x4xf32>, memref<2x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
// CHECK-NEXT: }

// -----

// The gradient is also read elsewhere: nothing to fold.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "w" : memref<2x2xf32>
  %a = rt.state "a" : memref<2x2xf32>
  %dw = rt.alloc : memref<2x2xf32>
  rt.kernel "popxl.matmul"(%a, %a) -> (%dw) : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
  rt.kernel "popxl.scaled_add_"(%w, %dw) -> (%w) {a = 1.000000e+00 : f64, b = -1.000000e+00 : f64} : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
  rt.d2h "g", %dw : memref<2x2xf32>
}

// CHECK:      rt.kernel "popxl.matmul"
// CHECK-NEXT: rt.kernel "popxl.scaled_add_"
// CHECK-NOT:  xl.gemm_acc

// -----

// The operand changes between the matmul and the update: not folded.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "w" : memref<2x2xf32>
  %a = rt.state "a" : memref<2x2xf32>
  %dw = rt.alloc : memref<2x2xf32>
  rt.kernel "popxl.matmul"(%a, %a) -> (%dw) : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
  rt.kernel "popxl.scaled_add_"(%a, %a) -> (%a) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
  rt.kernel "popxl.scaled_add_"(%w, %dw) -> (%w) {a = 1.000000e+00 : f64, b = -1.000000e+00 : f64} : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
}

// CHECK:      rt.kernel "popxl.matmul"(%a, %a) -> (%dw)
// CHECK-NEXT: rt.kernel "popxl.scaled_add_"(%a, %a) -> (%a)
// CHECK-NEXT: rt.kernel "popxl.scaled_add_"(%w, %dw) -> (%w)

// -----

// A bias add on a matmul result: broadcast the bias into the output, then accumulate.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "w" : memref<4x3xf32>
  %b = rt.state "b" : memref<3xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %m = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.matmul"(%x, %w) -> (%m) : (memref<2x4xf32>, memref<4x3xf32>) -> memref<2x3xf32>
  %z = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.add"(%m, %b) -> (%z) : (memref<2x3xf32>, memref<3xf32>) -> memref<2x3xf32>
  rt.d2h "z", %z : memref<2x3xf32>
}

// CHECK:      rt.h2d "x", %x : memref<2x4xf32>
// CHECK-NEXT: %z = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.kernel "popxl.expand"(%b) -> (%z) : (memref<3xf32>) -> memref<2x3xf32>
// CHECK-NEXT: rt.kernel "xl.gemm_acc"(%x, %w, %z) -> (%z) {alpha = 1.000000e+00 : f64, beta = 1.000000e+00 : f64, trans_a = false, trans_b = false}
// CHECK-NEXT: rt.d2h "z", %z : memref<2x3xf32>
