// RUN: not xl-opt %s 2>&1 | filecheck %s
// RUN: not xl-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=SPLIT

// A parse error is reported as file:line:col, the message, the source line and a caret,
// with no Python traceback, and xl-opt exits with status 1.

graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %y = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %z = popxl.add %x %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
}

// CHECK:      xl-opt-parse-error.mlir:10:21: error: Expected ':'
// CHECK-NEXT:   %z = popxl.add %x %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT: {{^                    \^\^$}}
// CHECK-NOT:  Traceback

// With --split-input-file, lines are still counted from the top of the file, and the
// other chunks are processed (their output precedes the error on stderr).

// -----

graph.main {
  %u = graph.undefined : tensor<2xf32>
}

// -----

graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
}

// SPLIT:      xl-opt-parse-error.mlir:10:21: error: Expected ':'
// SPLIT:      {{^//}} -----
// SPLIT:      xl-opt-parse-error.mlir:24:8: error: Operation graph.undefined is not registered
// SPLIT-NEXT:   %u = graph.undefined : tensor<2xf32>
// SPLIT-NEXT: {{^ +\^+$}}
// SPLIT:      {{^//}} -----
// SPLIT-NEXT: builtin.module {
// SPLIT-NEXT:   graph.main {
// SPLIT-NEXT:     %x = graph.constant dense<1.000000e+00> : tensor<2xf32>
// SPLIT-NOT:  Traceback
