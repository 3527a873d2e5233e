"""Host data given as a torch tensor that requires grad, at every host-data entry point.

Torch refuses `np.asarray` on such a tensor (`Tensor.__array__` calls `.numpy()`, which
raises); upstream converts through `popxl.utils.to_numpy`, which detaches first. The
application layer tests (graphcore/examples) pass these to `addons.host_load`, variables,
`Session.run` and `write_variables_data`. `FakeGradTensor` behaves as torch does there
(its class's module is `torch`, `__array__` raises unless detached), so the tests run
without torch; with torch installed they also run on real tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl import ops
from popxl.utils import to_numpy


class FakeGradTensor:
    """A stand-in for a torch tensor with `requires_grad=True`."""

    __module__ = "torch"  # as type(torch.ones(1)).__module__

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        self._data = np.array(data)
        self.requires_grad = requires_grad

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    def detach(self) -> FakeGradTensor:
        return FakeGradTensor(self._data, requires_grad=False)

    def cpu(self) -> FakeGradTensor:
        return self

    def numpy(self) -> np.ndarray:
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return self._data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.numpy() if dtype is None else self.numpy().astype(dtype)


def _tensors() -> list[Any]:
    """Factories `f(array) -> tensor requiring grad`: the fake, and torch when installed."""
    out: list[Any] = [pytest.param(FakeGradTensor, id="fake")]
    try:
        import torch
    except ImportError:
        out.append(pytest.param(None, id="torch", marks=pytest.mark.skip(reason="torch is not installed")))
    else:
        out.append(pytest.param(lambda a: torch.tensor(a, requires_grad=True), id="torch"))
    return out


def test_the_fake_refuses_asarray_as_torch_does() -> None:
    with pytest.raises(RuntimeError, match="requires grad"):
        np.asarray(FakeGradTensor([1.0]))
    np.testing.assert_array_equal(to_numpy(FakeGradTensor([1.0, 2.0])), [1.0, 2.0])


@pytest.mark.parametrize("make", _tensors())
def test_addons_host_load(make: Any) -> None:
    data = np.arange(6, dtype=np.float64).reshape(2, 3) / 4
    ir = popxl.Ir()
    with ir.main_graph:
        arr, stream, x = addons.host_load(make(data), popxl.float32, name="x")
        out = addons.host_store(x * 2.0)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr.shape == (2, 3)
    assert stream.shape == (2, 3) and stream.dtype == popxl.float32
    with popxl.Session(ir, "cpu") as session:
        got = session.run({stream: arr})[out]
    np.testing.assert_array_equal(got, (data * 2).astype(np.float32))


@pytest.mark.parametrize("make", _tensors())
def test_variables_constants_operands(make: Any) -> None:
    w = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(make(w), popxl.float32, name="w")
        c = popxl.constant(make(w * 10))
        y = ops.add(v + c, make(np.float32(1.0)))
        out = addons.host_store(y)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out], w * 11 + 1)
        np.testing.assert_array_equal(session.get_tensor_data(v), w)


@pytest.mark.parametrize("make", _tensors())
def test_session_inputs_and_written_variables(make: Any) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        v = popxl.variable(np.zeros(3, np.float32), name="v")
        u = popxl.variable(np.zeros(3, np.float32), name="u")
        out = addons.host_store(ops.host_load(xs) + v + u)
    x = np.array([1.0, 2.0, 3.0], np.float32)
    with popxl.Session(ir, "cpu") as session:
        session.write_variables_data({v: make(np.full(3, 10.0, np.float32))})
        session.write_variable_data(u, make(np.full(3, 100.0, np.float32)))
        np.testing.assert_array_equal(session.run({xs: make(x)})[out], x + 110)
