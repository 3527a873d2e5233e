"""`popxl.Session` (popxl/session.py): compiles an Ir and runs it on the NumPy runtime.

The session keeps a host copy of every variable. Attaching (entering the context)
writes the host copies to the device (`weights_from_host`); detaching copies the
device values back (`weights_to_host`, unless `weights_to_host_on_exit=False`).
While attached, `get_tensor_data` lazily fetches the device values after a `run`.

Replicas: each replica has its own copy of every variable. A variable with a
`replica_grouping` of several groups has one host value per group, `[num_groups, *shape]`:
replica r is written from `host[assignment[r]]` and the host copy of group g is read from
the first replica of g. A variable with `retrieval_mode='all_replicas'` (and more than one
replica) is read as `[replication_factor, *shape]`, every replica's value; it cannot be
written (as in PopXL). Stream data covers the replicas this process runs
(`[num_host_transfers, local replicas, *shape]`, size-1 dims dropped).

Profiling (`xl.runtime.profile`): `with session.profile() as prof:` records the runs inside
the block (torch.profiler-like: `prof.export_chrome_trace(path)`, `prof.key_averages()`);
`session.profile_summary()` prints time per op type and per call site of every profiled
run. A session runs its unprofiled plan, unchanged, outside profile blocks: the first block
builds a second, profiled plan from the same compiled program (once), and each block runs
on it, the device state (variables, optimiser state, stashes, remote buffers) copied into it
when the block starts and back when it ends. `Session(ir, profile=True)` compiles the
profiled plan only and records every run; `Session(ir, profile="trace.json")` also writes
the trace of every run when the session detaches. Either way a kernel failing at run time
names its popxl op and id (`Gather.104`), as `print_schedule` does.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.utils.exceptions import VerifyException

from popxl._checks import check_int
from popxl._host import downcast_np_dtype
from popxl._logging import logger
from popxl._session_remote import SessionRemote
from popxl.errors import RunDataError
from popxl.fp8_utils import float8_view, host_float8
from popxl.ir import Ir
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Constant, Tensor, Variable
from xl.dialects.graph import VariableOp
from xl.dialects.replica_layout import ReplicaLayout, host_data_shape
from xl.dialects.utils import dense_to_numpy
from xl.runtime.kernels.registry import DataRangeError

__all__ = ["Session"]

_DEVICES = ("cpu", "ipu_model", "ipu_hw")


class Session:
    """Runs an `Ir`. Use as a context manager: `with session: session.run(inputs)`."""

    def __init__(
        self,
        ir: Ir,
        device_desc: Any = "cpu",
        weights_to_host_on_exit: bool = True,
        passes: Sequence[Any] = (),
        profile: bool | str | Path = False,
        concurrent: bool = True,
        outline: bool = True,
    ):
        """`passes`: xDSL `ModulePass` instances run on the program before xl's lowering
        (e.g. a plugin's pass; `xl.compiler.compile_module(..., extra_passes=...)`).

        `profile`: True records every kernel's time of every run (`session.profile()`,
        `session.profile_summary()`); a path also writes the Chrome trace of the runs there
        when the session detaches (Perfetto, chrome://tracing). Not needed for
        `with session.profile():`, which profiles the runs of its block on any session.

        `concurrent`: a program placed on two or more virtual IPUs (`popxl.ipu(k)`, pipelining)
        runs each IPU's kernels on its own worker thread, synchronised where the IPUs share
        data, with results bit-identical to serial execution at the same number of BLAS
        threads (1 per worker on 2 cores; `xl.runtime.concurrent`; programs with replica
        collectives run serially). A program on one virtual IPU may split large elementwise
        kernels into row blocks and run independent kernels side by side on those threads,
        where that is estimated to beat BLAS's own threads (`xl.runtime.parallel_kernels`,
        bit-identical too). `concurrent=False`, or `XL_SERIAL=1` in the environment, runs
        everything one kernel after another on the calling thread (for debugging and
        comparison).

        `outline=False`: no automatic outlining of repeated code (`xl.compiler.driver`;
        on by default for programs of 400+ ops)."""
        if not isinstance(ir, Ir):
            raise TypeError(f"Session expects a popxl.Ir, got {type(ir).__name__}")
        if not isinstance(device_desc, str):
            raise TypeError(
                f"Session: device_desc must be one of {', '.join(_DEVICES)}, got {type(device_desc).__name__}"
            )
        if not isinstance(weights_to_host_on_exit, bool):
            raise TypeError(
                f"Session: weights_to_host_on_exit must be a bool, got {type(weights_to_host_on_exit).__name__}"
            )
        if not isinstance(profile, bool | str | Path):
            raise TypeError(f"Session: profile must be a bool or a trace file path, got {type(profile).__name__}")
        if not isinstance(outline, bool):
            raise TypeError(f"Session: outline must be a bool, got {type(outline).__name__}")
        if not isinstance(concurrent, bool):
            raise TypeError(f"Session: concurrent must be a bool, got {type(concurrent).__name__}")
        if device_desc not in _DEVICES:
            raise ValueError(f"Session: unknown device_desc {device_desc!r}; expected one of {', '.join(_DEVICES)}")
        self._ir = ir
        self._device_desc = device_desc
        self.weights_to_host_on_exit = weights_to_host_on_exit and not ir._has_read_only_memmap
        if weights_to_host_on_exit and ir._has_read_only_memmap:
            logger.info("Weights to host has been disabled as the `ir` contains a read-only memmaped variable.")
        self._attached = False
        self._ctx_stack: list[bool] = []
        self._device_dirty = False  # device state may differ from the host copies

        from popxl._views import check_views

        check_views(ir, "Session")
        module = ir._module
        try:
            module.verify()
        except VerifyException as e:
            raise ValueError(f"Session: the program of {ir!r} is invalid: {str(e).split(chr(10) * 2)[0]}") from None
        from xl.compiler import compile_module

        comm = None
        if getattr(ir, "_popdist", False):  # Ir(replication="popdist"): this instance's replicas
            from popdist import _instance_comm

            comm = _instance_comm()
        self._trace_path = None if isinstance(profile, bool) else Path(profile)
        # the names print_schedule gives the results of each op, for the memory report
        self._tensor_names: dict[tuple[str | None, str], list[str]] = {}
        with _source_names(ir, self._tensor_names):
            self._exe = compile_module(
                module,
                extra_passes=(*passes, *_option_passes(ir)),
                comm=comm,
                profile=profile is not False,
                concurrent=concurrent,
                outline=outline,
            )
        self._concurrent = concurrent
        # the plan that records kernel times: this one with profile=..., else built by the
        # first `profile()` block; the unprofiled plan runs outside the blocks
        self._profiled_exe: Any = self._exe if self._exe.profile is not None else None
        self._plain_exe: Any = self._exe
        self._profile_depth = 0
        ir._sessions.append(self)

        self._num_host_transfers = ir.num_host_transfers
        self._replication_factor = ir.replication_factor
        # the replicas this process runs (all of them unless the program runs as several instances)
        self._local_replicas = self._exe.local_replication_factor
        self._h2d = ir._ordered_h2d_streams()
        self._d2h = ir._ordered_d2h_streams()
        self._d2h_by_name = {s.tensor_id: s for s in self._d2h}

        # Host copies of the variables, in main-graph order.
        main = ir.main_graph
        self._host: dict[Variable, np.ndarray] = {}
        self._layouts: dict[Variable, ReplicaLayout] = {}  # which replicas share which value
        for op in main._block.ops:
            if isinstance(op, VariableOp):
                v = main._tensor(op.result)
                assert isinstance(v, Variable)
                self._layouts[v] = op.layout(self._replication_factor)
                self._host[v] = self._initial_value(v, op)
        # remote / replica-sharded variables: their host copies are full values
        self._remote = SessionRemote(main, self._exe, self._all_replicas)
        self._host.update(self._remote.initial_values())
        self._layouts.update(self._remote.layouts())
        self._pb_session_handle: Any = None
        # the Ir's PopART session options: a warning for each one xl does not honour
        # although it could change the numbers (popart.handles.check_session)
        from popart.handles import check_session

        check_session(self)
        ir._dot_final()  # the checkpoint FINAL, when the dot checks select it (as PopART)

    def _initial_value(self, v: Variable, op: VariableOp) -> np.ndarray:
        if v._memmap_arr is not None and not self._all_replicas(v):
            return v._memmap_arr  # the host copy is the user's memory-mapped file itself
        name = op.var_name.data
        host_init = getattr(v, "_host_init", None)
        if self._all_replicas(v):
            # every replica's value (the device starts each replica from its group's value)
            if name in self._exe.state:
                return np.array(self._exe.gather_state(name))
            if host_init is None and isinstance(op.init, DenseIntOrFPElementsAttr):
                host_init = dense_to_numpy(op.init)
            if host_init is not None:
                return self._layouts[v].every_replica(host_init)
            return np.zeros((self._replication_factor, *v.shape), v.dtype._compute_np())
        if host_init is not None:
            return np.array(host_init)
        if name in self._exe.state:
            if self._layouts[v].num_groups > 1:
                return self._layouts[v].per_group(self._exe.gather_state(name))
            return np.array(self._exe.get_state(name))
        if isinstance(op.init, DenseIntOrFPElementsAttr):
            return dense_to_numpy(op.init)
        return np.zeros(v.shape_on_host, v.dtype._compute_np())

    # -- replicas -------------------------------------------------------------------------
    def _all_replicas(self, v: Variable) -> bool:
        """Whether the host copy of `v` is every replica's value (`[replication_factor, *shape]`)."""
        return v.retrieval_mode == "all_replicas" and self._replication_factor > 1

    # -- properties -----------------------------------------------------------------------
    @property
    def ir(self) -> Ir:
        """The Ir this session runs."""
        return self._ir

    @property
    def is_attached(self) -> bool:
        """True inside `with session:` (after `__enter__`, before `__exit__`)."""
        return self._attached

    @property
    def device(self) -> Any:
        """The device the session was created for, as given (`"cpu"`, `"ipu_model"`, `"ipu_hw"`): all run on NumPy."""
        return self._device_desc

    def expected_inputs(self) -> list[HostToDeviceStream]:
        """The host-to-device streams a `run` needs data for."""
        return list(self._h2d)

    def _full_input_shape(self, shape: Iterable[int]) -> tuple[int, ...]:
        return host_data_shape(tuple(shape), self._num_host_transfers, self._local_replicas)

    # -- attach / detach --------------------------------------------------------------------
    def _attach(self) -> None:
        self._attached = True

    def _detach(self) -> None:
        self._attached = False

    def __enter__(self) -> Session:
        was_attached = self._attached
        self._ctx_stack.append(was_attached)
        if not was_attached:
            self._attach()
            self.weights_from_host()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        was_attached = self._ctx_stack.pop()
        if not was_attached:
            try:
                if exc_type is None and self.weights_to_host_on_exit:
                    self.weights_to_host()
            finally:
                self._detach()
                if self._trace_path is not None:
                    self._all_runs().export_chrome_trace(self._trace_path)

    def _require_attached(self, what: str) -> None:
        if not self._attached:
            raise ValueError(
                f"Must be attached to device before calling {what}. Did you forget to put "
                f"the call inside a `Session` context, e.g. `with session: session.{what}(...)`?"
            )

    # -- weights ------------------------------------------------------------------------------
    def weights_to_host(self) -> None:
        """Copy every variable from the device to its host copy; flushes the variables kept
        in `np.memmap` files. Refused when a variable's memmap is read-only (as PopXL)."""
        if self._ir._has_read_only_memmap:
            raise RuntimeError(
                "Writing data from device to host is not possible as the `ir` contains a read-only memmap."
            )
        self._require_attached("weights_to_host")
        state = self._exe.state
        for v, host in self._host.items():
            if v in self._remote:
                np.copyto(host, self._remote.read(v), casting="no")
                continue
            name = v._var_name
            if name not in state:
                continue
            if self._all_replicas(v):
                np.copyto(host, self._exe.gather_state(name), casting="no")
            elif self._layouts[v].num_groups > 1:
                np.copyto(host, self._layouts[v].per_group(self._exe.gather_state(name)), casting="no")
            else:
                np.copyto(host, state[name], casting="no")
        for host in self._host.values():
            if isinstance(host, np.memmap):
                host.flush()
        self._device_dirty = False

    def weights_from_host(self) -> None:
        """Copy every host copy to the device."""
        self._require_attached("weights_from_host")
        for v, host in self._host.items():
            self._write_device(v, host)
        self._device_dirty = False

    def _write_device(self, v: Variable, host: np.ndarray) -> None:
        if v in self._remote:
            return self._remote.write(v, host)
        name = v._var_name
        if name not in self._exe.state:
            return
        if self._all_replicas(v):
            self._exe.set_state_each(name, [host[r] for r in self._exe.local_replicas])
        elif self._layouts[v].num_groups > 1:
            layout = self._layouts[v]
            self._exe.set_state_each(name, [layout.group_value(host, r) for r in self._exe.local_replicas])
        else:
            self._exe.set_state(name, host)

    def _check_variable(self, t: Any, what: str) -> Variable:
        if not isinstance(t, Variable):
            lead = f"Tensor {t.id} is not of type Variable. " if isinstance(t, Tensor) else ""  # PopXL's words
            raise TypeError(
                f"{lead}Session.{what}: {t!r} is not a Variable"
                + (" (constants are read-only)" if isinstance(t, Constant) else "")
            )
        if t not in self._host:
            raise ValueError(f"Session.{what}: variable {t.id} is not part of this session's Ir")
        return t

    def get_tensor_data(self, tensor: Tensor) -> np.ndarray:
        """The value of a Variable (synced from the device when needed) or Constant, as a new
        array: later runs and writes do not change an array returned earlier. A variable
        created from an `np.memmap` returns that memmap itself, which holds its value.
        float8 data is in the host format (`popxl.dtypes.np_dtype_float8_143` / `_152`)."""
        if isinstance(tensor, Constant):
            return host_float8(np.array(tensor._data, copy=True))
        if not isinstance(tensor, Variable):
            raise TypeError(
                f"Session.get_tensor_data: {tensor!r} is not of type Constant or Variable; only "
                "variables and constants have data outside a run"
            )
        v = self._check_variable(tensor, "get_tensor_data")
        if self._attached and self._device_dirty:
            self.weights_to_host()
        host = self._host[v]
        # a variable kept in an np.memmap: that object itself, as PopXL
        return host_float8(host if host is v._memmap_arr else host.copy())

    def get_tensors_data(self, tensors: Iterable[Tensor]) -> dict[Tensor, np.ndarray]:
        """`get_tensor_data` of each of `tensors` (variables or constants), by tensor."""
        if isinstance(tensors, Tensor) or not isinstance(tensors, Iterable):
            raise TypeError(f"Session.get_tensors_data: expected an iterable of tensors, got {type(tensors).__name__}")
        tensors = list(tensors)
        for t in tensors:
            if not isinstance(t, Variable | Constant):
                raise TypeError(f"Session.get_tensors_data: {t!r} is not a Variable or Constant")
        return {t: self.get_tensor_data(t) for t in tensors}

    def _host_array(self, v: Variable, data: Any, what: str) -> np.ndarray:
        """`data` checked against variable `v` (dtype, shape), as an array; writes nothing."""
        host = self._host[v]
        if self._all_replicas(v):
            # as PopXL: the per-replica values of an all_replicas variable are read-only
            raise NotImplementedError(
                f"Session.{what}: variable {v.id} has retrieval_mode='all_replicas'; writing "
                "its per-replica values is not supported (as in PopXL)"
            )
        if type(data).__module__.startswith("torch"):  # (not a number or a popxl Tensor)
            data = data.detach().cpu().numpy()
        if isinstance(data, int | float | bool) and not isinstance(data, np.generic):
            return np.full(host.shape, data, dtype=host.dtype)
        if isinstance(data, Tensor):
            raise TypeError(
                f"Session.{what}: the data for variable {v.id} must be host data (an array), "
                f"got the popxl Tensor {data!r}"
            )
        arr = np.asarray(data)
        f8 = float8_view(arr)  # float8 data in the host format or ml_dtypes
        arr = arr if f8 is None else f8
        if arr.dtype != host.dtype:
            raise TypeError(
                f"Session.{what}: dtype of the data ({arr.dtype}) does not match variable {v.id} ({v.dtype.name})"
            )
        if arr.shape != host.shape:
            raise ValueError(
                f"Session.{what}: shape of the data {arr.shape} does not match variable {v.id} {host.shape}"
            )
        return arr

    def write_variable_data(self, tensor: Variable, data: Any) -> None:
        """Set the value of a variable (host copy; also the device when attached)."""
        self.write_variables_data({tensor: data}, _what="write_variable_data")

    def write_variables_data(self, tensors: Mapping[Variable, Any], _what: str = "write_variables_data") -> None:
        """Set the values of several variables (host copies; also the device when attached).

        All or nothing: every entry is checked (a Variable of this session's Ir, data of its
        shape and dtype) before any variable is written."""
        if not isinstance(tensors, Mapping):
            raise TypeError(f"Session.{_what}: expected a mapping of variables to data, got {type(tensors).__name__}")
        checked = [
            (v, self._host_array(v, d, _what))
            for v, d in ((self._check_variable(t, _what), d) for t, d in tensors.items())
        ]
        if self._attached and self._device_dirty:
            self.weights_to_host()
        for v, arr in checked:
            np.copyto(self._host[v], arr)
        if self._attached:
            for v, _ in checked:
                self._write_device(v, self._host[v])

    def _current_values(self) -> dict[str, np.ndarray]:
        """The current value of every variable of the Ir, by variable name, as the IR holds
        it: `[num_groups, *shape]` for grouped variables (all_replicas ones included)."""
        out: dict[str, np.ndarray] = {}
        for v in self._host:
            data = self.get_tensor_data(v)
            f8 = float8_view(data)  # float8: as the IR holds it (ml_dtypes)
            data = data if f8 is None else f8
            if self._all_replicas(v):
                data = self._layouts[v].per_group(data)
            out[v._var_name] = data
        return out

    # -- running --------------------------------------------------------------------------------
    def _prepare_inputs(self, inputs: Mapping[HostToDeviceStream, Any] | None, downcast: bool) -> dict[str, np.ndarray]:
        if inputs is not None and not isinstance(inputs, Mapping):
            raise TypeError(f"Session.run: inputs must map HostToDeviceStreams to arrays, got {type(inputs).__name__}")
        inputs = dict(inputs or {})
        _check_streams(
            "Session.run: the inputs do not match the streams the program loads.",
            set(inputs),
            self._h2d,
        )
        out: dict[str, np.ndarray] = {}
        for s in self._h2d:
            data = inputs[s]
            if type(data).__module__.startswith("torch"):
                data = data.detach().cpu().numpy()
            arr = np.asarray(data)
            f8 = float8_view(arr)  # float8 data in the host format or ml_dtypes
            arr = arr if f8 is None else f8
            want = s.dtype._compute_np()
            if arr.dtype != want and downcast and downcast_np_dtype(arr.dtype) == want:
                arr = arr.astype(want)
            full = self._full_input_shape(s.shape)
            if arr.shape != full and _one_element_per_transfer(arr.shape, full, len(s.shape)):
                # PopXL's leniency: a stream of one element takes its data with any size-1
                # dims ((10, 1) or (10,) for 10 transfers of a scalar, () or (1,) for one)
                arr = arr.reshape(full)
            if arr.shape != full:
                raise ValueError(
                    f"Session.run: input for stream {s.tensor_id!r} has shape {arr.shape}, "
                    f"expected {full} ([num_host_transfers={self._num_host_transfers}, "
                    f"{self._replicas_str()}] + {s.shape}, size-1 dims dropped)"
                )
            if arr.dtype != want:
                raise ValueError(
                    f"Session.run: input for stream {s.tensor_id!r} has dtype {arr.dtype}, expected {want}"
                )
            out[s.tensor_id] = arr
        return out

    def run(
        self,
        inputs: Mapping[HostToDeviceStream, Any] | None = None,
        downcast_inputs: bool = True,
    ) -> dict[DeviceToHostStream, np.ndarray]:
        """Run the program once; returns one array per device-to-host stream."""
        self._require_attached("run")
        arrays = self._prepare_inputs(inputs, downcast_inputs)
        try:
            outs = self._exe.run(arrays)
        except DataRangeError as e:  # popart.poplar_application_runtime_error too, as in PopXL
            raise RunDataError(str(e)) from None
        self._device_dirty = True
        # float8 results in the host format (PopXL's structured uint8 dtype)
        return {self._d2h_by_name[n]: host_float8(a) for n, a in outs.items() if n in self._d2h_by_name}

    def run_with_outputs(
        self,
        inputs: Mapping[HostToDeviceStream, Any] | None = None,
        outputs: Mapping[DeviceToHostStream, np.ndarray] | None = None,
        downcast_inputs: bool = True,
    ) -> None:
        """Run, writing the results into the user-provided `outputs` arrays."""
        self._require_attached("run_with_outputs")
        if outputs is not None and not isinstance(outputs, Mapping):
            raise TypeError(
                "Session.run_with_outputs: outputs must map DeviceToHostStreams to arrays, got "
                f"{type(outputs).__name__}"
            )
        outputs = dict(outputs) if outputs is not None else self.create_host_outputs()
        _check_streams(
            "Session.run_with_outputs: the outputs do not match the streams the program stores.",
            outputs,
            self._d2h,
        )
        for s, arr in outputs.items():
            full = self._full_input_shape(s.shape)
            if (
                not isinstance(arr, np.ndarray)
                or arr.shape != full
                or arr.dtype not in (np.dtype(s.dtype.as_numpy()), s.dtype._compute_np())
            ):
                raise ValueError(
                    f"Session.run_with_outputs: output array for stream {s.tensor_id!r} must be "
                    f"a {full} {s.dtype.name} ndarray, got "
                    f"{getattr(arr, 'shape', None)} {getattr(arr, 'dtype', type(arr).__name__)}"
                )
        results = self.run(inputs, downcast_inputs)
        for s, arr in outputs.items():
            f8 = float8_view(arr)  # float8 outputs: the host format or ml_dtypes, written as bits
            if f8 is None:
                np.copyto(arr, results[s])
            else:
                np.copyto(f8, results[s].view(f8.dtype), casting="no")

    @property
    def _pb_session(self) -> Any:
        """PopART's session as PopXL programs reach it (`session._pb_session`): xl's
        stand-in `popart.handles.PbSession` (session options, `setEngineIsLoaded`)."""
        if self._pb_session_handle is None:
            from popart.handles import PbSession

            self._pb_session_handle = PbSession(self)
        return self._pb_session_handle

    def options_report(self, print_report: bool = True) -> str:
        """The PopART session options the program set on its Ir
        (`ir._pb_ir.getSessionOptions()`): those xl honours, those recorded without effect on
        NumPy, and those not honoured that could change the numbers on an IPU. Printed unless
        `print_report` is False; returned as text."""
        from popart.handles import session_options_of

        opts = session_options_of(self._ir)
        assert opts is not None
        text = opts.report()
        if print_report:
            print(text)
        return text

    def memory_report(self, print_table: bool = True) -> Any:
        """Bytes per virtual IPU of the compiled program, without running it: variables,
        pipeline stashes, remote buffers, constants and the peak of live activations
        (`xl.runtime.memory`), then in the program's terms: the tensors live at each IPU's
        peak, named as `print_schedule` names them (`%3 @ main_graph`), the largest buffers
        and the variables by module. Prints it unless `print_table=False`; returns the
        `MemoryReport` (`.ipu(k).variables`, `.peak_tensors(k)`, `.write_liveness("live.svg")`,
        `.to_json()`, ...)."""
        from xl.compiler.memory import session_memory_report

        return session_memory_report(self, print_table)

    # -- profiling ----------------------------------------------------------------------------
    def _profiled(self) -> Any:
        """The executable that records kernel times, built from the compiled program on
        first use (same kernels, buffers, replicas and communicator; timing added)."""
        if self._profiled_exe is None:
            from xl.runtime.executable import compile_program

            program = self._exe.program
            if program is None:  # (every Session compiles from a module: never)
                raise ValueError("Session.profile: the compiled program is not available to build a profiled plan")
            self._profiled_exe = compile_program(
                program, optimize=True, comm=self._exe.comm, profile=True, concurrent=self._concurrent
            )
        return self._profiled_exe

    def _switch_to(self, exe: Any) -> None:
        """Run on `exe` from now on: the device state (every state slot of every local
        replica: variables, optimiser state, stashes, remote buffers) is copied into it."""
        if exe is self._exe:
            return
        for old, new in zip(self._exe.replicas, exe.replicas, strict=True):
            for name, buf in old.state.items():
                np.copyto(new.state[name], buf)
        self._exe = exe
        self._remote._exe = exe

    def _all_runs(self) -> Any:
        from xl.runtime.profile import Profile

        if self._profiled_exe is None:
            raise ValueError(
                "Session.profile_summary: no run has been profiled; run inside `with session.profile():` "
                "(or create the session with popxl.Session(ir, ..., profile=True) to record every run)"
            )
        return Profile(self._profiled_exe.profile)

    @contextmanager
    def profile(self) -> Iterator[Any]:
        """`with session.profile() as prof:` the runs inside the block, as a
        `xl.runtime.profile.Profile`: `prof.events()`, `prof.key_averages(group_by=
        "type" | "site" | "graph" | "row").table(sort_by=..., row_limit=...)`,
        `prof.export_chrome_trace(path)`. Works on any session: without `profile=True` the
        block runs on the profiled plan (built on first use) and the session returns to its
        unprofiled plan afterwards, with the same device state."""
        from xl.runtime.profile import Profile

        exe = self._profiled()
        outermost = self._profile_depth == 0
        if outermost:
            self._switch_to(exe)
        self._profile_depth += 1
        rec = exe.profile
        prof = Profile(rec, rec.mark())
        try:
            yield prof
        finally:
            prof.stop()
            self._profile_depth -= 1
            if outermost:
                self._switch_to(self._plain_exe)

    def profile_summary(self, print_table: bool = True, row_limit: int | None = None) -> str:
        """Time per op type and per call site (`MatMul.101 @ graph`) of every run so far,
        sorted by total time, with count, total, mean and percentage (as torch.profiler's
        `key_averages().table()`). Prints it unless `print_table=False`; returns the text.
        Covers the runs inside `profile()` blocks, or every run with `profile=True`."""
        if row_limit is not None:
            row_limit = check_int(row_limit, "Session.profile_summary", "row_limit", minimum=0)
        prof = self._all_runs()
        text = (
            prof.key_averages("type").table(row_limit=row_limit)
            + "\n\n"
            + prof.key_averages("site").table(row_limit=row_limit)
        )
        if print_table:
            print(text)
        return text

    def create_host_outputs(self) -> dict[DeviceToHostStream, np.ndarray]:
        """Empty arrays of the right shape and dtype for every device-to-host stream."""
        return {s: np.empty(self._full_input_shape(s.shape), dtype=s.dtype.as_numpy()) for s in self._d2h}

    def _replicas_str(self) -> str:
        if self._local_replicas == self._replication_factor:
            return f"replication_factor={self._replication_factor}"
        return f"instance_replication_factor={self._local_replicas}"

    def __repr__(self) -> str:
        return f"Session[{self._ir!r} device={self._device_desc!r} attached={self._attached}]"


