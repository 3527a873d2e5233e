// RUN: xl-opt %s -p rt-broadcast-operands --split-input-file | filecheck %s

// A bias broadcast read by two elementwise kernels: both read the bias, the copy goes.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %b = rt.state "b" : memref<3xf32>
  %x = rt.alloc : memref<4x3xf32>
  rt.h2d "x", %x : memref<4x3xf32>
  %e = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.expand"(%b) -> (%e) : (memref<3xf32>) -> memref<4x3xf32>
  %y = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.mul"(%x, %e) -> (%y) : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  %z = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.add"(%e, %y) -> (%z) : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  rt.d2h "z", %z : memref<4x3xf32>
}

// CHECK:      %b = rt.state "b" : memref<3xf32>
// CHECK-NOT:  popxl.expand
// CHECK:      rt.kernel "popxl.mul"(%x, %b) -> (%y) : (memref<4x3xf32>, memref<3xf32>) -> memref<4x3xf32>
// CHECK:      rt.kernel "popxl.add"(%b, %y) -> (%z) : (memref<3xf32>, memref<4x3xf32>) -> memref<4x3xf32>

// -----

// Both operands expanded: the first goes (its reader still has a full-shape operand and
// the broadcast gives the result's shape), then the second too ((3,) and (4, 1) broadcast
// to (4, 3)).
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %a = rt.state "a" : memref<3xf32>
  %c = rt.state "c" : memref<4x1xf32>
  %ea = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.expand"(%a) -> (%ea) : (memref<3xf32>) -> memref<4x3xf32>
  %ec = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.expand"(%c) -> (%ec) : (memref<4x1xf32>) -> memref<4x3xf32>
  %y = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.sub"(%ea, %ec) -> (%y) : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  rt.d2h "y", %y : memref<4x3xf32>
}

// CHECK-NOT:  popxl.expand
// CHECK:      rt.kernel "popxl.sub"(%a, %c) -> (%y) : (memref<3xf32>, memref<4x1xf32>) -> memref<4x3xf32>

// -----

// The copy stays: a matmul reads it, a unary kernel would change shape, an in-place
// kernel writes it, and the source changes before the reader runs.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %b = rt.state "b" : memref<3xf32>
  %w = rt.alloc : memref<3x2xf32>
  rt.h2d "w", %w : memref<3x2xf32>
  %e1 = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.expand"(%b) -> (%e1) : (memref<3xf32>) -> memref<4x3xf32>
  %m = rt.alloc : memref<4x2xf32>
  rt.kernel "popxl.matmul"(%e1, %w) -> (%m) : (memref<4x3xf32>, memref<3x2xf32>) -> memref<4x2xf32>
  %e2 = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.expand"(%b) -> (%e2) : (memref<3xf32>) -> memref<4x3xf32>
  %t = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.tanh"(%e2) -> (%t) : (memref<4x3xf32>) -> memref<4x3xf32>
  %e3 = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.expand"(%b) -> (%e3) : (memref<3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.add_"(%e3, %t) -> (%e3) : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  %e4 = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.expand"(%b) -> (%e4) : (memref<3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.scaled_add_"(%b, %b) -> (%b) {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (memref<3xf32>, memref<3xf32>) -> memref<3xf32>
  %u = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.add"(%e4, %t) -> (%u) : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  rt.d2h "m", %m : memref<4x2xf32>
  rt.d2h "e3", %e3 : memref<4x3xf32>
  rt.d2h "u", %u : memref<4x3xf32>
}

// CHECK:      rt.kernel "popxl.expand"(%b) -> (%e1)
// CHECK:      rt.kernel "popxl.matmul"(%e1, %w) -> (%m)
// CHECK:      rt.kernel "popxl.expand"(%b) -> (%e2)
// CHECK:      rt.kernel "popxl.tanh"(%e2) -> (%t)
// CHECK:      rt.kernel "popxl.expand"(%b) -> (%e3)
// CHECK:      rt.kernel "popxl.add_"(%e3, %t) -> (%e3)
// CHECK:      rt.kernel "popxl.expand"(%b) -> (%e4)
// CHECK:      rt.kernel "popxl.add"(%e4, %t) -> (%u)
