"""`xl-run`: execute the main graph of a textual xl program on the NumPy runtime.

    xl-run prog.mlir x=x.npy                 # feed stream @x, print every d2h output
    xl-run prog.mlir inputs.npz --vars w.npz --steps 3 -o out.npz

Inputs: `name=file.npy` for one stream, a bare `.npy` when the program has exactly
one input stream, or a `.npz` whose keys are stream names. Variables: `--vars
file.npz` (keys are variable names; with replicas, a value for every replica,
`[replication_factor, *shape]`, or one for all); variables not given keep their initial value
from the IR (`graph.variable "w" = dense<...>`) or zeros, except variables marked
`{graph.external = "prog.npz"}` (written by `Ir.to_mlir(weights="prog.npz")`), which
`--vars` must provide. Each step is one run of the program with the same inputs;
variables persist across steps. `-` reads the program from stdin (`xl-opt ... | xl-run -`),
`-o -` writes the outputs' .npz to stdout.

Seeing a run: `--trace trace.json` records every kernel's time over the steps and writes
a Chrome trace (Perfetto, chrome://tracing; rows per virtual IPU, copies and host
transfers, input shapes and FLOPs on each kernel, see `xl.runtime.profile`); `--op-times`
prints the time per op type and per op (stderr; `--json`: as JSON). `--memory` prints the
memory per virtual IPU instead of running (`xl.runtime.memory`: the buffers live at each
IPU's peak, the largest, the variables by module; `--json`: as JSON), `--liveness FILE.svg`
(or `.png`, with matplotlib) draws the live bytes of each IPU over the schedule. Ops are
named by type and source position (`MatMul@12:5`). A kernel failing
at run time is reported at its op: `prog.mlir:12:5: error: MatMul@12:5 (popxl.matmul in
graph main_graph) failed: ...`, with the source line.

`-p` is the whole lowering pipeline and must end in `lower-to-rt` (xl-run does not append
it, so the passes that ran are the ones written; a pipeline that leaves no `rt.program` is
refused saying so). Without `-p` the default pipeline runs (`xl-run --help` prints it).

Every failure is one message and exit status 1, never a traceback (``--traceback``
re-raises for debugging): errors in the program as ``file:line:col: error: ...`` at the
op (parse errors, verifier errors, element types the NumPy runtime has no kernels for,
tensors too large to allocate), everything else as ``xl-run: error: ...``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    ParseError,
    VerifyException,
)

from popxl.fp8_utils import float8_view
from xl.compiler import DEFAULT_PIPELINE, compile_module
from xl.compiler.weights import EXTERNAL_ATTR, load_arrays, missing_external_variables, save_arrays
from xl.passes.plugins import load_pass_plugin
from xl.runtime import Executable
from xl.runtime.errors import PlanError
from xl.runtime.executable import ReplicaDivergenceError
from xl.tools.context import xl_context
from xl.tools.diagnostics import (
    LocatedError,
    SourceText,
    check_runnable_types,
    format_located,
    verify_located,
)
from xl.tools.opt import format_parse_error, version_text
from xl.tools.parse import as_parse_error, parse_source
from xl.tools.pipeline_spec import describe_pipeline_error, pipeline_error_column

PROG = "xl-run"


class RunError(Exception):
    pass


def _load_array_file(path: str) -> np.ndarray | dict[str, np.ndarray]:
    p = Path(path)
    if not p.exists():
        raise RunError(f"input file '{path}' does not exist")
    if p.is_dir():
        raise RunError(f"input '{path}' is a directory, expected a .npy or .npz file")
    try:
        data = np.load(p, allow_pickle=False)
        if isinstance(data, np.lib.npyio.NpzFile):
            data.close()
            return load_arrays(p)  # the dtypes save_arrays recorded (float8)
    except Exception as e:  # noqa: BLE001 - report any reader failure plainly
        raise RunError(f"cannot read '{path}': {e}") from None
    return data


def gather_inputs(exe: Executable, specs: Sequence[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        if "=" in spec:
            name, path = spec.split("=", 1)
            arr = _load_array_file(path)
            if isinstance(arr, dict):
                raise RunError(f"'{path}': expected a .npy file for stream \"{name}\"")
            inputs[name] = arr
            continue
        arr = _load_array_file(spec)
        if isinstance(arr, dict):
            inputs.update(arr)
        elif len(exe.h2d_streams) == 1:
            inputs[next(iter(exe.h2d_streams))] = arr
        else:
            raise RunError(
                f"'{spec}': the program has {len(exe.h2d_streams)} input streams "
                f"({sorted(exe.h2d_streams)}); name it as stream=file.npy"
            )
    return inputs


def _typed(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`arr` as the float8 `dtype` xl computes with when it holds float8 data in popxl's host
    format (`popxl.fp8_utils.float8_view`: a structured dtype naming the format), or the bits
    untyped: NumPy's .npy/.npz writers keep an ml_dtypes float8 array's bytes but not its type
    (it reads back as `|V1`). Anything else is returned as it is (and checked by the caller)."""
    view = float8_view(arr)
    if view is not None:
        return view  # a float8 of the other format stays that format: refused with both names
    if (
        dtype.kind == "V"
        and arr.dtype.kind == "V"
        and arr.dtype.fields is None
        and arr.dtype.itemsize == dtype.itemsize
    ):
        return arr.view(dtype)
    return arr


