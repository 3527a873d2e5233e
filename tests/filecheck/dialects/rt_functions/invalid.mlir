// RUN: xl-opt %s --split-input-file --verify-diagnostics
// RUN: not xl-opt %S/Inputs/bad_call.mlir.in 2>&1 | filecheck %s --check-prefix=LOC

// rt.call: the function must exist in the program

rt.program {
  %x = rt.alloc : memref<2xf32>
  // expected-error @+1 {{rt.call: no rt.func @missing in the program}}
  rt.call @missing(%x) -> () : (memref<2xf32>) -> ()
}

// -----

// rt.call: operand types must be the function's

rt.program {
  rt.func @f(%x: memref<2xf32>) -> (%y: memref<2xf32>) {
    rt.copy %x, %y : memref<2xf32>, memref<2xf32>
  }
  %x = rt.alloc : memref<3xf32>
  %y = rt.alloc : memref<2xf32>
  // expected-error @+1 {{rt.call @f: operand types (memref<3xf32>) -> (memref<2xf32>) differ from the function's (memref<2xf32>) -> (memref<2xf32>)}}
  rt.call @f(%x) -> (%y) : (memref<3xf32>) -> (memref<2xf32>)
}

// -----

// rt.call: destinations are distinct buffers, not also inputs

rt.program {
  rt.func @f(%x: memref<2xf32>) -> (%y: memref<2xf32>) {
    rt.copy %x, %y : memref<2xf32>, memref<2xf32>
  }
  %x = rt.alloc : memref<2xf32>
  // expected-error @+1 {{rt.call @f: destination #0 is also another operand (destinations must be distinct buffers)}}
  rt.call @f(%x) -> (%x) : (memref<2xf32>) -> (memref<2xf32>)
}

// -----

// rt.call: no recursion

rt.program {
  rt.func @f(%x: memref<2xf32>) -> () {
    // expected-error @+1 {{rt.call @f: a function cannot call itself}}
    rt.call @f(%x) -> () : (memref<2xf32>) -> ()
  }
}

// -----

// rt.func: no host streams in a function

rt.program {
  // expected-error @+1 {{rt.func @f: rt.h2d "x" in a function (host streams are read and written by the program body only)}}
  rt.func @f(%x: memref<2xf32>) -> () {
    rt.h2d "x", %x : memref<2xf32>
  }
}

// -----

// rt.func: only in rt.program

graph.main {
  // expected-error @+1 {{'rt.func' expects parent op 'rt.program'}}
  "rt.func"() <{sym_name = "f", num_outs = 0 : i64}> ({
  ^bb0:
  }) : () -> ()
}

// -----

// rt.func: num_outs cannot exceed the arguments

rt.program {
  // expected-error @+1 {{rt.func @f: num_outs = 2 but the function has 1 arguments}}
  "rt.func"() <{sym_name = "f", num_outs = 2 : i64}> ({
  ^bb0(%x: memref<2xf32>):
  }) : () -> ()
}

// -----

// rt.func: arguments are memrefs

rt.program {
  // expected-error @+1 {{rt.func @f: arguments must be memrefs, got tensor<2xf32>}}
  rt.func @f(%x: tensor<2xf32>) -> () {
  }
}

// LOC:      bad_call.mlir.in:7:3: error: rt.call: no rt.func @g in the program
// LOC-NEXT:   rt.call @g(%x) -> (%y) : (memref<2xf32>) -> (memref<2xf32>)
// LOC-NEXT:   ^
// LOC-NOT:  Traceback
