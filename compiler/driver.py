"""`lower` and `compile_module`: the pass pipeline, then the runtime's plan.

```python
from xl.compiler import compile_module

exe = compile_module(module)          # lowered, rt-optimised, generated plan
ref = compile_module(module, optimize=False)  # the straightforward plan, as lowered
flat = compile_module(module, outline=False)  # no automatic outlining
outs = exe.run({"x": x})
```

Automatic outlining. With the default pipeline, `compile_module` runs `OUTLINE_PIPELINE`
on programs of at least `OUTLINE_MIN_PROGRAM_OPS` ops once inlined (`count_ops`; 400:
below that, compiling is fast and repeats are few; MNIST's training program has 57 ops and
is compiled exactly as without outlining):

- `inline{keep-shared=true}` expands the graphs called from one place (the forward and
  gradient graphs of a training step: their ops are moved, not copied) and keeps the
  calls of graphs called from several places (a layer the user calls twice);
- `hoist-updates` moves each in-place update of a variable (the optimiser step) right after
  its gradient, so that outlining keeps a layer's backward and its update in one graph:
  the weight gradient stays inside the graph (where `rt-fold-update` folds the step into
  the gemm) instead of becoming an output of every call, alive until the end of the step;
- `outline{min-ops=6}` removes dead code first (a call keeps its whole body alive; the
  same liveness as `dce`, in about one sweep: `xl.passes.outline_dce`), then turns
  repeated code (identical layers, their gradients and updates) into one graph called at
  each repeat; runs are at least `OUTLINE_MIN_OPS` ops (a call costs about a
  microsecond, so shorter runs of small ops would slow the step);
- then `canonicalize,cse,dce,lower-to-rt` as in `DEFAULT_PIPELINE`; `lower-to-rt` keeps
  each graph called from several places as one `rt.func`, so the rt optimisations and the
  generated plan work on one copy of each.

`outline=False` compiles with `DEFAULT_PIPELINE` as is; `functions=False` expands every
call when lowering (`lower-to-rt{functions=false}`). A pipeline given explicitly is used
as given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.transforms import get_all_passes
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import VerifyException

from xl.dialects import rt, xl_context
from xl.passes import get_all_passes as xl_passes
from xl.passes.hoist_updates import HoistUpdatesPass
from xl.passes.inline import InlinePass, inlined_copy
from xl.passes.outline import OutlinePass, count_ops
from xl.passes.outline_copy import outlined_copy
from xl.passes.pipeline import PipelinePass, pipeline_regions
from xl.runtime.comm import Comm
from xl.runtime.errors import PlanError
from xl.runtime.executable import Executable, compile_program, gc_paused

__all__ = ["DEFAULT_PIPELINE", "OUTLINE_PIPELINE", "RT_PIPELINE", "compile_module", "lower"]

# From a high-level module (graphs, calls, popxl ops) to one `rt.program`.
DEFAULT_PIPELINE = "pipeline,inline,canonicalize,cse,dce,lower-to-rt"

# The size threshold of automatic outlining (ops of the program once inlined), and the
# shortest run outlined.
OUTLINE_MIN_PROGRAM_OPS = 400
OUTLINE_MIN_OPS = 6

# `DEFAULT_PIPELINE` with automatic outlining (see the module docstring): what
# `compile_module` runs by default on programs of `OUTLINE_MIN_PROGRAM_OPS` ops or more.
OUTLINE_PIPELINE = (
    f"pipeline,inline{{keep-shared=true}},hoist-updates,outline{{min-ops={OUTLINE_MIN_OPS}}},"
    "canonicalize,cse,dce,lower-to-rt"
)


def split_pipeline(pipeline: str) -> list[str]:
    """The passes of a pipeline string (commas inside `{...}` options kept)."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(pipeline):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(pipeline[start:i])
            start = i + 1
    parts.append(pipeline[start:])
    return [p.strip() for p in parts if p.strip()]


def _pass_name(spec: str) -> str:
    return spec.split("{", 1)[0].strip()


def compile_pipeline(
    pipeline: str = DEFAULT_PIPELINE,
    outline: bool = True,
    functions: bool = True,
    module: ModuleOp | None = None,
) -> str:
    """The pipeline `compile_module` runs for these options: `OUTLINE_PIPELINE` for the
    default pipeline with `outline`, when `module` (if given) has at least
    `OUTLINE_MIN_PROGRAM_OPS` ops once inlined; without `functions`,
    `lower-to-rt{functions=false}`."""
    if pipeline == DEFAULT_PIPELINE and outline and (module is None or count_ops(module) >= OUTLINE_MIN_PROGRAM_OPS):
        pipeline = OUTLINE_PIPELINE
    if not functions:
        pipeline = ",".join(
            "lower-to-rt{functions=false}" if _pass_name(p) == "lower-to-rt" else p for p in split_pipeline(pipeline)
        )
    return pipeline


# The rt-level optimisations applied by `compile_module(..., optimize=True)`.
RT_PIPELINE = "rt-optimize"


def lower(module: ModuleOp, pipeline: str = DEFAULT_PIPELINE) -> ModuleOp:
    """A copy of `module` with the passes of `pipeline` applied (the input is left
    untouched). Pass names are xDSL's and xl's (`xl.passes.get_all_passes`, plugins
    included). The copy is made by the first passes where they can (`first_copy`)."""
    with gc_paused():
        passes = pass_pipeline(pipeline).passes
        module, start = first_copy(module, passes)
        ctx = xl_context()
        for p in passes[start:]:
            p.apply(ctx, module)
    return module


