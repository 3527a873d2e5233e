// RUN: xl-opt %s -p lower-to-rt | filecheck %s
// RUN: xl-opt %s -p lower-to-rt | xl-opt | filecheck %s
// RUN: xl-opt %s -p lower-to-rt,rt-optimize | filecheck %s --check-prefix=OPT

// Replica collectives lower to rt.kernel with their grouping as a parameter; a grouped
// variable becomes an rt.state with one initial value per group and the same grouping.

graph.h2d_stream @x : tensor<3xf32>
graph.d2h_stream @y : tensor<6xf32>
graph.main attributes {replication_factor = 4 : i64} {
  %w = graph.variable "w" = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32> -> tensor<3xf32> {grouping = #replica.grouping<stride = 2, group_size = 2>}
  %x = graph.host_load @x : tensor<3xf32>
  replica.all_reduce_ %x {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean"} : (tensor<3xf32>) -> ()
  popxl.accumulate_ %w, %x : (tensor<3xf32>, tensor<3xf32>) -> ()
  %g = replica.all_gather %w {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>, new_axis = false} : (tensor<3xf32>) -> tensor<6xf32>
  graph.host_store @y, %g : tensor<6xf32>
}

// CHECK:      rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 4 : i64} {
// CHECK-NEXT:   %w = rt.state "w" = dense<{{\[}}[1.000000e+00, 2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00, 6.000000e+00]]> : tensor<2x3xf32> : memref<3xf32> {grouping = #replica.grouping<stride = 2, group_size = 2>}
// CHECK-NEXT:   %x = rt.alloc : memref<3xf32>
// CHECK-NEXT:   rt.h2d "x", %x : memref<3xf32>
// CHECK-NEXT:   rt.kernel "replica.all_reduce_"(%x) -> (%x) {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean"} : (memref<3xf32>) -> memref<3xf32>
// CHECK-NEXT:   rt.kernel "popxl.accumulate_"(%w, %x) -> (%w)
// CHECK-NEXT:   %g = rt.alloc : memref<6xf32>
// CHECK-NEXT:   rt.kernel "replica.all_gather"(%w) -> (%g) {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>, new_axis = false} : (memref<3xf32>) -> memref<6xf32>
// CHECK-NEXT:   rt.d2h "y", %g : memref<6xf32>
// CHECK-NEXT: }

// The rt optimisations leave collectives in place (not fused, not views).
// OPT: rt.kernel "replica.all_reduce_"
// OPT: rt.kernel "replica.all_gather"
