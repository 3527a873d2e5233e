// xl-run reports every failure as one message with exit status 1, never a traceback.
// RUN: python -c "import numpy as np; np.save('%t.x.npy', np.ones((2, 4), np.float32))"
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.x.npy -o %t.nodir/out.npz 2>&1 | filecheck %s --check-prefix=OUTDIR
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.x.npy --save-vars %t.nodir/v.npz 2>&1 | filecheck %s --check-prefix=VARSDIR
// RUN: not xl-run %S 2>&1 | filecheck %s --check-prefix=DIR
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%S 2>&1 | filecheck %s --check-prefix=INDIR
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.x.npy -p 'inline{' 2>&1 | filecheck %s --check-prefix=PIPE
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.x.npy -p 'inline,nosuch' 2>&1 | filecheck %s --check-prefix=PASS
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.x.npy -p 'inline{remove-dead=maybe}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not xl-run %s --steps 0 2>&1 | filecheck %s --check-prefix=STEPS
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.x.npy -p nosuch --traceback 2>&1 | filecheck %s --check-prefix=TRACE
// RUN: printf 'graph.h2d_stream @x : tensor<2xsi32>\ngraph.main {\n  %%%%x = graph.host_load @x : tensor<2xsi32>\n}\n' > %t.si32.mlir
// RUN: not xl-run %t.si32.mlir 2>&1 | filecheck %s --check-prefix=SI32
// RUN: printf 'graph.main {\n  %%%%x = graph.constant dense<1.0> : tensor<2xbf16>\n}\n' > %t.bf16.mlir
// RUN: not xl-run %t.bf16.mlir 2>&1 | filecheck %s --check-prefix=BF16
// RUN: printf 'graph.main {\n  %%%%w = graph.variable "w" = dense<[(1.0, 2.0)]> : tensor<1xcomplex<f32>>\n}\n' > %t.complex.mlir
// RUN: not xl-run %t.complex.mlir 2>&1 | filecheck %s --check-prefix=COMPLEX
// RUN: printf 'graph.main {\n  %%%%w = graph.variable "w" : tensor<100000x100000x100000xf32>\n}\n' > %t.big.mlir
// RUN: not xl-run %t.big.mlir 2>&1 | filecheck %s --check-prefix=BIG
// RUN: printf 'graph.main attributes {replication_factor = 1000000 : i64} {\n}\n' > %t.reps.mlir
// RUN: not xl-run %t.reps.mlir 2>&1 | filecheck %s --check-prefix=REPS
// RUN: printf 'graph.main {\n  %%%%y = popxl.neg %%%%x : (tensor<2xf32>) -> tensor<2xf32>\n  %%%%x = graph.constant dense<1.0> : tensor<2xf32>\n}\n' > %t.dom.mlir
// RUN: not xl-run %t.dom.mlir 2>&1 | filecheck %s --check-prefix=DOM

graph.main {
}

// OUTDIR:   xl-run: error: -o '{{.*}}nodir/out.npz': folder '{{.*}}nodir' does not exist
// VARSDIR:  xl-run: error: --save-vars '{{.*}}nodir/v.npz': folder '{{.*}}nodir' does not exist
// DIR:      xl-run: error: '{{.*}}' is a directory, not a textual program
// INDIR:    xl-run: error: input '{{.*}}' is a directory, expected a .npy or .npz file
// PIPE:     xl-run: error: -p 'inline{': Expected argument name here (column 8)
// PASS:     xl-run: error: -p 'inline,nosuch': Unrecognized passes: ['nosuch']
// OPTION:   xl-run: error: -p 'inline{remove-dead=maybe}': Incompatible types
// STEPS:    xl-run: error: --steps must be >= 1
// TRACE:    Traceback
// TRACE:    RunError: -p 'nosuch': Unrecognized passes: ['nosuch']
// SI32:     si32.mlir:3:3: error: graph.host_load: element type si32 is not supported by the NumPy runtime
// SI32-NEXT:  %x = graph.host_load @x : tensor<2xsi32>
// SI32-NEXT:  ^
// BF16:     bf16.mlir:2:3: error: graph.constant: element type bf16 is not supported by the NumPy runtime
// COMPLEX:  complex.mlir:2:3: error: graph.variable: element type complex<f32> is not supported by the NumPy runtime
// BIG:      big.mlir:2:3: error: graph.variable: tensor<100000x100000x100000xf32> needs 3.553 PiB, more than the memory of this machine
// REPS:     reps.mlir:1:1: error: graph.main: replication_factor 1000000 is more than the 1024 replicas xl simulates in one process: every replica runs in this process with its own copy of every buffer
// DOM:      dom.mlir:2:3: error: popxl.neg: operand #0 (%x) is used before its definition: defined later, by graph.constant at line 3
// CHECK-NOT: Traceback
