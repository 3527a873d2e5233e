// Discoverability: pass and dialect listings, -p help, versions, help texts.
// RUN: xl-opt --list-passes | filecheck %s --check-prefix=PASSES
// RUN: xl-opt -p help | filecheck %s --check-prefix=PASSES
// RUN: xl-opt --list-dialects | filecheck %s --check-prefix=DIALECTS
// RUN: xl-opt --version > %t.opt-version
// RUN: xl-run --version > %t.run-version
// RUN: python -c "import xl, importlib.metadata as m; print(f'xl-opt (xl) {xl.__version__}, xDSL {m.version(chr(120) + \"dsl\")}')" > %t.opt-expected
// RUN: diff %t.opt-expected %t.opt-version
// RUN: filecheck %s --check-prefix=RUNVERSION --input-file %t.run-version
// RUN: xl-opt --help | filecheck %s --check-prefix=HELP
// RUN: xl-run --help | filecheck %s --check-prefix=RUNHELP
// RUN: not xl-opt %s -t riscv-asm 2>&1 | filecheck %s --check-prefix=TARGET

// Each xl pass: name and one-line description, then its options (type = default),
// taken from the pass class (docstring, dataclass fields); xDSL's passes apart.
// PASSES:      xl passes:
// PASSES:      accumulate: Gradient accumulation on a gradient graph
// PASSES-NEXT:     usage: accumulate{graph=NAME
// PASSES-NEXT:     graph: str | None = None
// PASSES-NEXT:     inputs: tuple[int, ...] | None = None
// PASSES-NEXT:     names: tuple[str, ...] | None = None
// PASSES-NEXT:     keep: tuple[int, ...] = ()
// PASSES-NEXT:     counter: str = 'mean_accum_counter'
// PASSES:      hoist-updates: In-place updates of variables move up to where their inputs are ready.
// PASSES-NEXT:     graph: str | None = None
// PASSES:      inline: Inline all `call.call` ops (with `keep-shared`, not those of graphs called from several places); `remove-dead` erases graphs no longer called.
// PASSES-NEXT:     remove-dead: bool = True
// PASSES-NEXT:     keep-shared: bool = False
// PASSES:      outline: Repeated isomorphic op sequences
// PASSES:          min-ops: int = 3
// PASSES:      rt-optimize: All `rt` optimisations
// PASSES:      xDSL passes (see xDSL's documentation):
// PASSES:      canonicalize,
// PASSES-NOT:  xl-test-fail

// DIALECTS:      xl dialects:
// DIALECTS-NEXT:   graph: The `graph` dialect
// DIALECTS-NEXT:     graph.constant, graph.d2h_stream, graph.graph
// DIALECTS:        popxl:
// DIALECTS:        popxl.abs,
// DIALECTS:        rt:
// DIALECTS:      xDSL dialects (also accepted in the input):
// DIALECTS:      arith,

// The versions are xl.__version__ and xDSL's installed version (diff above).
// RUNVERSION: xl-run (xl) {{[0-9]+\.[0-9]+.*}}, xDSL {{[0-9]+\.[0-9]+}}

// HELP:      -p PASSES, --passes PASSES
// HELP:      xl passes: accumulate, autodiff,
// HELP:      {{xDSL passes:|xDSL$}}
// HELP:      --mlir-elide-elementsattrs-if-larger N
// HELP:      --list-passes
// HELP:      --list-dialects
// HELP:      --load-pass-plugin FILE.py

// RUNHELP:      default lowering pipeline (-p):
// RUNHELP-NEXT:   pipeline,inline,canonicalize,cse,dce,lower-to-rt

// TARGET: invalid choice: 'riscv-asm' (choose from mlir, dot, svg)
