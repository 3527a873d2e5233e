// RUN: xl-opt %s --split-input-file --verify-diagnostics | filecheck %s

// source IPU must be non-negative

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  %y = ipu.copy %x {source = -1 : i64, destination = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
}

// CHECK: ipu.copy: source IPU must be >= 0

// -----

// destination IPU must be non-negative

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  %y = ipu.copy %x {source = 0 : i64, destination = -2 : i64} : (tensor<4xf32>) -> tensor<4xf32>
}

// CHECK: ipu.copy: destination IPU must be >= 0

// -----

// a copy keeps the type

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  %y = "ipu.copy"(%x) <{source = 0 : i64, destination = 1 : i64}> : (tensor<4xf32>) -> tensor<4xf16>
}

// CHECK: result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute tensor<4xf32> expected from variable 'T', but got tensor<4xf16>

// -----

// both IPUs are required

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  %y = "ipu.copy"(%x) <{source = 0 : i64}> : (tensor<4xf32>) -> tensor<4xf32>
}

// CHECK: property 'destination' expected in operation 'ipu.copy'

// -----

// IPUs are integers

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  %y = "ipu.copy"(%x) <{source = 0 : i64, destination = "one"}> : (tensor<4xf32>) -> tensor<4xf32>
}

// CHECK: "one" should be of base attribute integer
