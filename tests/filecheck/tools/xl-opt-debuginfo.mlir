// RUN: xl-opt %s --print-debuginfo | filecheck %s
// RUN: xl-opt %s --print-debuginfo | xl-opt --print-debuginfo | filecheck %s
// RUN: xl-opt %s --split-input-file --print-debuginfo | filecheck %s --check-prefix=SPLIT

// Parsed ops keep their source location: --print-debuginfo prints loc("file":line:col)
// of the op's first token (explicit locations are kept as written, so a round trip
// through xl-opt keeps the original ones).

graph.main {
  %x = graph.constant dense<1.0> : tensor<2xf32>
  %y = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32> loc("model.py":7:5)
}

// CHECK:      graph.main {
// CHECK-NEXT:   %x = graph.constant dense<1.000000e+00> : tensor<2xf32> loc("{{.*}}xl-opt-debuginfo.mlir":10:3)
// CHECK-NEXT:   %y = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32> loc("model.py":7:5)
// CHECK-NEXT: } loc("{{.*}}xl-opt-debuginfo.mlir":9:1)

// With --split-input-file, lines count from the start of the file.
// SPLIT: %x = graph.constant dense<1.000000e+00> : tensor<2xf32> loc("{{.*}}xl-opt-debuginfo.mlir":10:3)
// SPLIT: %z = graph.constant dense<2.000000e+00> : tensor<f32> loc("{{.*}}xl-opt-debuginfo.mlir":26:3)

// -----

graph.main {
  %z = graph.constant dense<2.0> : tensor<f32>
}
