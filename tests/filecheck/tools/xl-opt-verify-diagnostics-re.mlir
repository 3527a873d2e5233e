// RUN: xl-opt %s --split-input-file --verify-diagnostics
// RUN: not xl-opt %S/Inputs/verify-diagnostics-re-mismatch.mlir.in --split-input-file --verify-diagnostics -o %t 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not xl-opt %S/Inputs/verify-diagnostics-unknown.mlir.in --verify-diagnostics -o %t 2>&1 | filecheck %s --check-prefix=UNKNOWN

// The `-re` annotations (MLIR's syntax): literal text, with regular expressions inside
// `{{...}}`; the whole is searched for in the message.

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  // expected-error-re @+1 {{stream @{{[a-z]+}} carries ({{[0-9]{1}}},) float32 but the load produces (3,)}}
  %x = graph.host_load @x : tensor<3xf32>
}

// -----

// Literal parts are literal: `(`, `.` and `*` match only themselves; anchors go in `{{^}}`.
graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<3xf32> // expected-error-re {{(2,) float32 but the load{{.*}}(3,) float32}}
}

// -----

graph.main {
  %x = "graph.bogus"() : () -> tensor<2xf32> // expected-error-re {{{{^}}Operation graph.{{b[aeiou]gus}} is not registered{{$}}}}
}

// The mismatches (Inputs/verify-diagnostics-re-mismatch.mlir.in): a -re annotation is
// matched as a pattern, and an unmatched one is reported located (not skipped).

// BAD:      re-mismatch.mlir.in:6:3: error: unexpected error: graph.host_load: stream @x carries (2,) float32 but the load produces (3,) float32
// BAD-NEXT: re-mismatch.mlir.in:5:6: error: expected error matching "stream @x carries ({{.*}},)" was not produced
// BAD-NEXT: re-mismatch.mlir.in:14:3: error: unexpected error: graph.host_load: stream @x carries
// BAD-NEXT: re-mismatch.mlir.in:13:6: error: expected error matching "float32 but {{.*}} load produces (2" was not produced
// BAD-NEXT: re-mismatch.mlir.in:20:8: error: unexpected error: Operation graph.bogus is not registered
// BAD-NEXT: re-mismatch.mlir.in:20:49: error: expected warning matching "Operation graph.{{.*}} is not registered" was not produced
// BAD-NEXT: re-mismatch.mlir.in:21:6: error: expected note matching "{{.*}}" was not produced
// BAD-NOT:  error

// Annotations the verifier does not understand are refused where they are written
// (Inputs/verify-diagnostics-unknown.mlir.in), never skipped.

// UNKNOWN:      unknown.mlir.in:4:6: error: unknown annotation 'expected-errors' (known: expected-error, expected-warning, expected-note and expected-remark, each also with -re for a regular expression)
// UNKNOWN-NEXT: unknown.mlir.in:5:6: error: unknown annotation 'expected-error-regex'
// UNKNOWN-NEXT: unknown.mlir.in:6:6: error: unknown annotation 'expected-fatal'
// UNKNOWN-NEXT: unknown.mlir.in:7:6: error: malformed expected-error annotation: expected '@above', '@below', '@unknown', '@+N' or '@-N', then
// UNKNOWN-NEXT: unknown.mlir.in:8:6: error: malformed expected-error-re annotation: a '{{[{][{]}}' regular expression without its closing
// UNKNOWN-NEXT: unknown.mlir.in:9:6: error: expected-error-re: invalid regular expression: missing ), unterminated subpattern
// UNKNOWN-NEXT: unknown.mlir.in:10:6: error: malformed expected-warning-re annotation: expected '@above'
// UNKNOWN-NEXT: unknown.mlir.in:11:3: error: unexpected error: graph.host_load: stream @x carries (2,) float32 but the load produces (3,) float32
// UNKNOWN-NOT:  error
