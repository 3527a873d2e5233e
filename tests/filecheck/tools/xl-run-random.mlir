// Random ops from the command line: the numbers depend only on the seed's value (NumPy's
// Philox keyed [seed[0] << 32 | seed[1], stream], see xl/runtime/kernels/random.py); the
// expected values were computed from that definition, independently of the kernels.
// print_tensor prints on stderr when the op runs.
// RUN: xl-run %s | filecheck %s
// RUN: xl-run %s --steps 3 | filecheck %s
// RUN: xl-run %s 2>&1 >/dev/null | filecheck %s --check-prefix=PRINT

graph.d2h_stream @u : tensor<4xf32>
graph.d2h_stream @d : tensor<2x4xf32>
graph.d2h_stream @s : tensor<2xui32>
graph.main attributes {num_host_transfers = 1 : i64} {
  %seed = graph.constant dense<[1234, 5678]> : tensor<2xui32>
  %m = graph.constant dense<1> : tensor<ui32>
  %x = graph.constant dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>
  %s1 = popxl.modify_random_seed %seed, %m : (tensor<2xui32>, tensor<ui32>) -> tensor<2xui32>
  %u = popxl.random_uniform %seed {low = -1.0 : f64, high = 1.0 : f64} : (tensor<2xui32>) -> tensor<4xf32>
  %d = popxl.dropout %x, %seed {ratio = 0.5 : f64} : (tensor<2x4xf32>, tensor<2xui32>) -> tensor<2x4xf32>
  %p = popxl.print_tensor %d {title = "dropped", digits = 3 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  graph.host_store @u, %u : tensor<4xf32>
  graph.host_store @d, %d : tensor<2x4xf32>
  graph.host_store @s, %s1 : tensor<2xui32>
}

// u = -1 + 2 * (the top 53 bits of the first 4 words of stream 0) * 2**-53
// CHECK:      u = [-0.796917,  0.868407,  0.206564, -0.055382]
// dropout keeps element i when that uniform is >= 0.5 (the same words), scaled by 2
// CHECK-NEXT: d = {{\[}}[ 0.,  4.,  6.,  0.],
// CHECK-NEXT:  [ 0.,  0., 14., 16.]]
// the word at counter 1 of stream 2, split into two uint32
// CHECK-NEXT: s = [3521693908, 2571096129]

// PRINT:      dropped: {{\[}}[ 0.0  4.0  6.0  0.0]
// PRINT-NEXT:  [ 0.0  0.0 14.0 16.0]]
