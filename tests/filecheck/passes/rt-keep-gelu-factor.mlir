// RUN: xl-opt %s -p rt-keep-gelu-factor | filecheck %s

// %x's gelu and its gradient: the gelu also writes %t (a new buffer before it), the
// gradient reads it. %z is written between its gelu and the gradient: both stay. %i is
// updated in place by its gelu: both stay. %h is float16: rewritten too. %e's geluerf keeps
// its factor in float64.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %x = rt.alloc : memref<2x3xf32>
  rt.h2d "x", %x : memref<2x3xf32>
  %dy = rt.alloc : memref<2x3xf32>
  rt.h2d "dy", %dy : memref<2x3xf32>
  %y = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.gelu"(%x) -> (%y) : (memref<2x3xf32>) -> memref<2x3xf32>
  %dx = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.gelu_grad"(%dy, %x) -> (%dx) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  %z = rt.alloc : memref<2x3xf32>
  rt.h2d "z", %z : memref<2x3xf32>
  %yz = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.gelu"(%z) -> (%yz) : (memref<2x3xf32>) -> memref<2x3xf32>
  rt.kernel "popxl.neg"(%yz) -> (%z) : (memref<2x3xf32>) -> memref<2x3xf32>
  %dz = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.gelu_grad"(%dy, %z) -> (%dz) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  %i = rt.alloc : memref<2x3xf32>
  rt.h2d "i", %i : memref<2x3xf32>
  rt.kernel "popxl.gelu"(%i) -> (%i) : (memref<2x3xf32>) -> memref<2x3xf32>
  %di = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.gelu_grad"(%dy, %i) -> (%di) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  %h = rt.alloc : memref<2x3xf16>
  rt.h2d "h", %h : memref<2x3xf16>
  %yh = rt.alloc : memref<2x3xf16>
  rt.kernel "popxl.gelu"(%h) -> (%yh) : (memref<2x3xf16>) -> memref<2x3xf16>
  %dh = rt.alloc : memref<2x3xf16>
  rt.kernel "popxl.gelu_grad"(%yh, %h) -> (%dh) : (memref<2x3xf16>, memref<2x3xf16>) -> memref<2x3xf16>
  %e = rt.alloc : memref<2x3xf32>
  rt.h2d "e", %e : memref<2x3xf32>
  %ye = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.geluerf"(%e) -> (%ye) : (memref<2x3xf32>) -> memref<2x3xf32>
  %de = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.geluerf_grad"(%dy, %e) -> (%de) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  rt.d2h "y", %y : memref<2x3xf32>
  rt.d2h "de", %de : memref<2x3xf32>
  rt.d2h "dx", %dx : memref<2x3xf32>
  rt.d2h "dz", %dz : memref<2x3xf32>
  rt.d2h "di", %di : memref<2x3xf32>
  rt.d2h "dh", %dh : memref<2x3xf16>
}

// CHECK:      %y = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: %{{.*}} = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.kernel "xl.gelu_tanh"(%x) -> (%y, %[[T:.*]]) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
// CHECK-NEXT: %dx = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.kernel "xl.gelu_grad_tanh"(%dy, %x, %[[T]]) -> (%dx) : (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
// CHECK:      rt.kernel "popxl.gelu"(%z) -> (%yz)
// CHECK:      rt.kernel "popxl.gelu_grad"(%dy, %z) -> (%dz)
// CHECK:      rt.kernel "popxl.gelu"(%i) -> (%i)
// CHECK:      rt.kernel "popxl.gelu_grad"(%dy, %i) -> (%di)
// CHECK:      %yh = rt.alloc : memref<2x3xf16>
// CHECK-NEXT: %{{.*}} = rt.alloc : memref<2x3xf16>
// CHECK-NEXT: rt.kernel "xl.gelu_tanh"(%h) -> (%yh, %[[TH:.*]]) : (memref<2x3xf16>) -> (memref<2x3xf16>, memref<2x3xf16>)
// CHECK:      rt.kernel "xl.gelu_grad_tanh"(%yh, %h, %[[TH]]) -> (%dh)
// CHECK:      %ye = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: %{{.*}} = rt.alloc : memref<2x3xf64>
// CHECK-NEXT: rt.kernel "xl.geluerf_keep"(%e) -> (%ye, %[[HE:.*]]) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf64>)
// CHECK-NEXT: %de = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.kernel "xl.geluerf_grad_kept"(%dy, %e, %[[HE]]) -> (%de) : (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf64>) -> memref<2x3xf32>
// CHECK-NOT:  popxl.gelu
