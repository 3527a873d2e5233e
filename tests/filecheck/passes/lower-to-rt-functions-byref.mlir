// Call semantics of rt functions: a by-reference input is updated in place in the
// caller's buffer, an input the body writes without being by-reference is copied inside
// the body (the caller's tensor keeps its value), outputs are the caller's fresh buffers.
// RUN: xl-opt %s -p lower-to-rt | filecheck %s
// RUN: python -c "import numpy as np; np.save('%t.g1.npy', np.array([0.5, -1.0, 2.0], np.float32)); np.save('%t.g2.npy', np.array([1.5, 0.25, -0.5], np.float32))"
// RUN: xl-run %s g1=%t.g1.npy g2=%t.g2.npy --steps 2 -p lower-to-rt | filecheck %s --check-prefix=OUT
// RUN: xl-run %s g1=%t.g1.npy g2=%t.g2.npy --steps 2 -p 'lower-to-rt{functions=false}' | filecheck %s --check-prefix=OUT
// RUN: xl-run %s g1=%t.g1.npy g2=%t.g2.npy --steps 2 | filecheck %s --check-prefix=OUT
// RUN: python -c "import numpy as np; g = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]]); acc = [np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 0.25])]; v = np.array([2.0, -2.0, 1.0]); exec('s = []\nfor i in range(2):\n    acc[i] = acc[i] + 0.5 * np.tanh(g[i])\n    s.append(acc[i] * g[i])\n    s.append((v + 1.0) * g[i] * 2.0)\n' * 2); np.set_printoptions(precision=6, suppress=True); [print(f's{k + 1} =', np.array2string(np.float32(x), separator=', ')) for k, x in enumerate(s)]; print('v =', np.array2string(v.astype(np.float32), separator=', '))" | filecheck %s --check-prefix=OUT

graph.h2d_stream @g1 : tensor<3xf32>
graph.h2d_stream @g2 : tensor<3xf32>
graph.d2h_stream @s1 : tensor<3xf32>
graph.d2h_stream @s2 : tensor<3xf32>
graph.d2h_stream @s3 : tensor<3xf32>
graph.d2h_stream @s4 : tensor<3xf32>
graph.d2h_stream @v : tensor<3xf32>
graph.graph @update(%acc: tensor<3xf32> {graph.by_ref, graph.name = "acc"}, %x: tensor<3xf32> {graph.name = "x"}) -> (tensor<3xf32>) {
  %t = popxl.tanh %x : (tensor<3xf32>) -> tensor<3xf32>
  popxl.scaled_add_ %acc, %t {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
  %m = popxl.mul %acc, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.output %m : tensor<3xf32>
}
graph.graph @scaled(%v: tensor<3xf32> {graph.name = "v"}, %x: tensor<3xf32> {graph.name = "x"}) -> (tensor<3xf32>) {
  %k = graph.constant dense<2.0> : tensor<3xf32>
  popxl.scaled_add_ %v, %k {a = 1.000000e+00 : f64, b = 5.000000e-01 : f64} : (tensor<3xf32>, tensor<3xf32>) -> ()
  %w = popxl.mul %v, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %r = popxl.mul %w, %k : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.output %r : tensor<3xf32>
}
graph.main {
  %acc1 = graph.variable "acc1" = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %acc2 = graph.variable "acc2" = dense<[-1.0, 0.5, 0.25]> : tensor<3xf32>
  %v = graph.variable "v" = dense<[2.0, -2.0, 1.0]> : tensor<3xf32>
  %l1 = graph.host_load @g1 : tensor<3xf32>
  %m1 = call.call @update(%acc1, %l1) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @s1, %m1 : tensor<3xf32>
  %r1 = call.call @scaled(%v, %l1) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @s2, %r1 : tensor<3xf32>
  %l2 = graph.host_load @g2 : tensor<3xf32>
  %m2 = call.call @update(%acc2, %l2) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @s3, %m2 : tensor<3xf32>
  %r2 = call.call @scaled(%v, %l2) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  graph.host_store @s4, %r2 : tensor<3xf32>
  graph.host_store @v, %v : tensor<3xf32>
}

// CHECK:      rt.func @update(%acc: memref<3xf32>, %x: memref<3xf32>) -> (%m: memref<3xf32>) {
// CHECK-NEXT:   %t = rt.alloc : memref<3xf32>
// CHECK-NEXT:   rt.kernel "popxl.tanh"(%x) -> (%t)
// CHECK-NEXT:   rt.kernel "popxl.scaled_add_"(%acc, %t) -> (%acc)
// CHECK-NEXT:   rt.kernel "popxl.mul"(%acc, %x) -> (%m)
// CHECK-NEXT: }
// CHECK-NEXT: rt.func @scaled(%v: memref<3xf32>, %x: memref<3xf32>) -> (%r: memref<3xf32>) {
// CHECK-NEXT:   %v_1 = rt.alloc : memref<3xf32>
// CHECK-NEXT:   rt.copy %v, %v_1 : memref<3xf32>, memref<3xf32>
// CHECK-NEXT:   %k = rt.const
// CHECK-NEXT:   rt.kernel "popxl.scaled_add_"(%v_1, %k) -> (%v_1)
// CHECK-NEXT:   %w = rt.alloc : memref<3xf32>
// CHECK-NEXT:   rt.kernel "popxl.mul"(%v_1, %x) -> (%w)
// CHECK-NEXT:   rt.kernel "popxl.mul"(%w, %k) -> (%r)
// CHECK-NEXT: }
// CHECK:      rt.call @update(%acc1, %l1) -> (%m1)
// CHECK:      rt.call @scaled(%v, %l1) -> (%r1)
// CHECK:      rt.call @update(%acc2, %l2) -> (%m2)
// CHECK:      rt.call @scaled(%v, %l2) -> (%r2)
// CHECK:      rt.d2h "v", %v

// OUT:      s1 = [ 0.731059, -1.238406,  7.928055]
// OUT-NEXT: s2 = [3., 2., 8.]
// OUT-NEXT: s3 = [-0.142278,  0.18623 ,  0.106059]
// OUT-NEXT: s4 = [ 9. , -0.5, -2. ]
// OUT-NEXT: v = [ 2., -2.,  1.]