def check_inputs(exe: Executable, inputs: dict[str, np.ndarray]) -> None:
    unexpected = sorted(set(inputs) - set(exe.h2d_streams))
    if unexpected:
        names = ", ".join(f'"{n}"' for n in unexpected)
        streams = ", ".join(sorted(exe.h2d_streams)) or "none"
        raise RunError(f"the program has no input stream named {names} (its input streams: {streams})")
    missing = sorted(set(exe.h2d_streams) - set(inputs))
    if missing:
        raise RunError(f"missing input for stream(s) {', '.join(missing)}")
    for name, (shape, dtype) in exe.h2d_streams.items():
        arr = inputs[name] = _typed(inputs[name], np.dtype(dtype))
        full = exe.full_shape(shape)
        if arr.shape != full:
            raise RunError(
                f'stream "{name}": expected shape {full}, got {arr.shape} '
                f"(layout [num_host_transfers, replication_factor, *shape], size-1 dims dropped)"
            )
        if arr.dtype != dtype:
            raise RunError(f'stream "{name}": expected dtype {dtype}, got {arr.dtype}')


def read_variables(path: str) -> dict[str, np.ndarray]:
    data = _load_array_file(path)
    if not isinstance(data, dict):
        raise RunError(f"--vars '{path}': expected a .npz file keyed by variable name")
    return data


def check_external_variables(module: ModuleOp, data: dict[str, np.ndarray] | None, vars_path: str | None) -> None:
    """Every variable marked `graph.external` gets its value from `--vars`."""
    missing = missing_external_variables(module, data)
    if not missing:
        return
    name, op = missing[0]
    where = op.attributes[EXTERNAL_ATTR]
    file = getattr(where, "data", "an .npz")
    if vars_path is None:
        msg = (
            f'{op.name} "{name}": its value is not in the program but in "{file}" '
            f"(written by to_mlir(weights=...)): run with --vars {file}"
        )
    else:
        msg = f"{op.name} \"{name}\": --vars '{vars_path}' has no value for this external variable"
    others = len(missing) - 1
    if others:
        msg += f" ({others} more external variable{'s' if others > 1 else ''} missing)"
    raise LocatedError(msg, op)


def set_variables(exe: Executable, data: dict[str, np.ndarray]) -> None:
    for name, arr in data.items():
        if name not in exe.state:
            raise RunError(f'--vars: the program has no variable named "{name}"')
        buf = exe.state[name]
        arr = _typed(arr, buf.dtype)
        r = exe.replication_factor
        per_replica = r > 1 and arr.shape == (r, *buf.shape)
        if arr.shape != buf.shape and not per_replica:
            also = f" or {(r, *buf.shape)} (one value per replica)" if r > 1 else ""
            raise RunError(f'variable "{name}": expected shape {buf.shape}{also}, got {arr.shape}')
        if arr.dtype != buf.dtype:
            raise RunError(f'variable "{name}": expected dtype {buf.dtype}, got {arr.dtype}')
        if per_replica:
            exe.set_state_each(name, [arr[i] for i in exe.local_replicas])
        else:
            exe.set_state(name, arr)


