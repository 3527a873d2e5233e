// RUN: not xl-opt %s --split-input-file -p 'autodiff{graph=g}' 2>&1 | filecheck %s
// RUN: not xl-opt %s --split-input-file -p 'autodiff{graph=g grads_required=5}' 2>&1 | filecheck %s --check-prefix=INDEX
// RUN: not xl-opt %s --split-input-file -p 'autodiff{graph=nope}' 2>&1 | filecheck %s --check-prefix=MISSING

// A forward graph must not modify its inputs.
graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}, %y: tensor<2xf32> {graph.name = "y"}) -> (tensor<2xf32>) {
  popxl.scaled_add_ %x, %y {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  %z = popxl.mul %x, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %z : tensor<2xf32>
}
// CHECK: xl-opt: error: The graph g contains a modifying op: popxl.scaled_add_ modifies its input 'x' (input 0)
// INDEX: xl-opt: error: autodiff: grads_required index 5 is not an input of graph @g (2 inputs)
// MISSING: xl-opt: error: autodiff: no graph @nope in the module

// -----

// ... nor through a by-reference input of a graph it calls.
graph.graph @acc(%a: tensor<2xf32> {graph.by_ref, graph.name = "a"}, %v: tensor<2xf32> {graph.name = "v"}) -> () {
  popxl.scaled_add_ %a, %v {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.output
}
graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}, %y: tensor<2xf32> {graph.name = "y"}) -> (tensor<2xf32>) {
  call.call @acc(%y, %x) : (tensor<2xf32>, tensor<2xf32>) -> ()
  %z = popxl.mul %x, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %z : tensor<2xf32>
}
// CHECK: xl-opt: error: The graph g contains a modifying op: call.call modifies its input 'y' (input 1)

// -----

// A gradient must not flow through an op without a gradient rule.
graph.graph @g(%x: tensor<2x3xf32> {graph.name = "x"}) -> (tensor<f32>) {
  %l = graph.constant dense<[0, 2]> : tensor<2xi32>
  %loss, %dx = popxl.nll_loss_with_softmax_grad %x, %l {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi32>) -> (tensor<f32>, tensor<2x3xf32>)
  graph.output %loss : tensor<f32>
}
// CHECK: xl-opt: error: autodiff: no gradient rule for 'popxl.nll_loss_with_softmax_grad' in graph @g, and a gradient must flow through it
