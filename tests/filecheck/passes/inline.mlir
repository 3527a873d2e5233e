// RUN: xl-opt %s -p inline | filecheck %s
// RUN: xl-opt %s -p 'inline{remove-dead=false}' | filecheck %s --check-prefix=KEEP

// A plain call: the body replaces the call, the graph disappears.
graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.graph @act(%a: tensor<2xf32> {graph.name = "a"}) -> (tensor<2xf32>) {
  %r = popxl.relu %a : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %r : tensor<2xf32>
}
// An accumulator update through a by-reference input modifies the caller's tensor;
// the non-by-ref input `b` is updated in place, so the caller's value is copied.
graph.graph @upd(%acc: tensor<2xf32> {graph.by_ref, graph.name = "acc"}, %b: tensor<2xf32> {graph.name = "b"}) -> (tensor<2xf32>) {
  popxl.scaled_add_ %acc, %b {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  popxl.scaled_add_ %b, %b {a = 2.000000e+00 : f64, b = 0.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.output %b : tensor<2xf32>
}
graph.main {
  %v = graph.variable "v" : tensor<2xf32>
  %x = graph.host_load @x : tensor<2xf32>
  %y = call.call @act(%x) : (tensor<2xf32>) -> tensor<2xf32>
  %z = call.call @upd(%v, %y) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %z : tensor<2xf32>
}

// CHECK-NOT:   graph.graph
// CHECK:       graph.main {
// CHECK-NEXT:    %v = graph.variable "v" : tensor<2xf32>
// CHECK-NEXT:    %x = graph.host_load @x : tensor<2xf32>
// CHECK-NEXT:    %r = popxl.relu %x : (tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %[[COPY:.*]] = popxl.identity %r : (tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    popxl.scaled_add_ %v, %[[COPY]] {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
// CHECK-NEXT:    popxl.scaled_add_ %[[COPY]], %[[COPY]] {a = 2.000000e+00 : f64, b = 0.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
// CHECK-NEXT:    %[[OUT:.*]] = popxl.identity %[[COPY]] : (tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    graph.host_store @y, %[[OUT]] : tensor<2xf32>
// CHECK-NEXT:  }

// KEEP: graph.graph @act
// KEEP: graph.graph @upd
// KEEP: graph.main
// KEEP-NOT: call.call
