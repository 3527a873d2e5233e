// RUN: xl-opt %s --split-input-file -p outline | filecheck %s
// RUN: xl-opt %s --split-input-file -p 'outline{min-ops=4}' | filecheck %s --check-prefix=MIN4
// RUN: xl-opt %s --split-input-file -p 'outline{min-ops=6}' | filecheck %s --check-prefix=MIN6

// Results unchanged through xl-run: the first program (the inlined seed Net) before and
// after outlining, and NumPy, print the same numbers.
// RUN: python -c "import sys; print(open(sys.argv[1]).read().split('// ' + '-' * 5)[0])" %s > %t.net.mlir
// RUN: python -c "import numpy as np; np.save('%t.image.npy', np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 2, 3))"
// RUN: xl-run %t.net.mlir image=%t.image.npy | filecheck %s --check-prefix=NET
// RUN: xl-opt %t.net.mlir -p outline | xl-run - image=%t.image.npy | filecheck %s --check-prefix=NET
// RUN: python -c "import numpy as np; W = lambda r, c, k: ((np.arange(r * c).reshape(r, c) * (k + 2)) % 7 - 3) * 0.1; B = lambda c, k: (np.arange(c) % 3 - 1) * 0.1 * k; g = lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))); x = np.linspace(-1, 1, 12).reshape(2, 6); x = g(x @ W(6, 4, 1) + B(4, 1)); x = g(x @ W(4, 4, 2) + B(4, 2)); x = g(x @ W(4, 4, 3) + B(4, 3)); y = x @ W(4, 3, 4) + B(3, 4); np.set_printoptions(precision=6, suppress=True); print('outputs =', np.array2string(y.astype(np.float32), separator=', '))" | filecheck %s --check-prefix=NET

// The second program (in-place updates and host I/O inside the repeated runs), two steps.
// RUN: python -c "import sys; print(open(sys.argv[1]).read().split('// ' + '-' * 5)[1])" %s > %t.io.mlir
// RUN: python -c "import numpy as np; np.save('%t.g.npy', np.array([[[0.5, -1.0, 2.0]], [[1.5, 0.25, -0.5]]], np.float32).reshape(2, 3))"
// RUN: xl-run %t.io.mlir g=%t.g.npy --steps 2 | filecheck %s --check-prefix=IO
// RUN: xl-opt %t.io.mlir -p outline | xl-run - g=%t.g.npy --steps 2 | filecheck %s --check-prefix=IO
// RUN: python -c "import numpy as np; g = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]]); acc = [np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 0.25])]; exec('s = []\nfor i in range(2):\n    acc[i] = acc[i] + 0.5 * np.tanh(g[i])\n    s.append(acc[i] * g[i])\n' * 2); np.set_printoptions(precision=6, suppress=True); print('s =', np.array2string(np.array(s, np.float32), separator=', '))" | filecheck %s --check-prefix=IO

// Bad options: a clear error, no traceback.
// RUN: not xl-opt %s --split-input-file -p 'outline{min-ops=0}' 2>&1 | filecheck %s --check-prefix=BADMIN
// RUN: not xl-opt %s --split-input-file -p 'outline{graph=nope}' 2>&1 | filecheck %s --check-prefix=NOGRAPH
// BADMIN: xl-opt: error: outline: min-ops must be >= 1, got 0
// BADMIN-NOT: Traceback
// NOGRAPH: xl-opt: error: outline: no graph @nope in the module
// NOGRAPH-NOT: Traceback

// The seed's Net, inlined, with small widths: fc1 (6 -> 4) differs in its input width,
// fc2 and fc3 (4 -> 4) are identical, fc4 (4 -> 3) differs: ONE graph, called for fc2
// and fc3; fc1 and fc4 stay in the main graph.
graph.h2d_stream @image : tensor<2x2x3xf32>
graph.d2h_stream @outputs : tensor<2x3xf32>
graph.main attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
    %image = graph.host_load @image : tensor<2x2x3xf32>
    %fc1.weight = graph.variable "fc1.weight" = dense<[[-0.3, 0.0, 0.3, -0.1], [0.2, -0.2, 0.1, -0.3], [0.0, 0.3, -0.1, 0.2], [-0.2, 0.1, -0.3, 0.0], [0.3, -0.1, 0.2, -0.2], [0.1, -0.3, 0.0, 0.3]]> : tensor<6x4xf32>
    %fc1.bias = graph.variable "fc1.bias" = dense<[-0.1, 0.0, 0.1, -0.1]> : tensor<4xf32>
    %fc2.weight = graph.variable "fc2.weight" = dense<[[-0.3, 0.1, -0.2, 0.2], [-0.1, 0.3, 0.0, -0.3], [0.1, -0.2, 0.2, -0.1], [0.3, 0.0, -0.3, 0.1]]> : tensor<4x4xf32>
    %fc2.bias = graph.variable "fc2.bias" = dense<[-0.2, 0.0, 0.2, -0.2]> : tensor<4xf32>
    %fc3.weight = graph.variable "fc3.weight" = dense<[[-0.3, 0.2, 0.0, -0.2], [0.3, 0.1, -0.1, -0.3], [0.2, 0.0, -0.2, 0.3], [0.1, -0.1, -0.3, 0.2]]> : tensor<4x4xf32>
    %fc3.bias = graph.variable "fc3.bias" = dense<[-0.3, 0.0, 0.3, -0.3]> : tensor<4xf32>
    %fc4.weight = graph.variable "fc4.weight" = dense<[[-0.3, 0.3, 0.2], [0.1, 0.0, -0.1], [-0.2, -0.3, 0.3], [0.2, 0.1, 0.0]]> : tensor<4x3xf32>
    %fc4.bias = graph.variable "fc4.bias" = dense<[-0.4, 0.0, 0.4]> : tensor<3xf32>
    %0 = popxl.reshape %image : (tensor<2x2x3xf32>) -> tensor<2x6xf32>
    %1 = popxl.matmul %0, %fc1.weight : (tensor<2x6xf32>, tensor<6x4xf32>) -> tensor<2x4xf32>
    %2 = popxl.add %1, %fc1.bias : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %3 = popxl.gelu %2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %4 = popxl.matmul %3, %fc2.weight : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %5 = popxl.add %4, %fc2.bias : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %6 = popxl.gelu %5 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %7 = popxl.matmul %6, %fc3.weight : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %8 = popxl.add %7, %fc3.bias : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %9 = popxl.gelu %8 : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %10 = popxl.matmul %9, %fc4.weight : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %11 = popxl.add %10, %fc4.bias : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    graph.host_store @outputs, %11 : tensor<2x3xf32>
}

