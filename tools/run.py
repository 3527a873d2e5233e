"""`xl-run`: execute the main graph of a textual xl program on the NumPy runtime.

    xl-run prog.mlir x=x.npy                 # feed stream @x, print every d2h output
    xl-run prog.mlir inputs.npz --vars w.npz --steps 3 -o out.npz

Inputs: `name=file.npy` for one stream, a bare `.npy` when the program has exactly
one input stream, or a `.npz` whose keys are stream names. Variables: `--vars
file.npz` (keys are variable names); variables not given keep their initial value
from the IR (`graph.variable "w" = dense<...>`) or zeros. Each step is one run of
the program with the same inputs; variables persist across steps.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

from xl.runtime import DEFAULT_PIPELINE, Executable, compile_module
from xl.tools.context import xl_context
from xl.tools.opt import format_parse_error


class RunError(Exception):
    pass


def _load_array_file(path: str) -> np.ndarray | dict[str, np.ndarray]:
    p = Path(path)
    if not p.exists():
        raise RunError(f"input file '{path}' does not exist")
    try:
        data = np.load(p, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - report any reader failure plainly
        raise RunError(f"cannot read '{path}': {e}") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        return {k: data[k] for k in data.files}
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


def check_inputs(exe: Executable, inputs: dict[str, np.ndarray]) -> None:
    missing = sorted(set(exe.h2d_streams) - set(inputs))
    if missing:
        raise RunError(f"missing input for stream(s) {', '.join(missing)}")
    unexpected = sorted(set(inputs) - set(exe.h2d_streams))
    if unexpected:
        raise RunError(f"no input stream named {', '.join(unexpected)}")
    for name, (shape, dtype) in exe.h2d_streams.items():
        arr = inputs[name]
        full = exe.full_shape(shape)
        if arr.shape != full:
            raise RunError(
                f"stream \"{name}\": expected shape {full}, got {arr.shape} "
                f"(layout [num_host_transfers, replication_factor, *shape], size-1 dims dropped)"
            )
        if arr.dtype != dtype:
            raise RunError(f"stream \"{name}\": expected dtype {dtype}, got {arr.dtype}")


def set_variables(exe: Executable, path: str) -> None:
    data = _load_array_file(path)
    if not isinstance(data, dict):
        raise RunError(f"--vars '{path}': expected a .npz file keyed by variable name")
    for name, arr in data.items():
        if name not in exe.state:
            raise RunError(f"--vars: the program has no variable named \"{name}\"")
        buf = exe.state[name]
        if arr.shape != buf.shape:
            raise RunError(f"variable \"{name}\": expected shape {buf.shape}, got {arr.shape}")
        if arr.dtype != buf.dtype:
            raise RunError(f"variable \"{name}\": expected dtype {buf.dtype}, got {arr.dtype}")
        exe.set_state(name, arr)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="xl-run", description=__doc__.split("\n")[0])
    ap.add_argument("file", help="textual xl program (.mlir); '-' reads stdin")
    ap.add_argument("inputs", nargs="*", help="name=x.npy, x.npy or inputs.npz")
    ap.add_argument("--vars", help=".npz of variable values, keyed by variable name")
    ap.add_argument("--steps", type=int, default=1, help="number of runs (default 1)")
    ap.add_argument("-o", "--output", help="write the last step's outputs to this .npz")
    ap.add_argument("--save-vars", help="write the final variable values to this .npz")
    ap.add_argument("-p", "--pipeline", default=DEFAULT_PIPELINE, help="lowering pipeline")
    args = ap.parse_args(argv)
    np.set_printoptions(precision=6, suppress=True, linewidth=120)
    try:
        if args.file == "-":
            text, name = sys.stdin.read(), "<stdin>"
        else:
            if not Path(args.file).exists():
                raise RunError(f"file '{args.file}' does not exist")
            text, name = Path(args.file).read_text(), args.file
        module = Parser(xl_context(), text, name).parse_module()
        module.verify()
        exe = compile_module(module, args.pipeline)
        if args.vars:
            set_variables(exe, args.vars)
        inputs = gather_inputs(exe, args.inputs)
        check_inputs(exe, inputs)
        if args.steps < 1:
            raise RunError("--steps must be >= 1")
        outs: dict[str, np.ndarray] = {}
        for step in range(args.steps):
            outs = exe.run(inputs)
            if not args.output:
                if args.steps > 1:
                    print(f"step {step}:")
                for k, v in outs.items():
                    print(f"{k} = {np.array2string(v, separator=', ')}")
        if args.output:
            np.savez(args.output, **outs)
        if args.save_vars:
            np.savez(args.save_vars, **{k: v for k, v in exe.state.items()})
    except ParseError as e:
        print(format_parse_error(e), file=sys.stderr)
        return 1
    except (VerifyException, DiagnosticException) as e:
        print(f"xl-run: error: {e}", file=sys.stderr)
        return 1
    except (RunError, ValueError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"xl-run: error: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


def entry() -> None:
    sys.exit(main())
