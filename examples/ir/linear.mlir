// A linear layer y = x @ W + b called from the main graph.
graph.h2d_stream @x : tensor<2x4xf32>
graph.d2h_stream @y : tensor<2x3xf32>
graph.graph @linear(%x: tensor<2x4xf32> {graph.name = "x"}, %w: tensor<4x3xf32> {graph.name = "weight"}, %b: tensor<3xf32> {graph.name = "bias"}) -> (tensor<2x3xf32>) {
  %xw = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %y = popxl.add %xw, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  graph.output %y : tensor<2x3xf32>
}
graph.main attributes {num_host_transfers = 1 : i64} {
  %w = graph.variable "weight" = dense<[[1.0, 0.0, -1.0], [0.5, 0.5, 0.5], [2.0, -2.0, 0.0], [0.0, 1.0, 1.0]]> : tensor<4x3xf32>
  %b = graph.variable "bias" = dense<[0.1, 0.2, 0.3]> : tensor<3xf32>
  %x = graph.host_load @x : tensor<2x4xf32>
  %y = call.call @linear(%x, %w, %b) : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %y : tensor<2x3xf32>
}
