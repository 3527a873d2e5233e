"""`TaskSession`: a `popxl.Session` that knows its streams and its state, and saves and
loads checkpoints (popxl_addons/task_session.py).

```python
session = TaskSession(inputs, outputs, state=variables, ir=ir, device_desc="cpu")
with session:
    session.run(...)
session.add_session_state_info({"total_steps": 0})   # saved in session_info.json
session.save_checkpoint("ckpt")     # ckpt/model/<name>.npz per tensor + ckpt/session_info.json
other.load_checkpoint("ckpt", report_missing="error")
other.session_state["steps"]        # the runs made before the checkpoint
```

A checkpoint directory holds `model/<dotted name>.npz` (one array, key `"data"`) for every
tensor of `state`, `session_info.json` (upstream's: the `session_state` dict, the number of
`run` calls under `"steps"` and what `add_session_state_info` added), `session_state.json`
(xl's record of the format version and the names, shapes and dtypes of the tensors) and
the state of the `dataloader`: `dataloader.bin` written by its `save(path)` (upstream's
protocol, read back with `resume(filename=...)`), or its `state_dict()` in
`session_state.json`. Every file is written to a temporary file in the same directory, then
moved into place with `os.replace`, so a crash leaves either the old file or the new one.
Loading checks every tensor's shape and dtype against the session's before writing any (a
`ValueError` naming the tensor); names missing on either side, in the tensors or in the
session state, are reported as `report_missing` says.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

import popxl
from popxl.fp8_utils import float8_view, host_float8
from popxl_addons.named_tensors import NamedTensorData, NamedTensors
from popxl_addons.streams import InputStreams, OutputStreams
from xl.compiler.weights import load_arrays, save_arrays

__all__ = ["TaskSession", "write_variables_pb", "initialise_memmap_dir_from_checkpoint", "CHECKPOINT_FORMAT_VERSION"]

logger = logging.getLogger("popxl_addons")

#: The `format_version` written to `session_state.json`; `load_checkpoint` reads only this one.
CHECKPOINT_FORMAT_VERSION = 1
_STATE_FILE = "session_state.json"
_SESSION_INFO_FILE = "session_info.json"
_DATALOADER_FILE = "dataloader.bin"
_MODEL_DIR = "model"
_REPORT = ("none", "warn", "error")


def write_variables_pb(session: popxl.Session, weights: Mapping[popxl.Variable, np.ndarray]) -> None:
    """`session.write_variables_data(weights)` (upstream's workaround, kept for its callers)."""
    session.write_variables_data(dict(weights))


def _atomic_write(path: str, write: Any, mode: str = "wb") -> None:
    """Write `path` through a temporary file in its directory and `os.replace`."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check_report(report_missing: str) -> None:
    if report_missing not in _REPORT:
        raise ValueError(f"report_missing must be one of {_REPORT}, got {report_missing!r}")


def _report(ckpt_keys: Iterable[str], model_keys: Iterable[str], how: str, where: str) -> None:
    ckpt, model = set(ckpt_keys), set(model_keys)
    lines = []
    if ckpt - model:
        lines.append(f"Checkpoint tensors not in the model: {sorted(ckpt - model)}")
    if model - ckpt:
        lines.append(f"Model tensors not in the checkpoint ({where}): {sorted(model - ckpt)}")
    if not lines or how == "none":
        return
    msg = "\n".join(lines)
    if how == "error":
        raise ValueError(msg)
    logger.warning(msg)


def _report_state(ckpt_keys: Iterable[str], session_keys: Iterable[str], how: str, where: str) -> None:
    ckpt, own = set(ckpt_keys), set(session_keys)
    lines = []
    if ckpt - own:
        lines.append(f"Session state keys in {where} not in the session: {sorted(ckpt - own)}")
    if own - ckpt:
        lines.append(f"Session state keys not in {where}: {sorted(own - ckpt)}")
    if not lines or how == "none":
        return
    if how == "error":
        raise ValueError("\n".join(lines))
    logger.warning("\n".join(lines))


def initialise_memmap_dir_from_checkpoint(checkpoint_dir: str, memmap_dir: str) -> None:
    """Copy the memory-mapped variable files (`model/*.npy`) of a checkpoint into
    `memmap_dir`, where `init(memmap_dir=...)` / `init_remote(memmap_dir=...)` then use them."""
    model_dir = os.path.join(os.fspath(checkpoint_dir), _MODEL_DIR)
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"initialise_memmap_dir_from_checkpoint: {model_dir} does not exist")
    os.makedirs(memmap_dir, exist_ok=True)
    for fn in sorted(os.listdir(model_dir)):
        if fn.endswith(".npy"):
            shutil.copyfile(os.path.join(model_dir, fn), os.path.join(memmap_dir, fn))


class TaskSession(popxl.Session):
    """A Session with its input and output streams and its `state` (the named variables
    that make a checkpoint: weights, optimiser state, seeds, ...).

    Args:
        inputs: `InputStreams` or an iterable of host-to-device streams.
        outputs: `OutputStreams` or an iterable of device-to-host streams.
        state: the named variables to checkpoint.
        max_checkpoints: how many checkpoint directories saved by this session to keep
            (the oldest are deleted); None keeps all.
        *args, **kwargs: for `popxl.Session` (`ir`, `device_desc`, ...).
    """

    def __init__(
        self,
        inputs: InputStreams | Iterable[Any],
        outputs: OutputStreams | Iterable[Any],
        state: NamedTensors,
        max_checkpoints: int | None = 1,
        *args: Any,
        **kwargs: Any,
    ):
        if not isinstance(state, NamedTensors):
            raise TypeError(f"TaskSession: state must be a NamedTensors, got {type(state).__name__}")
        if max_checkpoints is not None and (
            isinstance(max_checkpoints, bool) or not isinstance(max_checkpoints, int) or max_checkpoints < 1
        ):
            raise ValueError(f"TaskSession: max_checkpoints must be an int >= 1 or None, got {max_checkpoints!r}")
        for name, t in state.to_dict().items():
            if not isinstance(t, popxl.Variable):
                raise TypeError(f"TaskSession: state tensor {name!r} is not a Variable ({type(t).__name__})")
        super().__init__(*args, **kwargs)
        self.inputs: InputStreams = inputs if isinstance(inputs, InputStreams) else InputStreams.from_streams(inputs)
        self.outputs: OutputStreams = (
            outputs if isinstance(outputs, OutputStreams) else OutputStreams.from_streams(outputs)
        )
        self.state = state
        self.max_checkpoints = max_checkpoints
        self._saved_checkpoints: list[str] = []
        self._dataloader: Any = None
        self.session_state: dict[str, Any] = {"steps": 0}
        """What a checkpoint saves besides the tensors (`session_info.json`): `"steps"`, the
        number of `run` calls, and the entries of `add_session_state_info`."""

    # upstream's older name for `state`
    @property
    def model(self) -> NamedTensors:
        """The same as `state` (upstream's older name)."""
        return self.state

    @property
    def dataloader(self) -> Any:
        """The data loader whose state checkpoints save: one with `save(path)` and
        `resume(filename=path)` (upstream's protocol), or with `state_dict()` and
        `load_state_dict(state)`. None (the default) saves no data loader state."""
        return self._dataloader

    @dataloader.setter
    def dataloader(self, value: Any) -> None:
        if value is not None and not (
            (hasattr(value, "save") and hasattr(value, "resume"))
            or (hasattr(value, "state_dict") and hasattr(value, "load_state_dict"))
        ):
            raise ValueError(
                "TaskSession.dataloader: the data loader must implement save and resume methods "
                f"(or state_dict and load_state_dict); {type(value).__name__} has neither pair"
            )
        self._dataloader = value

    def add_session_state_info(self, info: Mapping[str, Any]) -> None:
        """Add entries to `session_state`, which checkpoints save in `session_info.json`
        and `load_checkpoint` restores (e.g. total steps, a learning rate schedule). The
        values must be JSON-serialisable (TypeError naming the key otherwise)."""
        if not isinstance(info, Mapping):
            raise TypeError(f"add_session_state_info: info must be a dict, got {type(info).__name__}")
        for key, value in info.items():
            if not isinstance(key, str):
                raise TypeError(f"add_session_state_info: keys must be str, got {key!r}")
            try:
                json.dumps(value)
            except (TypeError, ValueError) as e:
                raise TypeError(f"add_session_state_info: the value of {key!r} is not JSON-serialisable: {e}") from None
        self.session_state.update(info)

    def run(
        self,
        inputs: Mapping[popxl.HostToDeviceStream, Any] | None = None,
        downcast_inputs: bool = True,
    ) -> dict[popxl.DeviceToHostStream, np.ndarray]:
        """`popxl.Session.run`, counting the runs in `session_state["steps"]` (a run that
        raises is not counted)."""
        outputs = super().run(inputs, downcast_inputs)
        self.session_state["steps"] += 1
        return outputs

    def get_named_tensors_data(self) -> NamedTensorData:
        """The current values of `state`, by name."""
        names = self.state.to_dict()
        data = self.get_tensors_data(list(names.values()))
        return NamedTensorData.from_dict({k: data[t] for k, t in names.items()})

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Write the values of `state` (and the dataloader state) to `checkpoint_dir`."""
        if not isinstance(checkpoint_dir, str | os.PathLike):
            raise TypeError(f"save_checkpoint: checkpoint_dir must be a path, got {type(checkpoint_dir).__name__}")
        checkpoint_dir = os.fspath(checkpoint_dir)
        if checkpoint_dir.startswith("wandb://"):
            raise ValueError(
                "save_checkpoint: wandb:// checkpoints need Weights & Biases, which xl does not use; give a directory"
            )
        model_dir = os.path.join(checkpoint_dir, _MODEL_DIR)
        os.makedirs(model_dir, exist_ok=True)
        values = self.get_named_tensors_data().to_dict()
        tensors_meta = {}
        for name, arr in values.items():
            arr = np.asarray(arr)
            _atomic_write(os.path.join(model_dir, f"{name}.npz"), lambda f, a=arr: save_arrays(f, {"data": a}))
            tensors_meta[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
        meta: dict[str, Any] = {"format_version": CHECKPOINT_FORMAT_VERSION, "tensors": tensors_meta}
        dl = self._dataloader
        if dl is not None and hasattr(dl, "save") and hasattr(dl, "resume"):
            dl.save(os.path.join(checkpoint_dir, _DATALOADER_FILE))
        elif dl is not None and hasattr(dl, "state_dict"):
            meta["dataloader"] = dl.state_dict()
        text = json.dumps(meta, indent=2, sort_keys=True)
        _atomic_write(os.path.join(checkpoint_dir, _STATE_FILE), lambda f: f.write(text), mode="w")
        info = json.dumps(self.session_state)
        _atomic_write(os.path.join(checkpoint_dir, _SESSION_INFO_FILE), lambda f: f.write(info), mode="w")
        self._remember(checkpoint_dir)

    def _remember(self, checkpoint_dir: str) -> None:
        path = os.path.abspath(checkpoint_dir)
        if path in self._saved_checkpoints:
            self._saved_checkpoints.remove(path)
        self._saved_checkpoints.append(path)
        while self.max_checkpoints is not None and len(self._saved_checkpoints) > self.max_checkpoints:
            old = self._saved_checkpoints.pop(0)
            # delete only what save_checkpoint wrote
            shutil.rmtree(os.path.join(old, _MODEL_DIR), ignore_errors=True)
            for name in (_STATE_FILE, _SESSION_INFO_FILE, _DATALOADER_FILE):
                path = os.path.join(old, name)
                if os.path.exists(path):
                    os.unlink(path)
            try:
                os.rmdir(old)
            except OSError:
                pass

    def load_checkpoint(self, checkpoint_dir: str, report_missing: str = "warn", skip_memmap: bool = False) -> None:
        """Write the values saved in `checkpoint_dir` into the `state` variables.

        `report_missing`: 'warn' (log), 'error' (ValueError) or 'none' for names in only one
        of the checkpoint and `state`, and for `session_state` keys in only one of
        `session_info.json` and this session. A shape or dtype that differs is always a
        ValueError naming the tensor; nothing is written unless every tensor fits.
        `session_state` becomes the checkpoint's (`{"steps": 0}` without a
        `session_info.json`) and the data loader resumes from its saved state. `skip_memmap`
        is accepted for upstream's signature (which ignores it too).
        """
        _check_report(report_missing)
        checkpoint_dir = os.fspath(checkpoint_dir)
        if checkpoint_dir.startswith("wandb://"):
            raise ValueError(
                "load_checkpoint: wandb:// checkpoints need Weights & Biases, which xl does not use; give a directory"
            )
        state_file = os.path.join(checkpoint_dir, _STATE_FILE)
        model_dir = os.path.join(checkpoint_dir, _MODEL_DIR)
        if not os.path.isdir(model_dir):
            raise FileNotFoundError(f"load_checkpoint: {model_dir} does not exist (not a checkpoint directory)")
        meta: dict[str, Any] = {}
        if os.path.exists(state_file):
            try:
                with open(state_file) as f:
                    meta = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"load_checkpoint: {state_file} is not valid JSON: {e}") from None
            version = meta.get("format_version")
            if version != CHECKPOINT_FORMAT_VERSION:
                raise ValueError(
                    f"load_checkpoint: {state_file} has format_version {version!r}, this xl reads "
                    f"{CHECKPOINT_FORMAT_VERSION}"
                )
        files = {
            fn[: -len(".npz")]: os.path.join(model_dir, fn)
            for fn in os.listdir(model_dir)
            if fn.endswith(".npz") and not fn.startswith(".tmp-")
        }
        variables = self.state.to_dict()
        _report(files.keys(), variables.keys(), report_missing, model_dir)
        to_write: dict[Any, np.ndarray] = {}
        for name in sorted(set(files) & set(variables)):
            path = files[name]
            try:
                arrays = load_arrays(path)  # every dtype bit for bit (float8: xl.compiler.weights)
                if "data" not in arrays:
                    raise ValueError(f"load_checkpoint: {path} has no array 'data' (tensor {name!r})")
                arr = arrays["data"]
            except (OSError, ValueError) as e:
                if isinstance(e, ValueError) and str(e).startswith("load_checkpoint"):
                    raise
                raise ValueError(f"load_checkpoint: cannot read tensor {name!r} from {path}: {e}") from None
            var = variables[name]
            want_dtype = np.dtype(var.dtype.as_numpy())
            f8 = float8_view(arr)  # float8: the host format, or ml_dtypes (earlier checkpoints)
            arr = arr if f8 is None else host_float8(f8)
            if tuple(arr.shape) != tuple(var.shape) or arr.dtype != want_dtype:
                raise ValueError(
                    f"load_checkpoint: tensor {name!r} in {path} is {arr.shape} {arr.dtype}, the "
                    f"session's variable is {tuple(var.shape)} {want_dtype}"
                )
            to_write[var] = arr
        info_file = os.path.join(checkpoint_dir, _SESSION_INFO_FILE)
        loaded_state: dict[str, Any] = {"steps": 0}
        if os.path.exists(info_file):
            try:
                with open(info_file) as f:
                    loaded_state = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"load_checkpoint: {info_file} is not valid JSON: {e}") from None
            if not isinstance(loaded_state, dict) or not isinstance(loaded_state.get("steps", 0), int):
                raise ValueError(f"load_checkpoint: {info_file} must hold a JSON object with an int 'steps'")
        _report_state(loaded_state.keys(), self.session_state.keys(), report_missing, info_file)
        if to_write:
            self.write_variables_data(to_write)
        self.session_state = {"steps": 0, **loaded_state}
        dl = self._dataloader
        dl_file = os.path.join(checkpoint_dir, _DATALOADER_FILE)
        if dl is not None and hasattr(dl, "resume") and os.path.exists(dl_file):
            dl.resume(filename=dl_file)
        elif "dataloader" in meta and dl is not None and hasattr(dl, "load_state_dict"):
            dl.load_state_dict(meta["dataloader"])

    def load_from_session(self, src: TaskSession, report_missing: str = "none") -> None:
        """Copy the values of `src.state` into the variables of `self.state` with the same names."""
        _check_report(report_missing)
        if not isinstance(src, TaskSession):
            raise TypeError(f"load_from_session: expected a TaskSession, got {type(src).__name__}")
        data = src.get_named_tensors_data()
        self.load_from_tensors(data, report_missing)

    def load_from_tensors(self, data: NamedTensorData | Mapping[str, np.ndarray], report_missing: str = "none") -> None:
        """Write named host arrays into the variables of `self.state` with the same names
        (shapes and dtypes checked first)."""
        _check_report(report_missing)
        values = data.to_dict() if isinstance(data, NamedTensorData) else dict(data)
        variables = self.state.to_dict()
        _report(values.keys(), variables.keys(), report_missing, "source")
        to_write = {}
        for name in sorted(set(values) & set(variables)):
            arr = np.asarray(values[name])
            var = variables[name]
            if tuple(arr.shape) != tuple(var.shape):
                raise ValueError(
                    f"load_from_tensors: tensor {name!r} has shape {arr.shape}, the session's variable "
                    f"{tuple(var.shape)}"
                )
            to_write[var] = arr
        if to_write:
            self.write_variables_data(to_write)
