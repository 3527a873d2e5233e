// A float written as its bits (NaN, infinities, float8's NaN: how they are printed) keeps
// those bits: xDSL alone reads 0x7FC00000 as the number 2143289344.
// RUN: xl-run %s | filecheck %s
// RUN: xl-opt %s | filecheck %s --check-prefix=TEXT
// RUN: xl-run %s --save-vars %t.npz && python -c "from xl.compiler.weights import load_arrays; v = load_arrays('%t.npz'); print({k: v[k].view('u%%d' %% v[k].dtype.itemsize).tolist() for k in sorted(v)})" | filecheck %s --check-prefix=BITS
// RUN: printf 'graph.main {\n  %%%%w = graph.variable "w" = dense<[0x1FFFF]> : tensor<1xf16>\n}\n' > %t.wide.mlir
// RUN: not xl-run %t.wide.mlir 2>&1 | filecheck %s --check-prefix=WIDE

graph.d2h_stream @y : tensor<4xf32>
graph.main {
  %f32 = graph.variable "f32" = dense<[0x7FC00000, 0xFF800000, -0.0, 1.5]> : tensor<4xf32>
  %f16 = graph.variable "f16" = dense<0x7C00> : tensor<2xf16>
  %f64 = graph.variable "f64" = dense<[0x7FF8000000000001, 2.0]> : tensor<2xf64>
  %f8 = graph.variable "f8" = dense<[0x80, 1.0]> : tensor<2xf8E4M3FNUZ>
  graph.host_store @y, %f32 : tensor<4xf32>
}

// CHECK: y = [ nan, -inf, -0. , 1.5]
// TEXT: dense<[0x7fc00000, 0xff800000, -0.000000e+00, 1.500000e+00]> : tensor<4xf32>
// TEXT: dense<0x7c00> : tensor<2xf16>
// TEXT: dense<[0x7ff8000000000001, 2.000000e+00]> : tensor<2xf64>
// TEXT: dense<[0x80, 1.000000e+00]> : tensor<2xf8E4M3FNUZ>
// BITS: {'f16': [31744, 31744], 'f32': [2143289344, 4286578688, 2147483648, 1069547520], 'f64': [9221120237041090561, 4611686018427387904], 'f8': [128, 64]}
// WIDE: wide.mlir:2:36: error: hexadecimal literal 0x1FFFF has more bits than f16 (16)