def _check_output_path(option: str, path: str | None) -> None:
    if path is None or (option == "-o" and path == "-"):
        return
    p = Path(path)
    if p.is_dir():
        raise RunError(f"{option} '{path}' is a directory")
    parent = p.parent
    if not parent.is_dir():
        raise RunError(f"{option} '{path}': folder '{parent}' does not exist")


def _check_pipeline(spec: str) -> None:
    from xdsl.passes import PassPipeline
    from xdsl.transforms import get_all_passes as xdsl_passes

    from xl.passes import get_all_passes

    try:
        PassPipeline.parse_spec({**xdsl_passes(), **get_all_passes()}, spec)
    except ArgSpecParseError as e:
        hint = describe_pipeline_error(spec, pipeline_error_column(e))  # an option value to quote
        if hint is not None:
            raise RunError(f"-p '{spec}': {hint}") from None
        lines = [ln.strip() for ln in str(e.args[0] if e.args else e).splitlines() if ln.strip()]
        where = next((ln for ln in lines if ln.startswith("pass-pipeline:")), "")
        col = f" (column {where.rsplit(':', 1)[1]})" if where else ""
        raise RunError(f"-p '{spec}': {lines[-1] if lines else 'bad pipeline'}{col}") from None
    except Exception as e:  # noqa: BLE001 - unknown pass, bad option value, ...
        raise RunError(f"-p '{spec}': {e}") from None


def _not_lowered(module: ModuleOp, spec: str) -> RunError | None:
    """The error for a `-p` pipeline that leaves no `rt.program` to run because it does not
    lower the program (None if the program was lowered already or the pipeline lowers it).
    `-p` is the whole pipeline: xl-run does not append `lower-to-rt`, so what ran is what
    was written."""
    from xdsl.utils.arg_spec import parse_pipeline

    from xl.dialects import rt

    if any(isinstance(op, rt.ProgramOp) for op in module.ops):
        return None
    if "lower-to-rt" in (p.name for p in parse_pipeline(spec)):
        return None
    fixed = f"{spec.strip()},lower-to-rt" if spec.strip() else "lower-to-rt"
    return RunError(
        f"-p '{spec}' leaves no rt.program to run: the pipeline must end in lower-to-rt, as in "
        f"-p '{fixed}' (without -p, xl-run lowers with '{DEFAULT_PIPELINE}')"
    )


def _read_program(file: str) -> tuple[bytes, str]:
    if file == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    p = Path(file)
    if not p.exists():
        raise RunError(f"file '{file}' does not exist")
    if p.is_dir():
        raise RunError(f"'{file}' is a directory, not a textual program")
    try:
        return p.read_bytes(), file
    except OSError as e:
        raise RunError(f"cannot read '{file}': {e.strerror or e}") from None


