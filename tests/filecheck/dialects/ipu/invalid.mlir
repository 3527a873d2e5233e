// RUN: xl-opt %s --split-input-file --verify-diagnostics

// source IPU must be non-negative

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{ipu.copy: source IPU must be >= 0}}
  %y = ipu.copy %x {source = -1 : i64, destination = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// destination IPU must be non-negative

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{ipu.copy: destination IPU must be >= 0}}
  %y = ipu.copy %x {source = 0 : i64, destination = -2 : i64} : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// a copy keeps the type

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{ipu.copy: result 'result' at position 0 does not verify:}}
  %y = "ipu.copy"(%x) <{source = 0 : i64, destination = 1 : i64}> : (tensor<4xf32>) -> tensor<4xf16>
}

// -----

// both IPUs are required

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{ipu.copy: property 'destination' expected in operation 'ipu.copy'}}
  %y = "ipu.copy"(%x) <{source = 0 : i64}> : (tensor<4xf32>) -> tensor<4xf32>
}

// -----

// IPUs are integers

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32>
  // expected-error @+1 {{ipu.copy: "one" should be of base attribute integer}}
  %y = "ipu.copy"(%x) <{source = 0 : i64, destination = "one"}> : (tensor<4xf32>) -> tensor<4xf32>
}

