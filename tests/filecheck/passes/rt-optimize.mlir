// RUN: xl-opt %s -p lower-to-rt,rt-optimize | filecheck %s

// A linear layer trained with SGD: the bias add and the weight update are folded into
// accumulating gemms, the reshape and the transpose are views, gelu + tanh are fused,
// and the temporaries share storage.
graph.h2d_stream @x : tensor<2x2x2xf32>
graph.h2d_stream @dy : tensor<2x3xf32>
graph.d2h_stream @y : tensor<2x3xf32>
graph.main attributes {num_host_transfers = 1 : i64} {
  %w = graph.variable "w" = dense<0.5> : tensor<4x3xf32>
  %b = graph.variable "b" = dense<0.1> : tensor<3xf32>
  %img = graph.host_load @x : tensor<2x2x2xf32>
  %x = popxl.reshape %img : (tensor<2x2x2xf32>) -> tensor<2x4xf32>
  %m = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %z = popxl.add %m, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %h = popxl.gelu %z : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %t = popxl.tanh %h : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %t : tensor<2x3xf32>
  %dy = graph.host_load @dy : tensor<2x3xf32>
  %xt = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dw = popxl.matmul %xt, %dy : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  popxl.scaled_add_ %w, %dw {a = 1.000000e+00 : f64, b = -1.000000e-01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
}

// CHECK:      %img = rt.alloc : memref<2x2x2xf32>
// CHECK-NEXT: rt.h2d "x", %img : memref<2x2x2xf32>
// CHECK-NEXT: %x = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.kernel "popxl.reshape"(%img) -> (%x) {rt.view}
// CHECK-NEXT: %z = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.kernel "popxl.expand"(%b) -> (%z)
// CHECK-NEXT: rt.kernel "xl.gemm_acc"(%x, %w, %z) -> (%z) {alpha = 1.000000e+00 : f64, beta = 1.000000e+00 : f64, trans_a = false, trans_b = false}
// CHECK-NEXT: %t = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.kernel "xl.fused"(%z) -> (%t) {steps = [{kernel = "popxl.gelu", args = array<i64: 0>}, {kernel = "popxl.tanh", args = array<i64: -1>}]}
// CHECK-NEXT: rt.d2h "y", %t : memref<2x3xf32>
// The loaded gradient takes the storage of %t, the most recently freed buffer.
// CHECK-NEXT: rt.h2d "dy", %t : memref<2x3xf32>
// CHECK-NEXT: rt.kernel "xl.gemm_acc"(%x, %t, %w) -> (%w) {alpha = -1.000000e-01 : f64, beta = 1.000000e+00 : f64, trans_a = true, trans_b = false}
// CHECK-NEXT: }