def _run(args: argparse.Namespace) -> None:
    if args.steps < 1:
        raise RunError("--steps must be >= 1")
    _check_output_path("-o", args.output)
    _check_output_path("--save-vars", args.save_vars)
    if args.json and not (args.memory or args.liveness or args.op_times):
        raise RunError("--json prints the --memory report or the --op-times tables as JSON: give one of them")
    for plugin in args.load_pass_plugin or ():
        load_pass_plugin(plugin)
    _check_pipeline(args.pipeline)
    data, name = _read_program(args.file)
    module = parse_source(xl_context(), data, name)
    source = SourceText(name, data.decode("utf-8"))
    if not args.pipeline.strip() and (not_lowered := _not_lowered(module, args.pipeline)):
        raise not_lowered
    if args.memory or args.liveness:  # the memory report of the compiled program, instead of a run
        from xl.compiler.memory import module_memory_report

        if args.liveness:
            _check_output_path("--liveness", args.liveness)
            if not args.liveness.lower().endswith((".svg", ".png")):
                raise RunError(f"--liveness {args.liveness}: the file name must end in .svg or .png")
        try:
            verify_located(module)
            with _source_positions(module, {}):
                report = module_memory_report(module, args.pipeline, outline=not args.no_outline)
            print(report.to_json() if args.json else report.text())
            if args.liveness:
                try:
                    report.write_liveness(args.liveness)
                except ImportError as e:
                    raise RunError(str(e)) from None
        except LocatedError as e:
            raise _Located(format_located(e, source, PROG)) from None
        except PlanError as e:
            raise (_not_lowered(module, args.pipeline) or e) from None
        return
    var_values = read_variables(args.vars) if args.vars else None
    try:
        check_runnable_types(module)
        verify_located(module)
        check_external_variables(module, var_values, args.vars)
    except LocatedError as e:
        raise _Located(format_located(e, source, PROG)) from None
    profile = bool(args.trace or args.op_times)
    if args.trace:
        _check_output_path("--trace", args.trace)
    named: dict[str, Operation] = {}
    try:
        with _source_positions(module, named):
            exe = compile_module(
                module, args.pipeline, profile=profile, concurrent=not args.serial, outline=not args.no_outline
            )
    except LocatedError as e:
        raise _Located(format_located(e, source, PROG)) from None
    except PlanError as e:
        raise (_not_lowered(module, args.pipeline) or e) from None
    except MemoryError as e:
        raise RunError(f"out of memory while preparing the program: {e}") from None
    if var_values is not None:
        set_variables(exe, var_values)
    inputs = gather_inputs(exe, args.inputs)
    check_inputs(exe, inputs)
    outs: dict[str, np.ndarray] = {}
    for step in range(args.steps):
        try:
            outs = exe.run(inputs)
        except Exception as e:
            # a kernel failed: point at the op of the source it came from
            info = getattr(e, "xl_kernel", None)
            op = named.get(info.source.split("+")[0]) if info and info.source else None
            if op is None or args.traceback:
                raise
            raise _Located(format_located(LocatedError(_describe(e), op), source, PROG)) from None
        if not args.output:
            if args.steps > 1:
                print(f"step {step}:")
            for k, v in outs.items():
                print(f"{k} = {np.array2string(v, separator=', ')}")
    if profile:
        from xl.runtime.profile import Profile

        assert exe.profile is not None
        prof = Profile(exe.profile)
        if args.trace:
            prof.export_chrome_trace(args.trace)
        if args.op_times and args.json:
            tables = {g: prof.key_averages(g).as_dict() for g in ("type", "site")}
            _eprint(json.dumps(tables, indent=1))
        elif args.op_times:
            _eprint(prof.table("type") + "\n\n" + prof.table("site"))
    if args.output == "-":
        buf = io.BytesIO()
        save_arrays(buf, outs)
        sys.stdout.flush()
        sys.stdout.buffer.write(buf.getvalue())
        sys.stdout.buffer.flush()
    elif args.output:
        save_arrays(args.output, outs)
    if args.save_vars:
        if exe.replication_factor > 1:  # every replica's value, [replication_factor, *shape]
            save_arrays(args.save_vars, {k: exe.gather_state(k) for k in exe.state})
        else:
            save_arrays(args.save_vars, exe.state)


@contextmanager
def _source_positions(module: ModuleOp, named: dict[str, Operation]) -> Iterator[None]:
    """While compiling: each op that becomes a kernel is named by its PopART type and its
    position in the source (`MatMul@12:5`, the `rt.source` attribute the runtime reads for
    traces and run-time errors; `named` maps the names to the ops); the module is left as
    it was."""
    from xdsl.dialects.builtin import FileLineColLoc, StringAttr

    from xl.dialects.graph import GraphOp
    from xl.dialects.popxl import PopxlOp
    from xl.dialects.traits import is_cross_replica, popart_type
    from xl.runtime.profile import GRAPH_ATTR, SOURCE_ATTR

    marked = []
    try:
        for op in module.walk():
            loc = op.location
            if SOURCE_ATTR in op.attributes or not isinstance(loc, FileLineColLoc):
                continue
            if isinstance(op, PopxlOp) or is_cross_replica(op):
                where = f"{loc.line.data}:{loc.column.data}"
                name = f"{popart_type(op)}@{where}"
                op.attributes[SOURCE_ATTR] = StringAttr(name)
                named[name] = op
                parent = op.parent_op()
                graph = parent.sym_name.data if isinstance(parent, GraphOp) else "main_graph"
                op.attributes.setdefault(GRAPH_ATTR, StringAttr(graph))
                marked.append(op)
        yield
    finally:
        for op in marked:
            op.attributes.pop(SOURCE_ATTR, None)
            op.attributes.pop(GRAPH_ATTR, None)


