// RUN: not xl-opt %s 2>&1 | filecheck %s
// RUN: not xl-opt %s -p cse 2>&1 | filecheck %s
// RUN: xl-opt %s --verify-diagnostics

// A verifier error without --verify-diagnostics: file:line:col of the failing op, the
// message, the source line with a caret, exit status 1 and no traceback (never the whole
// module). Verification runs before any pass.

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  // expected-error @below {{graph.host_load: stream @x carries (2,) float32 but the load produces (3,) float32}}
  %x = graph.host_load @x : tensor<3xf32>
}

// CHECK:      xl-opt-verify-error.mlir:12:3: error: graph.host_load: stream @x carries (2,) float32 but the load produces (3,) float32
// CHECK-NEXT:   %x = graph.host_load @x : tensor<3xf32>
// CHECK-NEXT:   ^
// CHECK-NEXT: xl-opt: note: while verifying the input
// CHECK-NOT:  graph.main
// CHECK-NOT:  Traceback

// With --verify-diagnostics, the error announced by the annotation makes xl-opt succeed.
