// RUN: xl-opt %s -p 'autodiff{graph=linear}' | filecheck %s --check-prefix=LINEAR
// RUN: xl-opt %s -p 'autodiff{graph=net}' | filecheck %s --check-prefix=CALL
// RUN: xl-opt %s -p 'autodiff{graph=linear grads_required=2,1}' | filecheck %s --check-prefix=SUBSET
// RUN: xl-opt %s -p 'autodiff{graph=linear grad_graph="dlinear"}' | xl-opt | filecheck %s --check-prefix=ROUNDTRIP

graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "w"}, %b: tensor<3xf32> {graph.name = "b"}) -> (tensor<2x3xf32>) {
  %h = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = popxl.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %z = popxl.gelu %y : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.output %z : tensor<2x3xf32>
}
graph.graph @net(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "w"}, %b: tensor<3xf32> {graph.name = "b"}) -> (tensor<2x3xf32>) {
  %a = call.call @linear(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %s = popxl.softmax %a {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.output %s : tensor<2x3xf32>
}
graph.main {
  %x = graph.constant dense<1.0> : tensor<2x4xf32>
  %w = graph.variable "w" : tensor<4x3xf32>
  %b = graph.variable "b" : tensor<3xf32>
  %y = call.call @net(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
}

// A linear layer: the gradient graph takes dz (FwdGrad of output 0), then the
// activations it needs. gelu's input %y becomes an extra forward output; the
// call site in @net gets the new result in place.
// LINEAR:      graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "w"}, %b: tensor<3xf32> {graph.name = "b"}) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
// LINEAR:        %y = popxl.add %h, %b
// LINEAR-NEXT:   %z = popxl.gelu %y
// LINEAR-NEXT:   graph.output %z, %y : tensor<2x3xf32>, tensor<2x3xf32>
// LINEAR-NEXT: }
// LINEAR-NEXT: graph.graph @linear_grad(%[[DZ:.*]]: tensor<2x3xf32> {graph.name = "Gradient___z"}, %[[Y:.*]]: tensor<2x3xf32> {graph.name = "y"}, %[[W:.*]]: tensor<4x3xf32> {graph.name = "w"}, %[[X:.*]]: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>)
// LINEAR-SAME:   attributes {autodiff.forward = @linear, autodiff.expected_inputs = {{\[}}["fwd_grad", 0 : i64], ["fwd_output", 1 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]], autodiff.expected_outputs = array<i64: 0, 1, 2>} {
// LINEAR-NEXT:   %[[DY:.*]] = popxl.gelu_grad %[[DZ]], %[[Y]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// LINEAR-NEXT:   %[[DB:.*]] = popxl.reduce_to_shape %[[DY]] : (tensor<2x3xf32>) -> tensor<3xf32>
// LINEAR-NEXT:   %[[WT:.*]] = popxl.transpose %[[W]] {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
// LINEAR-NEXT:   %[[DX:.*]] = popxl.matmul %[[DY]], %[[WT]] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// LINEAR-NEXT:   %[[XT:.*]] = popxl.transpose %[[X]] {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
// LINEAR-NEXT:   %[[DW:.*]] = popxl.matmul %[[XT]], %[[DY]] : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// LINEAR-NEXT:   graph.output %[[DX]], %[[DW]], %[[DB]] : tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>
// LINEAR-NEXT: }
// LINEAR:      graph.graph @net
// LINEAR-NEXT:   %a, %{{.*}} = call.call @linear(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
// LINEAR:        graph.output %s : tensor<2x3xf32>
// LINEAR-NOT:  autodiff.forward

// A call into a subgraph: @linear is differentiated recursively and @net_grad calls
// @linear_grad. The activation of @linear, now a result of the call, becomes an
// output of @net too, and the call in the main graph gets it.
// CALL:        graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "w"}, %b: tensor<3xf32> {graph.name = "b"}) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
// CALL:        graph.graph @linear_grad({{.*}}) -> (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) attributes {autodiff.forward = @linear, {{.*}}autodiff.expected_outputs = array<i64: 0, 1, 2>} {
// CALL:        graph.graph @net(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "w"}, %b: tensor<3xf32> {graph.name = "b"}) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
// CALL-NEXT:     %a, %[[ACT:.*]] = call.call @linear(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
// CALL-NEXT:     %s = popxl.softmax %a {axis = 1 : i64}
// CALL-NEXT:     graph.output %s, %[[ACT]] : tensor<2x3xf32>, tensor<2x3xf32>
// CALL-NEXT:   }
// CALL-NEXT:   graph.graph @net_grad(%[[DS:.*]]: tensor<2x3xf32> {graph.name = "Gradient___s"}, %[[S:.*]]: tensor<2x3xf32> {graph.name = "s"}, %[[A:.*]]: tensor<2x3xf32> {{{.*}}}, %[[W:.*]]: tensor<4x3xf32> {graph.name = "w"}, %[[X:.*]]: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>)
// CALL-SAME:     attributes {autodiff.forward = @net, autodiff.expected_inputs = {{\[}}["fwd_grad", 0 : i64], ["fwd_output", 0 : i64], ["fwd_output", 1 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]], autodiff.expected_outputs = array<i64: 0, 1, 2>} {
// CALL-NEXT:     %[[DA:.*]] = popxl.softmax_grad %[[DS]], %[[S]] {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CALL-NEXT:     %[[G0:.*]], %[[G1:.*]], %[[G2:.*]] = call.call @linear_grad(%[[DA]], %[[A]], %[[W]], %[[X]]) : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<4x3xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>)
// CALL-NEXT:     graph.output %[[G0]], %[[G1]], %[[G2]] : tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>
// CALL-NEXT:   }
// CALL-NEXT:   graph.main {
// CALL:          %y, %{{.*}} = call.call @net(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)

// grads_required on a subset, in the given order (b then w): x's gradient is not
// computed, so w is not needed; the outputs follow grads_required.
// SUBSET:      graph.graph @linear_grad(%[[DZ:.*]]: tensor<2x3xf32> {graph.name = "Gradient___z"}, %[[Y:.*]]: tensor<2x3xf32> {graph.name = "y"}, %[[X:.*]]: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<3xf32>, tensor<4x3xf32>)
// SUBSET-SAME:   attributes {autodiff.forward = @linear, autodiff.expected_inputs = {{\[}}["fwd_grad", 0 : i64], ["fwd_output", 1 : i64], ["fwd_input", 0 : i64]], autodiff.expected_outputs = array<i64: 2, 1>} {
// SUBSET-NEXT:   %[[DY:.*]] = popxl.gelu_grad %[[DZ]], %[[Y]]
// SUBSET-NEXT:   %[[DB:.*]] = popxl.reduce_to_shape %[[DY]] : (tensor<2x3xf32>) -> tensor<3xf32>
// SUBSET-NEXT:   %[[XT:.*]] = popxl.transpose %[[X]] {perm = array<i64: 1, 0>}
// SUBSET-NEXT:   %[[DW:.*]] = popxl.matmul %[[XT]], %[[DY]]
// SUBSET-NEXT:   graph.output %[[DB]], %[[DW]] : tensor<3xf32>, tensor<4x3xf32>
// SUBSET-NOT:  popxl.matmul

// The connections survive printing and parsing.
// ROUNDTRIP:   graph.graph @dlinear({{.*}}) -> (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) attributes {autodiff.forward = @linear, autodiff.expected_inputs = {{\[}}["fwd_grad", 0 : i64], ["fwd_output", 1 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]], autodiff.expected_outputs = array<i64: 0, 1, 2>} {
