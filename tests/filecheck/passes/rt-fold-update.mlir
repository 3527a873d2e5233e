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

// -----

// A running mean of weight gradients (`accumulate_mean_` with a step counter) becomes one
// accumulating gemm whose scales come from the counter: no alpha / beta attributes.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %acc = rt.state "acc" : memref<4x3xf32>
  %n = rt.state "n" : memref<f32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %dy = rt.alloc : memref<2x3xf32>
  rt.h2d "dy", %dy : memref<2x3xf32>
  %xt = rt.alloc : memref<4x2xf32>
  rt.kernel "popxl.transpose"(%x) -> (%xt) {perm = array<i64: 1, 0>} : (memref<2x4xf32>) -> memref<4x2xf32>
  %dw = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%xt, %dy) -> (%dw) : (memref<4x2xf32>, memref<2x3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.accumulate_mean_"(%acc, %dw, %n) -> (%acc) {operand_segments = array<i64: 1, 1, 1>, ipu.id = 1 : i64} : (memref<4x3xf32>, memref<4x3xf32>, memref<f32>) -> memref<4x3xf32>
}

// CHECK:      rt.program
// CHECK-NEXT:   %acc = rt.state "acc" : memref<4x3xf32>
// CHECK-NEXT:   %n = rt.state "n" : memref<f32>
// CHECK-NEXT:   %x = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:   rt.h2d "x", %x : memref<2x4xf32>
// CHECK-NEXT:   %dy = rt.alloc : memref<2x3xf32>
// CHECK-NEXT:   rt.h2d "dy", %dy : memref<2x3xf32>
// CHECK-NEXT:   rt.kernel "xl.gemm_acc"(%x, %dy, %acc, %n) -> (%acc) {trans_a = true, trans_b = false, ipu.id = 1 : i64{{.*}}} : (memref<2x4xf32>, memref<2x3xf32>, memref<4x3xf32>, memref<f32>) -> memref<4x3xf32>
// CHECK-NEXT: }

// -----

// A constant step 3: the scales are 1/4 and 3/4, as attributes.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %acc = rt.state "acc" : memref<2x2xf64>
  %a = rt.state "a" : memref<2x2xf64>
  %dw = rt.alloc : memref<2x2xf64>
  rt.kernel "popxl.matmul"(%a, %a) -> (%dw) : (memref<2x2xf64>, memref<2x2xf64>) -> memref<2x2xf64>
  rt.kernel "popxl.accumulate_mean_"(%acc, %dw) -> (%acc) {operand_segments = array<i64: 1, 1, 0>, step = 3.000000e+00 : f64} : (memref<2x2xf64>, memref<2x2xf64>) -> memref<2x2xf64>
}

// CHECK:      rt.kernel "xl.gemm_acc"(%a, %a, %acc) -> (%acc) {alpha = 2.500000e-01 : f64, beta = 7.500000e-01 : f64, trans_a = false, trans_b = false{{.*}}} : (memref<2x2xf64>, memref<2x2xf64>, memref<2x2xf64>) -> memref<2x2xf64>
// CHECK-NOT:  popxl.accumulate_mean_

// -----

// float16 (no BLAS gemm) and a counter that is the accumulator itself are left alone.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %acc = rt.state "acc" : memref<2x2xf16>
  %n = rt.state "n" : memref<f16>
  %a = rt.state "a" : memref<2x2xf16>
  %dw = rt.alloc : memref<2x2xf16>
  rt.kernel "popxl.matmul"(%a, %a) -> (%dw) : (memref<2x2xf16>, memref<2x2xf16>) -> memref<2x2xf16>
  rt.kernel "popxl.accumulate_mean_"(%acc, %dw, %n) -> (%acc) {operand_segments = array<i64: 1, 1, 1>} : (memref<2x2xf16>, memref<2x2xf16>, memref<f16>) -> memref<2x2xf16>
  %acc2 = rt.state "acc2" : memref<1x1xf32>
  %b = rt.state "b" : memref<1x1xf32>
  %dw2 = rt.alloc : memref<1x1xf32>
  rt.kernel "popxl.matmul"(%b, %b) -> (%dw2) : (memref<1x1xf32>, memref<1x1xf32>) -> memref<1x1xf32>
  rt.kernel "popxl.accumulate_mean_"(%acc2, %dw2, %acc2) -> (%acc2) {operand_segments = array<i64: 1, 1, 1>} : (memref<1x1xf32>, memref<1x1xf32>, memref<1x1xf32>) -> memref<1x1xf32>
}

// CHECK:      rt.kernel "popxl.matmul"(%a, %a) -> (%dw)
// CHECK-NEXT: rt.kernel "popxl.accumulate_mean_"(%acc, %dw, %n)
// CHECK:      rt.kernel "popxl.matmul"(%b, %b) -> (%dw2)
// CHECK-NEXT: rt.kernel "popxl.accumulate_mean_"(%acc2, %dw2, %acc2)
