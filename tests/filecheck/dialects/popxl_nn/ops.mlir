// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Round trip of the popxl neural-network ops (convolution, pooling): custom -> generic -> custom.

func.func @conv(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %x1: tensor<2x4x9xf32>, %w1: tensor<6x2x3xf32>, %t: tensor<2x4x4x4xf32>, %dy: tensor<2x4x8x8xf32>) {
  %y = popxl.conv %x, %w {stride = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %y1 = popxl.conv %x1, %w1 {dilation = array<i64: 2>, groups = 2 : i64} : (tensor<2x4x9xf32>, tensor<6x2x3xf32>) -> tensor<2x6x5xf32>
  %ct = popxl.conv_transpose %t, %w {stride = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, output_padding = array<i64: 1, 1>} : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  %dw = popxl.conv_weight_grad %dy, %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x4x8x8xf32>, tensor<2x3x8x8xf32>) -> tensor<4x3x3x3xf32>
  func.return
}

func.func @pool(%x: tensor<1x3x8x8xf32>, %dy: tensor<1x3x4x4xf32>, %z: tensor<1x2x7xf32>) {
  %m = popxl.max_pool %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
  %a = popxl.average_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  %c = popxl.average_pool %z {kernel = array<i64: 2>, stride = array<i64: 2>, ceil_mode = true, count_include_pad = true} : (tensor<1x2x7xf32>) -> tensor<1x2x4xf32>
  %dm = popxl.max_pool_grad %dy, %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>, tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
  %da = popxl.average_pool_grad %dy {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  func.return
}

// CHECK-LABEL: func.func @conv(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %x1: tensor<2x4x9xf32>, %w1: tensor<6x2x3xf32>, %t: tensor<2x4x4x4xf32>, %dy: tensor<2x4x8x8xf32>) {
// CHECK-NEXT:    %y = popxl.conv %x, %w {stride = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
// CHECK-NEXT:    %y1 = popxl.conv %x1, %w1 {dilation = array<i64: 2>, groups = 2 : i64} : (tensor<2x4x9xf32>, tensor<6x2x3xf32>) -> tensor<2x6x5xf32>
// CHECK-NEXT:    %ct = popxl.conv_transpose %t, %w {stride = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, output_padding = array<i64: 1, 1>} : (tensor<2x4x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x8x8xf32>
// CHECK-NEXT:    %dw = popxl.conv_weight_grad %dy, %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x4x8x8xf32>, tensor<2x3x8x8xf32>) -> tensor<4x3x3x3xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:    }
// CHECK-LABEL: func.func @pool(%x: tensor<1x3x8x8xf32>, %dy: tensor<1x3x4x4xf32>, %z: tensor<1x2x7xf32>) {
// CHECK-NEXT:    %m = popxl.max_pool %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32>
// CHECK-NEXT:    %a = popxl.average_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
// CHECK-NEXT:    %c = popxl.average_pool %z {kernel = array<i64: 2>, stride = array<i64: 2>, ceil_mode = true, count_include_pad = true} : (tensor<1x2x7xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT:    %dm = popxl.max_pool_grad %dy, %x {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>, tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xf32>
// CHECK-NEXT:    %da = popxl.average_pool_grad %dy {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:    }

// CHECK-GENERIC: "popxl.conv"(%x, %w) <{stride = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>}> : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
// CHECK-GENERIC: "popxl.average_pool_grad"(%dy) <{kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>}> : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
