// RUN: xl-opt %s -p rt-fold-all-reduce | filecheck %s
// RUN: xl-opt %s -p rt-fold-all-reduce | xl-opt | filecheck %s

// A gradient written by one kernel, averaged over the replicas in place and only then
// added to a weight: one xl.all_reduce_update collective where the update was.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 4 : i64} {
  %x = rt.alloc : memref<8x4xf32>
  %dy = rt.alloc : memref<8x3xf32>
  %w = rt.state "w" : memref<4x3xf32>
  %v = rt.state "v" : memref<4x3xf32>
  %u = rt.state "u" : memref<4x3xf32>
  %t = rt.state "t" : memref<4x3xf32>
  %g = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%x, %dy) -> (%g) : (memref<8x4xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.kernel "replica.all_reduce_"(%g) -> (%g) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean"} : (memref<4x3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.scaled_add_"(%w, %g) -> (%w) {a = 1.0 : f64, b = -0.05 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  // read again after the update: not folded (the fused kernel leaves a partial sum)
  %h = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%x, %dy) -> (%h) : (memref<8x4xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.kernel "replica.all_reduce_"(%h) -> (%h) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"} : (memref<4x3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.scaled_add_"(%v, %h) -> (%v) {a = 1.0 : f64, b = -0.05 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  rt.d2h "h", %h : memref<4x3xf32>
  // a = 0.9 (weight decay): not folded
  %k = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%x, %dy) -> (%k) : (memref<8x4xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.kernel "replica.all_reduce_"(%k) -> (%k) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean"} : (memref<4x3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.scaled_add_"(%u, %k) -> (%u) {a = 0.9 : f64, b = -0.05 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  // max is not a sum: not folded
  %m = rt.alloc : memref<4x3xf32>
  rt.kernel "popxl.matmul"(%x, %dy) -> (%m) : (memref<8x4xf32>, memref<8x3xf32>) -> memref<4x3xf32>
  rt.kernel "replica.all_reduce_"(%m) -> (%m) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "max"} : (memref<4x3xf32>) -> memref<4x3xf32>
  rt.kernel "popxl.scaled_add_"(%t, %m) -> (%t) {a = 1.0 : f64, b = -0.05 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
}

// Only written by the fused update over all 4 replicas: the same value on every replica.
// CHECK:      %w = rt.state "w" : memref<4x3xf32> {rt.replica_invariant}
// CHECK-NEXT: %v = rt.state "v" : memref<4x3xf32>{{$}}
// CHECK:      rt.kernel "popxl.matmul"(%x, %dy) -> (%g)
// CHECK-NEXT: rt.kernel "xl.all_reduce_update"(%g, %w) -> (%g, %w) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -5.000000e-02 : f64} : (memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>)
// CHECK-NEXT: %h = rt.alloc
// CHECK-NEXT: rt.kernel "popxl.matmul"(%x, %dy) -> (%h)
// CHECK-NEXT: rt.kernel "replica.all_reduce_"(%h) -> (%h)
// CHECK-NEXT: rt.kernel "popxl.scaled_add_"(%v, %h) -> (%v)
// CHECK:      rt.kernel "replica.all_reduce_"(%k) -> (%k)
// CHECK-NEXT: rt.kernel "popxl.scaled_add_"(%u, %k) -> (%u)
// CHECK:      rt.kernel "replica.all_reduce_"(%m) -> (%m)
// CHECK-NEXT: rt.kernel "popxl.scaled_add_"(%t, %m) -> (%t)
