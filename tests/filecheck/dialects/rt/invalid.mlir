// RUN: xl-opt %s --split-input-file --verify-diagnostics

// rt.copy: shapes must match

rt.program {
  %a = rt.alloc : memref<4xf32>
  %b = rt.alloc : memref<2xf32>
  // expected-error @+1 {{rt.copy: cannot copy (4,) float32 into (2,) float32}}
  rt.copy %a, %b : memref<4xf32>, memref<2xf32>
}

// -----

// rt.copy: dtypes must match

rt.program {
  %a = rt.alloc : memref<4xf32>
  %b = rt.alloc : memref<4xf16>
  // expected-error @+1 {{rt.copy: cannot copy (4,) float32 into (4,) float16}}
  rt.copy %a, %b : memref<4xf32>, memref<4xf16>
}

// -----

// rt.state only in rt.program

graph.main {
  // expected-error @+1 {{rt.state: 'rt.state' expects parent op 'rt.program'}}
  %w = "rt.state"() <{slot = "w"}> : () -> memref<4xf32>
}

// -----

// rt.state: the initial value must fit the buffer

rt.program {
  // expected-error @+1 {{rt.state "w": initial value tensor<3xf32> does not fit buffer memref<4xf32>}}
  %w = "rt.state"() <{slot = "w", init = dense<1.0> : tensor<3xf32>}> : () -> memref<4xf32>
}

// -----

// rt.state holds a memref

rt.program {
  // expected-error @+1 {{rt.state: result 'result' at position 0 does not verify:}}
  %w = "rt.state"() <{slot = "w"}> : () -> tensor<4xf32>
}

// -----

// rt.const: the value must fit the buffer

rt.program {
  // expected-error @+1 {{rt.const: value tensor<2xf32> does not fit buffer memref<4xf32>}}
  %c = rt.const dense<1.0> : tensor<2xf32> : memref<4xf32>
}

// -----

// rt.loop: non-negative count

rt.program {
  // expected-error @+1 {{rt.loop: count must be >= 0, got -3}}
  rt.loop -3 {
  }
}

// -----

// rt.if: the condition is a bool

rt.program {
  %c = rt.alloc : memref<f32>
  // expected-error @+1 {{rt.if: condition must be a scalar bool buffer (memref<i1>), got memref<f32>}}
  rt.if %c : memref<f32> {
  } else {
  }
}

// -----

// rt.if: the condition is a scalar

rt.program {
  %c = rt.alloc : memref<2xi1>
  // expected-error @+1 {{rt.if: condition must be a scalar bool buffer (memref<i1>), got memref<2xi1>}}
  rt.if %c : memref<2xi1> {
  } else {
  }
}

// -----

// rt.h2d reads into a buffer, not a tensor

rt.program {
  %x = "graph.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  // expected-error @+1 {{tensor<4xf32> should be of base attribute memref}}
  rt.h2d "x", %x : tensor<4xf32>
}

// -----

// rt.kernel operands are buffers

rt.program {
  %x = "graph.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf32>
  %y = rt.alloc : memref<4xf32>
  // expected-error @+1 {{tensor<4xf32> should be of base attribute memref}}
  rt.kernel "popxl.relu" (%x) -> (%y) : (tensor<4xf32>) -> (memref<4xf32>)
}

// -----

// rt.kernel needs a kernel name

rt.program {
  %x = rt.alloc : memref<4xf32>
  // expected-error @+1 {{rt.kernel: property 'kernel' expected in operation 'rt.kernel'}}
  "rt.kernel"(%x, %x) <{operandSegmentSizes = array<i32: 1, 1>}> : (memref<4xf32>, memref<4xf32>) -> ()
}

