// RUN: xl-opt %s -p cse --split-input-file | filecheck %s

// Identical reads merge, but not across an in-place update of an operand.
graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %w = graph.variable "w" : tensor<2xf32>
  %x = graph.host_load @x : tensor<2xf32>
  %a = popxl.add %w, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %b = popxl.add %w, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %b : tensor<2xf32>
  popxl.scaled_add_ %w, %a {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  %c = popxl.add %w, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %c : tensor<2xf32>
}

// CHECK:      %a = popxl.add %w, %x
// CHECK-NEXT: graph.host_store @y, %a
// CHECK-NEXT: popxl.scaled_add_ %w, %a
// CHECK-NEXT: %c = popxl.add %w, %x
// CHECK-NEXT: graph.host_store @y, %c

// -----

// A tensor updated in place later is never merged with an identical one.
graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<2xf32>
  %a = popxl.exp %x : (tensor<2xf32>) -> tensor<2xf32>
  %b = popxl.exp %x : (tensor<2xf32>) -> tensor<2xf32>
  popxl.scaled_add_ %a, %x {a = 1.000000e+00 : f64, b = 1.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.host_store @y, %a : tensor<2xf32>
  graph.host_store @y, %b : tensor<2xf32>
}

// CHECK:      %a = popxl.exp %x
// CHECK-NEXT: %b = popxl.exp %x
