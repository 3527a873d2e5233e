// RUN: xl-opt %s -p canonicalize --split-input-file | filecheck %s

// Shape chains fold; dead pure ops go; in-place updates and host I/O stay.
graph.h2d_stream @x : tensor<2x3xf32>
graph.d2h_stream @y : tensor<3x2xf32>
graph.d2h_stream @z : tensor<2x3xf32>
graph.main {
  %x = graph.host_load @x : tensor<2x3xf32>
  %a = popxl.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  %b = popxl.reshape %a : (tensor<6xf32>) -> tensor<3x2xf32>
  %t = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %tt = popxl.transpose %t {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %same = popxl.cast %tt : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %dead = popxl.exp %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %b : tensor<3x2xf32>
  graph.host_store @z, %same : tensor<2x3xf32>
}

// CHECK:      graph.main {
// CHECK-NEXT:   %x = graph.host_load @x : tensor<2x3xf32>
// CHECK-NEXT:   %b = popxl.reshape %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:   graph.host_store @y, %b : tensor<3x2xf32>
// CHECK-NEXT:   graph.host_store @z, %x : tensor<2x3xf32>
// CHECK-NEXT: }

// -----

// A reshape whose result is updated in place is a copy: it must stay.
graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<2xf32>
  %r = popxl.reshape %x : (tensor<2xf32>) -> tensor<2xf32>
  popxl.scaled_add_ %r, %x {a = 2.000000e+00 : f64, b = 0.000000e+00 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.host_store @y, %x : tensor<2xf32>
}

// CHECK:      %r = popxl.reshape %x
// CHECK-NEXT: popxl.scaled_add_ %r, %x
// CHECK-NEXT: graph.host_store @y, %x
