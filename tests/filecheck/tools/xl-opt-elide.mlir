// --elide-elementsattrs-if-larger=N (and mlir-opt's spelling): dense values with more than
// N elements print as dense_resource<__elided__>; such text is refused when parsed back.
// RUN: xl-opt %s --elide-elementsattrs-if-larger=4 | filecheck %s
// RUN: xl-opt %s --mlir-elide-elementsattrs-if-larger 4 --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: xl-opt %s --elide-elementsattrs-if-larger=4 -o %t.elided.mlir
// RUN: not xl-opt %t.elided.mlir 2>&1 | filecheck %s --check-prefix=REFUSED
// RUN: not xl-run %t.elided.mlir 2>&1 | filecheck %s --check-prefix=REFUSED
// RUN: not xl-opt %s --elide-elementsattrs-if-larger=-1 2>&1 | filecheck %s --check-prefix=BADN
// RUN: xl-opt %s -p cse --print-ir-after-all --elide-elementsattrs-if-larger=4 2>&1 >/dev/null | filecheck %s --check-prefix=DUMP

graph.main {
  %w = graph.variable "w" = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %b = graph.variable "b" = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %c = graph.constant dense<[1, 2, 3, 4, 5]> : tensor<5xi32>
}

// Six and five elements are elided, four (= N) are not.
// CHECK:      %w = graph.variable "w" = dense_resource<__elided__> : tensor<2x3xf32>
// CHECK-NEXT: %b = graph.variable "b" = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>
// CHECK-NEXT: %c = graph.constant dense_resource<__elided__> : tensor<5xi32>

// GENERIC: "graph.variable"() <{var_name = "w", init = dense_resource<__elided__> : tensor<2x3xf32>}> : () -> tensor<2x3xf32>
// GENERIC: "graph.constant"() <{value = dense_resource<__elided__> : tensor<5xi32>}> : () -> tensor<5xi32>

// REFUSED:      elided.mlir:3:31: error: this constant was elided when the program was printed (dense_resource<__elided__>, from --elide-elementsattrs-if-larger or to_mlir(elide_larger_than=...)): its values are not in the text.
// REFUSED-NEXT: %w = graph.variable "w" = dense_resource<__elided__> : tensor<2x3xf32>
// REFUSED-NEXT: {{^ +\^+$}}
// REFUSED-NOT:  Traceback

// BADN: argument --elide-elementsattrs-if-larger/--mlir-elide-elementsattrs-if-larger: expected a number >= 0, got -1

// DUMP: // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
// DUMP: dense_resource<__elided__> : tensor<2x3xf32>
