// RUN: xl-opt %s -p rt-views --split-input-file | filecheck %s

// Reshape of a loaded input and transpose of a weight read before the weight is
// updated: both become views.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "w" : memref<3x4xf32>
  %img = rt.alloc : memref<2x2x2xf32>
  rt.h2d "x", %img : memref<2x2x2xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.reshape"(%img) -> (%x) : (memref<2x2x2xf32>) -> memref<2x4xf32>
  %wt = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.transpose"(%w) -> (%wt) {perm = array<i64: 1, 0>} : (memref<3x4xf32>) -> memref<4x3xf32>
  %y = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.matmul"(%x, %wt) -> (%y) : (memref<2x4xf32>, memref<4x3xf32>) -> memref<2x3xf32>
  rt.kernel "popxl.scaled_add_"(%w, %w) -> (%w) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (memref<3x4xf32>, memref<3x4xf32>) -> memref<3x4xf32>
  rt.d2h "y", %y : memref<2x3xf32>
}

// CHECK: rt.kernel "popxl.reshape"(%img) -> (%x) {rt.view}
// CHECK: rt.kernel "popxl.transpose"(%w) -> (%wt) {perm = array<i64: 1, 0>, rt.view}

// -----

// The weight changes while the transposed copy is still needed: it stays a copy.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "w" : memref<3x4xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %wt = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.transpose"(%w) -> (%wt) {perm = array<i64: 1, 0>} : (memref<3x4xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.scaled_add_"(%w, %w) -> (%w) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (memref<3x4xf32>, memref<3x4xf32>) -> memref<3x4xf32>
  %y = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.matmul"(%x, %wt) -> (%y) : (memref<2x4xf32>, memref<4x3xf32>) -> memref<2x3xf32>
  rt.d2h "y", %y : memref<2x3xf32>
}

// CHECK:     rt.kernel "popxl.transpose"(%w) -> (%wt) {perm = array<i64: 1, 0>} :
// CHECK-NOT: rt.view

// -----

// Written again later (in place): not a view either.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %a = rt.alloc : memref<4xf32>
  rt.h2d "a", %a : memref<4xf32>
  %b = rt.alloc : memref<2x2xf32>
  rt.kernel "popxl.reshape"(%a) -> (%b) : (memref<4xf32>) -> memref<2x2xf32>
  rt.kernel "popxl.scaled_add_"(%b, %b) -> (%b) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
  rt.d2h "a", %a : memref<4xf32>
  rt.d2h "b", %b : memref<2x2xf32>
}

// CHECK:     rt.kernel "popxl.reshape"(%a) -> (%b) :
// CHECK-NOT: rt.view
