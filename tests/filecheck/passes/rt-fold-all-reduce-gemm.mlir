// RUN: xl-opt %s -p rt-fold-all-reduce-gemm | filecheck %s
// RUN: xl-opt %s -p rt-fold-all-reduce-gemm | xl-opt | filecheck %s

// The weight gradient of a fused replica update is a matmul read by nothing else: the
// matmul moves into the collective (a transposed operand becomes a gemm flag), where the
// update was. The transpose of %x stays: the other matmuls read it.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 4 : i64} {
  %x = rt.alloc : memref<8x4xf32>
  %dy = rt.alloc : memref<8x3xf32>
  %w = rt.state "w" : memref<4x3xf32>
  %v = rt.state "v" : memref<4x3xf32>
  %u = rt.state "u" : memref<4x3xf32>
  %t = rt.state "t" : memref<3x4xf32>
  %xt = rt.alloc : memref<4x8xf32>
  rt.kernel "popxl.transpose"(%x) -> (%xt) {perm = array<i64: 1, 0>} : (memref<8x4xf32>) -> memref<4x8xf32>
  %g = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%xt, %dy) -> (%g) : (memref<4x8xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.kernel "xl.all_reduce_update"(%g, %w) -> (%g, %w) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -5.000000e-02 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>)
  // an operand written between the matmul and the update: not folded
  %h = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%xt, %dy) -> (%h) : (memref<4x8xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.neg"(%dy) -> (%dy) : (memref<8x3xf32>) -> memref<8x3xf32>
  rt.kernel "xl.all_reduce_update"(%h, %v) -> (%h, %v) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add", scale = -5.000000e-02 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>)
  // the gradient is also stored: not folded
  %k = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%xt, %dy) -> (%k) : (memref<4x8xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.d2h "k", %k : memref<4x3xf32>
  rt.kernel "xl.all_reduce_update"(%k, %u) -> (%k, %u) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -5.000000e-02 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>)
  // d^T @ x into a 3x4 weight, groups of two: folded (the transpose, now unused, erased)
  %dt = rt.alloc : memref<3x8xf32>
  rt.kernel "popxl.transpose"(%dy) -> (%dt) {perm = array<i64: 1, 0>} : (memref<8x3xf32>) -> memref<3x8xf32>
  %m = rt.alloc : memref<3x4xf32>
  rt.kernel "popxl.matmul"(%dt, %x) -> (%m) : (memref<3x8xf32>, memref<8x4xf32>) -> memref<3x4xf32>
  rt.kernel "xl.all_reduce_update"(%m, %t) -> (%m, %t) {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add", scale = 1.000000e+00 : f64} : (memref<3x4xf32>, memref<3x4xf32>) -> (memref<3x4xf32>, memref<3x4xf32>)
}

// Written only by fused updates over all 4 replicas: replica-invariant (t's groups are of 2).
// CHECK:      %w = rt.state "w" : memref<4x3xf32> {rt.replica_invariant}
// CHECK-NEXT: %v = rt.state "v" : memref<4x3xf32> {rt.replica_invariant}
// CHECK-NEXT: %u = rt.state "u" : memref<4x3xf32> {rt.replica_invariant}
// CHECK-NEXT: %t = rt.state "t" : memref<3x4xf32>{{$}}
// CHECK-NEXT: %xt = rt.alloc : memref<4x8xf32>
// CHECK-NEXT: rt.kernel "popxl.transpose"(%x) -> (%xt)
// CHECK-NEXT: rt.kernel "xl.all_reduce_gemm_update"(%x, %dy, %w) -> (%w) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -5.000000e-02 : f64, trans_a = true, trans_b = false} : (memref<8x4xf32>, memref<8x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
// CHECK-NEXT: %h = rt.alloc : memref<4x3xf32>
// CHECK-NEXT: rt.kernel "popxl.matmul"(%xt, %dy) -> (%h)
// CHECK-NEXT: rt.kernel "popxl.neg"(%dy) -> (%dy)
// CHECK-NEXT: rt.kernel "xl.all_reduce_update"(%h, %v) -> (%h, %v)
// CHECK:      rt.kernel "popxl.matmul"(%xt, %dy) -> (%k)
// CHECK-NEXT: rt.d2h "k", %k
// CHECK-NEXT: rt.kernel "xl.all_reduce_update"(%k, %u) -> (%k, %u)
// CHECK-NEXT: rt.kernel "xl.all_reduce_gemm_update"(%dy, %x, %t) -> (%t) {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add", scale = 1.000000e+00 : f64, trans_a = true, trans_b = false} : (memref<8x3xf32>, memref<8x4xf32>, memref<3x4xf32>) -> memref<3x4xf32>
// CHECK-NEXT: }
