// RUN: not xl-opt %s -p no-such-pass 2>&1 | filecheck %s
// RUN: not xl-opt %s -p 'cse,no-such-pass' 2>&1 | filecheck %s
// RUN: not xl-opt %s -p 'cse{bogus=1}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not xl-opt %s -p 'cse{' 2>&1 | filecheck %s --check-prefix=SPEC

graph.main {
}

// CHECK:     xl-opt: error: Unrecognized passes: ['no-such-pass']
// CHECK-NOT: Traceback

// OPTION:     xl-opt: error: Provided arguments ["bogus"] not found in expected arguments []
// OPTION-NOT: Traceback

// SPEC:      xl-opt: error: Error parsing pass pipeline specification:
// SPEC-NEXT: pass-pipeline:1:5
// SPEC-NOT:  Traceback
