// The linear layer example runs end to end: xl-run prints what NumPy computes.
// RUN: python -c "import numpy as np; np.save('%t.x.npy', np.arange(8, dtype=np.float32).reshape(2, 4))"
// RUN: xl-run %S/../../../examples/ir/linear.mlir x=%t.x.npy | filecheck %s
// RUN: python -c "import numpy as np; x = np.arange(8, dtype=np.float32).reshape(2, 4); w = np.array([[1, 0, -1], [.5, .5, .5], [2, -2, 0], [0, 1, 1]], np.float32); b = np.array([.1, .2, .3], np.float32); np.set_printoptions(precision=6, suppress=True); print('y =', np.array2string(x @ w + b, separator=', '))" | filecheck %s
// RUN: not xl-run %S/../../../examples/ir/linear.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: python -c "import numpy as np; np.save('%t.bad.npy', np.zeros((3, 4), np.float32))"
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.bad.npy 2>&1 | filecheck %s --check-prefix=SHAPE
// RUN: python -c "import numpy as np; np.save('%t.i.npy', np.zeros((2, 4), np.int32))"
// RUN: not xl-run %S/../../../examples/ir/linear.mlir x=%t.i.npy 2>&1 | filecheck %s --check-prefix=DTYPE

// CHECK:      y = {{\[}}[ 4.6, -0.3,  3.8],
// CHECK-NEXT:  [18.6, -2.3,  5.8]]

// MISSING: xl-run: error: missing input for stream(s) x
// MISSING-NOT: Traceback
// SHAPE: xl-run: error: stream "x": expected shape (2, 4), got (3, 4)
// DTYPE: xl-run: error: stream "x": expected dtype float32, got int32

// Malformed and invalid programs: file:line:col for parse errors, the op for verifier errors.
// RUN: printf 'graph.main {\n  %%%%x = graph.bogus\n}\n' > %t.bad.mlir
// RUN: not xl-run %t.bad.mlir 2>&1 | filecheck %s --check-prefix=PARSE
// RUN: printf 'graph.main {\n  %%%%x = graph.constant dense<1.0> : tensor<2xf32>\n  %%%%y = popxl.matmul %%%%x, %%%%x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2x2xf32>\n}\n' > %t.inv.mlir
// RUN: not xl-run %t.inv.mlir 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: not xl-run %t.missing.mlir 2>&1 | filecheck %s --check-prefix=NOFILE
// PARSE: bad.mlir:{{[0-9]+}}:{{[0-9]+}}: error: Operation graph.bogus is not registered
// PARSE-NOT: Traceback
// VERIFY: inv.mlir:3:3: error: popxl.matmul: result types ((2, 2) float32) differ from the inferred (() float32)
// NOFILE: xl-run: error: file '{{.*}}missing.mlir' does not exist
