// RUN: xl-opt %s | filecheck %s
// CHECK: builtin.module
