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
// CHECK:     // -----

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
// CHECK:     // -----

// -----

// Flattening a transposed view is not a view in NumPy (it needs a copy): the transpose
// becomes a view, the reshape of it stays a copying kernel.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %x = rt.alloc : memref<2x3xf32>
  rt.h2d "x", %x : memref<2x3xf32>
  %xt = rt.alloc : memref<3x2xf32>
  rt.kernel "popxl.transpose"(%x) -> (%xt) {perm = array<i64: 1, 0>} : (memref<2x3xf32>) -> memref<3x2xf32>
  %y = rt.alloc : memref<6xf32>
  rt.kernel "popxl.reshape"(%xt) -> (%y) : (memref<3x2xf32>) -> memref<6xf32>
  rt.d2h "y", %y : memref<6xf32>
}

// CHECK:      rt.kernel "popxl.transpose"(%x) -> (%xt) {perm = array<i64: 1, 0>, rt.view}
// CHECK-NEXT: %y = rt.alloc : memref<6xf32>
// CHECK-NEXT: rt.kernel "popxl.reshape"(%xt) -> (%y) : (memref<3x2xf32>) -> memref<6xf32>

// -----

// A chain that NumPy can view: split a dim, swap the two leading dims, merge the
// leading dims again after the swap is undone (3x4 -> 3x2x2 -> 2x3x2 -> 3x2x2 -> 12).
// Every link is checked on the whole chain: the last reshape is a view only because
// the two transposes cancel.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %x = rt.alloc : memref<3x4xf32>
  rt.h2d "x", %x : memref<3x4xf32>
  %a = rt.alloc : memref<3x2x2xf32>
  rt.kernel "popxl.reshape"(%x) -> (%a) : (memref<3x4xf32>) -> memref<3x2x2xf32>
  %b = rt.alloc : memref<2x3x2xf32>
  rt.kernel "popxl.transpose"(%a) -> (%b) {perm = array<i64: 1, 0, 2>} : (memref<3x2x2xf32>) -> memref<2x3x2xf32>
  %c = rt.alloc : memref<3x2x2xf32>
  rt.kernel "popxl.transpose"(%b) -> (%c) {perm = array<i64: 1, 0, 2>} : (memref<2x3x2xf32>) -> memref<3x2x2xf32>
  %d = rt.alloc : memref<12xf32>
  rt.kernel "popxl.reshape"(%c) -> (%d) : (memref<3x2x2xf32>) -> memref<12xf32>
  %e = rt.alloc : memref<6x2xf32>
  rt.kernel "popxl.reshape"(%b) -> (%e) : (memref<2x3x2xf32>) -> memref<6x2xf32>
  rt.d2h "d", %d : memref<12xf32>
  rt.d2h "e", %e : memref<6x2xf32>
}

// CHECK:      rt.kernel "popxl.reshape"(%x) -> (%a) {rt.view}
// CHECK:      rt.kernel "popxl.transpose"(%a) -> (%b) {perm = array<i64: 1, 0, 2>, rt.view}
// CHECK:      rt.kernel "popxl.transpose"(%b) -> (%c) {perm = array<i64: 1, 0, 2>, rt.view}
// CHECK:      rt.kernel "popxl.reshape"(%c) -> (%d) {rt.view}
// CHECK:      rt.kernel "popxl.reshape"(%b) -> (%e) : (memref<2x3x2xf32>) -> memref<6x2xf32>

// -----

// A hand-written `rt.view` that is unsound (the source is written while the view is
// still read) is dropped and recomputed.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %a = rt.alloc : memref<4xf32>
  rt.h2d "a", %a : memref<4xf32>
  %b = rt.alloc : memref<2x2xf32>
  rt.kernel "popxl.reshape"(%a) -> (%b) {rt.view} : (memref<4xf32>) -> memref<2x2xf32>
  rt.kernel "popxl.scaled_add_"(%a, %a) -> (%a) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (memref<4xf32>, memref<4xf32>) -> memref<4xf32>
  rt.d2h "b", %b : memref<2x2xf32>
}

// CHECK:     rt.kernel "popxl.reshape"(%a) -> (%b) :
// CHECK-NOT: rt.view
// CHECK:     // -----

// -----

// In a loop, the output is read before the kernel (the previous iteration's copy):
// a view would show the source as changed since, so it stays a copy.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %a = rt.alloc : memref<4xf32>
  rt.h2d "a", %a : memref<4xf32>
  %b = rt.alloc : memref<2x2xf32>
  %s = rt.alloc : memref<2x2xf32>
  rt.loop 3 {
    rt.kernel "popxl.add"(%b, %b) -> (%s) : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
    rt.kernel "popxl.reshape"(%a) -> (%b) : (memref<4xf32>) -> memref<2x2xf32>
    rt.kernel "popxl.scaled_add_"(%a, %a) -> (%a) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (memref<4xf32>, memref<4xf32>) -> memref<4xf32>
  }
  rt.d2h "s", %s : memref<2x2xf32>
}

// CHECK:     rt.kernel "popxl.reshape"(%a) -> (%b) :
// CHECK-NOT: rt.view
