// RUN: xl-opt %s --split-input-file --verify-diagnostics

// a constant offset must be an entry of the buffer

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  // expected-error @+1 {{ipu.remote_load @rb: offset 3 is out of range [0, 3) (entries of the buffer)}}
  %x = ipu.remote_load @rb[3] : tensor<2xf32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  %x = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{ipu.remote_store @rb: offset -1 is out of range [0, 3) (entries of the buffer)}}
  ipu.remote_store @rb[-1], %x : tensor<2xf32>
}

// -----

// the tensor must have the buffer's entry type (shape and dtype)

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  // expected-error @+1 {{ipu.remote_load @rb: the buffer holds (2,) float32 entries, but the tensor is (3,) float32}}
  %x = ipu.remote_load @rb[0] : tensor<3xf32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  %x = graph.constant dense<1> : tensor<2xi32>
  // expected-error @+1 {{ipu.remote_store @rb: the buffer holds (2,) float32 entries, but the tensor is (2,) int32}}
  ipu.remote_store @rb[0], %x : tensor<2xi32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  %x = graph.constant dense<1.0> : tensor<2x1xf32>
  // expected-error @+1 {{ipu.remote_load_ @rb: the buffer holds (2,) float32 entries, but the tensor is (2, 1) float32}}
  ipu.remote_load_ @rb[0], %x : tensor<2x1xf32>
}

// -----

// a run-time offset is a scalar integer

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  %i = graph.constant dense<1.0> : tensor<f32>
  // expected-error @+1 {{ipu.remote_load @rb: the offset must be a scalar integer tensor, got () float32}}
  %x = ipu.remote_load @rb[%i : tensor<f32>] : tensor<2xf32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  %i = graph.constant dense<[1, 2]> : tensor<2xui32>
  // expected-error @+1 {{ipu.remote_load @rb: the offset must be a scalar integer tensor, got (2,) uint32}}
  %x = ipu.remote_load @rb[%i : tensor<2xui32>] : tensor<2xf32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 3
  %i = graph.constant dense<1> : tensor<ui32>
  // expected-error @+1 {{ipu.remote_load @rb: the offset is given both as an operand and as a constant}}
  %x = "ipu.remote_load"(%i) <{buffer = @rb, offset = 1 : i64}> : (tensor<ui32>) -> tensor<2xf32>
}

// -----

// the buffer must be declared in graph.main, before its uses there

graph.main {
  // expected-error @+1 {{ipu.remote_load: @nope does not name an ipu.remote_buffer (graph.main declares no such buffer)}}
  %x = ipu.remote_load @nope[0] : tensor<2xf32>
}

// -----

graph.graph @g() -> (tensor<2xf32>) {
  // expected-error @+1 {{ipu.remote_load: @rb does not name an ipu.remote_buffer (no graph.main)}}
  %x = ipu.remote_load @rb[0] : tensor<2xf32>
  graph.output %x : tensor<2xf32>
}

// -----

graph.main {
  // expected-error @+1 {{ipu.remote_load: remote buffer @rb is used before its ipu.remote_buffer declaration}}
  %x = ipu.remote_load @rb[0] : tensor<2xf32>
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 1
}

// -----

graph.main {
  // expected-error @+1 {{ipu.remote_buffer @rb: entries must be >= 1, got 0}}
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 0
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 1
  // expected-error @+1 {{ipu.remote_buffer @rb: a remote buffer of that name is already declared}}
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 2
}

// -----

graph.graph @g() -> () {
  // expected-error @+1 {{ipu.remote_buffer @rb: remote buffers are declared in graph.main, not in graph.graph}}
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 1
  graph.output
}

// -----

// remote variables: an entry of the buffer, of its type; one variable per entry

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 2
  // expected-error @+1 {{ipu.remote_variable "w": entry 2 of @rb is out of range [0, 2)}}
  %w = ipu.remote_variable "w" in @rb[2] = dense<1.0> : tensor<2xf32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 2
  // expected-error @+1 {{ipu.remote_variable "w": (3,) float32 does not match remote buffer @rb ((2,) float32)}}
  %w = ipu.remote_variable "w" in @rb[0] = dense<1.0> : tensor<3xf32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 2
  // expected-error @+1 {{ipu.remote_variable "w": dtype int32 does not match remote buffer @rb ((2,) float32)}}
  %w = ipu.remote_variable "w" in @rb[0] = dense<1> : tensor<2xi32>
}

