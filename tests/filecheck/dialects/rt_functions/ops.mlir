// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Functions and calls: inputs, then destinations; a by-reference input written in place;
// a function calling another one; an empty function.

rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @layer(%x: memref<2x4xf32>, %w: memref<4x4xf32>) -> (%y: memref<2x4xf32>) {
    %t = rt.alloc : memref<2x4xf32>
    rt.kernel "popxl.matmul" (%x, %w) -> (%t) : (memref<2x4xf32>, memref<4x4xf32>) -> (memref<2x4xf32>)
    rt.kernel "popxl.gelu" (%t) -> (%y) : (memref<2x4xf32>) -> (memref<2x4xf32>)
  }
  rt.func @update(%w: memref<4x4xf32>, %g: memref<4x4xf32>) -> () {
    rt.kernel "popxl.scaled_add_" (%w, %g) -> (%w) {a = 1.0 : f64, b = -0.1 : f64} : (memref<4x4xf32>, memref<4x4xf32>) -> (memref<4x4xf32>)
  }
  rt.func @twice(%x: memref<2x4xf32>, %w: memref<4x4xf32>) -> (%z: memref<2x4xf32>) {
    %y = rt.alloc : memref<2x4xf32>
    rt.call @layer(%x, %w) -> (%y) : (memref<2x4xf32>, memref<4x4xf32>) -> (memref<2x4xf32>)
    rt.call @layer(%y, %w) -> (%z) : (memref<2x4xf32>, memref<4x4xf32>) -> (memref<2x4xf32>)
  }
  rt.func @nothing() -> () {
  }
  %w = rt.state "w" : memref<4x4xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %z = rt.alloc : memref<2x4xf32>
  rt.call @twice(%x, %w) -> (%z) : (memref<2x4xf32>, memref<4x4xf32>) -> (memref<2x4xf32>)
  rt.call @update(%w, %w) -> () : (memref<4x4xf32>, memref<4x4xf32>) -> ()
  rt.call @nothing() -> () : () -> ()
  rt.d2h "z", %z : memref<2x4xf32>
}

// CHECK:      rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
// CHECK-NEXT:   rt.func @layer(%x: memref<2x4xf32>, %w: memref<4x4xf32>) -> (%y: memref<2x4xf32>) {
// CHECK-NEXT:     %t = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:     rt.kernel "popxl.matmul"(%x, %w) -> (%t) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:     rt.kernel "popxl.gelu"(%t) -> (%y) : (memref<2x4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   rt.func @update(%w: memref<4x4xf32>, %g: memref<4x4xf32>) -> () {
// CHECK-NEXT:     rt.kernel "popxl.scaled_add_"(%w, %g) -> (%w) {a = 1.000000e+00 : f64, b = -1.000000e-01 : f64} : (memref<4x4xf32>, memref<4x4xf32>) -> memref<4x4xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   rt.func @twice(%x: memref<2x4xf32>, %w: memref<4x4xf32>) -> (%z: memref<2x4xf32>) {
// CHECK-NEXT:     %y = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:     rt.call @layer(%x, %w) -> (%y) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:     rt.call @layer(%y, %w) -> (%z) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   rt.func @nothing() -> () {
// CHECK-NEXT:   }
// CHECK-NEXT:   %w = rt.state "w" : memref<4x4xf32>
// CHECK-NEXT:   %x = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:   rt.h2d "x", %x : memref<2x4xf32>
// CHECK-NEXT:   %z = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:   rt.call @twice(%x, %w) -> (%z) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:   rt.call @update(%w, %w) -> () : (memref<4x4xf32>, memref<4x4xf32>) -> ()
// CHECK-NEXT:   rt.call @nothing() -> () : () -> ()
// CHECK-NEXT:   rt.d2h "z", %z : memref<2x4xf32>
// CHECK-NEXT: }

// CHECK-GENERIC:      "rt.func"() <{sym_name = "layer", num_outs = 1 : i64}> ({
// CHECK-GENERIC-NEXT: ^bb0(%x: memref<2x4xf32>, %w: memref<4x4xf32>, %y: memref<2x4xf32>):
// CHECK-GENERIC:      "rt.func"() <{sym_name = "update", num_outs = 0 : i64}> ({
// CHECK-GENERIC:      "rt.call"(%x, %w, %y) <{callee = @layer, operandSegmentSizes = array<i32: 2, 1>}> : (memref<2x4xf32>, memref<4x4xf32>, memref<2x4xf32>) -> ()
// CHECK-GENERIC:      "rt.call"(%x, %w, %z) <{callee = @twice, operandSegmentSizes = array<i32: 2, 1>}> : (memref<2x4xf32>, memref<4x4xf32>, memref<2x4xf32>) -> ()
