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

// -----

// topk: k at most the size of the axis

func.func @f(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{popxl.topk: k = 5 must be in [1, 4] (the size of axis 1 of (3, 4) float32)}}
  %v, %i = popxl.topk %x {k = 5 : i64, axis = 1 : i64} : (tensor<3x4xf32>) -> (tensor<3x5xf32>, tensor<3x5xi32>)
  func.return
}

// -----

// scatter_reduce: indices of data's shape or 1-D along the axis

func.func @f(%x: tensor<5x2xf32>, %i: tensor<2xi32>) {
  // expected-error @+1 {{popxl.scatter_reduce: indices (2,) must have the shape of data (5, 2) or be 1-D of size 5 (broadcast along axis 0)}}
  %y = popxl.scatter_reduce %x, %i {axis = 0 : i64, axis_size = 3 : i64, reduction = "sum"} : (tensor<5x2xf32>, tensor<2xi32>) -> tensor<3x2xf32>
  func.return
}

// -----

// scatter_reduce: a known reduction

func.func @f(%x: tensor<5xf32>, %i: tensor<5xi32>) {
  // expected-error @+1 {{popxl.scatter_reduce: reduction 'mean' must be one of sum, max, min, none}}
  %y = popxl.scatter_reduce %x, %i {axis = 0 : i64, axis_size = 3 : i64, reduction = "mean"} : (tensor<5xf32>, tensor<5xi32>) -> tensor<3xf32>
  func.return
}

// -----

// interpolate: one scale per dim

func.func @f(%x: tensor<1x2x3x4xf32>) {
  // expected-error @+1 {{popxl.interpolate: scales (2.0, 2.0) must have one entry per dim of (1, 2, 3, 4) float32}}
  %y = popxl.interpolate %x {scales = array<f64: 2.0, 2.0>} : (tensor<1x2x3x4xf32>) -> tensor<1x2x6x8xf32>
  func.return
}

// -----

// roi_align: one batch index per RoI

func.func @f(%x: tensor<2x3x8x8xf32>, %r: tensor<4x4xf32>, %b: tensor<3xi32>) {
  // expected-error @+1 {{popxl.roi_align: batch_index must be (4,), one per RoI, got (3,) int32}}
  %y = popxl.roi_align %x, %r, %b {output_size = array<i64: 2, 2>, spatial_scale = 1.0 : f64, sampling_ratio = 1 : i64} : (tensor<2x3x8x8xf32>, tensor<4x4xf32>, tensor<3xi32>) -> tensor<4x3x2x2xf32>
  func.return
}

// -----

// histogram: ascending levels

func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{popxl.histogram: levels (2.0, 1.0) must be in ascending order}}
  %y = popxl.histogram %x {levels = array<f64: 2.0, 1.0>} : (tensor<4xf32>) -> tensor<3xui32>
  func.return
}
