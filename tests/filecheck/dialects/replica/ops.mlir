// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Collectives between replicas, each with a replica grouping; the groupings fit the
// replication factor of graph.main (4).

graph.main attributes {replication_factor = 4 : i64} {
  %w = graph.variable "w" = dense<1.0> : tensor<4xf32>
  %s = replica.all_reduce %w {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
  %g = replica.all_gather %w {axis = 0 : i64, grouping = #replica.grouping<stride = 2, group_size = 2>, new_axis = false} : (tensor<4xf32>) -> tensor<8xf32>
  %h = replica.all_gather %w {axis = 0 : i64, grouping = #replica.grouping<assignment = [0, 1, 1, 0]>, new_axis = true} : (tensor<4xf32>) -> tensor<2x4xf32>
  %r = replica.reduce_scatter %w {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "max"} : (tensor<4xf32>) -> tensor<1xf32>
  %q = replica.sharded_slice %w {grouping = #replica.grouping<stride = 1, group_size = 2>} : (tensor<4xf32>) -> tensor<2xf32>
  %p = replica.slice %w {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 4>} : (tensor<4xf32>) -> tensor<f32>
  %i = replica.all_reduce_identical_inputs %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
  %j = replica.all_reduce_identical_grad_inputs %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mul"} : (tensor<4xf32>) -> tensor<4xf32>
  replica.all_reduce_ %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mean"} : (tensor<4xf32>) -> ()
}

// CHECK:      graph.main attributes {replication_factor = 4 : i64} {
// CHECK-NEXT:   %w = graph.variable "w" = dense<1.000000e+00> : tensor<4xf32>
// CHECK-NEXT:   %s = replica.all_reduce %w {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   %g = replica.all_gather %w {axis = 0 : i64, grouping = #replica.grouping<stride = 2, group_size = 2>, new_axis = false} : (tensor<4xf32>) -> tensor<8xf32>
// CHECK-NEXT:   %h = replica.all_gather %w {axis = 0 : i64, grouping = #replica.grouping<assignment = [0, 1, 1, 0]>, new_axis = true} : (tensor<4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:   %r = replica.reduce_scatter %w {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "max"} : (tensor<4xf32>) -> tensor<1xf32>
// CHECK-NEXT:   %q = replica.sharded_slice %w {grouping = #replica.grouping<stride = 1, group_size = 2>} : (tensor<4xf32>) -> tensor<2xf32>
// CHECK-NEXT:   %p = replica.slice %w {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 4>} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:   %i = replica.all_reduce_identical_inputs %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   %j = replica.all_reduce_identical_grad_inputs %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mul"} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   replica.all_reduce_ %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mean"} : (tensor<4xf32>) -> ()
// CHECK-NEXT: }
// CHECK-NEXT: }

// CHECK-GENERIC: %s = "replica.all_reduce"(%w) <{grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"}> : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-GENERIC: "replica.all_reduce_"(%w) <{grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mean"}> : (tensor<4xf32>) -> ()
