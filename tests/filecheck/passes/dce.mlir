// RUN: xl-opt %s -p dce | filecheck %s

// Unused reads go; variables, in-place updates and host I/O stay.
graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %w = graph.variable "w" : tensor<2xf32>
  %unused = graph.variable "unused" : tensor<2xf32>
  %x = graph.host_load @x : tensor<2xf32>
  %dead = popxl.mul %x, %w : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %dead2 = popxl.gelu %dead : (tensor<2xf32>) -> tensor<2xf32>
  popxl.scaled_add_ %w, %x {a = 1.000000e+00 : f64, b = -1.000000e-01 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
}

// CHECK:      graph.main {
// CHECK-NEXT:   %w = graph.variable "w" : tensor<2xf32>
// CHECK-NEXT:   %unused = graph.variable "unused" : tensor<2xf32>
// CHECK-NEXT:   %x = graph.host_load @x : tensor<2xf32>
// CHECK-NEXT:   popxl.scaled_add_ %w, %x {a = 1.000000e+00 : f64, b = -1.000000e-01 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
// CHECK-NEXT: }
