// RUN: xl-opt %s --split-input-file --verify-diagnostics

// a grouping must fit the replication factor of graph.main

graph.main attributes {replication_factor = 4 : i64} {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.all_reduce: grouping #replica.grouping<stride = 1, group_size = 3>: the replication factor 4 is not divisible by stride * group_size = 3}}
  %y = replica.all_reduce %x {grouping = #replica.grouping<stride = 1, group_size = 3>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// stride * group_size must divide the replication factor

graph.main attributes {replication_factor = 4 : i64} {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.all_gather: grouping #replica.grouping<stride = 4, group_size = 2>: the replication factor 4 is not divisible by stride * group_size = 8}}
  %y = replica.all_gather %x {axis = 0 : i64, grouping = #replica.grouping<stride = 4, group_size = 2>, new_axis = false} : (tensor<4xf32>) -> tensor<8xf32>
}

// -----

// without replication (factor 1), only groups of one replica fit

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.all_reduce_: grouping #replica.grouping<stride = 1, group_size = 2>: the replication factor 1 is not divisible by stride * group_size = 2}}
  replica.all_reduce_ %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<4xf32>) -> ()
}

// -----

// an explicit assignment has one entry per replica

graph.main attributes {replication_factor = 2 : i64} {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.all_reduce: grouping #replica.grouping<assignment = [0, 0, 1, 1]> assigns 4 replicas, but the replication factor is 2}}
  %y = replica.all_reduce %x {grouping = #replica.grouping<assignment = [0, 0, 1, 1]>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// a collective in a subgraph is checked against the module's graph.main

graph.graph @g(%x: tensor<4xf32> {graph.name = "x"}) -> (tensor<4xf32>) {
  // expected-error @+1 {{replica.all_reduce: grouping #replica.grouping<stride = 1, group_size = 8>: the replication factor 2 is not divisible by stride * group_size = 8}}
  %y = replica.all_reduce %x {grouping = #replica.grouping<stride = 1, group_size = 8>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
  graph.output %y : tensor<4xf32>
}
graph.main attributes {replication_factor = 2 : i64} {
}

// -----

// groups of an explicit assignment have one size

graph.main attributes {replication_factor = 3 : i64} {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.grouping: the groups of assignment [0, 0, 1] differ in size}}
  %y = replica.all_reduce %x {grouping = #replica.grouping<assignment = [0, 0, 1]>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// the reduction must be one of the collective ops

graph.main attributes {replication_factor = 2 : i64} {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.all_reduce: op 'sum' is not a collective reduction; one of add, mean, mul, min, max, and, or, square_add}}
  %y = replica.all_reduce %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "sum"} : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// logical reductions take bool tensors

graph.main attributes {replication_factor = 2 : i64} {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.all_reduce: op 'and' needs a bool tensor, got float32}}
  %y = replica.all_reduce %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "and"} : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// reduce-scatter: each shard has ceil(nelms / group size) elements (6 over 4: 2, the last
// shard padded), not nelms // group size

graph.main attributes {replication_factor = 4 : i64} {
  %x = graph.constant dense<1.0> : tensor<2x3xf32>
  // expected-error @+1 {{replica.reduce_scatter: result types ((1,) float32) differ from the inferred ((2,) float32) for operands ((2, 3) float32)}}
  %y = replica.reduce_scatter %x {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"} : (tensor<2x3xf32>) -> tensor<1xf32>
}

// -----

// replicated slice: the axis must divide by the group size

graph.main attributes {replication_factor = 2 : i64} {
  %x = graph.constant dense<1.0> : tensor<2x3xf32>
  // expected-error @+1 {{replica.slice: axis 1 of (2, 3) float32 (size 3) is not divisible by the group size 2}}
  %y = replica.slice %x {axis = 1 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
}

// -----

// the result type of an all-gather is inferred from the operand, axis and group size

graph.main attributes {replication_factor = 2 : i64} {
  %x = graph.constant dense<1.0> : tensor<2x3xf32>
  // expected-error @+1 {{replica.all_gather: result types ((4, 3) float32) differ from the inferred ((2, 6) float32) for operands ((2, 3) float32)}}
  %y = replica.all_gather %x {axis = 1 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>, new_axis = false} : (tensor<2x3xf32>) -> tensor<4x3xf32>
}

// -----

// the gather axis must exist

graph.main attributes {replication_factor = 2 : i64} {
  %x = graph.constant dense<1.0> : tensor<2x3xf32>
  // expected-error @+1 {{replica.all_gather: axis 2 is out of range for rank 2}}
  %y = replica.all_gather %x {axis = 2 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>, new_axis = false} : (tensor<2x3xf32>) -> tensor<2x6xf32>
}

// -----

// an all-reduce keeps its operand type

graph.main attributes {replication_factor = 2 : i64} {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{replica.all_reduce: result types ((4,) float16) differ from the inferred ((4,) float32) for operands ((4,) float32)}}
  %y = replica.all_reduce %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<4xf32>) -> tensor<4xf16>
}
