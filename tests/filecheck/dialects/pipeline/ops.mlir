// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// A three-stage pipeline on two IPUs: a value copied to the next stage, a stash from
// stage 0 restored in stage 2 (depth 2 - 0 + 1 = 3), an op of stage 0 created after
// stage 1 (as a stash added later is).

graph.h2d_stream @x : tensor<ui32>
graph.d2h_stream @y : tensor<ui32>
graph.main {
  %one = graph.constant dense<1> : tensor<ui32>
  pipeline.region steps 10 {
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

// CHECK:      graph.main {
// CHECK-NEXT:   %one = graph.constant dense<1> : tensor<ui32>
// CHECK-NEXT:   pipeline.region steps 10 {
// CHECK-NEXT:     %x = graph.host_load @x {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : tensor<ui32>
// CHECK-NEXT:     %a = popxl.add %x, %one {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:     %c = ipu.copy %a {ipu.id = 1 : i64, pipeline.stage = 0 : i64, source = 0 : i64, destination = 1 : i64} : (tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:     %b = popxl.add %c, %one {ipu.id = 1 : i64, pipeline.stage = 1 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:     %d = ipu.copy %b {ipu.id = 0 : i64, pipeline.stage = 1 : i64, source = 1 : i64, destination = 0 : i64} : (tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:     %s = pipeline.stash %x {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : tensor<ui32> -> tensor<3xui32>
// CHECK-NEXT:     %r = pipeline.restore %s {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : tensor<3xui32> -> tensor<ui32>
// CHECK-NEXT:     %e = popxl.add %d, %r {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
// CHECK-NEXT:     graph.host_store @y, %e {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : tensor<ui32>
// CHECK-NEXT:   }
// CHECK-NEXT: }

// CHECK-GENERIC:      "pipeline.region"() <{steps = 10 : i64}> ({
// CHECK-GENERIC:        %s = "pipeline.stash"(%x) {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : (tensor<ui32>) -> tensor<3xui32>
// CHECK-GENERIC-NEXT:   %r = "pipeline.restore"(%s) {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : (tensor<3xui32>) -> tensor<ui32>
// CHECK-GENERIC:      }) : () -> ()

// -----

// Extra attributes, a stash of a multi-dimensional tensor, a region in a subgraph.

graph.graph @g(%w: tensor<2x3xf32> {graph.name = "w"}) -> () {
  pipeline.region steps 4 attributes {note = "sub"} {
    %a = popxl.relu %w {pipeline.stage = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %s = pipeline.stash %a {pipeline.stage = 0 : i64} : tensor<2x3xf32> -> tensor<2x2x3xf32>
    %r = pipeline.restore %s {pipeline.stage = 1 : i64} : tensor<2x2x3xf32> -> tensor<2x3xf32>
  }
  graph.output
}

// CHECK:      pipeline.region steps 4 attributes {note = "sub"} {
// CHECK-NEXT:   %a = popxl.relu %w {pipeline.stage = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:   %s = pipeline.stash %a {pipeline.stage = 0 : i64} : tensor<2x3xf32> -> tensor<2x2x3xf32>
// CHECK-NEXT:   %r = pipeline.restore %s {pipeline.stage = 1 : i64} : tensor<2x2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT: }

// CHECK-GENERIC: "pipeline.region"() <{steps = 4 : i64}> ({
// CHECK-GENERIC: }) {note = "sub"} : () -> ()
