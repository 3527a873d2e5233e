// RUN: xl-opt %s -p 'recompute{graph=layer_grad}' | filecheck %s
// RUN: xl-opt %s -p 'recompute{graph=layer_grad}' | xl-opt | filecheck %s
// RUN: xl-opt %s -p 'recompute{graph=layer_grad new_graph=layer_recomputed}' | filecheck %s --check-prefix=NAMED
// RUN: xl-opt %s -p 'autodiff{graph=plain grad_graph=dplain},accumulate{graph=dplain inputs=1,2},recompute{graph=dplain}' | filecheck %s --check-prefix=CHAIN
// RUN: not xl-opt %s -p 'recompute{graph=layer}' 2>&1 | filecheck %s --check-prefix=NOTGRAD
// RUN: not xl-opt %s -p 'recompute{graph=layer_grad new_graph=layer}' 2>&1 | filecheck %s --check-prefix=EXISTS
// RUN: not xl-opt %s -p 'recompute' 2>&1 | filecheck %s --check-prefix=NOOPT

// A gelu layer whose gradient graph takes the activation %y (a forward output) and, after
// `accumulate`, a counter and a weight accumulator by reference.
graph.graph @layer(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %b: tensor<3xf32> {graph.name = "bias"}) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %h = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = popxl.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %z = popxl.gelu %y : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.output %z, %y : tensor<2x3xf32>, tensor<2x3xf32>
}
graph.graph @layer_grad(%dz: tensor<2x3xf32> {graph.name = "Gradient___z"}, %y: tensor<2x3xf32> {graph.name = "y"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %x: tensor<2x4xf32> {graph.name = "x"}, %n: tensor<f32> {graph.by_ref, graph.name = "mean_accum_counter"}, %aw: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.weight"}) -> (tensor<2x4xf32>, tensor<3xf32>) attributes {autodiff.forward = @layer, autodiff.expected_inputs = [["fwd_grad", 0 : i64], ["fwd_output", 1 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]], autodiff.expected_outputs = array<i64: 0, 2>} {
  %dy = popxl.gelu_grad %dz, %y : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %db = popxl.reduce_to_shape %dy : (tensor<2x3xf32>) -> tensor<3xf32>
  %wt = popxl.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %dx = popxl.matmul %dy, %wt : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %xt = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = popxl.matmul %xt, %dy : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  popxl.accumulate_mean_ %aw, %dw, %n : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  popxl.accumulate_ %n, %one : (tensor<f32>, tensor<f32>) -> ()
  graph.output %dx, %db : tensor<2x4xf32>, tensor<3xf32>
}
graph.graph @plain(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %b: tensor<3xf32> {graph.name = "bias"}) -> (tensor<2x3xf32>) {
  %h = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = popxl.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %z = popxl.gelu %y : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.output %z : tensor<2x3xf32>
}
graph.main {
}

// The new graph takes the gradient, the forward inputs the gradient graph expects (weight, x),
// the remaining forward input (bias), then the accumulator inputs, still by reference. It
// recomputes the activation with a call of the forward graph and passes it to the original
// gradient graph. Its connections: no fwd_output (activation) left, only forward inputs.
// CHECK:      graph.graph @layer_grad(
// CHECK:      graph.graph @layer_grad_recomp(%Gradient___z: tensor<2x3xf32> {graph.name = "Gradient___z"}, %weight: tensor<4x3xf32> {graph.name = "weight"}, %x: tensor<2x4xf32> {graph.name = "x"}, %bias: tensor<3xf32> {graph.name = "bias"}, %mean_accum_counter: tensor<f32> {graph.by_ref, graph.name = "mean_accum_counter"}, %accum.weight: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.weight"}) -> (tensor<2x4xf32>, tensor<3xf32>)
// CHECK-SAME:   attributes {autodiff.forward = @layer, autodiff.expected_inputs = {{\[}}["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64], ["fwd_input", 2 : i64]], autodiff.expected_outputs = array<i64: 0, 2>} {
// CHECK-NEXT:   %z, %y = call.call @layer(%x, %weight, %bias) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
// CHECK-NEXT:   %dx, %db = call.call @layer_grad(%Gradient___z, %y, %weight, %x, %mean_accum_counter, %accum.weight) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<4x3xf32>, tensor<2x4xf32>, tensor<f32>, tensor<4x3xf32>) -> (tensor<2x4xf32>, tensor<3xf32>)
// CHECK-NEXT:   graph.output %dx, %db : tensor<2x4xf32>, tensor<3xf32>
// CHECK-NEXT: }
// CHECK-NOT:  fwd_output
// CHECK:      graph.main

// NAMED: graph.graph @layer_recomputed(

// autodiff, accumulate and recompute in one pipeline.
// CHAIN:      graph.graph @dplain_recomp(%Gradient___z: tensor<2x3xf32> {graph.name = "Gradient___z"}, %weight: tensor<4x3xf32> {graph.name = "weight"}, %x: tensor<2x4xf32> {graph.name = "x"}, %bias: tensor<3xf32> {graph.name = "bias"}, %mean_accum_counter: tensor<f32> {graph.by_ref, graph.name = "mean_accum_counter"}, %accum.weight: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.weight"}, %accum.bias: tensor<3xf32> {graph.by_ref, graph.name = "accum.bias"}) -> tensor<2x4xf32>
// CHAIN-SAME:   autodiff.expected_inputs = {{\[}}["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64], ["fwd_input", 2 : i64]], autodiff.expected_outputs = array<i64: 0>} {
// CHAIN-NEXT:   %z, %[[Y:.*]] = call.call @plain(%x, %weight, %bias) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
// CHAIN-NEXT:   %[[DX:.*]] = call.call @dplain(%Gradient___z, %[[Y]], %weight, %x, %mean_accum_counter, %accum.weight, %accum.bias)
// CHAIN-NEXT:   graph.output %[[DX]] : tensor<2x4xf32>

// NOTGRAD: xl-opt: error: recompute: graph @layer is not a gradient graph
// EXISTS: xl-opt: error: recompute: a graph named @layer already exists
// NOOPT: xl-opt: error: recompute: the 'graph' option (the gradient graph to recompute) is required
