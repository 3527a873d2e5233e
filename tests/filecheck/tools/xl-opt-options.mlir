// RUN: xl-opt %s -p 'cse,dce' | filecheck %s
// RUN: xl-opt %s -p 'canonicalize,cse{},dce' --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: xl-opt %s --split-input-file | filecheck %s --check-prefix=SPLIT
// RUN: xl-opt %s -o %t && filecheck %s --input-file=%t --check-prefix=SPLIT

// A pipeline with options; the output of a cleaned-up main graph.

graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %a = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %b = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %dead = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %a : tensor<2xf32>
  graph.host_store @y, %b : tensor<2xf32>
}

// CHECK:      graph.main {
// CHECK-NEXT:   %x = graph.constant dense<1.000000e+00> : tensor<2xf32>
// CHECK-NEXT:   %a = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:   graph.host_store @y, %a : tensor<2xf32>
// CHECK-NEXT:   graph.host_store @y, %a : tensor<2xf32>
// CHECK-NEXT: }

// GENERIC: "graph.host_store"(%a) <{stream = @y}> : (tensor<2xf32>) -> ()

// SPLIT: %dead = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
