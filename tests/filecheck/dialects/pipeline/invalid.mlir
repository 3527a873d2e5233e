// RUN: xl-opt %s --split-input-file --verify-diagnostics

// an op outside every stage

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: 'popxl.relu' is in no stage: every op of a pipeline region needs a 'pipeline.stage' attribute}}
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %a : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// a stage that is not an integer

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: 'popxl.relu' has pipeline.stage = "zero", expected a non-negative integer}}
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = "zero"} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// a negative stage

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: 'popxl.relu' has pipeline.stage = -1 : i64, expected a non-negative integer}}
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = -1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// stage 1 skipped

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: stage 1 is never used (stages must be 0..2)}}
  pipeline.region steps 6 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %c {pipeline.stage = 2 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// stages out of order

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: stage 0 starts after stage 1 (stages must first appear in order 0, 1, ..., S-1)}}
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// too few steps

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: steps = 3 is too few for 2 stages (pipelining needs steps >= 2 * stages = 4)}}
  pipeline.region steps 3 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %c {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// an empty region

graph.main {
  // expected-error @+1 {{pipeline.region: the region has no ops (no stages)}}
  pipeline.region steps 3 {
  }
}

// -----

// a value used by an earlier stage

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: %b (stage 1) is used in stage 0 by 'popxl.add': values cross stages only forward in stage order}}
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %c {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %d = popxl.add %a, %b {pipeline.stage = 0 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// a value used by a later stage without a copy or a stash

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: %a (stage 0) is used in stage 1 by 'popxl.relu': a value reaches a later stage only through an ipu.copy used by the next stage, or a pipeline.stash / pipeline.restore}}
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %a {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// a copy used two stages later

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: %k (stage 0) is used in stage 2 by 'popxl.relu': a value reaches a later stage only through an ipu.copy used by the next stage, or a pipeline.stash / pipeline.restore}}
  pipeline.region steps 6 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %k = ipu.copy %a {source = 0 : i64, destination = 1 : i64, pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %c {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %d = popxl.relu %k {pipeline.stage = 2 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// a copy used both in its stage and in the next

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: the ipu.copy %k (stage 0) is used both in stage 0 and in stage 1; a copy between stages is used only by the next stage}}
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %k = ipu.copy %a {source = 0 : i64, destination = 1 : i64, pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %e = popxl.relu %k {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %b = popxl.relu %k {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// a stash of depth 1

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  pipeline.region steps 4 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    // expected-error @+1 {{pipeline.stash: stash depth must be > 1, got 1 (the depth is to_stage - from_stage + 1: restore in a later stage)}}
    %s = pipeline.stash %a {pipeline.stage = 0 : i64} : tensor<2xf32> -> tensor<1x2xf32>
    %r = pipeline.restore %s {pipeline.stage = 0 : i64} : tensor<1x2xf32> -> tensor<2xf32>
    %b = popxl.relu %c {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// a stash whose depth does not match the stages

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  pipeline.region steps 6 {
    %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    %s = pipeline.stash %a {pipeline.stage = 0 : i64} : tensor<2xf32> -> tensor<2x2xf32>
    %b = popxl.relu %c {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    // expected-error @+1 {{pipeline.restore: restores in stage 2 a stash of depth 2 made in stage 0; the depth must be to_stage - from_stage + 1 = 3}}
    %r = pipeline.restore %s {pipeline.stage = 2 : i64} : tensor<2x2xf32> -> tensor<2xf32>
  }
}

// -----

// a stash buffer of the wrong type

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  pipeline.region steps 4 {
    // expected-error @+1 {{pipeline.stash: the stash buffer (2, 3) float32 must be the tensor type (2,) float32 with a leading depth dimension}}
    %s = pipeline.stash %c {pipeline.stage = 0 : i64} : tensor<2xf32> -> tensor<2x3xf32>
  }
}

// -----

// a restore of something that is not a stash

graph.main {
  %c = graph.constant dense<1.0> : tensor<2x2xf32>
  pipeline.region steps 4 {
    // expected-error @+1 {{pipeline.restore: the operand must be the result of a pipeline.stash}}
    %r = pipeline.restore %c {pipeline.stage = 1 : i64} : tensor<2x2xf32> -> tensor<2xf32>
    %b = popxl.relu %r {pipeline.stage = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>
  }
}

// -----

// stash outside a pipeline region

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.stash: 'pipeline.stash' expects parent op 'pipeline.region'}}
  %s = pipeline.stash %c : tensor<2xf32> -> tensor<2x2xf32>
}

// -----

// nested pipelines

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{pipeline.region: 'pipeline.region' is in no stage: every op of a pipeline region needs a 'pipeline.stage' attribute}}
  pipeline.region steps 4 {
    pipeline.region steps 4 {
      %a = popxl.relu %c {pipeline.stage = 0 : i64} : (tensor<2xf32>) -> tensor<2xf32>
    } 
  }
}

