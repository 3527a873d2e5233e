// RUN: XL_ROUNDTRIP
// RUN: XL_GENERIC_ROUNDTRIP

// Placement is the discardable `ipu.id` attribute; ipu.copy moves a tensor between IPUs.

graph.main {
  %x = graph.constant dense<1.0> : tensor<4xf32> {ipu.id = 0 : i64}
  %y = popxl.gelu %x {ipu.id = 0 : i64, ipu.tile_set = "compute"} : (tensor<4xf32>) -> tensor<4xf32>
  %z = ipu.copy %y {source = 0 : i64, destination = 1 : i64, ipu.id = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  %b = ipu.copy %z {source = 1 : i64, destination = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
}

// CHECK:      graph.main {
// CHECK-NEXT:   %x = graph.constant dense<1.000000e+00> : tensor<4xf32> {ipu.id = 0 : i64}
// CHECK-NEXT:   %y = popxl.gelu %x {ipu.id = 0 : i64, ipu.tile_set = "compute"} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   %z = ipu.copy %y {ipu.id = 1 : i64, source = 0 : i64, destination = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:   %b = ipu.copy %z {source = 1 : i64, destination = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: }

// CHECK-GENERIC:      %z = "ipu.copy"(%y) <{source = 0 : i64, destination = 1 : i64}> {ipu.id = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-GENERIC-NEXT: %b = "ipu.copy"(%z) <{source = 1 : i64, destination = 0 : i64}> : (tensor<4xf32>) -> tensor<4xf32>

// -----

// Copies work in subgraphs too, and on any dtype.

graph.graph @stage(%x: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %y = ipu.copy %x {source = 0 : i64, destination = 3 : i64} : (tensor<2x3xi32>) -> tensor<2x3xi32>
  graph.output %y : tensor<2x3xi32>
}

// CHECK:      graph.graph @stage(%x: tensor<2x3xi32>) -> tensor<2x3xi32> {
// CHECK-NEXT:   %y = ipu.copy %x {source = 0 : i64, destination = 3 : i64} : (tensor<2x3xi32>) -> tensor<2x3xi32>
// CHECK-NEXT:   graph.output %y : tensor<2x3xi32>
// CHECK-NEXT: }

// CHECK-GENERIC: %y = "ipu.copy"(%x) <{source = 0 : i64, destination = 3 : i64}> : (tensor<2x3xi32>) -> tensor<2x3xi32>
