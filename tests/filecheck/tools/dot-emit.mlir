// xl-opt --emit=dot (and -t dot): a Graphviz picture of the program. Ops are boxes named as
// print_schedule names them, tensors are edges labelled with shape and dtype, every graph is
// a cluster, every virtual IPU a cluster inside it, a call a dashed edge to its callee.
// At the rt level, edges follow the data through buffers.
// RUN: xl-opt %s --emit=dot | filecheck %s
// RUN: xl-opt %s -t dot | filecheck %s
// RUN: xl-opt %s -p inline,lower-to-rt --emit=dot | filecheck %s --check-prefix=RT
// RUN: not xl-opt %s --emit=png 2>&1 | filecheck %s --check-prefix=BAD

// CHECK:      digraph "xl" {
// CHECK-NEXT:   compound=true;
// CHECK:        subgraph "cluster_g0" {
// CHECK-NEXT:     label="Graph : layer";
// CHECK:          "[[X:in[0-9]+]]" [shape=egg, label="input 0: x=%1", color="black"];
// CHECK-NEXT:     "[[W:in[0-9]+]]" [shape=egg, label="input 1: weight=%2", color="black"];
// CHECK-NEXT:     "[[COPY:op[0-9]+]]" [shape=box, label="IpuCopy.101"];
// CHECK-NEXT:     "[[OUT:out[0-9]+]]" [shape=egg, label="output 0"];
// CHECK-NEXT:     subgraph "cluster_ipu{{[0-9]+}}" {
// CHECK-NEXT:       label="ipu 0";
// CHECK-NEXT:       style=
// CHECK-NEXT:       "[[MM:op[0-9]+]]" [shape=box, label="MatMul.100"];
// CHECK-NEXT:     }
// CHECK-NEXT:     subgraph "cluster_ipu{{[0-9]+}}" {
// CHECK-NEXT:       label="ipu 1";
// CHECK-NEXT:       style=
// CHECK-NEXT:       "[[GELU:op[0-9]+]]" [shape=box, label="Gelu.102"];
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   subgraph "cluster_g1" {
// CHECK-NEXT:     label="Graph : main";
// CHECK:          "[[VAR:t[0-9]+]]" [shape=egg, label="Variable \"weight\"", color="blue"];
// CHECK-NEXT:     "[[CALL:op[0-9]+]]" [shape=box, label="Call.104(layer)"];
// CHECK-NEXT:     subgraph "cluster_ipu{{[0-9]+}}" {
// CHECK-NEXT:       label="ipu 0";
// CHECK-NEXT:       style=
// CHECK-NEXT:       "[[LOAD:op[0-9]+]]" [shape=box, label="HostLoad.103"];
// CHECK-NEXT:     }
// CHECK-NEXT:     subgraph "cluster_ipu{{[0-9]+}}" {
// CHECK-NEXT:       label="ipu 1";
// CHECK-NEXT:       style=
// CHECK-NEXT:       "[[STORE:op[0-9]+]]" [shape=box, label="HostStore.105"];
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   "[[X]]" -> "[[MM]]" [label="%1 [(2, 4) float32]"];
// CHECK-NEXT:   "[[W]]" -> "[[MM]]" [label="%2 [(4, 3) float32]"];
// CHECK-NEXT:   "[[MM]]" -> "[[COPY]]" [label="%3 [(2, 3) float32]"];
// CHECK-NEXT:   "[[COPY]]" -> "[[GELU]]" [label="%4 [(2, 3) float32]"];
// CHECK-NEXT:   "[[GELU]]" -> "[[OUT]]" [label="%5 [(2, 3) float32]"];
// CHECK-NEXT:   "[[LOAD]]" -> "[[CALL]]" [label="%1 [(2, 4) float32]"];
// CHECK-NEXT:   "[[VAR]]" -> "[[CALL]]" [label="%2 [(4, 3) float32]"];
// CHECK-NEXT:   "[[CALL]]" -> "[[STORE]]" [label="%3 [(2, 3) float32]"];
// CHECK-NEXT:   "[[CALL]]" -> "graph:layer" [label="calls", style=dashed, color="blue", lhead="cluster_g0"];
// CHECK-NEXT: }

// RT:          label="Graph : rt.program";
// RT:          "[[STATE:t[0-9]+]]" [shape=egg, color="blue", label="State \"weight\""];
// RT-NEXT:     "[[H2D:op[0-9]+]]" [shape=box, label="H2d.100 \"x\""];
// RT-NEXT:     "[[COPY:op[0-9]+]]" [shape=box, label="Copy.102"];
// RT-NEXT:     "[[D2H:op[0-9]+]]" [shape=box, label="D2h.104 \"y\""];
// RT-NEXT:     subgraph "cluster_ipu{{[0-9]+}}" {
// RT-NEXT:       label="ipu 0";
// RT-NEXT:       style=
// RT-NEXT:       "[[MM:op[0-9]+]]" [shape=box, label="MatMul.101"];
// RT:            label="ipu 1";
// RT-NEXT:       style=
// RT-NEXT:       "[[GELU:op[0-9]+]]" [shape=box, label="Gelu.103"];
// RT:          "[[H2D]]" -> "[[MM]]" [label="%1 [(2, 4) float32]"];
// RT-NEXT:     "[[STATE]]" -> "[[MM]]" [label="%2 [(4, 3) float32]"];
// RT-NEXT:     "[[MM]]" -> "[[COPY]]" [label="%3 [(2, 3) float32]"];
// RT-NEXT:     "[[COPY]]" -> "[[GELU]]" [label="%4 [(2, 3) float32]"];
// RT-NEXT:     "[[GELU]]" -> "[[D2H]]" [label="%5 [(2, 3) float32]"];
// RT-NEXT:   }

// BAD: argument --emit: invalid choice: 'png' (choose from 'mlir', 'dot', 'svg')

graph.h2d_stream @x : tensor<2x4xf32>
graph.d2h_stream @y : tensor<2x3xf32>
graph.graph @layer(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "weight"}) -> (tensor<2x3xf32>) {
  %xw = popxl.matmul %x, %w {ipu.id = 0 : i64} : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %c = ipu.copy %xw {source = 0 : i64, destination = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = popxl.gelu %c {ipu.id = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.output %y : tensor<2x3xf32>
}
graph.main attributes {num_host_transfers = 1 : i64} {
  %w = graph.variable "weight" = dense<1.0> : tensor<4x3xf32>
  %x = graph.host_load @x {ipu.id = 0 : i64} : tensor<2x4xf32>
  %y = call.call @layer(%x, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %y {ipu.id = 1 : i64} : tensor<2x3xf32>
}
