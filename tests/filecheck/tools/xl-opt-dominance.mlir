// RUN: not xl-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: xl-opt %s --split-input-file --verify-diagnostics

// SSA dominance: a value must be defined before it is used. The parser accepts forward
// references, the verifiers of graph.main, graph.graph and rt.program reject them, at the use.

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<2xf32>
  %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> // expected-error {{operand #1 (%z) is used before its definition: defined later, by popxl.neg at line 11}}
  %z = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
}

// CHECK:      xl-opt-dominance.mlir:10:3: error: popxl.add: operand #1 (%z) is used before its definition: defined later, by popxl.neg at line 11
// CHECK-NEXT:   %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:   ^
// CHECK-NEXT: xl-opt: note: while verifying the input

// -----

// In a subgraph, and an op that uses its own result.

graph.graph @g(%a: tensor<2xf32> {graph.name = "a"}) -> tensor<2xf32> {
  %b = popxl.mul %b, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> // expected-error {{popxl.mul: operand #0 (%b) is used before its definition}}
  graph.output %b : tensor<2xf32>
}

// CHECK:      xl-opt-dominance.mlir:24:3: error: popxl.mul: operand #0 (%b) is used before its definition: defined later, by popxl.mul at line 24
// CHECK-NEXT:   %b = popxl.mul %b, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>

// -----

// In a lowered program.

rt.program {
  %a = rt.alloc : memref<2xf32>
  rt.kernel "popxl.neg"(%b) -> (%a) : (memref<2xf32>) -> memref<2xf32> // expected-error {{rt.kernel: operand #0 (%b) is used before its definition}}
  %b = rt.alloc : memref<2xf32>
}

// CHECK:      xl-opt-dominance.mlir:37:3: error: rt.kernel: operand #0 (%b) is used before its definition: defined later, by rt.alloc at line 38

// -----

// Defined before the use: fine.

graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %y = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
}

// CHECK-NOT: error:
