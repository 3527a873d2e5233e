// RUN: not xl-opt %s --split-input-file -p pipeline 2>&1 | filecheck %s

// A stash needs variables, so its region must be in graph.main.
graph.graph @g(%w: tensor<2xf32> {graph.name = "w"}) -> () {
  pipeline.region steps 4 {
    %a = popxl.relu %w {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %s = pipeline.stash %a {pipeline.stage = 0 : i64} : tensor<2xf32> -> tensor<2x2xf32>
    %r = pipeline.restore %s {pipeline.stage = 1 : i64} : tensor<2x2xf32> -> tensor<2xf32>
  }
  graph.output
}
// CHECK: xl-opt: error: pipeline: a pipeline.region with stashes must be in graph.main (the ring buffers are variables)

