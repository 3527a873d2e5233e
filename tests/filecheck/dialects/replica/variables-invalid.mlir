// RUN: xl-opt %s --split-input-file --verify-diagnostics

// with more than one group, the initial value has a leading num_groups dimension

graph.main attributes {replication_factor = 4 : i64} {
  // expected-error @+1 {{graph.variable "g": initial value of type tensor<2xf32> does not match the variable type tensor<2x2xf32> (2 groups of tensor<2xf32>)}}
  %g = graph.variable "g" = dense<[1.0, 2.0]> : tensor<2xf32> {grouping = #replica.grouping<stride = 2, group_size = 2>}
}

// -----

// the leading dimension is the number of groups

graph.main attributes {replication_factor = 4 : i64} {
  // expected-error @+1 {{graph.variable "g": initial value of type tensor<2x2xf32> does not match the variable type tensor<4x2xf32> (4 groups of tensor<2xf32>)}}
  %g = graph.variable "g" = dense<1.0> : tensor<2x2xf32> -> tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 1>}
}

// -----

// the grouping fits the replication factor

graph.main attributes {replication_factor = 2 : i64} {
  // expected-error @+1 {{graph.variable "g": grouping #replica.grouping<stride = 1, group_size = 4>: the replication factor 2 is not divisible by stride * group_size = 4}}
  %g = graph.variable "g" : tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 4>}
}

// -----

// retrieval modes

graph.main attributes {replication_factor = 2 : i64} {
  // expected-error @+1 {{graph.variable "g": retrieval_mode 'each' is not one of one_per_group, all_replicas}}
  %g = graph.variable "g" : tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 2>, retrieval_mode = "each"}
}
