// RUN: xl-opt %s -p cse,dce --mlir-print-ir-after-all 2>&1 >/dev/null | filecheck %s --check-prefix=AFTER
// RUN: xl-opt %s -p cse,dce --print-ir-after-all 2>&1 >/dev/null | filecheck %s --check-prefix=AFTER
// RUN: xl-opt %s -p cse,dce --mlir-print-ir-before-all 2>&1 >/dev/null | filecheck %s --check-prefix=BEFORE
// RUN: xl-opt %s -p cse,dce,cse --mlir-print-ir-after-all --mlir-print-ir-after-change 2>&1 >/dev/null | filecheck %s --check-prefix=CHANGE
// RUN: xl-opt %s -p cse,dce,cse --mlir-print-ir-after-change 2>&1 >/dev/null | filecheck %s --check-prefix=CHANGE
// RUN: xl-opt %s -p cse,dce --mlir-print-ir-before=dce --mlir-print-ir-after=cse,dce 2>&1 >/dev/null | filecheck %s --check-prefix=SELECT
// RUN: not xl-opt %s -p 'cse,autodiff{graph=nosuch}' --mlir-print-ir-after-failure 2>&1 | filecheck %s --check-prefix=FAILURE
// RUN: not xl-opt %s -p 'cse,autodiff{graph=nosuch}' --mlir-print-ir-after-all --mlir-print-ir-after-failure 2>&1 | filecheck %s --check-prefix=FAILURE
// RUN: not xl-opt %s -p 'cse,autodiff{graph=nosuch}' --mlir-print-ir-after-all 2>&1 | filecheck %s --check-prefix=ALL-FAILURE
// RUN: not xl-opt %s -p 'cse,xl-test-fail{kind=verify}' --mlir-print-ir-after-failure 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: xl-opt %s -p cse --mlir-print-ir-after-failure 2>&1 | filecheck %s --check-prefix=NO-FAILURE
// RUN: not xl-opt %s -p cse --mlir-print-ir-after=nosuch 2>&1 | filecheck %s --check-prefix=UNKNOWN

// mlir-opt's IR dumps, on stderr: a header naming the pass (class and pipeline name), the
// whole module, a blank line. `--print-ir-after-all` is the same as `--mlir-print-ir-after-all`.

graph.d2h_stream @y : tensor<2xf32>
graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %a = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %b = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %dead = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %a : tensor<2xf32>
  graph.host_store @y, %b : tensor<2xf32>
}

// AFTER-NOT:  IR Dump Before
// AFTER:      // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
// AFTER-NEXT: builtin.module {
// AFTER-NEXT:   graph.d2h_stream @y : tensor<2xf32>
// AFTER-NEXT:   graph.main {
// AFTER-NEXT:     %x = graph.constant dense<1.000000e+00> : tensor<2xf32>
// AFTER-NEXT:     %a = popxl.add %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// AFTER-NEXT:     graph.host_store @y, %a : tensor<2xf32>
// AFTER-NEXT:     graph.host_store @y, %a : tensor<2xf32>
// AFTER-NEXT:   }
// AFTER-NEXT: }
// AFTER-EMPTY:
// AFTER-NEXT: // -----// IR Dump After DeadCodeElimination (dce) //----- //
// AFTER-NEXT: builtin.module {
// AFTER-NOT:  IR Dump

// Before each pass: the IR it gets.
// BEFORE-NOT:  IR Dump After
// BEFORE:      // -----// IR Dump Before CommonSubexpressionElimination (cse) //----- //
// BEFORE:        %b = popxl.add %x, %x
// BEFORE-NEXT:   %dead = popxl.neg %x
// BEFORE:      // -----// IR Dump Before DeadCodeElimination (dce) //----- //
// BEFORE-NOT:  %b = popxl.add
// BEFORE-NOT:  IR Dump

// Only the passes that changed the IR (cse the first time; dce and the second cse did not).
// CHANGE:     // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
// CHANGE-NOT: IR Dump

// SELECT:      // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
// SELECT:      // -----// IR Dump Before DeadCodeElimination (dce) //----- //
// SELECT:      // -----// IR Dump After DeadCodeElimination (dce) //----- //
// SELECT-NOT:  IR Dump

// The failing pass: the IR it got (after cse), then the error. With
// --mlir-print-ir-after-failure only the failure is dumped, even with -after-all (as mlir-opt).
// FAILURE-NOT:  IR Dump After CommonSubexpressionElimination
// FAILURE:      // -----// IR Dump After AutodiffPass Failed (autodiff) //----- //
// FAILURE-NEXT: builtin.module {
// FAILURE:        %a = popxl.add %x, %x
// FAILURE-NEXT:   graph.host_store @y, %a : tensor<2xf32>
// FAILURE-NEXT:   graph.host_store @y, %a : tensor<2xf32>
// FAILURE:      xl-opt: error: autodiff: no graph @nosuch in the module
// FAILURE-NEXT: xl-opt: note: in pass 'autodiff'

// ALL-FAILURE:      // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //
// ALL-FAILURE:      // -----// IR Dump After AutodiffPass Failed (autodiff) //----- //
// ALL-FAILURE:      xl-opt: error: autodiff: no graph @nosuch in the module

// IR that does not verify after a pass is its failure: the dump is the valid IR it got.
// VERIFY:      // -----// IR Dump After TestFailPass Failed (xl-test-fail) //----- //
// VERIFY:        graph.main {
// VERIFY-NOT:    attributes {num_host_transfers
// VERIFY:      xl-opt: error: graph.main: 'num_host_transfers' must be a positive integer
// VERIFY:      xl-opt: note: while verifying the IR after pass 'xl-test-fail'

// NO-FAILURE-NOT: IR Dump
// NO-FAILURE:     graph.main {

// UNKNOWN: xl-opt: error: --mlir-print-ir-after: no pass named 'nosuch' (see --list-passes)
