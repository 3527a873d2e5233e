// RUN: xl-opt %s -p rt-fuse-elementwise | filecheck %s

// add -> gelu -> mul: each intermediate has one reader, so the chain is one kernel.
// %h is also stored, so the mul that reads it starts a new chain with the exp.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %b = rt.state "b" : memref<4xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %z = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.add"(%x, %b) -> (%z) : (memref<2x4xf32>, memref<4xf32>) -> memref<2x4xf32>
  %h = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.gelu"(%z) -> (%h) : (memref<2x4xf32>) -> memref<2x4xf32>
  %m = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.mul"(%h, %h) -> (%m) : (memref<2x4xf32>, memref<2x4xf32>) -> memref<2x4xf32>
  %e = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.exp"(%m) -> (%e) : (memref<2x4xf32>) -> memref<2x4xf32>
  rt.d2h "h", %h : memref<2x4xf32>
  rt.d2h "e", %e : memref<2x4xf32>
}

// CHECK:      %x = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.h2d "x", %x : memref<2x4xf32>
// CHECK-NEXT: %h = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.kernel "xl.fused"(%x, %b) -> (%h) {steps = [{kernel = "popxl.add", args = array<i64: 0, 1>}, {kernel = "popxl.gelu", args = array<i64: -1>}]}
// CHECK-NEXT: %e = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.kernel "xl.fused"(%h) -> (%e) {steps = [{kernel = "popxl.mul", args = array<i64: 0, 0>}, {kernel = "popxl.exp", args = array<i64: -1>}]}
// CHECK-NEXT: rt.d2h "h", %h : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "e", %e : memref<2x4xf32>
