// RUN: xl-opt %s -p functionalize | filecheck %s
// RUN: xl-opt %s -p 'functionalize{graph=other}' | filecheck %s --check-prefix=ONE
// RUN: xl-opt %s -p functionalize | xl-opt | filecheck %s
// RUN: not xl-opt %s -p 'functionalize{graph=nope}' 2>&1 | filecheck %s --check-prefix=ERR

// In-place updates of the graph's own intermediates become out-of-place ops whose
// result replaces every later use; in-place updates of inputs (%acc) and ops without
// an out-of-place form (accumulator_zero_) stay; graph.main is left alone.

graph.graph @g(%x: tensor<4x3xf32> {graph.name = "x"}, %acc: tensor<4x3xf32> {graph.by_ref, graph.name = "acc"}, %i: tensor<1xui32> {graph.name = "i"}, %u: tensor<1x3xf32> {graph.name = "u"}) -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %h = popxl.exp %x : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %m = popxl.mul %h, %x : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  popxl.scaled_add_ %h, %x {a = 2.000000e+00 : f64, b = -5.000000e-02 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  popxl.accumulate_ %h, %m {f = 5.000000e-01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  popxl.dynamic_update_ %h, %i, %u {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> ()
  popxl.copy_var_update_ %m, %h : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  popxl.accumulator_zero_ %h : (tensor<4x3xf32>) -> ()
  popxl.accumulate_ %acc, %h {f = 1.000000e+00 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  graph.output %h, %m : tensor<4x3xf32>, tensor<4x3xf32>
}
graph.graph @other(%x: tensor<2xf32> {graph.name = "x"}) -> (tensor<2xf32>) {
  %h = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
  popxl.scaled_add_ %h, %x {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.output %h : tensor<2xf32>
}
graph.main {
  %w = graph.variable "w" : tensor<2xf32>
  %d = graph.constant dense<1.0> : tensor<2xf32>
  popxl.scaled_add_ %w, %d {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
}

// CHECK:      graph.graph @g(
// CHECK-NEXT:   %h = popxl.exp %x
// CHECK-NEXT:   %m = popxl.mul %h, %x
// CHECK-NEXT:   %[[H1:.*]] = popxl.scaled_add %h, %x {a = 2.000000e+00 : f64, b = -5.000000e-02 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:   %[[H2:.*]] = popxl.scaled_add %[[H1]], %m {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:   %[[H3:.*]] = popxl.dynamic_update %[[H2]], %i, %u {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:   %[[M1:.*]] = popxl.identity %[[H3]] : (tensor<4x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:   popxl.accumulator_zero_ %[[H3]] : (tensor<4x3xf32>) -> ()
// CHECK-NEXT:   popxl.accumulate_ %acc, %[[H3]] {f = 1.000000e+00 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
// CHECK-NEXT:   graph.output %[[H3]], %[[M1]] : tensor<4x3xf32>, tensor<4x3xf32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @other(
// CHECK-NEXT:   %h = popxl.neg %x
// CHECK-NEXT:   %[[O1:.*]] = popxl.scaled_add %h, %x
// CHECK-NEXT:   graph.output %[[O1]] : tensor<2xf32>
// CHECK:      graph.main {
// CHECK-NEXT:   %w = graph.variable "w"
// CHECK-NEXT:   %d = graph.constant
// CHECK-NEXT:   popxl.scaled_add_ %w, %d

// Only @other: @g keeps its in-place ops.
// ONE:      graph.graph @g(
// ONE:        popxl.scaled_add_ %h, %x
// ONE:      graph.graph @other(
// ONE-NEXT:   %h = popxl.neg %x
// ONE-NEXT:   %[[O1:.*]] = popxl.scaled_add %h, %x
// ONE-NEXT:   graph.output %[[O1]] : tensor<2xf32>

// ERR: xl-opt: error: functionalize: no graph @nope in the module
// ERR-NOT: Traceback
