// RUN: not xl-opt %s -p 'xl-test-fail{kind=value message="bad graph"}' 2>&1 | filecheck %s --check-prefix=VALUE
// RUN: not xl-opt %s -p 'cse,xl-test-fail{kind=internal message="oops"}' 2>&1 | filecheck %s --check-prefix=INTERNAL
// RUN: not xl-opt %s -p 'xl-test-fail{kind=verify},dce' 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: not xl-opt %s -p 'xl-test-fail{kind=diagnostic message="cannot do it"}' 2>&1 | filecheck %s --check-prefix=DIAG
// RUN: xl-opt %s -p 'xl-test-fail{kind=diagnostic message="cannot do it"}' --verify-diagnostics
// RUN: not xl-opt %s -p 'xl-test-fail{kind=diagnostic message="other"}' --verify-diagnostics 2>&1 | filecheck %s --check-prefix=DIAG-BAD

// Exceptions raised inside a pass are reported with their notes and the pass name, and
// xl-opt exits with status 1 without a traceback. `xl-test-fail` fails on purpose.

// A pass failure has no location: `@unknown` announces it.
// expected-error @unknown {{cannot do it}}
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
}

// VALUE:      xl-opt: error: bad graph
// VALUE-NEXT: note: raised by xl-test-fail
// VALUE-NEXT: xl-opt: note: in pass 'xl-test-fail'
// VALUE-NOT:  Traceback

// INTERNAL:      xl-opt: error: RuntimeError: oops
// INTERNAL-NEXT: xl-opt: note: in pass 'xl-test-fail'
// INTERNAL-NOT:  Traceback

// VERIFY:     xl-opt: error: graph.main: 'num_host_transfers' must be a positive integer
// VERIFY:     xl-opt: note: while verifying the IR after pass 'xl-test-fail'
// VERIFY-NOT: Traceback

// DIAG:      xl-opt: error: cannot do it
// DIAG-NEXT: xl-opt: note: in pass 'xl-test-fail'

// DIAG-BAD:      xl-opt-pass-error.mlir: error: unexpected error: other
// DIAG-BAD-NEXT: xl-opt-pass-error.mlir:12:4: error: expected error "cannot do it" was not produced (at an unknown location)
