// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Round trip of every popxl op: custom -> generic -> custom.

// Elementwise ops, NumPy broadcasting.
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<4xi32>, %p: tensor<4xi1>, %q: tensor<4xi1>) {
  %add = popxl.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %sub = popxl.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %mul = popxl.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %div = popxl.div %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %pow = popxl.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %max = popxl.maximum %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %min = popxl.minimum %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %eq = popxl.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %gt = popxl.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %and = popxl.logical_and %p, %q : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %or = popxl.logical_or %p, %q : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %not = popxl.logical_not %p : (tensor<4xi1>) -> tensor<4xi1>
  %neg = popxl.neg %i : (tensor<4xi32>) -> tensor<4xi32>
  %abs = popxl.abs %b : (tensor<3xf32>) -> tensor<3xf32>
  %sign = popxl.sign %b : (tensor<3xf32>) -> tensor<3xf32>
  %relu = popxl.relu %b : (tensor<3xf32>) -> tensor<3xf32>
  %gelu = popxl.gelu %b : (tensor<3xf32>) -> tensor<3xf32>
  %tanh = popxl.tanh %b : (tensor<3xf32>) -> tensor<3xf32>
  %sig = popxl.sigmoid %b : (tensor<3xf32>) -> tensor<3xf32>
  %swish = popxl.swish %b : (tensor<3xf32>) -> tensor<3xf32>
  %exp = popxl.exp %b : (tensor<3xf32>) -> tensor<3xf32>
  %log = popxl.log %b : (tensor<3xf32>) -> tensor<3xf32>
  %sqrt = popxl.sqrt %b : (tensor<3xf32>) -> tensor<3xf32>
  %cos = popxl.cos %b : (tensor<3xf32>) -> tensor<3xf32>
  %sin = popxl.sin %b : (tensor<3xf32>) -> tensor<3xf32>
  %id = popxl.identity %i : (tensor<4xi32>) -> tensor<4xi32>
  %det = popxl.detach %b : (tensor<3xf32>) -> tensor<3xf32>
  %cast = popxl.cast %i : (tensor<4xi32>) -> tensor<4xf16>
  %w = popxl.where %p, %i, %id : (tensor<4xi1>, tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  func.return
}

// CHECK-LABEL: func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<4xi32>, %p: tensor<4xi1>, %q: tensor<4xi1>) {
// CHECK-NEXT:    %add = popxl.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %sub = popxl.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %mul = popxl.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %div = popxl.div %i, %i : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %pow = popxl.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %max = popxl.maximum %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %min = popxl.minimum %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %eq = popxl.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT:    %gt = popxl.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT:    %and = popxl.logical_and %p, %q : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT:    %or = popxl.logical_or %p, %q : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT:    %not = popxl.logical_not %p : (tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT:    %neg = popxl.neg %i : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %abs = popxl.abs %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %sign = popxl.sign %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %relu = popxl.relu %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %gelu = popxl.gelu %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %tanh = popxl.tanh %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %sig = popxl.sigmoid %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %swish = popxl.swish %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %exp = popxl.exp %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %log = popxl.log %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %sqrt = popxl.sqrt %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %cos = popxl.cos %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %sin = popxl.sin %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %id = popxl.identity %i : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %det = popxl.detach %b : (tensor<3xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %cast = popxl.cast %i : (tensor<4xi32>) -> tensor<4xf16>
// CHECK-NEXT:    %w = popxl.where %p, %i, %id : (tensor<4xi1>, tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    func.return

// -----


// Linear algebra, NN, shapes, reductions.
func.func @shape(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>, %e: tensor<1x3x1xf32>, %ids: tensor<2x3xi32>, %v: tensor<2xf16>) {
  %mm = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %sm = popxl.softmax %mm {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %cs = popxl.cumsum %mm {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %csr = popxl.cumsum %x {dim = -2 : i64, reverse = true} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %rs = popxl.reshape %x : (tensor<2x4xf32>) -> tensor<8xf32>
  %tr = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %cat = popxl.concat %x, %x, %x {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<6x4xf32>
  %sl = popxl.slice %x {start = array<i64: 3>, stop = array<i64: -9223372036854775808>, step = array<i64: -2>, axes = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2x2xf32>
  %sl2 = popxl.slice %x : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %ga = popxl.gather %w, %ids {axis = 0 : i64, zero_oor = true} : (tensor<4x3xf32>, tensor<2x3xi32>) -> tensor<2x3x3xf32>
  %oh = popxl.onehot %ids, %v {num_classes = 5 : i64, axis = 1 : i64} : (tensor<2x3xi32>, tensor<2xf16>) -> tensor<2x5x3xf16>
  %sq = popxl.squeeze %e {axes = array<i64: 0>} : (tensor<1x3x1xf32>) -> tensor<3x1xf32>
  %sq2 = popxl.squeeze %e : (tensor<1x3x1xf32>) -> tensor<3xf32>
  %ex = popxl.expand %e : (tensor<1x3x1xf32>) -> tensor<2x3x4xf32>
  %rts = popxl.reduce_to_shape %ex : (tensor<2x3x4xf32>) -> tensor<3x1xf32>
  %init = popxl.init {init_type = "zero"} : () -> tensor<2x2xi32>
  %undef = popxl.init {init_type = "undef"} : () -> tensor<2xf32>
  %am = popxl.argmax %x {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2xi32>
  %an = popxl.argmin %x {axis = 0 : i64, keepdims = true} : (tensor<2x4xf32>) -> tensor<1x4xi32>
  %rsum = popxl.reduce_sum %x : (tensor<2x4xf32>) -> tensor<f32>
  %rmean = popxl.reduce_mean %x {axis = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2xf32>
  %rmax = popxl.reduce_max %x {axis = array<i64: 1>, keepdims = true} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %rmin = popxl.reduce_min %x {axis = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  func.return
}

// CHECK-LABEL: func.func @shape(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>, %e: tensor<1x3x1xf32>, %ids: tensor<2x3xi32>, %v: tensor<2xf16>) {
// CHECK-NEXT:    %mm = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %sm = popxl.softmax %mm {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %cs = popxl.cumsum %mm {dim = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %csr = popxl.cumsum %x {dim = -2 : i64, reverse = true} : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %rs = popxl.reshape %x : (tensor<2x4xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %tr = popxl.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
// CHECK-NEXT:    %cat = popxl.concat %x, %x, %x {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT:    %sl = popxl.slice %x {start = array<i64: 3>, stop = array<i64: -9223372036854775808>, step = array<i64: -2>, axes = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:    %sl2 = popxl.slice %x : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %ga = popxl.gather %w, %ids {axis = 0 : i64, zero_oor = true} : (tensor<4x3xf32>, tensor<2x3xi32>) -> tensor<2x3x3xf32>
// CHECK-NEXT:    %oh = popxl.onehot %ids, %v {num_classes = 5 : i64, axis = 1 : i64} : (tensor<2x3xi32>, tensor<2xf16>) -> tensor<2x5x3xf16>
// CHECK-NEXT:    %sq = popxl.squeeze %e {axes = array<i64: 0>} : (tensor<1x3x1xf32>) -> tensor<3x1xf32>
// CHECK-NEXT:    %sq2 = popxl.squeeze %e : (tensor<1x3x1xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %ex = popxl.expand %e : (tensor<1x3x1xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT:    %rts = popxl.reduce_to_shape %ex : (tensor<2x3x4xf32>) -> tensor<3x1xf32>
// CHECK-NEXT:    %init = popxl.init {init_type = "zero"} : () -> tensor<2x2xi32>
// CHECK-NEXT:    %undef = popxl.init {init_type = "undef"} : () -> tensor<2xf32>
// CHECK-NEXT:    %am = popxl.argmax %x {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2xi32>
// CHECK-NEXT:    %an = popxl.argmin %x {axis = 0 : i64, keepdims = true} : (tensor<2x4xf32>) -> tensor<1x4xi32>
// CHECK-NEXT:    %rsum = popxl.reduce_sum %x : (tensor<2x4xf32>) -> tensor<f32>
// CHECK-NEXT:    %rmean = popxl.reduce_mean %x {axis = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %rmax = popxl.reduce_max %x {axis = array<i64: 1>, keepdims = true} : (tensor<2x4xf32>) -> tensor<2x1xf32>
// CHECK-NEXT:    %rmin = popxl.reduce_min %x {axis = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
// CHECK-NEXT:    func.return

// -----


// Losses and gradient helpers.
func.func @grads(%p: tensor<8x10xf32>, %y: tensor<8xi32>, %dl: tensor<f32>, %dy: tensor<8x10xf32>, %s: tensor<2x3x10xf32>, %i: tensor<2x3xi32>, %r: tensor<8xf32>) {
  %nll = popxl.nll_loss %p, %y {reduction = "mean", ignore_index = 0 : i64, log_prob = false} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
  %nlln = popxl.nll_loss %p, %y {reduction = "none"} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<8xf32>
  %l, %dx = popxl.nll_loss_with_softmax_grad %p, %y {loss_grad = 1.000000e+00 : f64, reduction = "mean"} : (tensor<8x10xf32>, tensor<8xi32>) -> (tensor<f32>, tensor<8x10xf32>)
  %l2, %dx2 = popxl.nll_loss_with_softmax_grad %p, %y, %dl {reduction = "sum", ignore_index = -100 : i64} : (tensor<8x10xf32>, tensor<8xi32>, tensor<f32>) -> (tensor<f32>, tensor<8x10xf32>)
  %gg = popxl.gelu_grad %dy, %p : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
  %rg = popxl.relu_grad %dy, %p : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
  %sg = popxl.softmax_grad %dy, %p {axis = -1 : i64} : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
  %ng = popxl.nll_loss_grad %p, %y, %dl {reduction = "mean", log_prob = true} : (tensor<8x10xf32>, tensor<8xi32>, tensor<f32>) -> tensor<8x10xf32>
  %gag = popxl.gather_grad %s, %i {axis = 0 : i64} : (tensor<2x3x10xf32>, tensor<2x3xi32>) -> tensor<8x10xf32>
  %slg = popxl.slice_grad %dy {start = array<i64: 1>, stop = array<i64: 9>, axes = array<i64: 0>} : (tensor<8x10xf32>) -> tensor<10x10xf32>
  %rmg = popxl.reduce_max_grad %p, %r, %r {axis = array<i64: 1>} : (tensor<8x10xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8x10xf32>
  func.return
}

// CHECK-LABEL: func.func @grads(%p: tensor<8x10xf32>, %y: tensor<8xi32>, %dl: tensor<f32>, %dy: tensor<8x10xf32>, %s: tensor<2x3x10xf32>, %i: tensor<2x3xi32>, %r: tensor<8xf32>) {
// CHECK-NEXT:    %nll = popxl.nll_loss %p, %y {reduction = "mean", ignore_index = 0 : i64, log_prob = false} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<f32>
// CHECK-NEXT:    %nlln = popxl.nll_loss %p, %y {reduction = "none"} : (tensor<8x10xf32>, tensor<8xi32>) -> tensor<8xf32>
// CHECK-NEXT:    %l, %dx = popxl.nll_loss_with_softmax_grad %p, %y {loss_grad = 1.000000e+00 : f64, reduction = "mean"} : (tensor<8x10xf32>, tensor<8xi32>) -> (tensor<f32>, tensor<8x10xf32>)
// CHECK-NEXT:    %l2, %dx2 = popxl.nll_loss_with_softmax_grad %p, %y, %dl {reduction = "sum", ignore_index = -100 : i64} : (tensor<8x10xf32>, tensor<8xi32>, tensor<f32>) -> (tensor<f32>, tensor<8x10xf32>)
// CHECK-NEXT:    %gg = popxl.gelu_grad %dy, %p : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
// CHECK-NEXT:    %rg = popxl.relu_grad %dy, %p : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
// CHECK-NEXT:    %sg = popxl.softmax_grad %dy, %p {axis = -1 : i64} : (tensor<8x10xf32>, tensor<8x10xf32>) -> tensor<8x10xf32>
// CHECK-NEXT:    %ng = popxl.nll_loss_grad %p, %y, %dl {reduction = "mean", log_prob = true} : (tensor<8x10xf32>, tensor<8xi32>, tensor<f32>) -> tensor<8x10xf32>
// CHECK-NEXT:    %gag = popxl.gather_grad %s, %i {axis = 0 : i64} : (tensor<2x3x10xf32>, tensor<2x3xi32>) -> tensor<8x10xf32>
// CHECK-NEXT:    %slg = popxl.slice_grad %dy {start = array<i64: 1>, stop = array<i64: 9>, axes = array<i64: 0>} : (tensor<8x10xf32>) -> tensor<10x10xf32>
// CHECK-NEXT:    %rmg = popxl.reduce_max_grad %p, %r, %r {axis = array<i64: 1>} : (tensor<8x10xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8x10xf32>
// CHECK-NEXT:    func.return

// -----


// In-place updates: scalar factors as f64 properties or scalar tensor operands.
func.func @updates(%t: tensor<4x3xf32>, %h: tensor<4x3xf16>, %x: tensor<4x3xf32>, %f: tensor<f32>, %ids: tensor<2xi32>, %g: tensor<2x3xf32>, %c: tensor<1xui32>, %u: tensor<1x3xf32>) {
  popxl.scaled_add_ %t, %x {a = 1.000000e+00 : f64, b = -5.000000e-02 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  %sa = popxl.scaled_add %t, %x {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  popxl.accumulate_ %t, %x {f = 5.000000e-01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  popxl.accumulate_ %t, %x, %f : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
  popxl.accumulate_square_ %t, %x : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  popxl.accumulate_mean_ %t, %x, %f : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
  popxl.accumulate_mean_ %t, %x {step = 3.000000e+00 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  popxl.accumulate_moving_average_ %h, %x {f = 9.000000e-01 : f64} : (tensor<4x3xf16>, tensor<4x3xf32>) -> ()
  popxl.accumulate_moving_average_square_ %t, %x, %f : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
  popxl.accumulator_scale_ %t {f = 0.000000e+00 : f64} : (tensor<4x3xf32>) -> ()
  popxl.accumulator_scale_ %t, %f : (tensor<4x3xf32>, tensor<f32>) -> ()
  popxl.accumulator_zero_ %t : (tensor<4x3xf32>) -> ()
  popxl.sparse_accumulate_ %t, %g, %ids {axis = 0 : i64, f = 2.000000e+00 : f64} : (tensor<4x3xf32>, tensor<2x3xf32>, tensor<2xi32>) -> ()
  popxl.copy_var_update_ %t, %x : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
  %cn = popxl.increment_mod %c {increment = 1.000000e+00 : f64, modulus = 3.000000e+00 : f64} : (tensor<1xui32>) -> tensor<1xui32>
  popxl.increment_mod_ %c {increment = 1.000000e+00 : f64, modulus = 3.000000e+00 : f64} : (tensor<1xui32>) -> ()
  %ds = popxl.dynamic_slice %t, %c {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<1xui32>) -> tensor<1x3xf32>
  %du = popxl.dynamic_update %t, %c, %u {axes = array<i64: 0>, sizes = array<i64: 1>, no_overlap = true} : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> tensor<4x3xf32>
  popxl.dynamic_update_ %t, %c, %u {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> ()
  func.return
}

// CHECK-LABEL: func.func @updates(%t: tensor<4x3xf32>, %h: tensor<4x3xf16>, %x: tensor<4x3xf32>, %f: tensor<f32>, %ids: tensor<2xi32>, %g: tensor<2x3xf32>, %c: tensor<1xui32>, %u: tensor<1x3xf32>) {
// CHECK-NEXT:    popxl.scaled_add_ %t, %x {a = 1.000000e+00 : f64, b = -5.000000e-02 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
// CHECK-NEXT:    %sa = popxl.scaled_add %t, %x {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    popxl.accumulate_ %t, %x {f = 5.000000e-01 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
// CHECK-NEXT:    popxl.accumulate_ %t, %x, %f : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
// CHECK-NEXT:    popxl.accumulate_square_ %t, %x : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
// CHECK-NEXT:    popxl.accumulate_mean_ %t, %x, %f : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
// CHECK-NEXT:    popxl.accumulate_mean_ %t, %x {step = 3.000000e+00 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
// CHECK-NEXT:    popxl.accumulate_moving_average_ %h, %x {f = 9.000000e-01 : f64} : (tensor<4x3xf16>, tensor<4x3xf32>) -> ()
// CHECK-NEXT:    popxl.accumulate_moving_average_square_ %t, %x, %f : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> ()
// CHECK-NEXT:    popxl.accumulator_scale_ %t {f = 0.000000e+00 : f64} : (tensor<4x3xf32>) -> ()
// CHECK-NEXT:    popxl.accumulator_scale_ %t, %f : (tensor<4x3xf32>, tensor<f32>) -> ()
// CHECK-NEXT:    popxl.accumulator_zero_ %t : (tensor<4x3xf32>) -> ()
// CHECK-NEXT:    popxl.sparse_accumulate_ %t, %g, %ids {axis = 0 : i64, f = 2.000000e+00 : f64} : (tensor<4x3xf32>, tensor<2x3xf32>, tensor<2xi32>) -> ()
// CHECK-NEXT:    popxl.copy_var_update_ %t, %x : (tensor<4x3xf32>, tensor<4x3xf32>) -> ()
// CHECK-NEXT:    %cn = popxl.increment_mod %c {increment = 1.000000e+00 : f64, modulus = 3.000000e+00 : f64} : (tensor<1xui32>) -> tensor<1xui32>
// CHECK-NEXT:    popxl.increment_mod_ %c {increment = 1.000000e+00 : f64, modulus = 3.000000e+00 : f64} : (tensor<1xui32>) -> ()
// CHECK-NEXT:    %ds = popxl.dynamic_slice %t, %c {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<1xui32>) -> tensor<1x3xf32>
// CHECK-NEXT:    %du = popxl.dynamic_update %t, %c, %u {axes = array<i64: 0>, sizes = array<i64: 1>, no_overlap = true} : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    popxl.dynamic_update_ %t, %c, %u {axes = array<i64: 0>, sizes = array<i64: 1>} : (tensor<4x3xf32>, tensor<1xui32>, tensor<1x3xf32>) -> ()
// CHECK-NEXT:    func.return

// -----


// Optimiser maths; optional operands match greedily, else operandSegmentSizes is printed.
func.func @optim(%m: tensor<4xf16>, %v: tensor<4xf32>, %w: tensor<4xf32>, %step: tensor<f32>, %b: tensor<f32>, %r1: tensor<f32>, %r2: tensor<f32>) {
  %u = popxl.adam_updater %m, %v, %w, %step {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, weight_decay = 1.000000e-02 : f64, epsilon = 1.000000e-05 : f64} : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %u2 = popxl.adam_updater %m, %v : (tensor<4xf16>, tensor<4xf32>) -> tensor<4xf32>
  %u3 = popxl.adam_updater %m, %v, %step, %b {beta1 = 9.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1, 0>} : (tensor<4xf16>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>
  %u4 = popxl.lamb_updater %m, %v, %w, %step {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64} : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %u5 = popxl.adamax_updater %v, %v, %w, %step, %b, %b {operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0>} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>
  popxl.adam_var_update %w, %u, %r1, %r2 {learning_rate = 1.000000e-03 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> ()
  popxl.adam_var_update %w, %u, %r1, %r2, %b {max_weight_norm = 1.000000e+00 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> ()
  func.return
}

// CHECK-LABEL: func.func @optim(%m: tensor<4xf16>, %v: tensor<4xf32>, %w: tensor<4xf32>, %step: tensor<f32>, %b: tensor<f32>, %r1: tensor<f32>, %r2: tensor<f32>) {
// CHECK-NEXT:    %u = popxl.adam_updater %m, %v, %w, %step {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, weight_decay = 1.000000e-02 : f64, epsilon = 1.000000e-05 : f64} : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK-NEXT:    %u2 = popxl.adam_updater %m, %v : (tensor<4xf16>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %u3 = popxl.adam_updater %m, %v, %step, %b {beta1 = 9.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1, 0>} : (tensor<4xf16>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>
// CHECK-NEXT:    %u4 = popxl.lamb_updater %m, %v, %w, %step {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64} : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK-NEXT:    %u5 = popxl.adamax_updater %v, %v, %w, %step, %b, %b : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>
// CHECK-NEXT:    popxl.adam_var_update %w, %u, %r1, %r2 {learning_rate = 1.000000e-03 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> ()
// CHECK-NEXT:    popxl.adam_var_update %w, %u, %r1, %r2, %b {max_weight_norm = 1.000000e+00 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> ()
// CHECK-NEXT:    func.return

// Generic form: properties (incl. the operand segments) go in <{...}>.
// CHECK-GENERIC:      %u = "popxl.adam_updater"(%m, %v, %w, %step) <{beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64, weight_decay = 1.000000e-02 : f64, epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0>}> : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK-GENERIC-NEXT: %u2 = "popxl.adam_updater"(%m, %v) <{operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>}> : (tensor<4xf16>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-GENERIC-NEXT: %u3 = "popxl.adam_updater"(%m, %v, %step, %b) <{beta1 = 9.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1, 0>}> : (tensor<4xf16>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>

// -----

// More elementwise ops (ceil, floor, erf, geluerf, fmod, bitwise, logical_xor, clip), print_tensor.
func.func @elementwise_more(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<4xi32>, %j: tensor<4xi32>, %p: tensor<4xi1>, %q: tensor<4xi1>) {
  %ceil = popxl.ceil %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %floor = popxl.floor %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %erf = popxl.erf %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %ge = popxl.geluerf %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %geg = popxl.geluerf_grad %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %fmod = popxl.fmod %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %imod = popxl.fmod %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %bnot = popxl.bitwise_not %i : (tensor<4xi32>) -> tensor<4xi32>
  %band = popxl.bitwise_and %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %bor = popxl.bitwise_or %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %bxor = popxl.bitwise_xor %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %bxnor = popxl.bitwise_xnor %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %lxor = popxl.logical_xor %p, %q : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %clip = popxl.clip %a {min = -1.0 : f64, max = 2.5 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %clipi = popxl.clip %i {min = 0.0 : f64} : (tensor<4xi32>) -> tensor<4xi32>
  %pt = popxl.print_tensor %a {title = "a", print_gradient = true, digits = 4 : i64, separator = ","} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

// CHECK-LABEL: func.func @elementwise_more(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<4xi32>, %j: tensor<4xi32>, %p: tensor<4xi1>, %q: tensor<4xi1>) {
// CHECK-NEXT:    %ceil = popxl.ceil %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %floor = popxl.floor %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %erf = popxl.erf %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %ge = popxl.geluerf %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %geg = popxl.geluerf_grad %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %fmod = popxl.fmod %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %imod = popxl.fmod %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %bnot = popxl.bitwise_not %i : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %band = popxl.bitwise_and %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %bor = popxl.bitwise_or %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %bxor = popxl.bitwise_xor %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %bxnor = popxl.bitwise_xnor %i, %j : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %lxor = popxl.logical_xor %p, %q : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK-NEXT:    %clip = popxl.clip %a {min = -1.000000e+00 : f64, max = 2.500000e+00 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %clipi = popxl.clip %i {min = 0.000000e+00 : f64} : (tensor<4xi32>) -> tensor<4xi32>
// CHECK-NEXT:    %pt = popxl.print_tensor %a {title = "a", print_gradient = true, digits = 4 : i64, separator = ","} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    func.return

// -----

// float8 (f8E4M3FNUZ = popxl.float8_143, f8E5M2FNUZ = popxl.float8_152): scaled casts and matmul.
func.func @float8(%x: tensor<2x4xf32>, %s: tensor<i32>, %w: tensor<4x3xf8E5M2FNUZ>) {
  %x8 = popxl.pow2scale_cast_to_fp8 %x, %s : (tensor<2x4xf32>, tensor<i32>) -> tensor<2x4xf8E4M3FNUZ>
  %y = popxl.matmul_pow2scaled %x8, %w, %s : (tensor<2x4xf8E4M3FNUZ>, tensor<4x3xf8E5M2FNUZ>, tensor<i32>) -> tensor<2x3xf16>
  %z = popxl.pow2scale_cast_from_fp8 %w, %s : (tensor<4x3xf8E5M2FNUZ>, tensor<i32>) -> tensor<4x3xf32>
  func.return
}

// CHECK-LABEL: func.func @float8(%x: tensor<2x4xf32>, %s: tensor<i32>, %w: tensor<4x3xf8E5M2FNUZ>) {
// CHECK-NEXT:    %x8 = popxl.pow2scale_cast_to_fp8 %x, %s : (tensor<2x4xf32>, tensor<i32>) -> tensor<2x4xf8E4M3FNUZ>
// CHECK-NEXT:    %y = popxl.matmul_pow2scaled %x8, %w, %s : (tensor<2x4xf8E4M3FNUZ>, tensor<4x3xf8E5M2FNUZ>, tensor<i32>) -> tensor<2x3xf16>
// CHECK-NEXT:    %z = popxl.pow2scale_cast_from_fp8 %w, %s : (tensor<4x3xf8E5M2FNUZ>, tensor<i32>) -> tensor<4x3xf32>
// CHECK-NEXT:    func.return

// -----

// Random numbers: seeds are tensor<2xui32>.
func.func @random(%seed: tensor<2xui32>, %m: tensor<ui32>, %x: tensor<4x8xf32>) {
  %s1 = popxl.modify_random_seed %seed, %m : (tensor<2xui32>, tensor<ui32>) -> tensor<2xui32>
  %u = popxl.random_uniform %s1 {low = -1.0 : f64, high = 1.0 : f64} : (tensor<2xui32>) -> tensor<3x4xf32>
  %u0 = popxl.random_uniform %seed : (tensor<2xui32>) -> tensor<5xf16>
  %n = popxl.random_normal %seed {mean = 0.5 : f64, std = 2.0 : f64} : (tensor<2xui32>) -> tensor<8xf32>
  %d = popxl.dropout %x, %seed {ratio = 0.1 : f64} : (tensor<4x8xf32>, tensor<2xui32>) -> tensor<4x8xf32>
  %sd = popxl.shaped_dropout %x, %seed {shape = array<i64: 4, 1>, ratio = 0.5 : f64} : (tensor<4x8xf32>, tensor<2xui32>) -> tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @random(%seed: tensor<2xui32>, %m: tensor<ui32>, %x: tensor<4x8xf32>) {
// CHECK-NEXT:    %s1 = popxl.modify_random_seed %seed, %m : (tensor<2xui32>, tensor<ui32>) -> tensor<2xui32>
// CHECK-NEXT:    %u = popxl.random_uniform %s1 {low = -1.000000e+00 : f64, high = 1.000000e+00 : f64} : (tensor<2xui32>) -> tensor<3x4xf32>
// CHECK-NEXT:    %u0 = popxl.random_uniform %seed : (tensor<2xui32>) -> tensor<5xf16>
// CHECK-NEXT:    %n = popxl.random_normal %seed {mean = 5.000000e-01 : f64, std = 2.000000e+00 : f64} : (tensor<2xui32>) -> tensor<8xf32>
// CHECK-NEXT:    %d = popxl.dropout %x, %seed {ratio = 1.000000e-01 : f64} : (tensor<4x8xf32>, tensor<2xui32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %sd = popxl.shaped_dropout %x, %seed {shape = array<i64: 4, 1>, ratio = 5.000000e-01 : f64} : (tensor<4x8xf32>, tensor<2xui32>) -> tensor<4x8xf32>
// CHECK-NEXT:    func.return

// Custom ops: the op type and attributes as written; no implementation is needed to parse and verify.
func.func @custom(%x: tensor<2x3xf32>, %s: tensor<f32>, %dy: tensor<2x3xf32>) {
  %y = popxl.custom %x, %s {op_type = "Scale", attrs = {factor = 2 : i64, mode = "a", dims = array<i64: 1, 2>}} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %a, %b = popxl.custom %x {op_type = "Two", attrs = {}} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<6xf16>)
  %dx, %ds = popxl.custom_grad %dy, %x, %s {op_type = "Scale", attrs = {factor = 2 : i64}, num_output_grads = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>) -> (tensor<2x3xf32>, tensor<f32>)
  func.return
}

// CHECK-LABEL: func.func @custom(%x: tensor<2x3xf32>, %s: tensor<f32>, %dy: tensor<2x3xf32>) {
// CHECK-NEXT:    %y = popxl.custom %x, %s {op_type = "Scale", attrs = {factor = 2 : i64, mode = "a", dims = array<i64: 1, 2>}} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %a, %b = popxl.custom %x {op_type = "Two", attrs = {}} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<6xf16>)
// CHECK-NEXT:    %dx, %ds = popxl.custom_grad %dy, %x, %s {op_type = "Scale", attrs = {factor = 2 : i64}, num_output_grads = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>) -> (tensor<2x3xf32>, tensor<f32>)
// CHECK-NEXT:    func.return

// Group normalisation with its statistics, and its gradient.
func.func @group_norm(%x: tensor<3x4x5xf32>, %w: tensor<4xf32>, %b: tensor<4xf32>, %dy: tensor<3x4x5xf32>) {
  %y, %m, %i = popxl.group_norm %x, %w, %b {num_groups = 2 : i64, epsilon = 1.0e-05 : f64} : (tensor<3x4x5xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<3x4x5xf32>, tensor<6xf32>, tensor<6xf32>)
  %dx, %dw, %db = popxl.group_norm_grad %x, %w, %m, %i, %dy {num_groups = 2 : i64, epsilon = 1.0e-05 : f64} : (tensor<3x4x5xf32>, tensor<4xf32>, tensor<6xf32>, tensor<6xf32>, tensor<3x4x5xf32>) -> (tensor<3x4x5xf32>, tensor<4xf32>, tensor<4xf32>)
  func.return
}

// CHECK-LABEL: func.func @group_norm(%x: tensor<3x4x5xf32>, %w: tensor<4xf32>, %b: tensor<4xf32>, %dy: tensor<3x4x5xf32>) {
// CHECK-NEXT:    %y, %m, %i = popxl.group_norm %x, %w, %b {num_groups = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<3x4x5xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<3x4x5xf32>, tensor<6xf32>, tensor<6xf32>)
// CHECK-NEXT:    %dx, %dw, %db = popxl.group_norm_grad %x, %w, %m, %i, %dy {num_groups = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<3x4x5xf32>, tensor<4xf32>, tensor<6xf32>, tensor<6xf32>, tensor<3x4x5xf32>) -> (tensor<3x4x5xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT:    func.return
