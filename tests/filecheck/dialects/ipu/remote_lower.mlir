// RUN: xl-opt %s -p lower-to-rt | filecheck %s
// RUN: xl-opt %s -p lower-to-rt | xl-opt | filecheck %s

// A remote buffer becomes an rt.state [entries, *shape] marked rt.remote, initialised from
// its remote variables; loads and stores become kernels copying one entry; a resident
// sharded variable becomes a per-replica state of its shard (replica r: shard r here).

graph.graph @phase(%i: tensor<ui32>) -> () {
  %x = ipu.remote_load @rb[%i : tensor<ui32>] : tensor<2xf32>
  ipu.remote_store @rb[%i : tensor<ui32>], %x : tensor<2xf32>
  graph.output
}
graph.main attributes {replication_factor = 2 : i64} {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 2 {ipu.id = 1 : i64}
  %v = ipu.remote_variable "w" in @rb[1] = dense<3.0> : tensor<2xf32>
  %f, %s = ipu.replica_sharded_variable "r" = dense<[1.0, 2.0, 3.0]> : tensor<3xf32> -> (tensor<3xf32>, tensor<2xf32>) {shard_over = 2 : i64}
  %x = ipu.remote_load @rb[1] : tensor<2xf32>
  ipu.remote_load_ @rb[0], %x : tensor<2xf32>
  ipu.remote_store @rb[0], %s : tensor<2xf32>
  %i = graph.constant dense<1> : tensor<ui32>
  call.call @phase(%i) : (tensor<ui32>) -> ()
}

// CHECK:      rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 2 : i64} {
// CHECK-NEXT:   %rb = rt.state "rb" = dense<{{\[\[}}0.000000e+00, 0.000000e+00], [3.000000e+00, 3.000000e+00]]> : tensor<2x2xf32> : memref<2x2xf32> {rt.remote, ipu.id = 1 : i64}
// CHECK-NEXT:   %s = rt.state "r" = dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 0.000000e+00]]> : tensor<2x2xf32> : memref<2xf32> {grouping = #replica.grouping<assignment = [0, 1]>}
// CHECK-NEXT:   %x = rt.alloc : memref<2xf32>
// CHECK-NEXT:   rt.kernel "ipu.remote_load"(%rb) -> (%x) {buffer = "rb", offset = 1 : i64} : (memref<2x2xf32>) -> memref<2xf32>
// CHECK-NEXT:   rt.kernel "ipu.remote_load_"(%rb) -> (%x) {buffer = "rb", offset = 0 : i64} : (memref<2x2xf32>) -> memref<2xf32>
// CHECK-NEXT:   rt.kernel "ipu.remote_store"(%s) -> (%rb) {buffer = "rb", offset = 0 : i64} : (memref<2xf32>) -> memref<2x2xf32>
// CHECK-NEXT:   %i = rt.const dense<1> : tensor<ui32> : memref<ui32>
// CHECK-NEXT:   %x_1 = rt.alloc : memref<2xf32>
// CHECK-NEXT:   rt.kernel "ipu.remote_load"(%rb, %i) -> (%x_1) {buffer = "rb"} : (memref<2x2xf32>, memref<ui32>) -> memref<2xf32>
// CHECK-NEXT:   rt.kernel "ipu.remote_store"(%x_1, %i) -> (%rb) {buffer = "rb"} : (memref<2xf32>, memref<ui32>) -> memref<2x2xf32>
// CHECK-NEXT: }
