// RUN: xl-opt %s -p 'accumulate{graph=linear_grad}' | filecheck %s --check-prefix=ALL
// RUN: xl-opt %s -p 'accumulate{graph=linear_grad inputs=1,2}' | filecheck %s --check-prefix=WB
// RUN: xl-opt %s -p 'accumulate{graph=linear_grad inputs=2,1 keep=2 names=b,w counter=n}' | filecheck %s --check-prefix=KEEP
// RUN: xl-opt %s -p 'accumulate{graph=linear_grad inputs=1,2}' | xl-opt | filecheck %s --check-prefix=WB
// RUN: xl-opt %s -p 'autodiff{graph=linear grad_graph=dlinear},accumulate{graph=dlinear inputs=1,2}' | filecheck %s --check-prefix=CHAIN
// RUN: not xl-opt %s -p 'accumulate{graph=linear}' 2>&1 | filecheck %s --check-prefix=NOTGRAD
// RUN: not xl-opt %s -p 'accumulate{graph=linear_grad inputs=3}' 2>&1 | filecheck %s --check-prefix=INDEX
// RUN: not xl-opt %s -p 'accumulate{graph=linear_grad inputs=1},accumulate{graph=linear_grad inputs=2}' 2>&1 | filecheck %s --check-prefix=TWICE
// RUN: not xl-opt %s -p 'accumulate' 2>&1 | filecheck %s --check-prefix=NOOPT

// A linear layer and its gradient graph, as `autodiff{graph=linear}` makes it.
graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %b: tensor<3xf32> {graph.name = "bias"}) -> (tensor<2x3xf32>) {
  %h = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = popxl.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  graph.output %y : tensor<2x3xf32>
}
graph.graph @linear_grad(%dy: tensor<2x3xf32> {graph.name = "Gradient___y"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) attributes {autodiff.forward = @linear, autodiff.expected_inputs = [["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]], autodiff.expected_outputs = array<i64: 0, 1, 2>} {
  %db = popxl.reduce_to_shape %dy : (tensor<2x3xf32>) -> tensor<3xf32>
  %wt = popxl.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %dx = popxl.matmul %dy, %wt : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %xt = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = popxl.matmul %xt, %dy : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  graph.output %dx, %dw, %db : tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>
}
graph.main {
}

// Default: every gradient the graph outputs is accumulated. The counter comes first, then one
// by-reference accumulator per forward input (in output order), named accum.<forward input
// name>. The running means follow the gradient computation, then the counter is incremented;
// no outputs remain. The expected inputs are unchanged (the new inputs are no connections).
// ALL:      graph.graph @linear_grad(%dy: tensor<2x3xf32> {graph.name = "Gradient___y"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %x: tensor<2x4xf32> {graph.name = "x"}, %mean_accum_counter: tensor<f32> {graph.by_ref, graph.name = "mean_accum_counter"}, %accum.x: tensor<2x4xf32> {graph.by_ref, graph.name = "accum.x"}, %accum.weight: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.weight"}, %accum.bias: tensor<3xf32> {graph.by_ref, graph.name = "accum.bias"})
// ALL-SAME:   attributes {autodiff.forward = @linear, autodiff.expected_inputs = {{\[}}["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]], autodiff.expected_outputs = array<i64>} {
// ALL:        %dw = popxl.matmul %xt, %dy
// ALL-NEXT:   popxl.accumulate_mean_ %accum.x, %dx, %mean_accum_counter : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<f32>) -> ()
// ALL-NEXT:   popxl.accumulate_mean_ %accum.weight, %dw, %mean_accum_counter : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
// ALL-NEXT:   popxl.accumulate_mean_ %accum.bias, %db, %mean_accum_counter : (tensor<3xf32>, tensor<3xf32>, tensor<f32>) -> ()
// ALL-NEXT:   %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// ALL-NEXT:   popxl.accumulate_ %mean_accum_counter, %[[ONE]] : (tensor<f32>, tensor<f32>) -> ()
// ALL-NEXT:   graph.output
// ALL-NEXT: }

// The weights only: dx stays the one output (expected_outputs follows the outputs).
// WB:      graph.graph @linear_grad(%dy: tensor<2x3xf32> {graph.name = "Gradient___y"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %x: tensor<2x4xf32> {graph.name = "x"}, %mean_accum_counter: tensor<f32> {graph.by_ref, graph.name = "mean_accum_counter"}, %accum.weight: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.weight"}, %accum.bias: tensor<3xf32> {graph.by_ref, graph.name = "accum.bias"}) -> tensor<2x4xf32>
// WB-SAME:   autodiff.expected_outputs = array<i64: 0>} {
// WB:        popxl.accumulate_mean_ %accum.weight, %dw, %mean_accum_counter
// WB-NEXT:   popxl.accumulate_mean_ %accum.bias, %db, %mean_accum_counter
// WB-NEXT:   %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// WB-NEXT:   popxl.accumulate_ %mean_accum_counter, %[[ONE]]
// WB-NEXT:   graph.output %dx : tensor<2x4xf32>

// Accumulators in the order of `inputs`, named by `names`; `keep` keeps the bias gradient an
// output; the counter is renamed.
// KEEP:      graph.graph @linear_grad({{.*}}, %x: tensor<2x4xf32> {graph.name = "x"}, %n: tensor<f32> {graph.by_ref, graph.name = "n"}, %accum.b: tensor<3xf32> {graph.by_ref, graph.name = "accum.b"}, %accum.w: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.w"}) -> (tensor<2x4xf32>, tensor<3xf32>)
// KEEP-SAME:   autodiff.expected_outputs = array<i64: 0, 2>} {
// KEEP:        popxl.accumulate_mean_ %accum.b, %db, %n
// KEEP-NEXT:   popxl.accumulate_mean_ %accum.w, %dw, %n
// KEEP-NEXT:   %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// KEEP-NEXT:   popxl.accumulate_ %n, %[[ONE]]
// KEEP-NEXT:   graph.output %dx, %db : tensor<2x4xf32>, tensor<3xf32>

// After autodiff: the new gradient graph accumulates its weight gradients.
// CHAIN:      graph.graph @dlinear({{.*}}, %mean_accum_counter: tensor<f32> {graph.by_ref, graph.name = "mean_accum_counter"}, %accum.weight: tensor<4x3xf32> {graph.by_ref, graph.name = "accum.weight"}, %accum.bias: tensor<3xf32> {graph.by_ref, graph.name = "accum.bias"}) -> tensor<2x4xf32> attributes {autodiff.forward = @linear, {{.*}}, autodiff.expected_outputs = array<i64: 0>} {
// CHAIN:        popxl.accumulate_mean_ %accum.weight, %{{.*}}, %mean_accum_counter
// CHAIN-NEXT:   popxl.accumulate_mean_ %accum.bias, %{{.*}}, %mean_accum_counter
// CHAIN-NEXT:   %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// CHAIN-NEXT:   popxl.accumulate_ %mean_accum_counter, %[[ONE]]
// CHAIN-NEXT:   graph.output %{{.*}} : tensor<2x4xf32>

// NOTGRAD: xl-opt: error: accumulate: graph @linear is not a gradient graph
// INDEX: xl-opt: error: accumulate: 3 is not an input of the forward graph @linear (3 inputs)
// TWICE: xl-opt: error: accumulate: graph @linear_grad already has an input named 'mean_accum_counter'
// NOOPT: xl-opt: error: accumulate: the 'graph' option (the gradient graph to accumulate) is required
