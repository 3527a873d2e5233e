// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// call.call: several results, no operands, by-reference callee inputs.

graph.graph @pair(%x: tensor<2xf32> {graph.name = "x"}, %acc: tensor<2xf32> {graph.by_ref, graph.name = "acc"}) -> (tensor<2xf32>, tensor<2xf32>) {
  popxl.scaled_add_ %acc, %x {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.output %x, %acc : tensor<2xf32>, tensor<2xf32>
}
graph.graph @nothing() -> () {
  graph.output
}
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %a = graph.variable "acc" : tensor<2xf32>
  %p:2 = call.call @pair(%x, %a) : (tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  call.call @nothing() : () -> ()
}

// CHECK:      graph.main {
// CHECK-NEXT:   %x = graph.constant dense<1.000000e+00> : tensor<2xf32>
// CHECK-NEXT:   %a = graph.variable "acc" : tensor<2xf32>
// CHECK-NEXT:   %p, %p_1 = call.call @pair(%x, %a) : (tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
// CHECK-NEXT:   call.call @nothing() : () -> ()
// CHECK-NEXT: }

// CHECK-GENERIC:      "graph.main"() ({
// CHECK-GENERIC:        %p, %p_1 = "call.call"(%x, %a) <{callee = @pair}> : (tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
// CHECK-GENERIC-NEXT:   "call.call"() <{callee = @nothing}> : () -> ()
// CHECK-GENERIC-NEXT: }) : () -> ()

// -----

// call.repeat: the N outputs are carried into the first N inputs; the rest are fixed.

graph.graph @step(%h: tensor<4xf32> {graph.name = "h"}, %w: tensor<4xf32> {graph.name = "w"}) -> tensor<4xf32> {
  %y = popxl.mul %h, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  graph.output %y : tensor<4xf32>
}
graph.graph @count(%i: tensor<i32>) -> tensor<i32> {
  graph.output %i : tensor<i32>
}
graph.main {
  %h = graph.constant dense<1.0> : tensor<4xf32>
  %w = graph.variable "w" : tensor<4xf32>
  %i = graph.constant dense<0> : tensor<i32>
  %r = call.repeat @step 10 (%h, %w) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %z = call.repeat @count 0 (%i) {note = "never runs"} : (tensor<i32>) -> tensor<i32>
}

// CHECK:      %r = call.repeat @step 10 (%h, %w) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: %z = call.repeat @count 0 (%i) {note = "never runs"} : (tensor<i32>) -> tensor<i32>

// CHECK-GENERIC:      %r = "call.repeat"(%h, %w) <{callee = @step, repeat_count = 10 : i64}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-GENERIC-NEXT: %z = "call.repeat"(%i) <{callee = @count, repeat_count = 0 : i64}> {note = "never runs"} : (tensor<i32>) -> tensor<i32>

// -----

// call.conditional: each branch has its own inputs; both produce the results.

graph.graph @double(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %y : tensor<2xf32>
}
graph.graph @pick(%x: tensor<2xf32>, %y: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %y : tensor<2xf32>
}
graph.graph @noop() -> () {
  graph.output
}
graph.main {
  %c = graph.constant dense<true> : tensor<i1>
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %b = graph.constant dense<2.0> : tensor<2xf32>
  %z = call.conditional %c then @double(%a) else @pick(%a, %b) : tensor<i1>, (tensor<2xf32>), (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  call.conditional %c then @noop() else @noop() : tensor<i1>, (), () -> ()
}

// CHECK:      %z = call.conditional %c then @double(%a) else @pick(%a, %b) : tensor<i1>, (tensor<2xf32>), (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT: call.conditional %c then @noop() else @noop() : tensor<i1>, (), () -> ()

// CHECK-GENERIC:      %z = "call.conditional"(%c, %a, %a, %b) <{then_branch = @double, else_branch = @pick, operandSegmentSizes = array<i32: 1, 1, 2>}> : (tensor<i1>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-GENERIC-NEXT: "call.conditional"(%c) <{then_branch = @noop, else_branch = @noop, operandSegmentSizes = array<i32: 1, 0, 0>}> : (tensor<i1>) -> ()
