// Replicas in xl-run: host data [replication_factor, *shape], collectives exchange data,
// --save-vars writes every replica's value, diverged replicas are one error message.
// RUN: python -c "import numpy as np; np.save('%t.x.npy', np.arange(8, dtype=np.float32).reshape(4, 2)); np.save('%t.c.npy', np.array([True, True, True, True]))"
// RUN: xl-run %s x=%t.x.npy c=%t.c.npy --save-vars %t.vars.npz | filecheck %s
// RUN: python -c "import numpy as np; print('w =', np.load('%t.vars.npz')['w'].tolist())" | filecheck %s --check-prefix=VARS
// RUN: python -c "import numpy as np; np.save('%t.c2.npy', np.array([True, False, True, False]))"
// RUN: not xl-run %s x=%t.x.npy c=%t.c2.npy 2>&1 | filecheck %s --check-prefix=DIVERGED

graph.h2d_stream @x : tensor<2xf32>
graph.h2d_stream @c : tensor<i1>
graph.d2h_stream @y : tensor<2xf32>
graph.graph @then(%a: tensor<2xf32> {graph.name = "a"}) -> (tensor<2xf32>) {
  %m = replica.all_reduce %a {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "max"} : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %m : tensor<2xf32>
}
graph.graph @else(%a: tensor<2xf32> {graph.name = "a"}) -> (tensor<2xf32>) {
  %m = popxl.neg %a : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %m : tensor<2xf32>
}
graph.main attributes {replication_factor = 4 : i64} {
  %w = graph.variable "w" = dense<[[10.0, 20.0], [30.0, 40.0]]> : tensor<2x2xf32> -> tensor<2xf32> {grouping = #replica.grouping<stride = 2, group_size = 2>}
  %x = graph.host_load @x : tensor<2xf32>
  %c = graph.host_load @c : tensor<i1>
  %s = replica.all_reduce %x {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"} : (tensor<2xf32>) -> tensor<2xf32>
  popxl.accumulate_ %w, %s : (tensor<2xf32>, tensor<2xf32>) -> ()
  %y = call.conditional %c then @then(%x) else @else(%x) : tensor<i1>, (tensor<2xf32>), (tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %y : tensor<2xf32>
}

// Every replica takes the all-reduce (max) branch: groups {0, 1}, {2, 3}.
// CHECK:      y = {{\[}}[2., 3.],
// CHECK-NEXT:  [2., 3.],
// CHECK-NEXT:  [6., 7.],
// CHECK-NEXT:  [6., 7.]]

// sum of x over all replicas: [12, 16]; w starts from its group's value (stride 2: {0, 2}, {1, 3})
// VARS: w = {{\[}}[22.0, 36.0], [42.0, 56.0], [22.0, 36.0], [42.0, 56.0]]

// Replicas 1 and 3 skip the branch with the collective.
// DIVERGED: xl-run: error: the replicas diverged: replica 0 reached collective #1 (replica.all_reduce of tensor "x" loaded from stream "x") but replica 1 reached the end of the step; every replica must reach the same collectives in the same order
// DIVERGED-NOT: Traceback
