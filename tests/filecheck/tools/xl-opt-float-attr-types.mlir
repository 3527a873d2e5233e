// RUN: not xl-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: not xl-run %s 2>&1 | filecheck %s --check-prefix=EXEC

// A float attribute of a type xDSL has no number format for (f80, f128) is refused where it
// is written, as a located parse error: xDSL parses `1.0 : f80` but cannot print it (xl-opt
// used to fail afterwards with "internal NotImplementedError (no message)" while printing).
// Float attributes of the other types print as before.

graph.d2h_stream @y : tensor<f32>
graph.main {
  %x = graph.variable "x" = dense<1.0> : tensor<f32>
  popxl.scaled_add_ %x, %x {a = 1.0 : f64, b = 1.0 : f80} : (tensor<f32>, tensor<f32>) -> ()
  graph.host_store @y, %x : tensor<f32>
}

// CHECK:      xl-opt-float-attr-types.mlir:12:48: error: a float attribute of type f80: xDSL cannot represent f80 values (use f16, bf16, f32 or f64)
// CHECK-NEXT:   popxl.scaled_add_ %x, %x {a = 1.0 : f64, b = 1.0 : f80} : (tensor<f32>, tensor<f32>) -> ()
// CHECK-NEXT: {{^                                               \^\^\^\^\^\^\^\^\^$}}
// CHECK-NOT:  Traceback
// CHECK-NOT:  internal

// EXEC:    xl-opt-float-attr-types.mlir:12:48: error: a float attribute of type f80
// EXEC-NOT:  Traceback

// -----

graph.main {
  %x = graph.variable "x" = dense<1.0> : tensor<f32>
  popxl.scaled_add_ %x, %x {a = 0.5 : bf16, b = 0.25 : f128} : (tensor<f32>, tensor<f32>) -> ()
}

// CHECK:      xl-opt-float-attr-types.mlir:29:49: error: a float attribute of type f128: xDSL cannot represent f128 values

// -----

graph.main {
  %x = graph.variable "x" = dense<1.0> : tensor<f32>
  popxl.scaled_add_ %x, %x {a = 0.5 : bf16, b = 0.25 : f16} : (tensor<f32>, tensor<f32>) -> ()
}

// CHECK:      popxl.scaled_add_ %x, %x {a = 5.000000e-01 : bf16, b = 2.500000e-01 : f16}
