// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Placement is the discardable `ipu.id` attribute; ipu.copy moves a tensor between IPUs.

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32> {ipu.id = 0 : i64}
  %y = popxl.gelu %x {ipu.id = 0 : i64, ipu.tile_set = "compute"} : (tensor<4xf32>) -> tensor<4xf32>
  %z = ipu.copy %y {source = 0 : i64, destination = 1 : i64, ipu.id = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  %b = ipu.copy %z {source = 1 : i64, destination = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
}

// CHECK:      graph.main {
// CHECK-NEXT:   %x = graph.constant dense<1.000000e+00> : tensor<4xf32> {ipu.id = 0 : i64}
// CHECK-NEXT:   %y = popxl.gelu %x {ipu.id = 0 : i64, ipu.tile_set = "compute"} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   %z = ipu.copy %y {ipu.id = 1 : i64, source = 0 : i64, destination = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   %b = ipu.copy %z {source = 1 : i64, destination = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: }

// CHECK-GENERIC:      %z = "ipu.copy"(%y) <{source = 0 : i64, destination = 1 : i64}> {ipu.id = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-GENERIC-NEXT: %b = "ipu.copy"(%z) <{source = 1 : i64, destination = 0 : i64}> : (tensor<4xf32>) -> tensor<4xf32>

// -----

// Copies work in subgraphs too, and on any dtype.

graph.graph @stage(%x: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %y = ipu.copy %x {source = 0 : i64, destination = 3 : i64} : (tensor<2x3xi32>) -> tensor<2x3xi32>
  graph.output %y : tensor<2x3xi32>
}

// CHECK:      graph.graph @stage(%x: tensor<2x3xi32>) -> tensor<2x3xi32> {
// CHECK-NEXT:   %y = ipu.copy %x {source = 0 : i64, destination = 3 : i64} : (tensor<2x3xi32>) -> tensor<2x3xi32>
// CHECK-NEXT:   graph.output %y : tensor<2x3xi32>
// CHECK-NEXT: }

// CHECK-GENERIC: %y = "ipu.copy"(%x) <{source = 0 : i64, destination = 3 : i64}> : (tensor<2x3xi32>) -> tensor<2x3xi32>

// -----

// Remote buffers: declared in graph.main; variables stored in an entry (sharded or not),
// resident sharded variables; loads and stores at constant or run-time offsets, in any graph.

graph.graph @phase(%i: tensor<ui32>, %t: tensor<2xf32>) -> () {
  %x = ipu.remote_load @rb[%i : tensor<ui32>] : tensor<2xf32>
  ipu.remote_load_ @rb[0], %t : tensor<2xf32>
  ipu.remote_store @rb[%i : tensor<ui32>], %x : tensor<2xf32>
  graph.output
}
graph.main attributes {replication_factor = 2 : i64} {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  ipu.remote_buffer @sh : tensor<2xi32>, entries = 1 {ipu.id = 1 : i64}
  %v = ipu.remote_variable "w" in @rb[1] = dense<1.0> : tensor<2xf32>
  %g = ipu.remote_variable "g" in @rb[2] = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> -> tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 1>, retrieval_mode = "all_replicas"}
  %s = ipu.remote_variable "s" in @sh[0] = dense<[1, 2, 3]> : tensor<3xi32> {shard_over = 2 : i64}
  %f, %fs = ipu.replica_sharded_variable "r" = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32> -> (tensor<4xf32>, tensor<2xf32>) {shard_over = 2 : i64}
  %e, %es = ipu.replica_sharded_variable "e" : (tensor<4xf32>, tensor<2xf32>) {shard_over = 2 : i64}
  %x = ipu.remote_load @rb[1] : tensor<2xf32>
  ipu.remote_store @rb[2], %fs : tensor<2xf32> {ipu.id = 0 : i64}
  %i = graph.constant dense<2> : tensor<ui32>
  call.call @phase(%i, %x) : (tensor<ui32>, tensor<2xf32>) -> ()
}

// CHECK:      graph.graph @phase(%i: tensor<ui32>, %t: tensor<2xf32>) {
// CHECK-NEXT:   %x = ipu.remote_load @rb[%i : tensor<ui32>] : tensor<2xf32>
// CHECK-NEXT:   ipu.remote_load_ @rb[0], %t : tensor<2xf32>
// CHECK-NEXT:   ipu.remote_store @rb[%i : tensor<ui32>], %x : tensor<2xf32>
// CHECK-NEXT:   graph.output
// CHECK-NEXT: }
// CHECK:        ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
// CHECK-NEXT:   ipu.remote_buffer @sh : tensor<2xi32>, entries = 1 {ipu.id = 1 : i64}
// CHECK-NEXT:   %v = ipu.remote_variable "w" in @rb[1] = dense<1.000000e+00> : tensor<2xf32>
// CHECK-NEXT:   %g = ipu.remote_variable "g" in @rb[2] = dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32> -> tensor<2xf32> {grouping = #replica.grouping<stride = 1, group_size = 1>, retrieval_mode = "all_replicas"}
// CHECK-NEXT:   %s = ipu.remote_variable "s" in @sh[0] = dense<[1, 2, 3]> : tensor<3xi32> {shard_over = 2 : i64}
// CHECK-NEXT:   %f, %fs = ipu.replica_sharded_variable "r" = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32> -> (tensor<4xf32>, tensor<2xf32>) {shard_over = 2 : i64}
// CHECK-NEXT:   %e, %es = ipu.replica_sharded_variable "e" : (tensor<4xf32>, tensor<2xf32>) {shard_over = 2 : i64}
// CHECK-NEXT:   %x = ipu.remote_load @rb[1] : tensor<2xf32>
// CHECK-NEXT:   ipu.remote_store @rb[2], %fs : tensor<2xf32> {ipu.id = 0 : i64}

// CHECK-GENERIC: %x = "ipu.remote_load"(%i) <{buffer = @rb}> : (tensor<ui32>) -> tensor<2xf32>
// CHECK-GENERIC: "ipu.remote_load_"(%t) <{buffer = @rb, offset = 0 : i64}> : (tensor<2xf32>) -> ()
// CHECK-GENERIC: "ipu.remote_store"(%x, %i) <{buffer = @rb}> : (tensor<2xf32>, tensor<ui32>) -> ()
// CHECK-GENERIC: "ipu.remote_buffer"() <{sym_name = "rb", type = tensor<2xf32>, entries = 3 : i64}> : () -> ()
// CHECK-GENERIC: %v = "ipu.remote_variable"() <{var_name = "w", buffer = @rb, offset = 1 : i64, init = dense<1.000000e+00> : tensor<2xf32>}> : () -> tensor<2xf32>

// -----

// ipu.remote_code_load names the graph whose code is loaded and where it goes.

graph.graph @body(%x: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %x : tensor<2xf32>
}
graph.main {
  ipu.remote_code_load @body to "executable"
  ipu.remote_code_load @body to "io_buffer" {ipu.id = 1 : i64}
}

// CHECK:      graph.main {
// CHECK-NEXT:   ipu.remote_code_load @body to "executable"
// CHECK-NEXT:   ipu.remote_code_load @body to "io_buffer" {ipu.id = 1 : i64}
// CHECK-NEXT: }

// CHECK-GENERIC: "ipu.remote_code_load"() <{graph = @body, destination = "executable"}> : () -> ()
