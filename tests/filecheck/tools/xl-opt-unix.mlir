// Unix conventions: '-' is stdin, '-o -' stdout, any extension is textual IR, and the
// pass reports (--time-passes, --print-ir-after-all, --print-between-passes) go to stderr,
// so `xl-opt ... | xl-run -` runs what xl-opt printed.
// RUN: cat %s | xl-opt - -o - | filecheck %s --check-prefix=STDIN
// RUN: cp %s %t.prog.txt
// RUN: xl-opt %t.prog.txt -p canonicalize | filecheck %s --check-prefix=STDIN
// RUN: xl-opt %s -p 'canonicalize,cse' --time-passes --print-ir-after-all --print-between-passes 2> %t.err | xl-run - | filecheck %s --check-prefix=OUT
// RUN: filecheck %s --check-prefix=ERR --input-file %t.err
// RUN: python -c "import numpy as np; np.save('%t.z.npy', np.zeros(2, np.float32))"
// RUN: not xl-run %s z=%t.z.npy 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: xl-run %s -o - > %t.out.npz
// RUN: python -c "import numpy as np; d = np.load('%t.out.npz'); print(sorted(d.files), d['y'].tolist())" | filecheck %s --check-prefix=NPZ

graph.d2h_stream @y : tensor<2xf32>
graph.main attributes {num_host_transfers = 1 : i64} {
  %c = graph.constant dense<[1.5, -2.0]> : tensor<2xf32>
  %n = popxl.neg %c : (tensor<2xf32>) -> tensor<2xf32>
  graph.host_store @y, %n : tensor<2xf32>
}

// STDIN:      graph.main attributes {num_host_transfers = 1 : i64} {
// STDIN-NEXT:   %c = graph.constant dense<[1.500000e+00, -2.000000e+00]> : tensor<2xf32>
// STDIN-NEXT:   %n = popxl.neg %c

// Only the program's outputs on stdout: -y is [-1.5, 2.0].
// OUT-NOT: Pass
// OUT:     y = [-1.5,  2. ]
// OUT-NOT: IR Dump

// ERR:      Pass canonicalize took {{[0-9.]+}} seconds
// ERR-NEXT: // -----// IR Dump After CanonicalizePass (canonicalize) //----- //
// ERR:      Pass cse took {{[0-9.]+}} seconds
// ERR-NEXT: // -----// IR Dump After CommonSubexpressionElimination (cse) //----- //

// The stream named by the user that the program does not have is named.
// UNKNOWN: xl-run: error: the program has no input stream named "z" (its input streams: none)

// NPZ: ['y'] [-1.5, 2.0]
