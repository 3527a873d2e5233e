// RUN: xl-opt %s -p 'outline,lower-to-rt' | filecheck %s
// RUN: xl-opt %s -p 'outline,lower-to-rt{functions=false}' | filecheck %s --check-prefix=FLAT
// RUN: xl-opt %s -p 'outline,lower-to-rt,rt-optimize' | filecheck %s --check-prefix=OPT

// Results unchanged through xl-run, with and without outlining and functions, and NumPy.
// RUN: python -c "import numpy as np; np.save('%t.image.npy', np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 2, 3))"
// RUN: xl-run %s image=%t.image.npy | filecheck %s --check-prefix=NET
// RUN: xl-run %s image=%t.image.npy --no-outline | filecheck %s --check-prefix=NET
// RUN: xl-run %s image=%t.image.npy -p 'pipeline,outline,canonicalize,cse,dce,lower-to-rt' | filecheck %s --check-prefix=NET
// RUN: xl-run %s image=%t.image.npy -p 'pipeline,outline,canonicalize,cse,dce,lower-to-rt{functions=false}' | filecheck %s --check-prefix=NET
// RUN: xl-opt %s -p outline | xl-run - image=%t.image.npy -p 'lower-to-rt' --no-outline | filecheck %s --check-prefix=NET
// RUN: python -c "import numpy as np; W = lambda r, c, k: ((np.arange(r * c).reshape(r, c) * (k + 2)) % 7 - 3) * 0.1; B = lambda c, k: (np.arange(c) % 3 - 1) * 0.1 * k; g = lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))); x = np.linspace(-1, 1, 12).reshape(2, 6); x = g(x @ W(6, 4, 1) + B(4, 1)); x = g(x @ W(4, 4, 2) + B(4, 2)); x = g(x @ W(4, 4, 3) + B(4, 3)); y = x @ W(4, 3, 4) + B(3, 4); np.set_printoptions(precision=6, suppress=True); print('outputs =', np.array2string(y.astype(np.float32), separator=', '))" | filecheck %s --check-prefix=NET
// RUN: xl-run --help | filecheck %s --check-prefix=HELP

// The seed's Net, inlined, with small widths (as in outline.mlir): fc2 and fc3 are one
// graph after `outline`, and `lower-to-rt` keeps it as ONE rt.func called twice; fc1 and
// fc4 stay in the program body.
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

// CHECK:      rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
// CHECK-NEXT:   rt.func @outlined(%0: memref<2x4xf32>, %fc2.weight: memref<4x4xf32>, %fc2.bias: memref<4xf32>) -> (%1: memref<2x4xf32>) {
// CHECK-NEXT:     %2 = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:     rt.kernel "popxl.matmul"(%0, %fc2.weight) -> (%2) : (memref<2x4xf32>, memref<4x4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:     %3 = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:     rt.kernel "popxl.add"(%2, %fc2.bias) -> (%3) : (memref<2x4xf32>, memref<4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:     rt.kernel "popxl.gelu"(%3) -> (%1) : (memref<2x4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:   }
// CHECK-NOT:    rt.func
// CHECK:        %fc2.weight = rt.state "fc2.weight"
// CHECK:        %fc3.weight = rt.state "fc3.weight"
// CHECK:        rt.kernel "popxl.matmul"(%0, %fc1.weight) -> (%1)
// CHECK:        rt.kernel "popxl.gelu"(%2) -> (%3)
// CHECK-NEXT:   %4 = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:   rt.call @outlined(%3, %fc2.weight, %fc2.bias) -> (%4) : (memref<2x4xf32>, memref<4x4xf32>, memref<4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:   %5 = rt.alloc : memref<2x4xf32>
// CHECK-NEXT:   rt.call @outlined(%4, %fc3.weight, %fc3.bias) -> (%5) : (memref<2x4xf32>, memref<4x4xf32>, memref<4xf32>) -> memref<2x4xf32>
// CHECK-NEXT:   %6 = rt.alloc : memref<2x3xf32>
// CHECK-NEXT:   rt.kernel "popxl.matmul"(%5, %fc4.weight) -> (%6)
// CHECK-NOT:    rt.call

// functions=false: the calls are expanded, as before functions existed.
// FLAT-NOT:     rt.func
// FLAT-NOT:     rt.call
// FLAT-COUNT-4: rt.kernel "popxl.matmul"

// rt-optimize works inside the function (bias add folded into the gemm, gelu in place).
// OPT:          rt.func @outlined(
// OPT:          rt.kernel "popxl.expand"(%fc2.bias)
// OPT-NEXT:     rt.kernel "xl.gemm_acc"(%0, %fc2.weight, %2) -> (%2)
// OPT:          rt.kernel "popxl.gelu"
// OPT-NEXT:   }
// OPT-COUNT-2:  rt.call @outlined(

// NET:      outputs = {{\[}}[-0.428242, -0.098718,  0.436069],
// NET-NEXT:  [-0.427066, -0.097445,  0.435428]]

// HELP: --no-outline
