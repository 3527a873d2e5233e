// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// A whole lowered program: state, buffers, streams, kernels, copies, loops, branches.

rt.program attributes {num_host_transfers = 2 : i64, replication_factor = 1 : i64} {
  %w = rt.state "weight" : memref<4x3xf32>
  %n = rt.state "step" = dense<0> : tensor<i32> : memref<i32>
  %k = rt.const dense<1.0> : tensor<2x3xf32> : memref<2x3xf32>
  %x = rt.alloc : memref<2x4xf32>
  %y = rt.alloc : memref<2x3xf32>
  %c = rt.alloc : memref<i1>
  rt.h2d "x", %x : memref<2x4xf32>
  rt.kernel "popxl.matmul" (%x, %w) -> (%y) : (memref<2x4xf32>, memref<4x3xf32>) -> (memref<2x3xf32>)
  rt.kernel "popxl.softmax" (%y) -> (%y) {axis = 1 : i64} : (memref<2x3xf32>) -> (memref<2x3xf32>)
  rt.kernel "popxl.scaled_add_" (%y, %k) -> () {a = 1.0 : f64, b = 0.5 : f64} : (memref<2x3xf32>, memref<2x3xf32>) -> ()
  rt.copy %y, %y : memref<2x3xf32>, memref<2x3xf32>
  rt.loop 3 {
    rt.kernel "popxl.add" (%y, %k) -> (%y) : (memref<2x3xf32>, memref<2x3xf32>) -> (memref<2x3xf32>)
  }
  rt.if %c : memref<i1> {
    rt.copy %k, %y : memref<2x3xf32>, memref<2x3xf32>
  } else {
  }
  rt.d2h "y", %y : memref<2x3xf32>
}

// CHECK:      builtin.module {
// CHECK-NEXT:   rt.program attributes {num_host_transfers = 2 : i64, replication_factor = 1 : i64} {
// CHECK-NEXT:     %w = rt.state "weight" : memref<4x3xf32>
// CHECK-NEXT:     %n = rt.state "step" = dense<0> : tensor<i32> : memref<i32>
// CHECK-NEXT:     %k = rt.const dense<1.000000e+00> : tensor<2x3xf32> : memref<2x3xf32>
// CHECK-NEXT:     %x = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:     %y = rt.alloc : memref<2x3xf32>
// CHECK-NEXT:     %c = rt.alloc : memref<i1>
// CHECK-NEXT:     rt.h2d "x", %x : memref<2x4xf32>
// CHECK-NEXT:     rt.kernel "popxl.matmul"(%x, %w) -> (%y) : (memref<2x4xf32>, memref<4x3xf32>) -> memref<2x3xf32>
// CHECK-NEXT:     rt.kernel "popxl.softmax"(%y) -> (%y) {axis = 1 : i64} : (memref<2x3xf32>) -> memref<2x3xf32>
// CHECK-NEXT:     rt.kernel "popxl.scaled_add_"(%y, %k) -> () {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (memref<2x3xf32>, memref<2x3xf32>) -> ()
// CHECK-NEXT:     rt.copy %y, %y : memref<2x3xf32>, memref<2x3xf32>
// CHECK-NEXT:     rt.loop 3 {
// CHECK-NEXT:       rt.kernel "popxl.add"(%y, %k) -> (%y) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
// CHECK-NEXT:     }
// CHECK-NEXT:     rt.if %c : memref<i1> {
// CHECK-NEXT:       rt.copy %k, %y : memref<2x3xf32>, memref<2x3xf32>
// CHECK-NEXT:     } else {
// CHECK-NEXT:     }
// CHECK-NEXT:     rt.d2h "y", %y : memref<2x3xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }

