// RUN: xl-opt %s -p hoist-updates | filecheck %s
// RUN: xl-opt %s -p 'hoist-updates{graph=g}' | filecheck %s --check-prefix=ONLYG
// RUN: python -c "import numpy as np; np.save('%t.x.npy', np.array([1, 2], np.float32))"
// RUN: xl-opt %s -p hoist-updates | xl-run - x=%t.x.npy --steps 2 -p lower-to-rt | filecheck %s --check-prefix=OUT
// RUN: xl-run %s x=%t.x.npy --steps 2 -p lower-to-rt | filecheck %s --check-prefix=OUT

graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.d2h_stream @z : tensor<2xf32>
graph.main {
  %w = graph.variable "w" = dense<[1.0, 2.0]> : tensor<2xf32>
  %v = graph.variable "v" = dense<[3.0, 4.0]> : tensor<2xf32>
  %u = graph.variable "u" = dense<[5.0, 6.0]> : tensor<2xf32>
  %q = graph.variable "q" = dense<[0.0, 0.0]> : tensor<2xf32>
  %x = graph.host_load @x : tensor<2xf32>
  %gw = popxl.mul %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  // reads %v: the update of %v stays after it
  %rv = popxl.add %v, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  // a view-like result of %u, read later: the update of %u stays after that read
  %ru = popxl.reshape %u : (tensor<2xf32>) -> tensor<2xf32>
  %gv = popxl.tanh %rv : (tensor<2xf32>) -> tensor<2xf32>
  %su = popxl.neg %ru : (tensor<2xf32>) -> tensor<2xf32>
  %t = popxl.sub %gv, %su : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %t : tensor<2xf32>
  // not a variable: stays where it is
  %acc = popxl.init {init_type = "zero"} : () -> tensor<2xf32>
  %e = popxl.exp %x : (tensor<2xf32>) -> tensor<2xf32>
  popxl.accumulate_ %acc, %gw {f = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  popxl.scaled_add_ %w, %gw {a = 1.0 : f64, b = -0.5 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  popxl.scaled_add_ %v, %gv {a = 1.0 : f64, b = -0.5 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  popxl.scaled_add_ %u, %x {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  %o = popxl.add %acc, %e : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  // a view of %x defined late: the update of %q reading it goes right after it, not above
  %xr = popxl.reshape %x : (tensor<2xf32>) -> tensor<2xf32>
  %o2 = popxl.add %o, %w : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @z, %o2 : tensor<2xf32>
  popxl.scaled_add_ %q, %xr {a = 1.0 : f64, b = 1.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
}

// CHECK:      %x = graph.host_load @x
// CHECK-NEXT: %gw = popxl.mul %x, %x
// CHECK-NEXT: popxl.scaled_add_ %w, %gw
// CHECK-NEXT: %rv = popxl.add %v, %x
// CHECK-NEXT: %ru = popxl.reshape %u
// CHECK-NEXT: %gv = popxl.tanh %rv
// CHECK-NEXT: popxl.scaled_add_ %v, %gv
// CHECK-NEXT: %su = popxl.neg %ru
// CHECK-NEXT: popxl.scaled_add_ %u, %x
// CHECK-NEXT: %t = popxl.sub %gv, %su
// CHECK-NEXT: graph.host_store @y, %t
// CHECK-NEXT: %acc = popxl.init
// CHECK-NEXT: %e = popxl.exp %x
// CHECK-NEXT: popxl.accumulate_ %acc, %gw
// CHECK-NEXT: %o = popxl.add %acc, %e
// CHECK-NEXT: %xr = popxl.reshape %x
// CHECK-NEXT: popxl.scaled_add_ %q, %xr
// CHECK-NEXT: %o2 = popxl.add %o, %w

// With graph=g (no such graph here) nothing moves.
// ONLYG:      %gw = popxl.mul %x, %x
// ONLYG-NEXT: %rv = popxl.add %v, %x

// Same results with and without the pass, as NumPy computes them for the second step
// (x = [1, 2]; y = tanh(v + x) + u, z = x*x + e^x + w, with v, u, w after one step):
// y = [6.99817912, 8.9999666], z = [3.71828183, 9.3890561].
// OUT:      step 1:
// OUT-NEXT: y = [6.998179, 8.999967]
// OUT-NEXT: z = [3.718282, 9.389055]