def _outlines(passes: Sequence[ModulePass]) -> bool:
    """Whether `passes` start with `inline{keep-shared=true},hoist-updates,outline` as
    `OUTLINE_PIPELINE` has them (every graph, dead ops removed, no size threshold)."""
    if len(passes) < 3:
        return False
    inline, hoist, outline = passes[:3]
    return (
        isinstance(inline, InlinePass)
        and inline.keep_shared
        and inline.remove_dead
        and isinstance(hoist, HoistUpdatesPass)
        and hoist.graph is None
        and isinstance(outline, OutlinePass)
        and outline.graph is None
        and outline.min_program_ops == 0
        and outline.dce
    )


def first_copy(module: ModuleOp, passes: Sequence[ModulePass]) -> tuple[ModuleOp, int]:
    """A copy of `module` with `passes[:n]` applied, and n: a leading `pipeline` with no
    `pipeline.region` to lower does nothing, and `inline` then builds its result as a copy
    (`xl.passes.inline.inlined_copy`: each op copied once, to its place, instead of a clone
    of everything then the callees' bodies moved); `inline{keep-shared=true},hoist-updates,
    outline` (`OUTLINE_PIPELINE`) build the outlined module without the expanded one where
    they can (`xl.passes.outline_copy.outlined_copy`); otherwise a clone and 0."""
    n = 0
    if n < len(passes) and isinstance(passes[n], PipelinePass) and not pipeline_regions(module):
        n += 1
    p = passes[n] if n < len(passes) else None
    if isinstance(p, InlinePass):
        if _outlines(passes[n:]):
            outline = cast(OutlinePass, passes[n + 2])
            copy = outlined_copy(module, outline.min_ops)
            if copy is not None:
                return copy, n + 3
        copy = inlined_copy(module, p.remove_dead, p.keep_shared)
        if copy is not None:
            return copy, n + 1
    return module.clone(), 0


# Parsed pipelines by spec and the pass classes its names resolve to (a plugin installed
# later resolves to other classes, hence a new entry). Passes are frozen dataclasses that
# keep no state between runs, so one instance serves every compile.
_PIPELINES: dict[tuple[str, tuple[type[ModulePass], ...]], PassPipeline] = {}


def pass_pipeline(pipeline: str) -> PassPipeline:
    """The `PassPipeline` of a spec (xDSL's and xl's pass names, plugins included), made
    once per spec: instantiating the passes from their options costs milliseconds."""
    passes = {**get_all_passes(), **xl_passes()}
    try:
        names = [p.name for p in parse_pipeline(pipeline)]
        key = (pipeline, tuple(passes[n]() for n in names))
    except Exception:  # a malformed spec or an unknown name: xDSL's own error
        return PassPipeline.parse_spec(passes, pipeline)
    if key not in _PIPELINES:
        if len(_PIPELINES) >= 256:
            _PIPELINES.clear()
        _PIPELINES[key] = PassPipeline.parse_spec(passes, pipeline)
    return _PIPELINES[key]


def apply_extra_passes(module: ModuleOp, passes: Sequence[ModulePass]) -> ModuleOp:
    """A copy of `module` with `passes` (ModulePass instances, e.g. a plugin's) applied in
    order, each followed by verification; an invalid result names the pass."""
    module = module.clone()
    ctx = xl_context()
    for p in passes:
        if not isinstance(p, ModulePass):
            raise TypeError(f"extra passes must be ModulePass instances, got {p!r}")
        p.apply(ctx, module)
        try:
            module.verify()
        except VerifyException as e:
            first = str(e).split("\n\n")[0]
            raise ValueError(f"the IR after pass '{p.name}' is invalid: {first}") from None
    return module


def compile_module(
    module: ModuleOp,
    pipeline: str = DEFAULT_PIPELINE,
    optimize: bool = True,
    extra_passes: Sequence[ModulePass] = (),
    comm: Comm | None = None,
    profile: bool = False,
    concurrent: bool = True,
    outline: bool = True,
    functions: bool = True,
) -> Executable:
    """Compile a high-level or already lowered module into an `Executable`.

    With `optimize=True` (default) the lowered program also goes through `RT_PIPELINE`
    and runs as a generated plan; `optimize=False` gives the straightforward plan of the
    lowered program as is (same results, used as the reference in tests).
    `extra_passes` (ModulePass instances) run first, on the high-level module
    (`apply_extra_passes`). The input module is never modified. `comm`: which replicas
    run in this process (`compile_program`; default all). `profile=True`: the plan records
    kernel times (`xl.runtime.profile`). `concurrent=False`: virtual IPUs run serially
    (`compile_program`). `outline` / `functions`: automatic outlining with the default
    pipeline, and calls kept as functions when lowering (see the module docstring,
    `compile_pipeline`).
    """
    with gc_paused():
        if extra_passes:
            module = apply_extra_passes(module, extra_passes)
        programs = [op for op in module.ops if isinstance(op, rt.ProgramOp)]
        if not programs:
            pipeline = compile_pipeline(pipeline, outline, functions, module)
            module = lower(module, f"{pipeline},{RT_PIPELINE}" if optimize else pipeline)
        elif optimize:
            module = lower(module, RT_PIPELINE)
        programs = [op for op in module.ops if isinstance(op, rt.ProgramOp)]
        if len(programs) != 1:
            raise PlanError(f"runtime: expected one rt.program, found {len(programs)}")
        return compile_program(programs[0], optimize=optimize, comm=comm, profile=profile, concurrent=concurrent)
