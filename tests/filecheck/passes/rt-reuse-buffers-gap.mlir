// RUN: xl-opt %s -p rt-reuse-buffers | filecheck %s

// Dead storage taken by a later buffer stays held over the gap between its last user and
// the new first user. %b2 takes %a's storage: only %m (16 bytes) lives in between, well
// within the peak (%p and %q, 256 bytes). %b would take it again over %p and %q, which
// would raise the peak to 288 bytes: it keeps a buffer of its own; %c, first written
// right after %b's last use, takes %b's.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %a = rt.alloc : memref<2x4xf32>
  rt.h2d "a", %a : memref<2x4xf32>
  rt.d2h "a", %a : memref<2x4xf32>
  %m = rt.alloc : memref<1x4xf32>
  rt.h2d "m", %m : memref<1x4xf32>
  rt.d2h "m", %m : memref<1x4xf32>
  %b2 = rt.alloc : memref<2x4xf32>
  rt.h2d "b2", %b2 : memref<2x4xf32>
  rt.d2h "b2", %b2 : memref<2x4xf32>
  %p = rt.alloc : memref<8x4xf32>
  rt.h2d "p", %p : memref<8x4xf32>
  %q = rt.alloc : memref<8x4xf32>
  rt.h2d "q", %q : memref<8x4xf32>
  rt.d2h "p", %p : memref<8x4xf32>
  rt.d2h "q", %q : memref<8x4xf32>
  %b = rt.alloc : memref<2x4xf32>
  rt.h2d "b", %b : memref<2x4xf32>
  rt.d2h "b", %b : memref<2x4xf32>
  %c = rt.alloc : memref<2x4xf32>
  rt.h2d "c", %c : memref<2x4xf32>
  rt.d2h "c", %c : memref<2x4xf32>
}

// CHECK:      %a = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.h2d "a", %a : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "a", %a : memref<2x4xf32>
// CHECK-NEXT: %m = rt.alloc : memref<1x4xf32>
// CHECK-NEXT: rt.h2d "m", %m : memref<1x4xf32>
// CHECK-NEXT: rt.d2h "m", %m : memref<1x4xf32>
// CHECK-NEXT: rt.h2d "b2", %a : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "b2", %a : memref<2x4xf32>
// CHECK-NEXT: %p = rt.alloc : memref<8x4xf32>
// CHECK-NEXT: rt.h2d "p", %p : memref<8x4xf32>
// CHECK-NEXT: %q = rt.alloc : memref<8x4xf32>
// CHECK-NEXT: rt.h2d "q", %q : memref<8x4xf32>
// CHECK-NEXT: rt.d2h "p", %p : memref<8x4xf32>
// CHECK-NEXT: rt.d2h "q", %q : memref<8x4xf32>
// CHECK-NEXT: %b = rt.alloc : memref<2x4xf32>
// CHECK-NEXT: rt.h2d "b", %b : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "b", %b : memref<2x4xf32>
// CHECK-NEXT: rt.h2d "c", %b : memref<2x4xf32>
// CHECK-NEXT: rt.d2h "c", %b : memref<2x4xf32>
// CHECK-NEXT: }
