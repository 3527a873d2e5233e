// RUN: xl-opt %s -p lower-to-rt | filecheck %s

graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.graph @body(%c: tensor<2xf32> {graph.name = "c"}, %w: tensor<2xf32> {graph.name = "w"}) -> (tensor<2xf32>) {
  %n = popxl.add %c, %w : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %n : tensor<2xf32>
}
graph.main attributes {num_host_transfers = 2 : i64} {
  %w = graph.variable "w" = dense<[1.0, 2.0]> : tensor<2xf32>
  %x = graph.host_load @x : tensor<2xf32>
  %r = call.repeat @body 3 (%x, %w) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  popxl.scaled_add_ %w, %r {a = 1.000000e+00 : f64, b = -5.000000e-01 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.host_store @y, %r : tensor<2xf32>
}

// CHECK:      rt.program attributes {num_host_transfers = 2 : i64, replication_factor = 1 : i64} {
// CHECK-NEXT:   %w = rt.state "w" = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32> : memref<2xf32>
// CHECK-NEXT:   %x = rt.alloc : memref<2xf32>
// CHECK-NEXT:   rt.h2d "x", %x : memref<2xf32>
// The loop-carried input gets its own buffer, so the caller's %x is not overwritten.
// CHECK-NEXT:   %[[C:.*]] = rt.alloc : memref<2xf32>
// CHECK-NEXT:   rt.copy %x, %[[C]] : memref<2xf32>, memref<2xf32>
// CHECK-NEXT:   rt.loop 3 {
// CHECK-NEXT:     %n = rt.alloc : memref<2xf32>
// CHECK-NEXT:     rt.kernel "popxl.add"(%[[C]], %w) -> (%n) : (memref<2xf32>, memref<2xf32>) -> memref<2xf32>
// CHECK-NEXT:     rt.copy %n, %[[C]] : memref<2xf32>, memref<2xf32>
// CHECK-NEXT:   }
// In-place update: the variable's buffer is both read and written.
// CHECK-NEXT:   rt.kernel "popxl.scaled_add_"(%w, %[[C]]) -> (%w) {a = 1.000000e+00 : f64, b = -5.000000e-01 : f64} : (memref<2xf32>, memref<2xf32>) -> memref<2xf32>
// CHECK-NEXT:   rt.d2h "y", %[[C]] : memref<2xf32>
// CHECK-NEXT: }
