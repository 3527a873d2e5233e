// RUN: not xl-opt %s 2>&1 | filecheck %s
// RUN: xl-opt %s --allow-unregistered-dialect | filecheck %s --check-prefix=ALLOW

// An op that no dialect defines is a parse error at the op.

graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %y = "popxl.frobnicate"(%x) : (tensor<2xf32>) -> tensor<2xf32>
}

// CHECK:      xl-opt-unknown-op.mlir:8:8: error: Operation popxl.frobnicate is not registered
// CHECK-NEXT:   %y = "popxl.frobnicate"(%x) : (tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT: {{^ +\^+$}}
// CHECK-NOT:  Traceback

// ALLOW: %y = "popxl.frobnicate"(%x) : (tensor<2xf32>) -> tensor<2xf32>