// CHECK:       graph.graph @outlined(%[[X:.*]]: tensor<2x4xf32> {graph.name = "{{.*}}"}, %fc2.weight: tensor<4x4xf32> {graph.name = "fc2.weight"}, %fc2.bias: tensor<4xf32> {graph.name = "fc2.bias"}) -> tensor<2x4xf32> {
// CHECK-NEXT:    %[[M:.*]] = popxl.matmul %[[X]], %fc2.weight : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[A:.*]] = popxl.add %[[M]], %fc2.bias : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[G:.*]] = popxl.gelu %[[A]] : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    graph.output %[[G]] : tensor<2x4xf32>
// CHECK-NEXT:  }
// CHECK-NOT:   graph.graph
// CHECK:       graph.main
// CHECK:         %[[R:.*]] = popxl.reshape %image
// CHECK-NEXT:    %[[M1:.*]] = popxl.matmul %[[R]], %fc1.weight
// CHECK-NEXT:    %[[A1:.*]] = popxl.add %[[M1]], %fc1.bias
// CHECK-NEXT:    %[[G1:.*]] = popxl.gelu %[[A1]]
// CHECK-NEXT:    %[[C2:.*]] = call.call @outlined(%[[G1]], %fc2.weight, %fc2.bias) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[C3:.*]] = call.call @outlined(%[[C2]], %fc3.weight, %fc3.bias) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[M4:.*]] = popxl.matmul %[[C3]], %fc4.weight
// CHECK-NEXT:    %[[A4:.*]] = popxl.add %[[M4]], %fc4.bias
// CHECK-NEXT:    graph.host_store @outputs, %[[A4]]
// CHECK-NEXT:  }

// Below min-ops (3 ops per layer): nothing is outlined.
// MIN4-NOT:    graph.graph
// MIN4-NOT:    call.call
// MIN4:        graph.host_store @outputs

// NET:      outputs = {{\[}}[-0.428242, -0.098718,  0.436069],
// NET-NEXT:  [-0.427066, -0.097445,  0.435428]]

// -----

// In-place updates and host I/O inside the runs: each run loads a transfer, updates its
// own accumulator in place, then stores a value read after the update. The accumulator
// becomes a by-reference input; the order of loads, updates and stores is kept.
graph.h2d_stream @g : tensor<3xf32>
graph.d2h_stream @s : tensor<3xf32>
graph.main attributes {num_host_transfers = 2 : i64} {
  %acc1 = graph.variable "acc1" = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %acc2 = graph.variable "acc2" = dense<[-1.0, 0.5, 0.25]> : tensor<3xf32>
  %l1 = graph.host_load @g : tensor<3xf32>
  %t1 = popxl.tanh %l1 : (tensor<3xf32>) -> tensor<3xf32>
  popxl.scaled_add_ %acc1, %t1 {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
  %m1 = popxl.mul %acc1, %l1 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @s, %m1 : tensor<3xf32>
  %l2 = graph.host_load @g : tensor<3xf32>
  %t2 = popxl.tanh %l2 : (tensor<3xf32>) -> tensor<3xf32>
  popxl.scaled_add_ %acc2, %t2 {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
  %m2 = popxl.mul %acc2, %l2 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @s, %m2 : tensor<3xf32>
}

// CHECK:       graph.graph @outlined(%acc1: tensor<3xf32> {graph.by_ref, graph.name = "acc1"}) {
// CHECK-NEXT:    %l1 = graph.host_load @g : tensor<3xf32>
// CHECK-NEXT:    %t1 = popxl.tanh %l1
// CHECK-NEXT:    popxl.scaled_add_ %acc1, %t1
// CHECK-NEXT:    %m1 = popxl.mul %acc1, %l1
// CHECK-NEXT:    graph.host_store @s, %m1
// CHECK-NEXT:    graph.output
// CHECK-NEXT:  }
// CHECK:       graph.main attributes {num_host_transfers = 2 : i64} {
// CHECK-NEXT:    %acc1 = graph.variable "acc1"
// CHECK-NEXT:    %acc2 = graph.variable "acc2"
// CHECK-NEXT:    call.call @outlined(%acc1) : (tensor<3xf32>) -> ()
// CHECK-NEXT:    call.call @outlined(%acc2) : (tensor<3xf32>) -> ()
// CHECK-NEXT:  }

// MIN4:        graph.graph @outlined(%acc1: tensor<3xf32> {graph.by_ref, graph.name = "acc1"})
// MIN4:        call.call @outlined(%acc1)
// MIN4-NEXT:   call.call @outlined(%acc2)

// MIN6-NOT:    graph.graph
// MIN6-NOT:    call.call

// IO:      s = {{\[}}[ 0.731059, -1.238406,  7.928055],
// IO-NEXT:  [-0.142278,  0.18623 ,  0.106059]]
