// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Grouped variables: one initial value per group ([num_groups, *shape]), the variable
// type after `->`; one group keeps the plain form.

graph.main attributes {replication_factor = 4 : i64} {
  %g = graph.variable "g" = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> -> tensor<2xf32> {grouping = #replica.grouping<stride = 2, group_size = 2>, retrieval_mode = "one_per_group"}
  %h = graph.variable "h" = dense<[1.0, 2.0]> : tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 4>, retrieval_mode = "all_replicas"}
  %k = graph.variable "k" : tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 1>}
}

// CHECK:      graph.main attributes {replication_factor = 4 : i64} {
// CHECK-NEXT:   %g = graph.variable "g" = dense<[[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32> -> tensor<2xf32> {grouping = #replica.grouping<stride = 2, group_size = 2>, retrieval_mode = "one_per_group"}
// CHECK-NEXT:   %h = graph.variable "h" = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 4>, retrieval_mode = "all_replicas"}
// CHECK-NEXT:   %k = graph.variable "k" : tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 1>}
// CHECK-NEXT: }

// CHECK-GENERIC: %g = "graph.variable"() <{var_name = "g", init = dense<{{.*}}> : tensor<2x2xf32>, grouping = #replica.grouping<stride = 2, group_size = 2>, retrieval_mode = "one_per_group"}> : () -> tensor<2xf32>
