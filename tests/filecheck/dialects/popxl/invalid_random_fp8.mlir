// RUN: xl-opt %s --split-input-file --verify-diagnostics

// Verifier errors of the random, float8 and added elementwise ops.

func.func @f(%seed: tensor<3xui32>) {
  // expected-error @+1 {{popxl.random_uniform: seed must be a uint32 tensor of shape (2,), got (3,) uint32}}
  %r = popxl.random_uniform %seed : (tensor<3xui32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%seed: tensor<2xi32>, %x: tensor<4xf32>) {
  // expected-error @+1 {{popxl.dropout: seed must be a uint32 tensor of shape (2,), got (2,) int32}}
  %r = popxl.dropout %x, %seed {ratio = 0.5 : f64} : (tensor<4xf32>, tensor<2xi32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%seed: tensor<2xui32>, %x: tensor<4xf32>) {
  // expected-error @+1 {{popxl.dropout: ratio 1.0 must be in [0, 1)}}
  %r = popxl.dropout %x, %seed {ratio = 1.0 : f64} : (tensor<4xf32>, tensor<2xui32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%seed: tensor<2xui32>, %x: tensor<4x8xf32>) {
  // expected-error @+1 {{popxl.shaped_dropout: mask shape (3, 1) does not broadcast to the input (4, 8) float32}}
  %r = popxl.shaped_dropout %x, %seed {shape = array<i64: 3, 1>, ratio = 0.5 : f64} : (tensor<4x8xf32>, tensor<2xui32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @f(%seed: tensor<2xui32>) {
  // expected-error @+1 {{popxl.random_normal: the result must be a floating point tensor, got (4,) int32}}
  %r = popxl.random_normal %seed : (tensor<2xui32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @f(%seed: tensor<2xui32>) {
  // expected-error @+1 {{popxl.random_uniform: low 2.0 and high 1.0 must be finite with low <= high}}
  %r = popxl.random_uniform %seed {low = 2.0 : f64, high = 1.0 : f64} : (tensor<2xui32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%x: tensor<4xf32>, %s: tensor<2xi32>) {
  // expected-error @+1 {{popxl.pow2scale_cast_to_fp8: log2_scale must be a scalar int32 tensor, got (2,) int32}}
  %r = popxl.pow2scale_cast_to_fp8 %x, %s : (tensor<4xf32>, tensor<2xi32>) -> tensor<4xf8E4M3FNUZ>
  func.return
}

// -----

func.func @f(%x: tensor<4xf32>, %s: tensor<i32>) {
  // expected-error @+1 {{popxl.pow2scale_cast_to_fp8: the result must be a float8_143 or float8_152 tensor, got (4,) float16}}
  %r = popxl.pow2scale_cast_to_fp8 %x, %s : (tensor<4xf32>, tensor<i32>) -> tensor<4xf16>
  func.return
}

// -----

func.func @f(%a: tensor<2x4xf32>, %b: tensor<4x3xf8E4M3FNUZ>, %s: tensor<i32>) {
  // expected-error @+1 {{popxl.matmul_pow2scaled: lhs must be a float8_143 or float8_152 tensor, got (2, 4) float32}}
  %r = popxl.matmul_pow2scaled %a, %b, %s : (tensor<2x4xf32>, tensor<4x3xf8E4M3FNUZ>, tensor<i32>) -> tensor<2x3xf16>
  func.return
}

// -----

func.func @f(%a: tensor<2x4xf8E4M3FNUZ>, %b: tensor<3x3xf8E4M3FNUZ>, %s: tensor<i32>) {
  // expected-error @+1 {{popxl.matmul_pow2scaled: contracting dimensions differ: (2, 4) float8_e4m3fnuz @ (3, 3) float8_e4m3fnuz (4 vs 3)}}
  %r = popxl.matmul_pow2scaled %a, %b, %s : (tensor<2x4xf8E4M3FNUZ>, tensor<3x3xf8E4M3FNUZ>, tensor<i32>) -> tensor<2x3xf16>
  func.return
}

// -----

func.func @f(%a: tensor<4xf32>) {
  // expected-error @+1 {{popxl.clip: min 2.0 must not be greater than max 1.0 (nor NaN)}}
  %r = popxl.clip %a {min = 2.0 : f64, max = 1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%a: tensor<4xf32>) {
  // expected-error @+1 {{popxl.bitwise_and: unsupported dtype float32 for operands ((4,) float32, (4,) float32)}}
  %r = popxl.bitwise_and %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @f(%a: tensor<4xf32>) {
  // expected-error @+1 {{popxl.print_tensor: separator must be exactly one character, got ', '}}
  %r = popxl.print_tensor %a {title = "a", separator = ", "} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}
