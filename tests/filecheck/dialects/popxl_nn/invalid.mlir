// RUN: xl-opt %s --split-input-file --verify-diagnostics

// the weight's input channels per group must match the input

func.func @f(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error @+1 {{popxl.conv: weight (6, 4, 3, 3) float32 has 4 input channels per group; input (2, 4, 8, 8) float32 with groups 2 needs 2}}
  %y = popxl.conv %x, %w {groups = 2 : i64} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<2x6x6x6xf32>
  func.return
}

// -----

// the window must fit in the padded input

func.func @f(%x: tensor<1x1x2x2xf32>, %w: tensor<1x1x3x3xf32>) {
  // expected-error @+1 {{popxl.conv: the window (5 elements with kernel 3, dilation 2) is larger than spatial dim 0 of size 2 plus padding 0+0}}
  %y = popxl.conv %x, %w {dilation = array<i64: 2, 2>} : (tensor<1x1x2x2xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x1x1xf32>
  func.return
}

// -----

// pads: begins then ends of every spatial dim

func.func @f(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // expected-error @+1 {{popxl.conv: pads (1, 1) must have 4 entries (begins then ends of 2 spatial dims)}}
  %y = popxl.conv %x, %w {pads = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x4x4xf32>
  func.return
}

// -----

// output_padding must be smaller than the stride (or the dilation)

func.func @f(%x: tensor<1x2x4xf32>, %w: tensor<2x1x3xf32>) {
  // expected-error @+1 {{popxl.conv_transpose: output_padding (2,) must be >= 0 and smaller than the stride or the dilation}}
  %y = popxl.conv_transpose %x, %w {stride = array<i64: 2>, output_padding = array<i64: 2>} : (tensor<1x2x4xf32>, tensor<2x1x3xf32>) -> tensor<1x1x11xf32>
  func.return
}

// -----

// pooling pads are at most half the window

func.func @f(%x: tensor<1x1x4x4xf32>) {
  // expected-error @+1 {{popxl.max_pool: pads (2, 2, 2, 2) must be at most half the window (3) along spatial dim 0}}
  %y = popxl.max_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 2, 2, 2, 2>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x6x6xf32>
  func.return
}

// -----

// the input is (N, C, *spatial)

func.func @f(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{popxl.average_pool: input must be (N, C, *spatial) with at least one spatial dim, got (4, 4) float32}}
  %y = popxl.average_pool %x {kernel = array<i64: 2>} : (tensor<4x4xf32>) -> tensor<4x2xf32>
  func.return
}
