// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Streams, a subgraph with named and by-reference inputs, and the main graph.

graph.h2d_stream @x : tensor<2x4xf32>
graph.d2h_stream @y : tensor<2x3xf32>
graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "weight"}) -> tensor<2x3xf32> {
  %y = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  graph.output %y : tensor<2x3xf32>
}
graph.main attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = graph.variable "weight" : tensor<4x3xf32>
  %x = graph.host_load @x : tensor<2x4xf32>
  %y = call.call @linear(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %y : tensor<2x3xf32>
}

// CHECK:      builtin.module {
// CHECK-NEXT:   graph.h2d_stream @x : tensor<2x4xf32>
// CHECK-NEXT:   graph.d2h_stream @y : tensor<2x3xf32>
// CHECK-NEXT:   graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "weight"}) -> tensor<2x3xf32> {
// CHECK-NEXT:     %y = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:     graph.output %y : tensor<2x3xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   graph.main attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
// CHECK-NEXT:     %w = graph.variable "weight" : tensor<4x3xf32>
// CHECK-NEXT:     %x = graph.host_load @x : tensor<2x4xf32>
// CHECK-NEXT:     %y = call.call @linear(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:     graph.host_store @y, %y : tensor<2x3xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }

// CHECK-GENERIC:      "builtin.module"() ({
// CHECK-GENERIC-NEXT:   "graph.h2d_stream"() <{sym_name = "x", type = tensor<2x4xf32>}> : () -> ()
// CHECK-GENERIC-NEXT:   "graph.d2h_stream"() <{sym_name = "y", type = tensor<2x3xf32>}> : () -> ()
// CHECK-GENERIC-NEXT:   "graph.graph"() <{sym_name = "linear", function_type = (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>, arg_attrs = [{graph.name = "x"}, {graph.name = "weight"}]}> ({
// CHECK-GENERIC-NEXT:   ^bb0(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>):
// CHECK-GENERIC-NEXT:     %y = "popxl.matmul"(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC-NEXT:     "graph.output"(%y) : (tensor<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:   }) : () -> ()
// CHECK-GENERIC-NEXT:   "graph.main"() ({
// CHECK-GENERIC-NEXT:     %w = "graph.variable"() <{var_name = "weight"}> : () -> tensor<4x3xf32>
// CHECK-GENERIC-NEXT:     %x = "graph.host_load"() <{stream = @x}> : () -> tensor<2x4xf32>
// CHECK-GENERIC-NEXT:     %y = "call.call"(%x, %w) <{callee = @linear}> : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC-NEXT:     "graph.host_store"(%y) <{stream = @y}> : (tensor<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:   }) {num_host_transfers = 1 : i64, replication_factor = 1 : i64} : () -> ()
// CHECK-GENERIC-NEXT: }) : () -> ()

// -----

// By-reference inputs, unnamed inputs, several outputs, visibility, extra attributes.

