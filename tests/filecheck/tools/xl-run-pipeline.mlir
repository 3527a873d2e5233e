// RUN: python -c "import numpy as np; np.save('%t.x.npy', np.array([1.0, -2.0], np.float32))"
// RUN: not xl-run %s x=%t.x.npy -p inline 2>&1 | filecheck %s --check-prefix=INLINE
// RUN: not xl-run %s x=%t.x.npy -p '' 2>&1 | filecheck %s --check-prefix=EMPTY
// RUN: not xl-run --memory %s -p cse 2>&1 | filecheck %s --check-prefix=MEMORY
// RUN: xl-run %s x=%t.x.npy -p inline,lower-to-rt | filecheck %s --check-prefix=OUT
// RUN: xl-run %s x=%t.x.npy | filecheck %s --check-prefix=OUT
// RUN: xl-opt %s -p inline,lower-to-rt | xl-run - x=%t.x.npy -p '' | filecheck %s --check-prefix=OUT
// RUN: not xl-run %s x=%t.x.npy -p 'autodiff{graph=Net_subgraph(0)}' 2>&1 | filecheck %s --check-prefix=QUOTE

// xl-run's -p is the whole lowering pipeline: one that leaves no rt.program (no lower-to-rt)
// is refused with what to write instead of the runtime's "expected one rt.program, found 0".
// A program lowered already runs with any pipeline.

graph.h2d_stream @x : tensor<2xf32>
graph.d2h_stream @y : tensor<2xf32>
graph.graph @twice(%a: tensor<2xf32> {graph.name = "a"}) -> (tensor<2xf32>) {
  %b = popxl.add %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %b : tensor<2xf32>
}
graph.main attributes {num_host_transfers = 1 : i64} {
  %x = graph.host_load @x : tensor<2xf32>
  %y = call.call @twice(%x) : (tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %y : tensor<2xf32>
}

// INLINE:     xl-run: error: -p 'inline' leaves no rt.program to run: the pipeline must end in lower-to-rt, as in -p 'inline,lower-to-rt' (without -p, xl-run lowers with 'pipeline,inline,canonicalize,cse,dce,lower-to-rt')
// INLINE-NOT: found 0

// EMPTY: xl-run: error: -p '' leaves no rt.program to run: the pipeline must end in lower-to-rt, as in -p 'lower-to-rt'

// MEMORY: xl-run: error: -p 'cse' leaves no rt.program to run: the pipeline must end in lower-to-rt, as in -p 'cse,lower-to-rt'

// OUT: y = [ 2., -4.]

// QUOTE: xl-run: error: -p 'autodiff{graph=Net_subgraph(0)}': the value of option 'graph' of pass 'autodiff' needs double quotes {{.*}}: write graph="Net_subgraph(0)"
