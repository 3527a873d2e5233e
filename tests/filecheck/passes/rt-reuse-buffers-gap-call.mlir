// RUN: xl-opt %s -p rt-reuse-buffers | filecheck %s

// The buffers a call holds count in the program's peak: @f's %t (256 bytes) is held at
// the call, so the most the program holds at once is 288 bytes there (%t, %i, %o), more
// than %p and %q (256 bytes). %b taking %a's storage would hold it over the call (320
// bytes): %b keeps a buffer of its own.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @f(%x: memref<1x4xf32>, %w: memref<16x1xf32>, %v: memref<1x16xf32>) -> (%y: memref<1x4xf32>) {
    %t = rt.alloc : memref<16x4xf32>
    rt.kernel "popxl.matmul"(%w, %x) -> (%t) : (memref<16x1xf32>, memref<1x4xf32>) -> memref<16x4xf32>
    rt.kernel "popxl.matmul"(%v, %t) -> (%y) : (memref<1x16xf32>, memref<16x4xf32>) -> memref<1x4xf32>
  }
  %w = rt.state "w" : memref<16x1xf32>
  %v = rt.state "v" : memref<1x16xf32>
  %p = rt.alloc : memref<8x4xf32>
  rt.h2d "p", %p : memref<8x4xf32>
  %q = rt.alloc : memref<8x4xf32>
  rt.h2d "q", %q : memref<8x4xf32>
  rt.d2h "p", %p : memref<8x4xf32>
  rt.d2h "q", %q : memref<8x4xf32>
  %a = rt.alloc : memref<2x4xf32>
  rt.h2d "a", %a : memref<2x4xf32>
  rt.d2h "a", %a : memref<2x4xf32>
  %i = rt.alloc : memref<1x4xf32>
  rt.h2d "i", %i : memref<1x4xf32>
  %o = rt.alloc : memref<1x4xf32>
  rt.call @f(%i, %w, %v) -> (%o) : (memref<1x4xf32>, memref<16x1xf32>, memref<1x16xf32>) -> memref<1x4xf32>
  rt.d2h "o", %o : memref<1x4xf32>
  %b = rt.alloc : memref<2x4xf32>
  rt.h2d "b", %b : memref<2x4xf32>
  rt.d2h "b", %b : memref<2x4xf32>
}

// CHECK:      %a = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.h2d "a", %a : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "a", %a : memref<2x4xf32>
// CHECK:      rt.d2h "o", %o : memref<1x4xf32>
// CHECK-NEXT: %b = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.h2d "b", %b : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "b", %b : memref<2x4xf32>