graph.graph private @acc(%x: tensor<2xf32> {graph.name = "x"}, %a: tensor<2xf32> {graph.by_ref, graph.name = "acc"}, %n: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) attributes {tag = "t"} {
  popxl.scaled_add_ %a, %x {a = 1.0 : f64, b = 0.5 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.output %x, %n : tensor<2xf32>, tensor<2xf32>
}
graph.graph @nothing() -> () {
  graph.output
}

// CHECK:      builtin.module {
// CHECK-NEXT:   graph.graph private @acc(%x: tensor<2xf32> {graph.name = "x"}, %a: tensor<2xf32> {graph.by_ref, graph.name = "acc"}, %n: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) attributes {tag = "t"} {
// CHECK-NEXT:     popxl.scaled_add_ %a, %x {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
// CHECK-NEXT:     graph.output %x, %n : tensor<2xf32>, tensor<2xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   graph.graph @nothing() {
// CHECK-NEXT:     graph.output
// CHECK-NEXT:   }
// CHECK-NEXT: }

// CHECK-GENERIC:      "graph.graph"() <{sym_name = "acc", function_type = (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>), arg_attrs = [{graph.name = "x"}, {graph.by_ref, graph.name = "acc"}, {}], sym_visibility = "private"}> ({
// CHECK-GENERIC-NEXT:   ^bb0(%x: tensor<2xf32>, %a: tensor<2xf32>, %n: tensor<2xf32>):
// CHECK-GENERIC-NEXT:     "popxl.scaled_add_"(%a, %x) <{a = 1.000000e+00 : f64, b = 5.000000e-01 : f64}> : (tensor<2xf32>, tensor<2xf32>) -> ()
// CHECK-GENERIC-NEXT:     "graph.output"(%x, %n) : (tensor<2xf32>, tensor<2xf32>) -> ()
// CHECK-GENERIC-NEXT:   }) {tag = "t"} : () -> ()
// CHECK-GENERIC-NEXT:   "graph.graph"() <{sym_name = "nothing", function_type = () -> ()}> ({
// CHECK-GENERIC-NEXT:     "graph.output"() : () -> ()
// CHECK-GENERIC-NEXT:   }) : () -> ()

// -----

// Variables with and without an initial value, constants, an integer stream.

graph.h2d_stream @label : tensor<8xi32>
graph.main {
  %w = graph.variable "w" : tensor<4x3xf32>
  %c = graph.variable "counter" = dense<0.0> : tensor<f32>
  %b = graph.variable "b" = dense<[1.0, 2.0, 3.0]> : tensor<3xf32> {note = "bias"}
  %k = graph.constant dense<[1, 2]> : tensor<2xi32>
  %t = graph.constant dense<true> : tensor<i1>
  %l = graph.host_load @label : tensor<8xi32>
}

// CHECK:      builtin.module {
// CHECK-NEXT:   graph.h2d_stream @label : tensor<8xi32>
// CHECK-NEXT:   graph.main {
// CHECK-NEXT:     %w = graph.variable "w" : tensor<4x3xf32>
// CHECK-NEXT:     %c = graph.variable "counter" = dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:     %b = graph.variable "b" = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32> {note = "bias"}
// CHECK-NEXT:     %k = graph.constant dense<[1, 2]> : tensor<2xi32>
// CHECK-NEXT:     %t = graph.constant dense<true> : tensor<i1>
// CHECK-NEXT:     %l = graph.host_load @label : tensor<8xi32>
// CHECK-NEXT:   }
// CHECK-NEXT: }

// CHECK-GENERIC:      "graph.main"() ({
// CHECK-GENERIC-NEXT:   %w = "graph.variable"() <{var_name = "w"}> : () -> tensor<4x3xf32>
// CHECK-GENERIC-NEXT:   %c = "graph.variable"() <{var_name = "counter", init = dense<0.000000e+00> : tensor<f32>}> : () -> tensor<f32>
// CHECK-GENERIC-NEXT:   %b = "graph.variable"() <{var_name = "b", init = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32>}> {note = "bias"} : () -> tensor<3xf32>
// CHECK-GENERIC-NEXT:   %k = "graph.constant"() <{value = dense<[1, 2]> : tensor<2xi32>}> : () -> tensor<2xi32>
// CHECK-GENERIC-NEXT:   %t = "graph.constant"() <{value = dense<true> : tensor<i1>}> : () -> tensor<i1>
// CHECK-GENERIC-NEXT:   %l = "graph.host_load"() <{stream = @label}> : () -> tensor<8xi32>
// CHECK-GENERIC-NEXT: }) : () -> ()

// -----

// An empty main graph.

graph.main {
}

// CHECK:      builtin.module {
// CHECK-NEXT:   graph.main {
// CHECK-NEXT:   }
// CHECK-NEXT: }

// CHECK-GENERIC:      "graph.main"() ({
// CHECK-GENERIC-NEXT:   ^bb0:
// CHECK-GENERIC-NEXT: }) : () -> ()
