// RUN: xl-opt %s -p 'canonicalize,cse,canonicalize' --mlir-timing 2>%t.err | filecheck %s --check-prefix=OUT
// RUN: filecheck %s --input-file=%t.err
// RUN: not xl-opt %s -p 'cse,xl-test-fail' --mlir-timing 2>&1 | filecheck %s --check-prefix=FAIL

// mlir-opt's execution time report on stderr (stdout keeps the program): the parser (the
// input's verification below it), each pass of the pipeline in order (its verification
// below it), the output, the rest and the total, each with its wall time and share.

graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %a = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %a : tensor<2xf32>
}

// OUT:     graph.main {
// OUT-NOT: Execution time report

// CHECK:      ===-------------------------------------------------------------------------===
// CHECK-NEXT: {{^}}                         ... Execution time report ...{{$}}
// CHECK-NEXT: ===-------------------------------------------------------------------------===
// CHECK-NEXT:   Total Execution Time: {{[0-9]+\.[0-9][0-9][0-9][0-9]}} seconds
// CHECK-EMPTY:
// CHECK-NEXT: {{^}}  ----Wall Time----  ----Name----{{$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)  Parser$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)    Verifier$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)  CanonicalizePass$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)    Verifier$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)  CommonSubexpressionElimination$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)    Verifier$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)  CanonicalizePass$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)    Verifier$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)  Output$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \( *[0-9]+\.[0-9]%\)  Rest$}}
// CHECK-NEXT: {{^ +[0-9]+\.[0-9]{4} \(100\.0%\)  Total$}}

// A failing run still reports, up to the failure (no Output row).
// FAIL:      xl-opt: error: test failure
// FAIL:      ... Execution time report ...
// FAIL:      CommonSubexpressionElimination
// FAIL:      TestFailPass
// FAIL-NOT:  Output
// FAIL:      Rest
// FAIL-NEXT: Total
