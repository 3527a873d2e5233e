// RUN: xl-opt %s --split-input-file -p rt-keep-gelu-factor | filecheck %s

// A gelu in one function (@fwd, its input %x a destination), its gradient in another (@bwd,
// x an input): @fwd gets a destination for the factor, each call of it a new buffer; @bwd
// an input, each call of it the buffer of the @fwd call that wrote its x (%x2 -> %1, %x1 -> %0).
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @fwd(%a: memref<2x3xf32>) -> (%x: memref<2x3xf32>, %y: memref<2x3xf32>) {
    rt.kernel "popxl.neg"(%a) -> (%x) : (memref<2x3xf32>) -> memref<2x3xf32>
    rt.kernel "popxl.gelu"(%x) -> (%y) : (memref<2x3xf32>) -> memref<2x3xf32>
  }
  rt.func @bwd(%dy: memref<2x3xf32>, %x: memref<2x3xf32>) -> (%dx: memref<2x3xf32>) {
    rt.kernel "popxl.gelu_grad"(%dy, %x) -> (%dx) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  }
  %in = rt.alloc : memref<2x3xf32>
  rt.h2d "in", %in : memref<2x3xf32>
  %x1 = rt.alloc : memref<2x3xf32>
  %y1 = rt.alloc : memref<2x3xf32>
  rt.call @fwd(%in) -> (%x1, %y1) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
  %x2 = rt.alloc : memref<2x3xf32>
  %y2 = rt.alloc : memref<2x3xf32>
  rt.call @fwd(%y1) -> (%x2, %y2) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
  %d2 = rt.alloc : memref<2x3xf32>
  rt.call @bwd(%y2, %x2) -> (%d2) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  %d1 = rt.alloc : memref<2x3xf32>
  rt.call @bwd(%d2, %x1) -> (%d1) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  rt.d2h "d1", %d1 : memref<2x3xf32>
}

// CHECK:      rt.func @fwd(%a: memref<2x3xf32>) -> (%x: memref<2x3xf32>, %y: memref<2x3xf32>, %[[T:.*]]: memref<2x3xf32>) {
// CHECK-NEXT:   rt.kernel "popxl.neg"(%a) -> (%x)
// CHECK-NEXT:   rt.kernel "xl.gelu_tanh"(%x) -> (%y, %[[T]]) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
// CHECK:      rt.func @bwd(%dy: memref<2x3xf32>, %x: memref<2x3xf32>, %[[TB:.*]]: memref<2x3xf32>) -> (%dx: memref<2x3xf32>) {
// CHECK-NEXT:   rt.kernel "xl.gelu_grad_tanh"(%dy, %x, %[[TB]]) -> (%dx)
// CHECK:      %[[T1:[0-9]+]] = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.call @fwd(%in) -> (%x1, %y1, %[[T1]])
// CHECK:      %[[T2:[0-9]+]] = rt.alloc : memref<2x3xf32>
// CHECK-NEXT: rt.call @fwd(%y1) -> (%x2, %y2, %[[T2]])
// CHECK:      rt.call @bwd(%y2, %x2, %[[T2]]) -> (%d2)
// CHECK:      rt.call @bwd(%d2, %x1, %[[T1]]) -> (%d1)

// -----

// %x1 is written between the @fwd call that left it and the @bwd call reading it: the
// gradient of @bwd keeps computing its factor, and @fwd is unchanged.
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @fwd(%a: memref<2x3xf32>) -> (%x: memref<2x3xf32>, %y: memref<2x3xf32>) {
    rt.kernel "popxl.neg"(%a) -> (%x) : (memref<2x3xf32>) -> memref<2x3xf32>
    rt.kernel "popxl.gelu"(%x) -> (%y) : (memref<2x3xf32>) -> memref<2x3xf32>
  }
  rt.func @bwd(%dy: memref<2x3xf32>, %x: memref<2x3xf32>) -> (%dx: memref<2x3xf32>) {
    rt.kernel "popxl.gelu_grad"(%dy, %x) -> (%dx) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  }
  %in = rt.alloc : memref<2x3xf32>
  rt.h2d "in", %in : memref<2x3xf32>
  %x1 = rt.alloc : memref<2x3xf32>
  %y1 = rt.alloc : memref<2x3xf32>
  rt.call @fwd(%in) -> (%x1, %y1) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
  %x2 = rt.alloc : memref<2x3xf32>
  %y2 = rt.alloc : memref<2x3xf32>
  rt.kernel "popxl.neg"(%in) -> (%x1) : (memref<2x3xf32>) -> memref<2x3xf32>
  rt.call @fwd(%y1) -> (%x2, %y2) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
  %d2 = rt.alloc : memref<2x3xf32>
  rt.call @bwd(%y2, %x2) -> (%d2) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  %d1 = rt.alloc : memref<2x3xf32>
  rt.call @bwd(%d2, %x1) -> (%d1) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
  rt.d2h "d1", %d1 : memref<2x3xf32>
}

// CHECK:      rt.func @fwd(%a: memref<2x3xf32>) -> (%x: memref<2x3xf32>, %y: memref<2x3xf32>) {
// CHECK:        rt.kernel "popxl.gelu"(%x) -> (%y)
// CHECK:      rt.func @bwd(%dy: memref<2x3xf32>, %x: memref<2x3xf32>) -> (%dx: memref<2x3xf32>) {
// CHECK-NEXT:   rt.kernel "popxl.gelu_grad"(%dy, %x) -> (%dx)
// CHECK-NOT:  xl.gelu
