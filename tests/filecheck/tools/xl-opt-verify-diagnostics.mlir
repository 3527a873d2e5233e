// RUN: xl-opt %s --split-input-file --verify-diagnostics
// RUN: not xl-opt %S/Inputs/verify-diagnostics-mismatch.mlir.in --split-input-file --verify-diagnostics -o %t 2>&1 | filecheck %s --check-prefix=BAD

// --verify-diagnostics with MLIR's semantics: every diagnostic must be announced by an
// `expected-*` annotation on its line (or @+N, @-N, @above, @below, @unknown) whose text is a
// substring of the message, and every annotation must be matched by a diagnostic.

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  // expected-error @+1 {{stream @x carries (2,) float32 but the load produces (3,) float32}}
  %x = graph.host_load @x : tensor<3xf32>
}

// -----

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<3xf32>
  // expected-error @-1 {{graph.host_load: stream @x}}
}

// -----

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<3xf32>
  // expected-error @above {{the load produces (3,) float32}}
}

// -----

graph.h2d_stream @x : tensor<2xf32>
// expected-error @below {{Redefinition of symbol "x"}}
graph.h2d_stream @x : tensor<3xf32>

// -----

graph.main {
  %x = "graph.bogus"() : () -> tensor<2xf32> // expected-error {{Operation graph.bogus is not registered}}
}

// -----

// A chunk without diagnostics and without annotations passes.
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
}

// The mismatches (Inputs/verify-diagnostics-mismatch.mlir.in), each located; exit status 1.

// BAD:      mismatch.mlir.in:7:3: error: unexpected error: graph.host_load: stream @x carries (2,) float32 but the load produces (3,) float32
// BAD-NEXT: mismatch.mlir.in:6:6: error: expected error "wrong text" was not produced
// BAD-NEXT: mismatch.mlir.in:15:3: error: unexpected error: graph.host_load: stream @x carries
// BAD-NEXT: mismatch.mlir.in:22:6: error: expected error "nothing wrong here" was not produced
// BAD-NEXT: mismatch.mlir.in:31:3: error: unexpected error: graph.host_load: stream @x carries
// BAD-NEXT: mismatch.mlir.in:30:6: error: expected error "stream @x carries (2,) float32" was not produced
// BAD-NEXT: mismatch.mlir.in:39:6: error: malformed expected-error annotation
// BAD-NEXT: mismatch.mlir.in:38:8: error: unexpected error: Operation graph.bogus is not registered
// BAD-NEXT: mismatch.mlir.in:38:39: error: expected warning "Operation graph.bogus is not registered" was not produced
// BAD-NOT:  Traceback
