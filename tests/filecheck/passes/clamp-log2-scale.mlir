// RUN: xl-opt %s -p clamp-log2-scale | filecheck %s

// Every float8 op's scale (its log2_scale operand) is clamped to [-32, 31] before the op,
// in the main graph and in subgraphs; other operands and ops are left alone.

builtin.module {
  graph.graph @sub(%a: tensor<2x3xf8E4M3FNUZ>, %b: tensor<3x2xf8E5M2FNUZ>, %t: tensor<i32>) -> (tensor<2x2xf16>) {
    %m = popxl.matmul_pow2scaled %a, %b, %t : (tensor<2x3xf8E4M3FNUZ>, tensor<3x2xf8E5M2FNUZ>, tensor<i32>) -> tensor<2x2xf16>
    graph.output %m : tensor<2x2xf16>
  }
  graph.main attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
    %x = graph.variable "x" = dense<1.000000e+00> : tensor<4xf16>
    %s = graph.constant dense<100> : tensor<i32>
    %y = popxl.pow2scale_cast_to_fp8 %x, %s : (tensor<4xf16>, tensor<i32>) -> tensor<4xf8E4M3FNUZ>
    %z = popxl.pow2scale_cast_from_fp8 %y, %s : (tensor<4xf8E4M3FNUZ>, tensor<i32>) -> tensor<4xf32>
    %w = popxl.relu %z : (tensor<4xf32>) -> tensor<4xf32>
  }
}

// CHECK:      graph.graph @sub(
// CHECK-NEXT:   %[[T:.*]] = popxl.clip %t {min = -3.200000e+01 : f64, max = 3.100000e+01 : f64} : (tensor<i32>) -> tensor<i32>
// CHECK-NEXT:   %m = popxl.matmul_pow2scaled %a, %b, %[[T]]
// CHECK:      %s = graph.constant
// CHECK-NEXT: %[[S1:.*]] = popxl.clip %s {min = -3.200000e+01 : f64, max = 3.100000e+01 : f64}
// CHECK-NEXT: %y = popxl.pow2scale_cast_to_fp8 %x, %[[S1]]
// CHECK-NEXT: %[[S2:.*]] = popxl.clip %s {min = -3.200000e+01 : f64, max = 3.100000e+01 : f64}
// CHECK-NEXT: %z = popxl.pow2scale_cast_from_fp8 %y, %[[S2]]
// CHECK-NEXT: %w = popxl.relu %z
// CHECK-NEXT: }
