// RUN: not xl-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: xl-opt %s --split-input-file --verify-diagnostics | filecheck %s --check-prefix=DIAG

// SSA dominance: a value must be defined before it is used. The parser accepts forward
// references, the verifiers of graph.main, graph.graph and rt.program reject them, at the use.

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<2xf32>
  %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %z = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
}

// CHECK:      xl-opt-dominance.mlir:10:3: error: popxl.add: operand #1 (%z) is used before its definition: defined later, by popxl.neg at line 11
// CHECK-NEXT:   %y = popxl.add %x, %z : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:   ^
// CHECK-NEXT: xl-opt: note: while verifying the input
// DIAG:       popxl.add: operand #1 (%z) is used before its definition: defined later, by popxl.neg at line 11

// -----

// In a subgraph, and an op that uses its own result.

graph.graph @g(%a: tensor<2xf32> {graph.name = "a"}) -> tensor<2xf32> {
  %b = popxl.mul %b, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %b : tensor<2xf32>
}

// CHECK:      xl-opt-dominance.mlir:25:3: error: popxl.mul: operand #0 (%b) is used before its definition: defined later, by popxl.mul at line 25
// CHECK-NEXT:   %b = popxl.mul %b, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// DIAG:       popxl.mul: operand #0 (%b) is used before its definition

// -----

// In a lowered program.

rt.program {
  %a = rt.alloc : memref<2xf32>
  rt.kernel "popxl.neg"(%b) -> (%a) : (memref<2xf32>) -> memref<2xf32>
  %b = rt.alloc : memref<2xf32>
}

// CHECK:      xl-opt-dominance.mlir:39:3: error: rt.kernel: operand #0 (%b) is used before its definition: defined later, by rt.alloc at line 40
// DIAG:       rt.kernel: operand #0 (%b) is used before its definition

// -----

// Defined before the use: fine.

graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %y = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
}

// CHECK-NOT: error
