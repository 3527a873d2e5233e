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

func.func @select(%x: tensor<3x5xf32>, %s: tensor<4x3xf32>, %i: tensor<2x3xi32>, %v: tensor<2x3xf32>, %d: tensor<5x2xf32>, %j: tensor<5xi32>, %init: tensor<3x2xf32>, %dy: tensor<3x2xf32>, %h: tensor<10xf32>) {
  %tv, %ti = popxl.topk %x {k = 2 : i64, axis = 1 : i64} : (tensor<3x5xf32>) -> (tensor<3x2xf32>, tensor<3x2xi32>)
  %bv, %bi = popxl.topk %x {k = 3 : i64, axis = 0 : i64, largest = false, sorted = false} : (tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<3x5xi32>)
  %sc = popxl.scatter %s, %i, %v {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %ta = popxl.take_along_axis %s, %i {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi32>) -> tensor<2x3xf32>
  %sr = popxl.scatter_reduce %d, %j {axis = 0 : i64, axis_size = 3 : i64, reduction = "max"} : (tensor<5x2xf32>, tensor<5xi32>) -> tensor<3x2xf32>
  %si = popxl.scatter_reduce %d, %j, %init {axis = 0 : i64, axis_size = 3 : i64, reduction = "sum"} : (tensor<5x2xf32>, tensor<5xi32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  %sg = popxl.scatter_reduce_grad %dy, %d, %j, %si, %init {axis = 0 : i64, axis_size = 3 : i64, reduction = "min", wrt = "initial"} : (tensor<3x2xf32>, tensor<5x2xf32>, tensor<5xi32>, tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  %p = popxl.reduce_prod %x {axis = array<i64: 1>} : (tensor<3x5xf32>) -> tensor<3xf32>
  %pg = popxl.reduce_prod_grad %x, %p {axis = array<i64: 1>} : (tensor<3x5xf32>, tensor<3xf32>) -> tensor<3x5xf32>
  %ls = popxl.log_softmax %x {axis = -1 : i64} : (tensor<3x5xf32>) -> tensor<3x5xf32>
  %hg = popxl.histogram %h {levels = array<f64: 0.1, 3.1, 7.0>, absolute_of_input = true} : (tensor<10xf32>) -> tensor<4xui32>
  func.return
}

func.func @resample(%x: tensor<1x2x3x4xf32>, %dy: tensor<1x2x6x8xf32>, %t: tensor<2x3x8x8xf32>, %r: tensor<4x4xf32>, %b: tensor<4xi32>, %g: tensor<4x3x2x2xf32>) {
  %y = popxl.interpolate %x {scales = array<f64: 1.0, 1.0, 2.0, 2.0>, mode = "linear"} : (tensor<1x2x3x4xf32>) -> tensor<1x2x6x8xf32>
  %n = popxl.interpolate %x {scales = array<f64: 1.0, 1.0, 1.5, 0.5>, mode = "nearest", nearest_mode = "floor", coordinate_transformation_mode = "asymmetric"} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x2xf32>
  %dx = popxl.interpolate_grad %dy {scales = array<f64: 1.0, 1.0, 2.0, 2.0>, mode = "cubic"} : (tensor<1x2x6x8xf32>) -> tensor<1x2x3x4xf32>
  %ra = popxl.roi_align %t, %r, %b {output_size = array<i64: 2, 2>, spatial_scale = 5.000000e-01 : f64, sampling_ratio = 2 : i64} : (tensor<2x3x8x8xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<4x3x2x2xf32>
  %rg = popxl.roi_align_grad %g, %r, %b {output_size = array<i64: 2, 2>, spatial_scale = 1.000000e+00 : f64, sampling_ratio = 0 : i64, aligned = true} : (tensor<4x3x2x2xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<2x3x8x8xf32>
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
// CHECK-LABEL: func.func @select(%x: tensor<3x5xf32>, %s: tensor<4x3xf32>, %i: tensor<2x3xi32>, %v: tensor<2x3xf32>, %d: tensor<5x2xf32>, %j: tensor<5xi32>, %init: tensor<3x2xf32>, %dy: tensor<3x2xf32>, %h: tensor<10xf32>) {
// CHECK-NEXT:    %tv, %ti = popxl.topk %x {k = 2 : i64, axis = 1 : i64} : (tensor<3x5xf32>) -> (tensor<3x2xf32>, tensor<3x2xi32>)
// CHECK-NEXT:    %bv, %bi = popxl.topk %x {k = 3 : i64, axis = 0 : i64, largest = false, sorted = false} : (tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<3x5xi32>)
// CHECK-NEXT:    %sc = popxl.scatter %s, %i, %v {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    %ta = popxl.take_along_axis %s, %i {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2x3xi32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %sr = popxl.scatter_reduce %d, %j {axis = 0 : i64, axis_size = 3 : i64, reduction = "max"} : (tensor<5x2xf32>, tensor<5xi32>) -> tensor<3x2xf32>
// CHECK-NEXT:    %si = popxl.scatter_reduce %d, %j, %init {axis = 0 : i64, axis_size = 3 : i64, reduction = "sum"} : (tensor<5x2xf32>, tensor<5xi32>, tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    %sg = popxl.scatter_reduce_grad %dy, %d, %j, %si, %init {axis = 0 : i64, axis_size = 3 : i64, reduction = "min", wrt = "initial"} : (tensor<3x2xf32>, tensor<5x2xf32>, tensor<5xi32>, tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    %p = popxl.reduce_prod %x {axis = array<i64: 1>} : (tensor<3x5xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %pg = popxl.reduce_prod_grad %x, %p {axis = array<i64: 1>} : (tensor<3x5xf32>, tensor<3xf32>) -> tensor<3x5xf32>
// CHECK-NEXT:    %ls = popxl.log_softmax %x {axis = -1 : i64} : (tensor<3x5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT:    %hg = popxl.histogram %h {levels = array<f64: 1.000000e-01, 3.100000e+00, 7.000000e+00>, absolute_of_input = true} : (tensor<10xf32>) -> tensor<4xui32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:    }
// CHECK-LABEL: func.func @resample(%x: tensor<1x2x3x4xf32>, %dy: tensor<1x2x6x8xf32>, %t: tensor<2x3x8x8xf32>, %r: tensor<4x4xf32>, %b: tensor<4xi32>, %g: tensor<4x3x2x2xf32>) {
// CHECK-NEXT:    %y = popxl.interpolate %x {scales = array<f64: 1.000000e+00, 1.000000e+00, 2.000000e+00, 2.000000e+00>, mode = "linear"} : (tensor<1x2x3x4xf32>) -> tensor<1x2x6x8xf32>
// CHECK-NEXT:    %n = popxl.interpolate %x {scales = array<f64: 1.000000e+00, 1.000000e+00, 1.500000e+00, 5.000000e-01>, mode = "nearest", nearest_mode = "floor", coordinate_transformation_mode = "asymmetric"} : (tensor<1x2x3x4xf32>) -> tensor<1x2x4x2xf32>
// CHECK-NEXT:    %dx = popxl.interpolate_grad %dy {scales = array<f64: 1.000000e+00, 1.000000e+00, 2.000000e+00, 2.000000e+00>, mode = "cubic"} : (tensor<1x2x6x8xf32>) -> tensor<1x2x3x4xf32>
// CHECK-NEXT:    %ra = popxl.roi_align %t, %r, %b {output_size = array<i64: 2, 2>, spatial_scale = 5.000000e-01 : f64, sampling_ratio = 2 : i64} : (tensor<2x3x8x8xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<4x3x2x2xf32>
// CHECK-NEXT:    %rg = popxl.roi_align_grad %g, %r, %b {output_size = array<i64: 2, 2>, spatial_scale = 1.000000e+00 : f64, sampling_ratio = 0 : i64, aligned = true} : (tensor<4x3x2x2xf32>, tensor<4x4xf32>, tensor<4xi32>) -> tensor<2x3x8x8xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:    }
