// RUN: not xl-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: printf 'graph.main {\n  %%%%w = graph.variable "w\xff" : tensor<2xf32>\n}\n' > %t.utf8.mlir
// RUN: not xl-opt %t.utf8.mlir 2>&1 | filecheck %s --check-prefix=UTF8
// RUN: python -c "print('graph.main {\n  %%w = graph.variable \"w' + 'a' * 10000)" > %t.quote.mlir
// RUN: not timeout 60 xl-opt %t.quote.mlir 2>&1 | filecheck %s --check-prefix=QUOTE
// RUN: not timeout 60 xl-run %t.quote.mlir 2>&1 | filecheck %s --check-prefix=QUOTE

// Every error is `file:line:col: error:` at the op, with the source line; never a traceback.

// A literal larger than any index (xDSL raises OverflowError).
graph.main {
  %w = graph.variable "w" = dense<1.0> : tensor<99999999999999999999xf32>
}

// CHECK:      xl-opt-located-errors.mlir:12:3: error: number too large (cannot fit 'int' into an index-sized integer)
// CHECK-NEXT:   %w = graph.variable "w" = dense<1.0> : tensor<99999999999999999999xf32>
// CHECK-NEXT:   ^

// -----

// A real literal for complex elements (xDSL fails an assertion).
graph.main {
  %w = graph.variable "w" = dense<[1.0]> : tensor<1xcomplex<f32>>
}

// CHECK:      xl-opt-located-errors.mlir:23:3: error: malformed input (internal AssertionError)

// -----

// An element type without a NumPy kernel: the op that uses it.
graph.h2d_stream @x : tensor<2xsi32>
graph.main {
  %x = graph.host_load @x : tensor<2xsi32>
  %y = popxl.add %x, %x : (tensor<2xsi32>, tensor<2xsi32>) -> tensor<2xsi32>
}

// CHECK:      xl-opt-located-errors.mlir:34:3: error: popxl.add: element type si32 has no NumPy dtype
// CHECK-NEXT:   %y = popxl.add %x, %x : (tensor<2xsi32>, tensor<2xsi32>) -> tensor<2xsi32>

// -----

// A verifier error inside a subgraph: the op, not the module.
graph.graph @g(%a: tensor<2xf32> {graph.name = "a"}) -> tensor<3xf32> {
  %b = popxl.neg %a : (tensor<2xf32>) -> tensor<3xf32>
  graph.output %b : tensor<3xf32>
}

// CHECK:      xl-opt-located-errors.mlir:44:3: error: popxl.neg:
// CHECK-NOT:  graph.graph
// CHECK-NOT:  Traceback

// UTF8:      utf8.mlir:2:25: error: invalid UTF-8 byte 0xff: the input must be UTF-8 text
// UTF8-NOT:  Traceback

// QUOTE:     quote.mlir:2:23: error: End of file reached before closing string literal.
// QUOTE-NOT: Traceback
