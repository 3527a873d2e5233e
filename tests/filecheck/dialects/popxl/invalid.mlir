// RUN: xl-opt %s --split-input-file --verify-diagnostics

// operand dtypes must match

func.func @f(%a: tensor<4xf32>, %b: tensor<4xi32>) {
  // expected-error @+1 {{popxl.add: operand dtypes differ: (4,) float32, (4,) int32}}
  %c = popxl.add %a, %b : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  func.return
}

// -----

// shapes must broadcast

func.func @f(%a: tensor<4xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{popxl.mul: cannot broadcast (4,) float32 with (3,) float32}}
  %c = popxl.mul %a, %b : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  func.return
}

// -----

// declared result type must equal the inferred one

func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{popxl.sub: result types ((3,) float32) differ from the inferred ((2, 3) float32) for operands ((2, 3) float32, (3,) float32)}}
  %c = popxl.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

// matmul contracting dims

func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{popxl.matmul: contracting dimensions differ: (2, 3) float32 @ (4, 5) float32 (3 vs 4)}}
  %c = popxl.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return
}

// -----

// concat: other dims must match

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{popxl.concat: shapes must match except on axis 0: (2, 3), (2, 4)}}
  %c = popxl.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  func.return
}

// -----

// slice step zero

func.func @f(%a: tensor<4xf32>) {
  // expected-error @+1 {{popxl.slice: slice step cannot be zero}}
  %c = popxl.slice %a {start = array<i64: 0>, stop = array<i64: 4>, step = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// gather needs integer indices

func.func @f(%a: tensor<10x4xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{popxl.gather: indices must be an integer tensor, got (3,) float32}}
  %c = popxl.gather %a, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

// where needs a bool condition

func.func @f(%c: tensor<4xi32>, %a: tensor<4xf32>) {
  // expected-error @+1 {{popxl.where: condition must be a bool tensor, got (4,) int32}}
  %r = popxl.where %c, %a, %a : (tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// onehot values are [off, on]

func.func @f(%i: tensor<4xi32>, %v: tensor<3xf32>) {
  // expected-error @+1 {{popxl.onehot: values must have shape (2,) ([off, on]), got (3,) float32}}
  %r = popxl.onehot %i, %v {num_classes = 5 : i64} : (tensor<4xi32>, tensor<3xf32>) -> tensor<4x5xf32>
  func.return
}

// -----

// squeeze a dim of size > 1

func.func @f(%a: tensor<1x3xf32>) {
  // expected-error @+1 {{popxl.squeeze: cannot squeeze axis 1 of size 3 in (1, 3) float32}}
  %r = popxl.squeeze %a {axes = array<i64: 1>} : (tensor<1x3xf32>) -> tensor<1xf32>
  func.return
}

// -----

// expand to a non-broadcastable shape

func.func @f(%a: tensor<3xf32>) {
  // expected-error @+1 {{popxl.expand: cannot broadcast (3,) float32 to (2, 4) float32}}
  %r = popxl.expand %a : (tensor<3xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

// reduce_to_shape to a shape that does not broadcast back

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{popxl.reduce_to_shape: (2, 1, 1) float32 does not broadcast to the input (2, 3) float32}}
  %r = popxl.reduce_to_shape %a : (tensor<2x3xf32>) -> tensor<2x1x1xf32>
  func.return
}

// -----

// init_type

func.func @f() {
  // expected-error @+1 {{popxl.init: init_type must be "zero" or "undef", got 'ones'}}
  %r = popxl.init {init_type = "ones"} : () -> tensor<2xf32>
  func.return
}

// -----

// argmax result is int32

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{popxl.argmax: result types ((2,) int64) differ from the inferred ((2,) int32) for operands ((2, 3) float32)}}
  %r = popxl.argmax %a {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2xi64>
  func.return
}

// -----

// nll_loss labels must match probs without the class dim

func.func @f(%p: tensor<8x10xf32>, %y: tensor<10xi32>) {
  // expected-error @+1 {{popxl.nll_loss: labels (10,) int32 must have the shape of probs (8, 10) float32 without its last (class) dim}}
  %r = popxl.nll_loss %p, %y {reduction = "mean"} : (tensor<8x10xf32>, tensor<10xi32>) -> tensor<f32>
  func.return
}

// -----

// nll_loss reduction

func.func @f(%p: tensor<8x10xf32>, %y: tensor<8xi32>) {
  // expected-error @+1 {{popxl.nll_loss: reduction must be one of ('mean', 'sum', 'none'), got 'avg'}}
  %r = popxl.nll_loss %p, %y {reduction = "avg"} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  func.return
}

// -----

// loss_grad given twice

func.func @f(%p: tensor<8x10xf32>, %y: tensor<8xi32>, %g: tensor<f32>) {
  // expected-error @+1 {{popxl.nll_loss_with_softmax_grad: loss_grad is given both as a property and as a tensor operand}}
  %l, %dx = popxl.nll_loss_with_softmax_grad %p, %y, %g {loss_grad = 1.0 : f64, reduction = "mean"} : (tensor<8x10xf32>, tensor<8xi32>, tensor<f32>) -> (tensor<f32>, tensor<8x10xf32>)
  func.return
}

// -----

// gelu_grad operand types

func.func @f(%dy: tensor<4xf16>, %x: tensor<4xf32>) {
  // expected-error @+1 {{popxl.gelu_grad: dy (4,) float16 and x (4,) float32 must have the same type}}
  %r = popxl.gelu_grad %dy, %x : (tensor<4xf16>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// nll_loss_grad dloss type

func.func @f(%p: tensor<8x10xf32>, %y: tensor<8xi32>, %d: tensor<8xf32>) {
  // expected-error @+1 {{popxl.nll_loss_grad: dloss (8,) float32 must have the loss type () float32}}
  %r = popxl.nll_loss_grad %p, %y, %d {reduction = "sum"} : (tensor<8x10xf32>, tensor<8xi32>, tensor<8xf32>) -> tensor<8x10xf32>
  func.return
}

// -----

// gather_grad: dy must be the gather of the result type

func.func @f(%dy: tensor<3x5xf32>, %i: tensor<3xi32>) {
  // expected-error @+1 {{popxl.gather_grad: dy (3, 5) float32 is not the gather of (10, 4) float32 at (3,) int32 (expected (3, 4) float32)}}
  %r = popxl.gather_grad %dy, %i {axis = 0 : i64} : (tensor<3x5xf32>, tensor<3xi32>) -> tensor<10x4xf32>
  func.return
}

// -----

// slice_grad: dy must be the slice of the result type

func.func @f(%dy: tensor<3xf32>) {
  // expected-error @+1 {{popxl.slice_grad: dy (3,) float32 is not the slice of (4,) float32 (expected (2,) float32)}}
  %r = popxl.slice_grad %dy {start = array<i64: 1>, stop = array<i64: 3>} : (tensor<3xf32>) -> tensor<4xf32>
  func.return
}

// -----

// reduce_max_grad: y and dy have the reduced type

func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{popxl.reduce_max_grad: y (3,) float32 and dy (3,) float32 must have the reduced type (2,) float32 of x (2, 3) float32}}
  %r = popxl.reduce_max_grad %x, %y, %y {axis = array<i64: 1>} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

// in-place update must not change the shape

func.func @f(%t: tensor<4xf32>, %x: tensor<2x4xf32>) {
  // expected-error @+1 {{popxl.accumulate_: cannot update (4,) float32 in place with X (2, 4) float32}}
  popxl.accumulate_ %t, %x : (tensor<4xf32>, tensor<2x4xf32>) -> ()
  func.return
}

// -----

// in-place ops have no results

func.func @f(%t: tensor<4xf32>, %x: tensor<4xf32>) {
  // expected-error @+1 {{popxl.accumulate_: Expected 0 results, but got 1}}
  %r = "popxl.accumulate_"(%t, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// moving average needs f

func.func @f(%t: tensor<4xf32>, %x: tensor<4xf32>) {
  // expected-error @+1 {{popxl.accumulate_moving_average_: f is required (a property or a tensor operand)}}
  popxl.accumulate_moving_average_ %t, %x : (tensor<4xf32>, tensor<4xf32>) -> ()
  func.return
}

// -----

// a tensor factor has one element

func.func @f(%t: tensor<4xf32>, %x: tensor<4xf32>, %s: tensor<2xf32>) {
  // expected-error @+1 {{popxl.accumulate_mean_: step_tensor must be a numeric tensor with one element, got (2,) float32}}
  popxl.accumulate_mean_ %t, %x, %s : (tensor<4xf32>, tensor<4xf32>, tensor<2xf32>) -> ()
  func.return
}

// -----

// sparse_accumulate_ X shape

func.func @f(%t: tensor<10x4xf32>, %x: tensor<2x4xf32>, %i: tensor<3xi32>) {
  // expected-error @+1 {{popxl.sparse_accumulate_: X (2, 4) float32 must have the shape (3, 4) of gathering (10, 4) float32 at (3,) int32}}
  popxl.sparse_accumulate_ %t, %x, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<2x4xf32>, tensor<3xi32>) -> ()
  func.return
}

// -----

// increment_mod modulus

func.func @f(%t: tensor<1xui32>) {
  // expected-error @+1 {{popxl.increment_mod_: modulus cannot be zero}}
  popxl.increment_mod_ %t {increment = 1.0 : f64, modulus = 0.0 : f64} : (tensor<1xui32>) -> ()
  func.return
}

// -----

// dynamic_slice index has one element per axis

func.func @f(%t: tensor<4x3xf32>, %i: tensor<2xui32>) {
  // expected-error @+1 {{popxl.dynamic_slice: index (2,) uint32 must have one element per axis (1)}}
  %r = popxl.dynamic_slice %t, %i {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<2xui32>) -> tensor<1x3xf32>
  func.return
}

// -----

// dynamic_update_ update shape

func.func @f(%t: tensor<4x3xf32>, %i: tensor<1xui32>, %u: tensor<2x3xf32>) {
  // expected-error @+1 {{popxl.dynamic_update_: update (2, 3) float32 must have the slice shape (1, 3) of (4, 3) float32}}
  popxl.dynamic_update_ %t, %i, %u {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<1xui32>, tensor<2x3xf32>) -> ()
  func.return
}

// -----

// adam_updater bias correction needs the betas

func.func @f(%m: tensor<4xf32>, %v: tensor<4xf32>, %w: tensor<4xf32>, %t: tensor<f32>) {
  // expected-error @+1 {{popxl.adam_updater: bias correction (time_step given) needs beta2}}
  %u = popxl.adam_updater %m, %v, %w, %t {beta1 = 0.9 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  func.return
}

// -----

// weight decay needs the weight

func.func @f(%m: tensor<4xf32>, %v: tensor<4xf32>) {
  // expected-error @+1 {{popxl.lamb_updater: weight_decay needs the weight operand}}
  %u = popxl.lamb_updater %m, %v {weight_decay = 0.1 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// updater result dtype is v's

func.func @f(%m: tensor<4xf16>, %v: tensor<4xf32>) {
  // expected-error @+1 {{popxl.adamax_updater: result types ((4,) float16) differ from the inferred ((4,) float32) for operands ((4,) float16, (4,) float32)}}
  %u = popxl.adamax_updater %m, %v : (tensor<4xf16>, tensor<4xf32>) -> tensor<4xf16>
  func.return
}

// -----

// adam_var_update needs a learning rate

func.func @f(%w: tensor<4xf32>, %x: tensor<4xf32>, %r1: tensor<f32>, %r2: tensor<f32>) {
  // expected-error @+1 {{popxl.adam_var_update: learning_rate is required (a property or a tensor operand)}}
  popxl.adam_var_update %w, %x, %r1, %r2 : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> ()
  func.return
}

