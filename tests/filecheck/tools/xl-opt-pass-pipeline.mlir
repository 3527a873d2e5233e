// RUN: xl-opt %s --pass-pipeline='builtin.module(cse,canonicalize)' | filecheck %s --check-prefix=CLEAN
// RUN: xl-opt %s --pass-pipeline=' builtin.module(cse{},canonicalize) ' | filecheck %s --check-prefix=CLEAN
// RUN: xl-opt %s --pass-pipeline='builtin.module()' | filecheck %s --check-prefix=NONE
// RUN: xl-opt %s --pass-pipeline='builtin.module(autodiff{graph="Net_subgraph(0)"})' | filecheck %s --check-prefix=GRAD
// RUN: xl-opt %s -p 'autodiff{graph="Net_subgraph(0)"}' | filecheck %s --check-prefix=GRAD
// RUN: not xl-opt %s -p 'autodiff{graph=Net_subgraph(0)}' 2>&1 | filecheck %s --check-prefix=QUOTE
// RUN: not xl-opt %s -p 'cse,autodiff{graph=Net_subgraph(0) grads_required=0}' 2>&1 | filecheck %s --check-prefix=QUOTE2
// RUN: not xl-opt %s --pass-pipeline='builtin.module(autodiff{graph=Net_subgraph(0)})' 2>&1 | filecheck %s --check-prefix=QUOTE-ANCHOR
// RUN: not xl-opt %s --pass-pipeline='cse,canonicalize' 2>&1 | filecheck %s --check-prefix=NO-ANCHOR
// RUN: not xl-opt %s --pass-pipeline='builtin.module(func.func(cse))' 2>&1 | filecheck %s --check-prefix=NESTED
// RUN: not xl-opt %s --pass-pipeline='builtin.module(cse)' -p dce 2>&1 | filecheck %s --check-prefix=BOTH
// RUN: not xl-opt %s -p 'cse;dce' 2>&1 | filecheck %s --check-prefix=OTHER

// mlir-opt's --pass-pipeline: the passes inside their anchor op, builtin.module (every xl
// pass runs on the whole module). An option value that is not a number or a plain name
// needs double quotes: the error says what to write.

graph.graph @"Net_subgraph(0)"(%x: tensor<2xf32> {graph.name = "x"}) -> (tensor<2xf32>) {
  %y = popxl.mul %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %a = popxl.add %y, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %b = popxl.add %y, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %c = popxl.sub %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %c : tensor<2xf32>
}

// CLEAN:      %a = popxl.add %y, %y
// CLEAN-NEXT: %c = popxl.sub %a, %a

// NONE:      %b = popxl.add %y, %y

// GRAD: graph.graph @"Net_subgraph(0)_grad"

// QUOTE:     xl-opt: error: -p 'autodiff{graph=Net_subgraph(0)}': the value of option 'graph' of pass 'autodiff' needs double quotes (an unquoted value is a number or a name of letters, digits, '_' and '-'): write graph="Net_subgraph(0)", as in 'autodiff{graph="Net_subgraph(0)"}'
// QUOTE-NOT: Unknown token

// QUOTE2: the value of option 'graph' of pass 'autodiff' needs double quotes {{.*}}: write graph="Net_subgraph(0)", as in 'cse,autodiff{graph="Net_subgraph(0)" grads_required=0}'

// QUOTE-ANCHOR: xl-opt: error: --pass-pipeline 'builtin.module(autodiff{graph=Net_subgraph(0)})': the value of option 'graph' {{.*}} as in 'builtin.module(autodiff{graph="Net_subgraph(0)"})'

// NO-ANCHOR: xl-opt: error: --pass-pipeline 'cse,canonicalize': the passes go inside their anchor op, as for mlir-opt: --pass-pipeline='builtin.module(cse,canonicalize)' (or -p 'cse,canonicalize')

// NESTED: xl-opt: error: --pass-pipeline 'builtin.module(func.func(cse))': 'func.func(...)': xl's passes run on the whole module, so a pipeline has no nested anchors

// BOTH: xl-opt: error: give the passes either with -p or with --pass-pipeline='builtin.module(...)', not both

// Other syntax errors keep xDSL's located message.
// OTHER:      xl-opt: error: Error parsing pass pipeline specification:
// OTHER-NEXT: pass-pipeline:1:4
