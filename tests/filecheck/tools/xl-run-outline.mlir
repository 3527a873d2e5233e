// xl-run outlines programs of 400+ ops by default (repeats run as one function) and
// --no-outline turns it off: same results, both equal to NumPy.
// A chain of 90 layers tanh(x @ W_i + b_i) (453 ops with the variables):
// RUN: python %S/Inputs/deep_chain.py program 90 > %t.mlir
// RUN: python -c "import numpy as np; np.save('%t.x.npy', np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))"
// RUN: xl-run %t.mlir x=%t.x.npy -o %t.on.npz
// RUN: xl-run %t.mlir x=%t.x.npy -o %t.off.npz --no-outline
// RUN: python %S/Inputs/deep_chain.py check 90 %t.x.npy %t.on.npz %t.off.npz | filecheck %s --check-prefix=BOTH
// RUN: python %S/Inputs/deep_chain.py check 90 %t.x.npy %t.off.npz | filecheck %s
// The default compile's outlining, spelled out: the layers become rt.call's of functions.
// RUN: xl-opt %t.mlir -p 'pipeline,inline{keep-shared=true},dce,hoist-updates,outline{min-ops=6},canonicalize,cse,dce,lower-to-rt' | filecheck %s --check-prefix=IR
// Below the threshold nothing is outlined.
// RUN: xl-opt %t.mlir -p 'pipeline,inline{keep-shared=true},dce,hoist-updates,outline{min-ops=6 min-program-ops=1000},canonicalize,cse,dce,lower-to-rt' | filecheck %s --check-prefix=SMALL

// differences at most 1e-5 from NumPy (float32), at most 1e-7 between the two compiles
// CHECK: numpy: {{[0-9]\.[0-9]e-0[6-9]|0\.0e\+00}}
// BOTH: numpy: {{[0-9]\.[0-9]e-0[6-9]|0\.0e\+00}}
// BOTH-NEXT: other: {{[0-9]\.[0-9]e-0[7-9]|0\.0e\+00}}
// IR: rt.func @outlined
// IR-COUNT-2: rt.call @outlined
// SMALL-NOT: rt.func
// SMALL-NOT: rt.call
