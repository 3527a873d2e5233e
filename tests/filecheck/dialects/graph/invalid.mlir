// RUN: xl-opt %s --split-input-file --verify-diagnostics

// graph.output does not match the declared output type

// expected-error @+1 {{graph.graph: graph @g: graph.output types ['tensor<2xf32>'] differ from the declared output types ['tensor<3xf32>']}}
graph.graph @g(%x: tensor<2xf32>) -> tensor<3xf32> {
  graph.output %x : tensor<2xf32>
}

// -----

// graph.output gives fewer outputs than declared

// expected-error @+1 {{graph.graph: graph @g: graph.output types ['tensor<2xf32>'] differ from the declared output types ['tensor<2xf32>', 'tensor<2xf32>']}}
graph.graph @g(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  graph.output %x : tensor<2xf32>
}

// -----

// entry block arguments differ from the function type (generic form)

// expected-error @+1 {{graph.graph: graph @g: entry block argument types ['tensor<3xf32>'] differ from the input types ['tensor<2xf32>']}}
"graph.graph"() <{sym_name = "g", function_type = (tensor<2xf32>) -> ()}> ({
^bb0(%x: tensor<3xf32>):
  "graph.output"() : () -> ()
}) : () -> ()

// -----

// one argument attribute dictionary per input

// expected-error @+1 {{graph.graph: graph @g: 2 argument attribute dictionaries for 1 inputs}}
"graph.graph"() <{sym_name = "g", function_type = (tensor<2xf32>) -> (), arg_attrs = [{graph.name = "x"}, {graph.name = "y"}]}> ({
^bb0(%x: tensor<2xf32>):
  "graph.output"() : () -> ()
}) : () -> ()

// -----

// a graph must end with graph.output

graph.graph @g(%x: tensor<2xf32>) -> () {
  // expected-error @+1 {{Operation popxl.neg terminates block in single-block region but is not a terminator}}
  %y = popxl.neg %x : (tensor<2xf32>) -> tensor<2xf32>
}

// -----

// graph.output only terminates a graph.graph

graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{graph.output: 'graph.output' expects parent op 'graph.graph'}}
  graph.output %c : tensor<2xf32>
}

// -----

// variables only in the main graph (HasParent)

graph.graph @g() -> tensor<2xf32> {
  // expected-error @+1 {{graph.variable "w": variables can only be created in the main graph (graph.main), not in graph @g}}
  %w = graph.variable "w" : tensor<2xf32>
  graph.output %w : tensor<2xf32>
}

// -----

// a variable's initial value must have the variable's type

graph.main {
  // expected-error @+1 {{graph.variable "w": initial value of type tensor<3xf32> does not match the variable type tensor<2xf32>}}
  %w = "graph.variable"() <{var_name = "w", init = dense<1.0> : tensor<3xf32>}> : () -> tensor<2xf32>
}

// -----

// num_host_transfers must be positive

// expected-error @+1 {{graph.main: 'num_host_transfers' must be a positive integer}}
graph.main attributes {num_host_transfers = 0 : i64} {
}

// -----

// replication_factor must be a positive integer

// expected-error @+1 {{graph.main: 'replication_factor' must be a positive integer}}
graph.main attributes {replication_factor = "two"} {
}

// -----

// host_load of an undeclared stream

graph.main {
  // expected-error @+1 {{graph.host_load: @nope does not name a graph.h2d_stream declaration (no such symbol)}}
  %x = graph.host_load @nope : tensor<2xf32>
}

// -----

// host_load with the wrong type

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  // expected-error @+1 {{graph.host_load: stream @x carries (2,) float32 but the load produces (3,) float32}}
  %x = graph.host_load @x : tensor<3xf32>
}

// -----

// host_load from a device-to-host stream

graph.d2h_stream @y : tensor<2xf32>
graph.main {
  // expected-error @+1 {{graph.host_load: @y does not name a graph.h2d_stream declaration (it is a graph.d2h_stream)}}
  %x = graph.host_load @y : tensor<2xf32>
}

// -----

// host_store into a host-to-device stream

graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<2xf32>
  // expected-error @+1 {{graph.host_store: @x does not name a graph.d2h_stream declaration (it is a graph.h2d_stream)}}
  graph.host_store @x, %x : tensor<2xf32>
}

// -----

// host_store with the wrong type

graph.d2h_stream @y : tensor<2xi32>
graph.main {
  %c = graph.constant dense<1.0> : tensor<2xf32>
  // expected-error @+1 {{graph.host_store: stream @y carries (2,) int32 but the stored tensor is (2,) float32}}
  graph.host_store @y, %c : tensor<2xf32>
}

// -----

// graph.constant: the result type is the value's type

graph.main {
  // expected-error @+1 {{graph.constant: attribute tensor<3xf32> expected from variable 'T', but got tensor<2xf32>}}
  %c = "graph.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
}

// -----

// symbols are unique

graph.h2d_stream @x : tensor<2xf32>
// expected-error @+1 {{graph.h2d_stream: Redefinition of symbol "x"}}
graph.h2d_stream @x : tensor<3xf32>

