// RUN: not xl-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: not xl-run %s 2>&1 | filecheck %s --check-prefix=EXEC
// RUN: xl-opt %s --split-input-file --verify-diagnostics -o %t

// A value used but never defined is reported at its first use (line:col of the `%name`),
// not at the end of the input, by xl-opt and xl-run alike.

graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{use of undefined value %z}}
  %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %y : tensor<2xf32>
}

// CHECK:      undefined-value.mlir:12:22: error: use of undefined value %z
// CHECK-NEXT:   %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:                      ^^

// EXEC:      undefined-value.mlir:12:22: error: use of undefined value %z
// EXEC-NEXT:   %y = popxl.add %x, %z

// -----

// Several undefined values: the first used is located, the others named.
graph.graph @g(%a: tensor<2xf32>) -> tensor<2xf32> {
  %b = popxl.neg %a : (tensor<2xf32>) -> tensor<2xf32>
  // expected-error @+1 {{use of undefined value %u (also undefined: %v)}}
  %c = popxl.sub %u, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %d = popxl.sub %c, %v : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %d : tensor<2xf32>
}

// CHECK:      undefined-value.mlir:29:18: error: use of undefined value %u (also undefined: %v)
// CHECK-NEXT:   %c = popxl.sub %u, %b
// CHECK-NEXT:                  ^^