// CHECK-GENERIC:      "builtin.module"() ({
// CHECK-GENERIC-NEXT:   "rt.program"() ({
// CHECK-GENERIC-NEXT:     %w = "rt.state"() <{slot = "weight"}> : () -> memref<4x3xf32>
// CHECK-GENERIC-NEXT:     %n = "rt.state"() <{slot = "step", init = dense<0> : tensor<i32>}> : () -> memref<i32>
// CHECK-GENERIC-NEXT:     %k = "rt.const"() <{value = dense<1.000000e+00> : tensor<2x3xf32>}> : () -> memref<2x3xf32>
// CHECK-GENERIC-NEXT:     %x = "rt.alloc"() : () -> memref<2x4xf32>
// CHECK-GENERIC-NEXT:     %y = "rt.alloc"() : () -> memref<2x3xf32>
// CHECK-GENERIC-NEXT:     %c = "rt.alloc"() : () -> memref<i1>
// CHECK-GENERIC-NEXT:     "rt.h2d"(%x) <{stream = "x"}> : (memref<2x4xf32>) -> ()
// CHECK-GENERIC-NEXT:     "rt.kernel"(%x, %w, %y) <{kernel = "popxl.matmul", operandSegmentSizes = array<i32: 2, 1>}> : (memref<2x4xf32>, memref<4x3xf32>, memref<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:     "rt.kernel"(%y, %y) <{kernel = "popxl.softmax", operandSegmentSizes = array<i32: 1, 1>}> {axis = 1 : i64} : (memref<2x3xf32>, memref<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:     "rt.kernel"(%y, %k) <{kernel = "popxl.scaled_add_", operandSegmentSizes = array<i32: 2, 0>}> {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (memref<2x3xf32>, memref<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:     "rt.copy"(%y, %y) : (memref<2x3xf32>, memref<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:     "rt.loop"() <{count = 3 : i64}> ({
// CHECK-GENERIC-NEXT:       "rt.kernel"(%y, %k, %y) <{kernel = "popxl.add", operandSegmentSizes = array<i32: 2, 1>}> : (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:     }) : () -> ()
// CHECK-GENERIC-NEXT:     "rt.if"(%c) ({
// CHECK-GENERIC-NEXT:       "rt.copy"(%k, %y) : (memref<2x3xf32>, memref<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:     }, {
// CHECK-GENERIC-NEXT:     ^bb0:
// CHECK-GENERIC-NEXT:     }) : (memref<i1>) -> ()
// CHECK-GENERIC-NEXT:     "rt.d2h"(%y) <{stream = "y"}> : (memref<2x3xf32>) -> ()
// CHECK-GENERIC-NEXT:   }) {num_host_transfers = 2 : i64, replication_factor = 1 : i64} : () -> ()
// CHECK-GENERIC-NEXT: }) : () -> ()

// -----

// Empty program, nested loops, a zero-trip loop, attributes on loops and branches.

rt.program {
}
rt.program attributes {tag = "nested"} {
  %c = rt.alloc : memref<i1>
  rt.loop 2 attributes {stage = 0 : i64} {
    rt.loop 0 {
    }
    rt.if %c : memref<i1> {
    } else {
      rt.loop 4 {
      }
    } {note = "branch"}
  }
}

// CHECK:      builtin.module {
// CHECK-NEXT:   rt.program {
// CHECK-NEXT:   }
// CHECK-NEXT:   rt.program attributes {tag = "nested"} {
// CHECK-NEXT:     %c = rt.alloc : memref<i1>
// CHECK-NEXT:     rt.loop 2 attributes {stage = 0 : i64} {
// CHECK-NEXT:       rt.loop 0 {
// CHECK-NEXT:       }
// CHECK-NEXT:       rt.if %c : memref<i1> {
// CHECK-NEXT:       } else {
// CHECK-NEXT:         rt.loop 4 {
// CHECK-NEXT:         }
// CHECK-NEXT:       } {note = "branch"}
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT: }

// CHECK-GENERIC:      "rt.loop"() <{count = 2 : i64}> ({
// CHECK-GENERIC-NEXT:   "rt.loop"() <{count = 0 : i64}> ({
// CHECK-GENERIC-NEXT:   ^bb0:
// CHECK-GENERIC-NEXT:   }) : () -> ()
// CHECK-GENERIC:      }) {stage = 0 : i64} : () -> ()
