// RUN: env PYTHONPATH=%S/Inputs/plugin_site xl-opt --list-passes 2>%t.err | filecheck %s
// RUN: filecheck %s --input-file=%t.err --check-prefix=WARN
// RUN: env PYTHONPATH=%S/Inputs/plugin_site xl-opt -p help 2>&1 | filecheck %s --check-prefix=WARN
// RUN: env PYTHONPATH=%S/Inputs/plugin_site xl-opt %s -p hello-plugin,cse | filecheck %s --check-prefix=RUNS
// RUN: env PYTHONPATH=%S/Inputs/plugin_site not xl-opt %s -p broken-import 2>&1 | filecheck %s --check-prefix=USED

// An installed plugin (entry point group xl.passes, Inputs/plugin_site) that fails to import
// does not break --list-passes: one warning line names it, its distribution and the error,
// and the other passes are listed. Using its pass is an error naming it.

graph.main {
}

// CHECK:      xl passes:
// CHECK:        inline:
// CHECK:      plugin passes (entry points 'xl.passes', --load-pass-plugin):
// CHECK-NEXT:   hello-plugin: Leave the module as it is (a plugin pass that loads).
// CHECK-NOT:    broken-import
// CHECK-NOT:    missing-module
// CHECK:      xDSL passes

// WARN-DAG: xl-opt: warning: pass 'broken-import' left out: entry point 'broken-import = broken_plugin:BrokenPass' (group xl.passes, distribution broken-plugin 1.0): cannot load it: ImportError: broken_plugin needs the 'nonexistent-dependency' package
// WARN-DAG: xl-opt: warning: pass 'missing-module' left out: entry point 'missing-module = no_such_plugin_module:MissingPass' (group xl.passes, distribution broken-plugin 1.0): cannot load it: ModuleNotFoundError: No module named 'no_such_plugin_module'
// WARN-NOT: Traceback

// RUNS: graph.main {

// USED:     xl-opt: error: entry point 'broken-import = broken_plugin:BrokenPass' {{.*}} cannot load it: ImportError: broken_plugin needs the 'nonexistent-dependency' package
// USED-NOT: Traceback
