// RUN: xl-opt %s --split-input-file -p pipeline | filecheck %s
// RUN: xl-opt %s --split-input-file -p pipeline | xl-opt --split-input-file | filecheck %s

// Two stages on two IPUs (the seed's forward example with `x + 1` layers): stage 0 loads
// and computes, its result is copied to IPU 1, stage 1 computes and stores. Ramp-up is one
// cycle of stage 0, the main loop runs steps - 1 = 3 cycles of both stages with the copied
// value loop-carried, ramp-down is one cycle of stage 1 (no copy).

graph.h2d_stream @x : tensor<ui32>
graph.d2h_stream @y : tensor<ui32>
graph.main attributes {num_host_transfers = 4 : i64} {
  %one = graph.constant dense<1> : tensor<ui32>
  pipeline.region steps 4 {
    %x = graph.host_load @x {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : tensor<ui32>
    %a = popxl.add %x, %one {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %c = ipu.copy %a {source = 0 : i64, destination = 1 : i64, ipu.id = 1 : i64, pipeline.stage = 0 : i64} : (tensor<ui32>) -> tensor<ui32>
    %b = popxl.add %c, %one {ipu.id = 1 : i64, pipeline.stage = 1 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    graph.host_store @y, %b {ipu.id = 1 : i64, pipeline.stage = 1 : i64} : tensor<ui32>
  }
}

// CHECK:      graph.graph @loads_stage_0() -> tensor<ui32> {
// CHECK-NEXT:   %x = graph.host_load @x {ipu.id = 0 : i64} : tensor<ui32>
// CHECK-NEXT:   graph.output %x : tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @stage_0(%x: tensor<ui32> {graph.by_ref, graph.name = "x"}, %one: tensor<ui32> {graph.by_ref, graph.name = "one"}) -> tensor<ui32> {
// CHECK-NEXT:   %a = popxl.add %x, %one {ipu.id = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   graph.output %a : tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @stage_1(%c: tensor<ui32> {graph.by_ref, graph.name = "c"}, %one: tensor<ui32> {graph.by_ref, graph.name = "one"}) -> tensor<ui32> {
// CHECK-NEXT:   %b = popxl.add %c, %one {ipu.id = 1 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   graph.output %b : tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @stores_stage_1(%b: tensor<ui32> {graph.by_ref, graph.name = "b"}) {
// CHECK-NEXT:   graph.host_store @y, %b {ipu.id = 1 : i64} : tensor<ui32>
// CHECK-NEXT:   graph.output
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @ipu_copies(%a: tensor<ui32> {graph.by_ref, graph.name = "a"}) -> tensor<ui32> {
// CHECK-NEXT:   %c = ipu.copy %a {ipu.id = 1 : i64, source = 0 : i64, destination = 1 : i64} : (tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   graph.output %c : tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @main_repeat(%c: tensor<ui32> {graph.name = "c"}, %one: tensor<ui32> {graph.by_ref, graph.name = "one"}) -> tensor<ui32> {
// CHECK-NEXT:   %x = call.call @loads_stage_0() {ipu.id = 0 : i64} : () -> tensor<ui32>
// CHECK-NEXT:   %a = call.call @stage_0(%x, %one) {ipu.id = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   %b = call.call @stage_1(%c, %one) {ipu.id = 1 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   call.call @stores_stage_1(%b) {ipu.id = 1 : i64} : (tensor<ui32>) -> ()
// CHECK-NEXT:   %c_1 = call.call @ipu_copies(%a) {ipu.id = 1 : i64} : (tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   graph.output %c_1 : tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @pipeline_graph(%one: tensor<ui32> {graph.by_ref, graph.name = "one"}) {
// CHECK-NEXT:   %x = call.call @loads_stage_0() {ipu.id = 0 : i64} : () -> tensor<ui32>
// CHECK-NEXT:   %a = call.call @stage_0(%x, %one) {ipu.id = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   %c = call.call @ipu_copies(%a) {ipu.id = 1 : i64} : (tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   %c_1 = call.repeat @main_repeat 3 (%c, %one) : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   %b = call.call @stage_1(%c_1, %one) {ipu.id = 1 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   call.call @stores_stage_1(%b) {ipu.id = 1 : i64} : (tensor<ui32>) -> ()
// CHECK-NEXT:   graph.output
// CHECK-NEXT: }
// CHECK-NEXT: graph.main attributes {num_host_transfers = 4 : i64} {
// CHECK-NEXT:   %one = graph.constant dense<1> : tensor<ui32>
// CHECK-NEXT:   call.call @pipeline_graph(%one) : (tensor<ui32>) -> ()
// CHECK-NEXT: }

// -----

// Three stages on two IPUs with a stash: %x of stage 0 is restored in stage 2, a ring buffer
// of depth 3. The stash becomes three variables (buffer and two counters); stage 0 writes
// with dynamic_update_ and advances its counter, stage 2 reads with dynamic_slice and
// advances its own. Both copies are loop-carried; the copy of a stage that has not run yet
// (ramp-up) or no longer runs (ramp-down) copies a zero placeholder.

graph.h2d_stream @x : tensor<ui32>
graph.d2h_stream @y : tensor<ui32>
graph.main attributes {num_host_transfers = 6 : i64} {
  %one = graph.constant dense<1> : tensor<ui32>
  pipeline.region steps 6 {
    %x = graph.host_load @x {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : tensor<ui32>
    %a = popxl.add %x, %one {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %c = ipu.copy %a {source = 0 : i64, destination = 1 : i64, ipu.id = 1 : i64, pipeline.stage = 0 : i64} : (tensor<ui32>) -> tensor<ui32>
    %b = popxl.add %c, %one {ipu.id = 1 : i64, pipeline.stage = 1 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %d = ipu.copy %b {source = 1 : i64, destination = 0 : i64, ipu.id = 0 : i64, pipeline.stage = 1 : i64} : (tensor<ui32>) -> tensor<ui32>
    %s = pipeline.stash %x {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : tensor<ui32> -> tensor<3xui32>
    %r = pipeline.restore %s {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : tensor<3xui32> -> tensor<ui32>
    %e = popxl.add %d, %r {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    graph.host_store @y, %e {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : tensor<ui32>
  }
}

// CHECK:      graph.graph @stage_0(%x: tensor<ui32> {graph.by_ref, graph.name = "x"}, %one: tensor<ui32> {graph.by_ref, graph.name = "one"}, %[[BUF:.*]]: tensor<3xui32> {graph.by_ref, graph.name = "pipeline.stash0.x.buffer"}, %[[SC:.*]]: tensor<1xui32> {graph.by_ref, graph.name = "pipeline.stash0.x.stash_counter"}) -> tensor<ui32> {
// CHECK-NEXT:   %a = popxl.add %x, %one {ipu.id = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   %[[R:.*]] = popxl.reshape %x {ipu.id = 0 : i64} : (tensor<ui32>) -> tensor<1xui32>
// CHECK-NEXT:   popxl.dynamic_update_ %[[BUF]], %[[SC]], %[[R]] {axes = array<i64: 0>, sizes = array<i64: 1>, no_overlap = true, ipu.id = 0 : i64} : (tensor<3xui32>, tensor<1xui32>, tensor<1xui32>) -> ()
// CHECK-NEXT:   popxl.increment_mod_ %[[SC]] {increment = 1.000000e+00 : f64, modulus = 3.000000e+00 : f64, ipu.id = 0 : i64} : (tensor<1xui32>) -> ()
// CHECK-NEXT:   graph.output %a : tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @stage_1(%c: tensor<ui32> {graph.by_ref, graph.name = "c"}, %one: tensor<ui32> {graph.by_ref, graph.name = "one"}) -> tensor<ui32> {
// CHECK:      graph.graph @stage_2(%[[BUF2:.*]]: tensor<3xui32> {graph.by_ref, graph.name = "pipeline.stash0.x.buffer"}, %[[RC:.*]]: tensor<1xui32> {graph.by_ref, graph.name = "pipeline.stash0.x.restore_counter"}, %d: tensor<ui32> {graph.by_ref, graph.name = "d"}) -> tensor<ui32> {
// CHECK-NEXT:   %[[S:.*]] = popxl.dynamic_slice %[[BUF2]], %[[RC]] {axes = array<i64: 0>, sizes = array<i64: 1>, no_overlap = true, ipu.id = 0 : i64} : (tensor<3xui32>, tensor<1xui32>) -> tensor<1xui32>
// CHECK-NEXT:   popxl.increment_mod_ %[[RC]] {increment = 1.000000e+00 : f64, modulus = 3.000000e+00 : f64, ipu.id = 0 : i64} : (tensor<1xui32>) -> ()
// CHECK-NEXT:   %r = popxl.reshape %[[S]] {ipu.id = 0 : i64} : (tensor<1xui32>) -> tensor<ui32>
// CHECK-NEXT:   %e = popxl.add %d, %r {ipu.id = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   graph.output %e : tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @stores_stage_2(%e: tensor<ui32> {graph.by_ref, graph.name = "e"}) {
// CHECK:      graph.graph @ipu_copies(%a: tensor<ui32> {graph.by_ref, graph.name = "a"}, %b: tensor<ui32> {graph.by_ref, graph.name = "b"}) -> (tensor<ui32>, tensor<ui32>) {
// CHECK-NEXT:   %c = ipu.copy %a {ipu.id = 1 : i64, source = 0 : i64, destination = 1 : i64} : (tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   %d = ipu.copy %b {ipu.id = 0 : i64, source = 1 : i64, destination = 0 : i64} : (tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:   graph.output %c, %d : tensor<ui32>, tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @main_repeat(%c: tensor<ui32> {graph.name = "c"}, %d: tensor<ui32> {graph.name = "d"}, %one: tensor<ui32> {graph.by_ref, graph.name = "one"}, %{{.*}}: tensor<3xui32> {graph.by_ref, graph.name = "pipeline.stash0.x.buffer"}, %{{.*}}: tensor<1xui32> {graph.by_ref, graph.name = "pipeline.stash0.x.stash_counter"}, %{{.*}}: tensor<1xui32> {graph.by_ref, graph.name = "pipeline.stash0.x.restore_counter"}) -> (tensor<ui32>, tensor<ui32>) {
// CHECK-NEXT:   %x = call.call @loads_stage_0()
// CHECK-NEXT:   %a = call.call @stage_0(%x, %one,
// CHECK-NEXT:   %b = call.call @stage_1(%c, %one)
// CHECK-NEXT:   %e = call.call @stage_2(
// CHECK-NEXT:   call.call @stores_stage_2(%e)
// CHECK-NEXT:   %c_1, %d_1 = call.call @ipu_copies(%a, %b)
// CHECK-NEXT:   graph.output %c_1, %d_1 : tensor<ui32>, tensor<ui32>
// CHECK-NEXT: }
// CHECK-NEXT: graph.graph @pipeline_graph(
// ramp-up: cycle over stage 0, then over stages 0 and 1
// CHECK-NEXT:   %x = call.call @loads_stage_0()
// CHECK-NEXT:   %a = call.call @stage_0(%x, %one,
// CHECK-NEXT:   %dummy__b = popxl.init {init_type = "zero", ipu.id = 1 : i64} : () -> tensor<ui32>
// CHECK-NEXT:   %c, %d = call.call @ipu_copies(%a, %dummy__b)
// CHECK-NEXT:   %x_1 = call.call @loads_stage_0()
// CHECK-NEXT:   %a_1 = call.call @stage_0(%x_1, %one,
// CHECK-NEXT:   %b = call.call @stage_1(%c, %one)
// CHECK-NEXT:   %c_1, %d_1 = call.call @ipu_copies(%a_1, %b)
// main loop: 6 - (3 - 1) = 4 cycles
// CHECK-NEXT:   %c_2, %d_2 = call.repeat @main_repeat 4 (%c_1, %d_1, %one,
// ramp-down: stages 1 and 2, then stage 2 alone (no copy)
// CHECK-NEXT:   %b_1 = call.call @stage_1(%c_2, %one)
// CHECK-NEXT:   %e = call.call @stage_2({{.*}}, %d_2)
// CHECK-NEXT:   call.call @stores_stage_2(%e)
// CHECK-NEXT:   %dummy__a = popxl.init {init_type = "zero", ipu.id = 0 : i64} : () -> tensor<ui32>
// CHECK-NEXT:   %c_3, %d_3 = call.call @ipu_copies(%dummy__a, %b_1)
// CHECK-NEXT:   %e_1 = call.call @stage_2({{.*}}, %d_3)
// CHECK-NEXT:   call.call @stores_stage_2(%e_1)
// CHECK-NEXT:   graph.output
// CHECK-NEXT: }
// CHECK-NEXT: graph.main attributes {num_host_transfers = 6 : i64} {
// CHECK-NEXT:   %one = graph.constant dense<1> : tensor<ui32>
// CHECK-NEXT:   %[[V1:.*]] = graph.variable "pipeline.stash0.x.buffer" = dense<0> : tensor<3xui32>
// CHECK-NEXT:   %[[V2:.*]] = graph.variable "pipeline.stash0.x.stash_counter" = dense<0> : tensor<1xui32>
// CHECK-NEXT:   %[[V3:.*]] = graph.variable "pipeline.stash0.x.restore_counter" = dense<0> : tensor<1xui32>
// CHECK-NEXT:   call.call @pipeline_graph(%one, %[[V1]], %[[V2]], %[[V3]])
// CHECK-NEXT: }