class _Located(Exception):
    """An already formatted `file:line:col: error: ...` message."""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description=(__doc__ or "").split("\n")[0],
        epilog=f"default lowering pipeline (-p):\n  {DEFAULT_PIPELINE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("file", help="textual xl program (any extension); '-' reads stdin")
    ap.add_argument("inputs", nargs="*", help="name=x.npy, x.npy or inputs.npz")
    ap.add_argument("--vars", help=".npz of variable values, keyed by variable name")
    ap.add_argument("--steps", type=int, default=1, help="number of runs (default 1)")
    ap.add_argument("-o", "--output", help="write the last step's outputs to this .npz ('-': stdout)")
    ap.add_argument("--save-vars", help="write the final variable values to this .npz")
    ap.add_argument(
        "-p",
        "--pipeline",
        default=DEFAULT_PIPELINE,
        help=f"lowering pipeline (default: {DEFAULT_PIPELINE})",
    )
    ap.add_argument(
        "--no-outline",
        action="store_true",
        help="no automatic outlining of repeated code (with the default pipeline, programs "
        "of 400+ ops are outlined and repeats run as one function)",
    )
    ap.add_argument(
        "--serial",
        action="store_true",
        help="run the virtual IPUs one after another on one thread (default: concurrently, "
        "one worker thread per IPU, same results; XL_SERIAL=1 does the same)",
    )
    ap.add_argument(
        "--memory",
        action="store_true",
        help="print the memory per virtual IPU of the compiled program (variables, stashes, "
        "remote staging, constants, peak of live activations) instead of running it",
    )
    ap.add_argument(
        "--liveness",
        metavar="FILE.svg",
        help="draw the bytes live on each virtual IPU over the schedule (.svg; .png with matplotlib, "
        "the [plot] extra); implies --memory",
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="--memory and --op-times as JSON (stdout and stderr)",
    )
    ap.add_argument(
        "--trace",
        metavar="FILE.json",
        help="record every kernel's time and write a Chrome trace (Perfetto, chrome://tracing)",
    )
    ap.add_argument(
        "--op-times",
        action="store_true",
        help="print the time per op type and per op over the steps (stderr)",
    )
    ap.add_argument(
        "--load-pass-plugin",
        action="append",
        metavar="FILE.py",
        help="load the ModulePass subclasses (with a 'name') defined in FILE.py; repeatable",
    )
    ap.add_argument("--version", action="version", version=version_text(PROG), help="print the xl and xDSL versions")
    ap.add_argument(
        "--traceback",
        action="store_true",
        help="re-raise internal errors with a Python traceback (for debugging xl)",
    )
    args = ap.parse_args(argv)
    np.set_printoptions(precision=6, suppress=True, linewidth=120)
    try:
        with warnings.catch_warnings():  # restores showwarning afterwards
            warnings.showwarning = _show_warning
            _run(args)
    except BrokenPipeError:  # `xl-run ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except ParseError as e:
        if args.traceback:
            raise
        _eprint(format_parse_error(e))
        return 1
    except _Located as e:
        _eprint(str(e))
        return 1
    except DiagnosticException as e:
        if args.traceback:
            raise
        located = as_parse_error(e)
        _eprint(format_parse_error(located) if located else f"{PROG}: error: {_describe(e)}")
        return 1
    except KeyboardInterrupt:
        raise
    except (Exception, ArgSpecParseError) as e:  # noqa: BLE001 - the tool reports every failure as one message
        if args.traceback:
            raise
        _eprint(f"{PROG}: error: {_describe(e)}")
        return 1
    return 0


def _describe(e: BaseException) -> str:
    """One message for any failure: the text of user errors, the type for internal ones."""
    if isinstance(e, KeyError) and e.args:
        msg = str(e.args[0])
    else:
        msg = str(e).strip() or type(e).__name__
    if isinstance(e, MemoryError):
        return f"out of memory: {msg}"
    if isinstance(e, RunError | VerifyException | DiagnosticException | ValueError | KeyError | ReplicaDivergenceError):
        return msg
    if isinstance(e, OSError) and e.strerror:
        where = f" '{e.filename}'" if e.filename else ""
        return f"{e.strerror}{where}"
    return f"{msg} ({type(e).__name__})"


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """A warning (e.g. the runtime's host-transfer counts) as one `xl-run: warning:` line,
    not Python's `file.py:543: HostTransferWarning:` and a line of xl's source."""
    _eprint(f"{PROG}: warning: {message}")


def _eprint(text: str) -> None:
    sys.stdout.flush()
    print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())


def entry() -> None:
    sys.exit(main())
