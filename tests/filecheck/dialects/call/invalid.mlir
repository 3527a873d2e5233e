// RUN: xl-opt %s --split-input-file --verify-diagnostics

// call arity: too few inputs

graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}, %w: tensor<2xf32> {graph.name = "weight"}) -> tensor<2xf32> {
  graph.output %x : tensor<2xf32>
}
graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.call @g: 1 inputs given, the graph takes 2}}
  %y = call.call @g(%c) : (tensor<2xf32>) -> tensor<2xf32>
}

// -----

// call input type mismatch names the graph input

graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}, %w: tensor<2xf32> {graph.name = "weight"}) -> tensor<2xf32> {
  graph.output %x : tensor<2xf32>
}
graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  %d = graph.constant dense<1.0> : tensor<3xf32>
  // expected-error @+1 {{call.call @g: input 1 ('weight') is (3,) float32, the graph expects (2,) float32}}
  %y = call.call @g(%c, %d) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
}

// -----

// call result types must be the graph outputs

graph.graph @g(%x: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %x : tensor<2xf32>
}
graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.call @g: result types ((2,) float16) differ from the graph outputs ((2,) float32)}}
  %y = call.call @g(%c) : (tensor<2xf32>) -> tensor<2xf16>
}

// -----

// call to a symbol that is not a graph

graph.h2d_stream @s : tensor<2xf32>
graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.call: @s does not name a graph.graph (it is a graph.h2d_stream)}}
  %y = call.call @s(%c) : (tensor<2xf32>) -> tensor<2xf32>
}

// -----

// call to an undefined symbol

graph.main {
  // expected-error @+1 {{call.call: @missing does not name a graph.graph (no such symbol)}}
  call.call @missing() : () -> ()
}

// -----

// repeat: output 0 cannot be carried into input 0

graph.graph @body(%a: tensor<2xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  graph.output %b : tensor<3xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %b = graph.constant dense<1.0> : tensor<3xf32>
  // expected-error @+1 {{call.repeat @body: output 0 ((3,) float32) cannot be carried into input 0 ((2,) float32)}}
  %r = call.repeat @body 4 (%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> tensor<3xf32>
}

// -----

// repeat: more outputs than inputs

graph.graph @body(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  graph.output %a, %a : tensor<2xf32>, tensor<2xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.repeat @body: the graph has 2 outputs but only 1 inputs to carry them into}}
  %r:2 = call.repeat @body 4 (%a) : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
}

// -----

// repeat: negative count

graph.graph @body(%a: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %a : tensor<2xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.repeat: repeat_count must be >= 0, got -1}}
  %r = call.repeat @body -1 (%a) : (tensor<2xf32>) -> tensor<2xf32>
}

// -----

// repeat: arity

graph.graph @body(%a: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %a : tensor<2xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.repeat @body: 2 inputs given, the graph takes 1}}
  %r = call.repeat @body 2 (%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
}

// -----

// conditional: condition must be bool

graph.graph @id(%a: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %a : tensor<2xf32>
}
graph.main {
  %c = graph.constant dense<1.0> : tensor<f32>
  %a = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.conditional: condition must be a scalar bool tensor, got () float32}}
  %z = call.conditional %c then @id(%a) else @id(%a) : tensor<f32>, (tensor<2xf32>), (tensor<2xf32>) -> tensor<2xf32>
}

// -----

// conditional: condition must be a scalar

graph.graph @id(%a: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %a : tensor<2xf32>
}
graph.main {
  %c = graph.constant dense<true> : tensor<2xi1>
  %a = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.conditional: condition must be a scalar bool tensor, got (2,) bool}}
  %z = call.conditional %c then @id(%a) else @id(%a) : tensor<2xi1>, (tensor<2xf32>), (tensor<2xf32>) -> tensor<2xf32>
}

// -----

// conditional: the else branch is checked too

graph.graph @id(%a: tensor<2xf32>) -> tensor<2xf32> {
  graph.output %a : tensor<2xf32>
}
graph.graph @other(%a: tensor<2xf32> {graph.name = "a"}, %b: tensor<2xf32> {graph.name = "b"}) -> tensor<2xf32> {
  graph.output %a : tensor<2xf32>
}
graph.main {
  %c = graph.constant dense<true> : tensor<i1>
  %a = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{call.conditional @other: 1 inputs given, the graph takes 2}}
  %z = call.conditional %c then @id(%a) else @other(%a) : tensor<i1>, (tensor<2xf32>), (tensor<2xf32>) -> tensor<2xf32>
}