@contextmanager
def _source_names(ir: Ir, tensor_names: dict[tuple[str | None, str], list[str]] | None = None) -> Iterator[None]:
    """While compiling: every op the frontend numbered carries its `print_schedule` name
    (`MatMul.101`) and graph as discardable attributes, which lowering keeps on the
    runtime's kernels (profiles, run-time errors). The Ir is left as it was.

    `tensor_names` is filled with the names `print_schedule` shows for each marked op's
    results (`("main_graph", "MatMul.101") -> ["%3 @ main_graph"]`) and for the tensor of a
    stream loaded once (`(None, "HostLoad x")`), for the memory report."""
    from xdsl.dialects.builtin import StringAttr
    from xdsl.ir import Block

    from popxl.printing import op_type_name, tensor_numbers
    from xl.dialects.graph import GraphOp, HostLoadOp
    from xl.dialects.popxl import PopxlOp
    from xl.dialects.rt import GRAPH_ATTR, SOURCE_ATTR
    from xl.dialects.traits import is_cross_replica

    marked = []
    unnumbered: dict[tuple[str, str], int] = {}
    numbers: dict[Block, dict[Any, int]] = {}
    loads: dict[str, list[str]] = {}

    def tensor(v: Any, block: Block, graph: str) -> str:
        if block not in numbers:
            numbers[block] = tensor_numbers(block)
        return f"%{numbers[block][v]} @ {graph}"

    try:
        for op in ir._module.walk():
            is_load = isinstance(op, HostLoadOp)
            if not (isinstance(op, PopxlOp) or is_cross_replica(op) or is_load):
                continue  # only these become kernels (constants, calls, ... do not)
            parent = op.parent_op()
            graph = parent.sym_name.data if isinstance(parent, GraphOp) else "main_graph"
            if is_load:  # named by its stream: only the memory report's tensor name
                if tensor_names is not None and op.parent is not None:
                    loads.setdefault(op.stream.string_value(), []).append(tensor(op.result, op.parent, graph))
                continue
            kind = op_type_name(op)
            oid = ir._op_id(op)
            printed = ir._printed_op_ids.get(id(op))
            if oid is None and printed is not None and printed[1] is op:
                oid = printed[0]  # built by a pass, already shown by print_schedule
            if oid is not None:
                name = f"{kind}.{oid}"
            else:
                # built by a pass (autodiff, accumulation, pipelining) and never printed:
                # numbering it here would change what print_schedule shows later, so it is
                # named by its type and rank among the ops of that type in its graph
                n = unnumbered[graph, kind] = unnumbered.get((graph, kind), 0) + 1
                name = f"{kind}#{n}"
            op.attributes[SOURCE_ATTR] = StringAttr(name)
            op.attributes[GRAPH_ATTR] = StringAttr(graph)
            marked.append(op)
            if tensor_names is not None and op.parent is not None:
                tensor_names[graph, name] = [tensor(r, op.parent, graph) for r in op.results]
        if tensor_names is not None:
            for stream, names in loads.items():
                if len(names) == 1:
                    tensor_names[None, f"HostLoad {stream}"] = names
        yield
    finally:
        for op in marked:
            op.attributes.pop(SOURCE_ATTR, None)
            op.attributes.pop(GRAPH_ATTR, None)