// -----

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 2
  %v = ipu.remote_variable "v" in @rb[1] = dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{ipu.remote_variable "w": entry 1 of @rb already holds remote variable "v"}}
  %w = ipu.remote_variable "w" in @rb[1] = dense<2.0> : tensor<2xf32>
}

// -----

// the handle is for the host only

graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 1
  // expected-error @+1 {{ipu.remote_variable "w": the variable is a handle for the host (Session get/write); popxl.relu cannot use it: load it (ipu.remote_load) or use its shard}}
  %w = ipu.remote_variable "w" in @rb[0] = dense<1.0> : tensor<2xf32>
  %y = popxl.relu %w : (tensor<2xf32>) -> tensor<2xf32>
}

// -----

// sharded: the entry holds one shard (elements rounded up); shard_over divides the group

graph.main attributes {replication_factor = 4 : i64} {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 1
  // expected-error @+1 {{ipu.remote_variable "s": shards of (9,) float32 over 4 replicas have 3 elements, but entries of @rb (2,) float32 have 2}}
  %s = ipu.remote_variable "s" in @rb[0] = dense<1.0> : tensor<9xf32> {shard_over = 4 : i64}
}

// -----

graph.main attributes {replication_factor = 4 : i64} {
  ipu.remote_buffer @rb : tensor<3xf32>, entries = 1
  // expected-error @+1 {{ipu.remote_variable "s": shards of (8,) float32 over 4 replicas have 2 elements, but entries of @rb (3,) float32 have 3}}
  %s = ipu.remote_variable "s" in @rb[0] = dense<1.0> : tensor<8xf32> {shard_over = 4 : i64}
}

// -----

graph.main attributes {replication_factor = 4 : i64} {
  ipu.remote_buffer @rb : tensor<3xf32>, entries = 1
  // expected-error @+1 {{ipu.remote_variable "s": shard_over 3 must divide the replica group size 4 (replication factor 4)}}
  %s = ipu.remote_variable "s" in @rb[0] = dense<1.0> : tensor<8xf32> {shard_over = 3 : i64}
}

// -----

graph.main attributes {replication_factor = 4 : i64} {
  // expected-error @+1 {{ipu.replica_sharded_variable "r": shard_over 4 must divide the replica group size 2 (replication factor 4)}}
  %f, %s = ipu.replica_sharded_variable "r" : (tensor<8xf32>, tensor<2xf32>) {shard_over = 4 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>}
}

// -----

graph.main attributes {replication_factor = 2 : i64} {
  // expected-error @+1 {{ipu.replica_sharded_variable "r": the shard of (5,) float32 over 2 replicas is (3,) float32, not (2,) float32}}
  %f, %s = ipu.replica_sharded_variable "r" : (tensor<5xf32>, tensor<2xf32>) {shard_over = 2 : i64}
}

// -----

graph.main attributes {replication_factor = 2 : i64} {
  // expected-error @+1 {{ipu.replica_sharded_variable "r": initial value (3, 4) float32 does not fit the variable (4,) float32 (2 groups: one value per group)}}
  %f, %s = ipu.replica_sharded_variable "r" = dense<1.0> : tensor<3x4xf32> -> (tensor<4xf32>, tensor<4xf32>) {shard_over = 1 : i64, grouping = #replica.grouping<stride = 1, group_size = 1>}
}

// -----

graph.graph @body() -> () {
  graph.output
}
graph.main {
  // expected-error @+1 {{ipu.remote_code_load: destination 'remote' is not one of executable, compute_buffer, io_buffer}}
  ipu.remote_code_load @body to "remote"
}

// -----

graph.main {
  // expected-error @+1 {{ipu.remote_code_load: @nowhere does not name a graph.graph (no such symbol)}}
  ipu.remote_code_load @nowhere to "executable"
}
