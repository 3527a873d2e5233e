// RUN: xl-opt %s -p rt-fuse-softmax | filecheck %s

// Attention scores: the scale-and-mask chain's result %s is read by the softmax only, so
// the chain becomes the prologue of one xl.softmax writing %p; its buffer goes.
// Backward: softmax_grad's result %g is read by the scale's mul only, which becomes the
// epilogue of one xl.softmax_grad (its operand %g is the output, -1; %scale is input 2).
// %t, also stored to the host, keeps its softmax unfused.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %qk = rt.alloc : memref<2x2x4x4xf32>
  rt.h2d "qk", %qk : memref<2x2x4x4xf32>
  %scale = rt.const dense<5.000000e-01> : tensor<f32> : memref<f32>
  %mask = rt.const dense<0.000000e+00> : tensor<4x4xf32> : memref<4x4xf32>
  %s = rt.alloc : memref<2x2x4x4xf32>
  rt.kernel "xl.fused"(%qk, %scale, %mask) -> (%s) {steps = [{kernel = "popxl.mul", args = array<i64: 0, 1>}, {kernel = "popxl.add", args = array<i64: -1, 2>}]} : (memref<2x2x4x4xf32>, memref<f32>, memref<4x4xf32>) -> memref<2x2x4x4xf32>
  %p = rt.alloc : memref<2x2x4x4xf32>
  rt.kernel "popxl.softmax"(%s) -> (%p) {axis = -1 : i64} : (memref<2x2x4x4xf32>) -> memref<2x2x4x4xf32>
  %dy = rt.alloc : memref<2x2x4x4xf32>
  rt.h2d "dy", %dy : memref<2x2x4x4xf32>
  %g = rt.alloc : memref<2x2x4x4xf32>
  rt.kernel "popxl.softmax_grad"(%dy, %p) -> (%g) {axis = -1 : i64} : (memref<2x2x4x4xf32>, memref<2x2x4x4xf32>) -> memref<2x2x4x4xf32>
  %dx = rt.alloc : memref<2x2x4x4xf32>
  rt.kernel "popxl.mul"(%g, %scale) -> (%dx) : (memref<2x2x4x4xf32>, memref<f32>) -> memref<2x2x4x4xf32>
  %t = rt.alloc : memref<2x2x4x4xf32>
  rt.kernel "popxl.mul"(%qk, %scale) -> (%t) : (memref<2x2x4x4xf32>, memref<f32>) -> memref<2x2x4x4xf32>
  %q = rt.alloc : memref<2x2x4x4xf32>
  rt.kernel "popxl.softmax"(%t) -> (%q) {axis = 3 : i64} : (memref<2x2x4x4xf32>) -> memref<2x2x4x4xf32>
  rt.d2h "p", %p : memref<2x2x4x4xf32>
  rt.d2h "dx", %dx : memref<2x2x4x4xf32>
  rt.d2h "t", %t : memref<2x2x4x4xf32>
  rt.d2h "q", %q : memref<2x2x4x4xf32>
}

// CHECK:      %mask = rt.const
// CHECK-NEXT: %p = rt.alloc : memref<2x2x4x4xf32>
// CHECK-NEXT: rt.kernel "xl.softmax"(%qk, %scale, %mask) -> (%p) {axis = -1 : i64, steps = [{kernel = "popxl.mul", args = array<i64: 0, 1>}, {kernel = "popxl.add", args = array<i64: -1, 2>}]} : (memref<2x2x4x4xf32>, memref<f32>, memref<4x4xf32>) -> memref<2x2x4x4xf32>
// CHECK-NEXT: %dy = rt.alloc
// CHECK-NEXT: rt.h2d "dy", %dy
// CHECK-NEXT: %dx = rt.alloc : memref<2x2x4x4xf32>
// CHECK-NEXT: rt.kernel "xl.softmax_grad"(%dy, %p, %scale) -> (%dx) {axis = -1 : i64, steps = [{kernel = "popxl.mul", args = array<i64: -1, 2>}]} : (memref<2x2x4x4xf32>, memref<2x2x4x4xf32>, memref<f32>) -> memref<2x2x4x4xf32>
// CHECK-NEXT: %t = rt.alloc
// CHECK-NEXT: rt.kernel "popxl.mul"(%qk, %scale) -> (%t)
// CHECK-NEXT: %q = rt.alloc
// CHECK-NEXT: rt.kernel "popxl.softmax"(%t) -> (%q) {axis = 3 : i64}