def _option_passes(ir: Ir) -> list[Any]:
    """The passes PopART's session options of `ir` ask for: `clamp-log2-scale` when
    `throwIfLog2ScaleTensorNotInRange` is False (float8 scales out of range are clamped
    instead of failing the run; on an IPU the result is undefined)."""
    from popart.handles import session_options_of

    opts = session_options_of(ir, create=False)
    if opts is None or opts.throwIfLog2ScaleTensorNotInRange:
        return []
    from xl.passes.clamp_log2_scale import ClampLog2ScalePass

    return [ClampLog2ScalePass()]


def _one_element_per_transfer(shape: tuple[int, ...], full: tuple[int, ...], rank: int) -> bool:
    """Whether data of `shape` fits a stream of one element whose full input shape is `full`
    (`rank`: the stream's rank): the transfer / replica dims as expected and one element
    each, whatever its size-1 dims."""
    lead = len(full) - rank
    return shape[:lead] == full[:lead] and math.prod(shape[lead:]) == 1 == math.prod(full[lead:])


def _stream_str(s: Any) -> str:
    if isinstance(s, HostToDeviceStream | DeviceToHostStream):
        return f"{s.tensor_id} {s.shape} {s.dtype.name}"
    return repr(s)


def _check_streams(header: str, given: Collection[Any], expected: Sequence[Any]) -> None:
    """Raise a `ValueError` (`header`, then the unexpected and the missing streams) unless
    the streams `given` are exactly those `expected`."""
    expected_set = set(expected)
    unexpected = [s for s in given if s not in expected_set]
    missing = [s for s in expected if s not in given]
    if unexpected or missing:
        msg = header
        if unexpected:
            msg += f"\nUnexpected: {', '.join(_stream_str(s) for s in unexpected)}"
        if missing:
            msg += f"\nMissing: {', '.join(_stream_str(s) for s in missing)}"
        raise ValueError(msg)
