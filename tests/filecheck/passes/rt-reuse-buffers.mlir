// RUN: xl-opt %s -p rt-reuse-buffers | filecheck %s

// %a dies at the gelu: the gelu writes into it (in place, %b disappears). %c needs a
// buffer of its own (%a is still read by its matmul); %d takes %a's storage, dead by
// then. %x (read at the end) and the state are never reused.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %w = rt.state "w" : memref<4x4xf32>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %a = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.matmul"(%x, %w) -> (%a) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
  %b = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.gelu"(%a) -> (%b) : (memref<2x4xf32>) -> memref<2x4xf32>
  %c = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.matmul"(%b, %w) -> (%c) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
  %d = rt.alloc : memref<2x4xf32>
  rt.kernel "popxl.matmul"(%c, %w) -> (%d) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
  rt.d2h "d", %d : memref<2x4xf32>
  rt.d2h "x", %x : memref<2x4xf32>
}

// CHECK:      %w = rt.state "w" : memref<4x4xf32>
// CHECK-NEXT: %x = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.h2d "x", %x : memref<2x4xf32>
// CHECK-NEXT: %a = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.kernel "popxl.matmul"(%x, %w) -> (%a)
// CHECK-NEXT: rt.kernel "popxl.gelu"(%a) -> (%a)
// CHECK-NEXT: %c = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.kernel "popxl.matmul"(%a, %w) -> (%c)
// CHECK-NEXT: rt.kernel "popxl.matmul"(%c, %w) -> (%a)
// CHECK-NEXT: rt.d2h "d", %a : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "x", %x : memref<2x4xf32>
