// RUN: xl-opt %s -p rt-trivial-collectives | filecheck %s

// Over groups of one replica an all-reduce is the identity: in place it disappears, out of
// place it becomes a copy; square_add (x * x) and groups of two stay.

rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 2 : i64} {
  %g = rt.alloc : memref<4xf32>
  %h = rt.alloc : memref<4xf32>
  %s = rt.alloc : memref<4xf32>
  %t = rt.alloc : memref<4xf32>
  %u = rt.alloc : memref<4xf32>
  rt.kernel "replica.all_reduce_"(%g) -> (%g) {grouping = #replica.grouping<stride = 1, group_size = 1>, op = "mean"} : (memref<4xf32>) -> memref<4xf32>
  rt.kernel "replica.all_reduce"(%g) -> (%h) {grouping = #replica.grouping<stride = 1, group_size = 1>, op = "max"} : (memref<4xf32>) -> memref<4xf32>
  rt.kernel "replica.all_reduce"(%g) -> (%s) {grouping = #replica.grouping<stride = 1, group_size = 1>, op = "square_add"} : (memref<4xf32>) -> memref<4xf32>
  rt.kernel "replica.all_reduce"(%g) -> (%t) {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (memref<4xf32>) -> memref<4xf32>
  rt.kernel "replica.all_reduce_identical_inputs"(%g) -> (%u) {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (memref<4xf32>) -> memref<4xf32>
}

// CHECK:      rt.program
// CHECK-NOT:  "replica.all_reduce_"
// CHECK:      rt.copy %g, %h : memref<4xf32>, memref<4xf32>
// CHECK-NEXT: rt.kernel "replica.all_reduce"(%g) -> (%s) {{.*}}op = "square_add"
// CHECK-NEXT: rt.kernel "replica.all_reduce"(%g) -> (%t) {{.*}}group_size = 2>, op = "add"
// CHECK-NEXT: rt.copy %g, %u : memref<4xf32>, memref<4xf32>
// CHECK-NEXT: }
