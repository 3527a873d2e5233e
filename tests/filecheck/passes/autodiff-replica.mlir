// RUN: xl-opt %s -p 'autodiff{graph=gather}' | filecheck %s --check-prefix=GATHER
// RUN: xl-opt %s -p 'autodiff{graph=reduce}' | filecheck %s --check-prefix=REDUCE
// RUN: xl-opt %s -p 'autodiff{graph=scatter}' | filecheck %s --check-prefix=SCATTER
// RUN: xl-opt %s -p 'autodiff{graph=scatter},autodiff{graph=reduce},autodiff{graph=gather}' | xl-opt | filecheck %s --check-prefix=ROUNDTRIP

// Gradient rules of the replica collectives (xl.passes.grad_rules_replica): each gradient
// is again a collective over the same grouping.

graph.graph @gather(%x: tensor<2x3xf32> {graph.name = "x"}) -> (tensor<2x12xf32>) {
  %y = replica.all_gather %x {axis = 1 : i64, grouping = #replica.grouping<stride = 1, group_size = 4>, new_axis = false} : (tensor<2x3xf32>) -> tensor<2x12xf32>
  graph.output %y : tensor<2x12xf32>
}
graph.graph @reduce(%x: tensor<4x3xf32> {graph.name = "x"}) -> (tensor<3xf32>, tensor<4x3xf32>) {
  %s = replica.slice %x {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 4>} : (tensor<4x3xf32>) -> tensor<3xf32>
  %m = replica.all_reduce %x {grouping = #replica.grouping<stride = 2, group_size = 2>, op = "max"} : (tensor<4x3xf32>) -> tensor<4x3xf32>
  graph.output %s, %m : tensor<3xf32>, tensor<4x3xf32>
}
graph.graph @scatter(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<4xf32>, tensor<4xf32>) {
  %r = replica.reduce_scatter %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mean"} : (tensor<2x4xf32>) -> tensor<4xf32>
  %i = replica.all_reduce_identical_inputs %r {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
  %j = replica.all_reduce_identical_grad_inputs %r {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
  graph.output %i, %j : tensor<4xf32>, tensor<4xf32>
}
graph.main attributes {replication_factor = 4 : i64} {
}

// all_gather (concat on axis 1) -> the replicated slice of the gradient on axis 1
// GATHER:      graph.graph @gather_grad(%[[DY:.*]]: tensor<2x12xf32> {graph.name = "Gradient___y"}) -> tensor<2x3xf32>
// GATHER-NEXT:   %[[DX:.*]] = replica.slice %[[DY]] {grouping = #replica.grouping<stride = 1, group_size = 4>, axis = 1 : i64} : (tensor<2x12xf32>) -> tensor<2x3xf32>
// GATHER-NEXT:   graph.output %[[DX]] : tensor<2x3xf32>

// slice (axis 0, size-1 slices drop the axis) -> the all-gather of the gradient, axis restored;
// all_reduce max -> the all-reduce (add) of the gradients where x is the maximum
// REDUCE:      graph.graph @reduce_grad(%[[DS:.*]]: tensor<3xf32> {graph.name = "Gradient___s"}, %[[DM:.*]]: tensor<4x3xf32> {graph.name = "Gradient___m"}, %[[M:.*]]: tensor<4x3xf32> {graph.name = "m"}, %[[X:.*]]: tensor<4x3xf32> {graph.name = "x"})
// REDUCE-NEXT:   %[[S:.*]] = replica.all_reduce %[[DM]] {grouping = #replica.grouping<stride = 2, group_size = 2>, op = "add"} : (tensor<4x3xf32>) -> tensor<4x3xf32>
// REDUCE-NEXT:   %[[EQ:.*]] = popxl.equal %[[X]], %[[M]] : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xi1>
// REDUCE-NEXT:   %[[MASK:.*]] = popxl.cast %[[EQ]] : (tensor<4x3xi1>) -> tensor<4x3xf32>
// REDUCE-NEXT:   %[[D1:.*]] = popxl.mul %[[S]], %[[MASK]] : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
// REDUCE-NEXT:   %[[R:.*]] = popxl.reshape %[[DS]] : (tensor<3xf32>) -> tensor<1x3xf32>
// REDUCE-NEXT:   %[[G:.*]] = replica.all_gather %[[R]] {grouping = #replica.grouping<stride = 1, group_size = 4>, axis = 0 : i64, new_axis = false} : (tensor<1x3xf32>) -> tensor<4x3xf32>
// REDUCE-NEXT:   %[[DX:.*]] = popxl.add %[[D1]], %[[G]] : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
// REDUCE-NEXT:   graph.output %[[DX]] : tensor<4x3xf32>

// identical inputs -> the all-reduce of the gradient; identical grad inputs -> the gradient
// itself; reduce_scatter mean -> the all-gather of the gradients over the group size
// SCATTER:      graph.graph @scatter_grad(%[[DI:.*]]: tensor<4xf32> {graph.name = "Gradient___i"}, %[[DJ:.*]]: tensor<4xf32> {graph.name = "Gradient___j"}) -> tensor<2x4xf32>
// SCATTER-NEXT:   %[[A:.*]] = replica.all_reduce %[[DI]] {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<4xf32>) -> tensor<4xf32>
// SCATTER-NEXT:   %[[DR:.*]] = popxl.add %[[DJ]], %[[A]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// SCATTER-NEXT:   %[[G:.*]] = replica.all_gather %[[DR]] {grouping = #replica.grouping<stride = 1, group_size = 2>, axis = 0 : i64, new_axis = false} : (tensor<4xf32>) -> tensor<8xf32>
// SCATTER-NEXT:   %[[F:.*]] = popxl.reshape %[[G]] : (tensor<8xf32>) -> tensor<2x4xf32>
// SCATTER-NEXT:   %[[H:.*]] = graph.constant dense<5.000000e-01> : tensor<f32>
// SCATTER-NEXT:   %[[DX:.*]] = popxl.mul %[[F]], %[[H]] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
// SCATTER-NEXT:   graph.output %[[DX]] : tensor<2x4xf32>

// ROUNDTRIP: graph.graph @gather_grad
// ROUNDTRIP: graph.graph @reduce_grad
// ROUNDTRIP: graph.graph @scatter_grad
