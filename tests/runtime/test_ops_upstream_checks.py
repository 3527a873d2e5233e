"""What PopXL programs rely on when they build ops: the checks and their exception types
(an op that cannot be built is a `ValueError` and `popart.popart_exception`, as PopART's op
setup raises it), the key words of the messages, operands placed on one IPU / tile set,
logical ops casting to bool, one-element offset tensors, and a conditional's site info."""

from __future__ import annotations

import re

import numpy as np
import pytest

import popart
import popxl
from popxl import ops
from popxl.errors import GraphBuildError


def _run(ir: popxl.Ir, *ts: popxl.Tensor) -> list[np.ndarray]:
    with ir.main_graph:
        streams = []
        for t in ts:
            s = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return [out[s] for s in streams]


def test_build_errors_are_popart_exceptions() -> None:
    with popxl.Ir().main_graph:
        a = popxl.variable(np.ones((2, 4), np.float32))
        b = popxl.variable(np.ones(3, np.float32))
        for build in (
            lambda: ops.concat((a, b)),
            lambda: a @ a,
            lambda: ops.split(a, [1, 2]),
            lambda: ops.call(popxl.gcg().ir.create_graph(lambda x: x + 1.0, b), a),
        ):
            with pytest.raises(popart.popart_exception) as info:
                build()
            assert isinstance(info.value, ValueError) and isinstance(info.value, GraphBuildError)
    assert issubclass(popart.popart_internal_exception, popart.popart_exception)


def test_operands_on_different_ipus_or_tile_sets() -> None:
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        with popxl.ipu(0):
            a = v + 1.0
        with popxl.ipu(1):
            b = v + 2.0
        with popxl.io_tiles():
            c = v * 3.0
        with pytest.raises(ValueError, match="located on different IPUs: 0 != 1"):
            ops.add(a, b)
        with pytest.raises(ValueError, match="located on different tile sets: 'compute' != 'io'"):
            ops.mul(a, c)
        _ = ops.add(a, b.copy_to_ipu(0))  # after a copy: fine
        _ = v + a  # a variable is placed by its consumers


def test_logical_ops_cast_to_bool() -> None:
    x = np.array([0, 2, -1, 0], np.int32)
    y = np.array([1.5, 0.0, 0.0, 0.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xv, yv = popxl.variable(x), popxl.variable(y)
        outs = (ops.logical_and(xv, yv), ops.logical_or(xv, yv), ops.logical_not(xv))
    assert all(t.dtype == popxl.bool for t in outs)
    got = _run(ir, *outs)
    for g, want in zip(got, (np.logical_and(x, y), np.logical_or(x, y), np.logical_not(x))):
        np.testing.assert_array_equal(g, want)


def test_remote_offset_tensor_of_one_element() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        rb = popxl.remote_buffer((2,), popxl.float32, 3)
        for k in range(3):
            popxl.remote_variable(np.full(2, k + 1.0, np.float32), rb, k)
        offset = popxl.constant([2])  # shape (1,), as upstream programs write it
        x = ops.remote_load(rb, offset)
        ops.remote_store(rb, popxl.constant(np.array([[0]], np.int32)), x * 10.0)
        y = ops.remote_load(rb, 0)
    np.testing.assert_array_equal(_run(ir, x, y), [[3.0, 3.0], [30.0, 30.0]])


def test_shape_argument_checks() -> None:
    with popxl.Ir().main_graph:
        a = popxl.variable(np.ones((1, 2, 3), np.float32))
        with pytest.raises(ValueError, match=r"Values in permutation must be less than .*rank 3.*\(5, 4, 3\)"):
            ops.transpose(a, (5, 4, 3))
        with pytest.raises(ValueError, match=r"Values in permutation must be less than"):
            ops.transpose_(a, (0, 1, 3))
        assert ops.transpose(a, (-1, 0, 1)).shape == (3, 1, 2)
        with pytest.raises(ValueError, match="axis 3 is out of range"):
            ops.squeeze(a, axes=[3])
        assert ops.squeeze(a, axes=[-3]).shape == (2, 3)
        for shape in ((-1, 0, 1), (6, -2, 1)):
            with pytest.raises(
                ValueError, match=rf"Invalid shape value in reshape.*{shape}".replace("(", r"\(").replace(")", r"\)")
            ):
                a.reshape(shape)
        with pytest.raises(ValueError, match=r"Reshape shape can contain at most one '-1' value, got \(-1, -1, 1\)"):
            a.reshape((-1, -1, 1))


def test_upstream_message_key_words() -> None:
    with pytest.raises(TypeError, match="`None` cannot be passed to"):
        popxl.in_sequence(None)  # pyright: ignore[reportArgumentType]  # bad input
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.float32(1.0))
        with popxl.ipu(None):  # no placement at all
            w = v + 1.0
        with pytest.raises(ValueError, match="Could not infer the ipu.*Please specify `source`"):
            ops.ipu_copy(w, 1)
        g = ir.create_graph(lambda a, b: (a + 1.0, b + 2.0), v, v)
        for build, text in (
            (lambda: ops.repeat(g, -1, v, v), "^Repeat count must be >= 0"),
            (lambda: ops.repeat(g, 2, v, v, v), "^Too many inputs have been provided"),
            (lambda: ops.repeat(g, 2, v, v, inputs_dict={g.inputs[0]: v}), "^Graph input tensor is specified twice"),
            (lambda: ops.repeat(g, 2, v), "^Not enough inputs have been provided"),
            (lambda: ops.repeat(g, 2, v, inputs_dict={v: v}), "not in the called graph"),
            (lambda: ops.repeat(ir.create_graph(lambda a: (a, a), v), 2, v), "^To repeat the subgraph"),
        ):
            with pytest.raises(ValueError, match=text):
                build()
    with popxl.Session(ir, "cpu") as s, pytest.raises(TypeError, match="is not of type Constant or Variable"):
        s.get_tensor_data(w)


def test_conditional_site_info() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        cond = popxl.variable(True, name="cond")
        a, b, c = (popxl.variable(np.float32(v), name=n) for v, n in ((1.0, "a"), (2.0, "b"), (3.0, "c")))
        then_g = ir.create_graph(lambda x, y: (x + y, x - y), a, b)
        else_g = ir.create_graph(lambda x, y: (x * y, x / y), c, a)
        info = ops.conditional_with_info(cond, then_g, else_g, then_inputs=(a, b), else_inputs=(c, a))
    assert info.called_graph == (then_g, else_g)
    assert info.inputs == (cond, a, b, c, a) and info.parent_input(3) is c
    assert [info.graph_to_parent_input_index(i, True) for i in (0, 1)] == [1, 2]
    assert [info.graph_to_parent_input_index(i, False) for i in (0, 1)] == [3, 4]
    assert [info.parent_to_graph_input_index(i) for i in (1, 2, 3, 4)] == [0, 1, 0, 1]
    assert [info.is_parent_index_in_then_branch(i) for i in (1, 2, 3, 4)] == [True, True, False, False]
    assert info.graph_to_parent_output_index(1, False) == 1 == info.parent_to_graph_output_index(1, True)
    assert info.parent_to_graph(c) is else_g.inputs[0] and info.parent_to_graph(a) is then_g.inputs[0]
    assert info.parent_to_graph(info.outputs[1]) is then_g.outputs[1]
    for bad in (
        lambda: info.graph_to_parent_input_index(2, True),
        lambda: info.parent_to_graph_input_index(5),
        lambda: info.parent_to_graph_input_index(0),
        lambda: info.is_parent_index_in_then_branch(5),
        lambda: info.parent_output(2),
        lambda: info.parent_input(5),
    ):
        with pytest.raises(IndexError):
            bad()
    with ir.main_graph, pytest.raises(ValueError, match="is not an input or output"):
        info.parent_to_graph(popxl.variable(1.0))


def test_complex_host_data() -> None:
    """popxl has complex dtypes (host data converts), xl's runtime refuses them."""
    from popxl.utils import to_numpy

    a = np.ones((2, 2), np.complex64)
    out = to_numpy(a, copy=False)
    assert out.dtype == np.complex64 and np.shares_memory(out, a)
    assert popxl.dtype.as_dtype(np.complex128) is popxl.complex128
    with popxl.Ir().main_graph:
        with pytest.raises(TypeError, match="popxl.variable: complex data .* not supported by xl"):
            popxl.variable(a)
        with pytest.raises(TypeError, match="popxl.constant: complex data"):
            popxl.constant(a)


def test_writing_a_constant_names_it() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        c = popxl.constant(np.ones(2, np.float32), name="c")
        _ = c + popxl.variable(np.ones(2, np.float32))
    with popxl.Session(ir, "cpu") as s, pytest.raises(TypeError, match=rf"^Tensor {c.id} is not of type Variable"):
        s.write_variable_data(c, np.zeros(2, np.float32))  # pyright: ignore[reportArgumentType]  # bad input


def test_conv_transpose_full_output_shape() -> None:
    ir = popxl.Ir()
    x = np.random.default_rng(0).normal(size=(2, 4, 3, 3)).astype(np.float32)
    w = np.random.default_rng(1).normal(size=(4, 2, 2, 2)).astype(np.float32)
    with ir.main_graph:
        xv, wv = popxl.variable(x), popxl.variable(w)
        full = ops.conv_transpose(xv, wv, stride=(2, 2), output_shape=(2, 2, 6, 5))
        spatial = ops.conv_transpose(xv, wv, stride=(2, 2), output_shape=(6, 5))
        with pytest.raises(ValueError, match=r"must start with the batch size and output channels \(2, 2\)"):
            ops.conv_transpose(xv, wv, stride=(2, 2), output_shape=(2, 3, 6, 5))
    assert full.shape == spatial.shape == (2, 2, 6, 5)
    a, b = _run(ir, full, spatial)
    np.testing.assert_array_equal(a, b)


def test_cache_dir_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPXL_CACHE_DIR", "where/the/cache/is")
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    assert opts.enableEngineCaching and opts.cachePath == "where/the/cache/is"


def test_addons_message_key_words() -> None:
    import popxl_addons as addons

    class WithGrad(addons.Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            self.aux["x"] = x
            return x * 2.0

        def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
            return dy * 2.0

    with pytest.raises(
        ValueError, match=r"^You cannot use graph caching if you have implemented `build_grad` \(WithGrad\)"
    ):
        WithGrad(cache=True)
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        _, graph = WithGrad().create_graph(x)
        graph.autodiff()
        with pytest.raises(ValueError, match="^Autodiff has already been applied to graph"):
            graph.autodiff()


def test_updater_argument_checks() -> None:
    vu = ops.var_updates
    with popxl.Ir().main_graph:
        m, v, w = (popxl.variable(np.ones(3, np.float32)) for _ in range(3))
        t = popxl.variable(np.float32(0.0))
        for fn in (vu.adam_updater, vu.lamb_updater):
            with pytest.raises(ValueError, match=r"^Bias correction requires both beta1 and beta2 to not be None\."):
                fn(m, v, time_step=t, beta1=0.9)
            with pytest.raises(ValueError, match=r"^Weight decay requires weight to not be None\."):
                fn(m, v, weight_decay=0.1)
        with pytest.raises(ValueError, match=r"^AdaMax requires time_step to not be None\."):
            vu.adamax_updater(m, v, w)
        with pytest.raises(ValueError, match=r"^Weight decay requires weight to not be None\."):
            vu.adamax_updater(m, v, time_step=t, weight_decay=popxl.constant(np.float32(0.2)))
        assert vu.adam_updater(m, v, weight=w, weight_decay=0.0).shape == (3,)  # 0 needs no weight


def test_autodiff_errors_are_popart_exceptions() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32))

        def modifying(x: popxl.Tensor) -> popxl.Tensor:
            return ops.var_updates.accumulate_(x, popxl.constant(np.ones(2, np.float32)))

        g = ir.create_graph(modifying, a.spec)
    with pytest.raises(
        popart.popart_exception, match="^The graph " + re.escape(g.name) + " contains a modifying op"
    ) as info:
        popxl.transforms.autodiff(g)
    assert isinstance(info.value, ValueError)


def test_dtype_mismatch_is_a_type_error_and_by_ref_inputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        f = popxl.variable(np.ones((2, 3), np.float32))
        i = popxl.variable(np.ones((2, 3), np.int32))
        with pytest.raises(TypeError, match="All inputs to a concat operation must have the same type"):
            ops.concat([f, i])
        with pytest.raises(TypeError, match="operand dtypes differ") as info:
            ops.add(f, i)
        assert isinstance(info.value, ValueError) and isinstance(info.value, popart.popart_exception)

        def body(a: popxl.TensorByRef, b: popxl.Tensor) -> None:
            ops.add_(a, b)

        g = ir.create_graph(body, f, f)
        assert g._by_ref_inputs == {g.inputs[0]}


@pytest.mark.filterwarnings("ignore:popart.SessionOptions. partialsTypeMatMuls")
def test_matmul_partials_type_checks() -> None:
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    for option, valid in (("", True), ("Float", True), ("half", True), ("foo", False)):
        ir = popxl.Ir()
        ir._pb_ir.getSessionOptions().partialsTypeMatMuls = option
        with ir.main_graph:
            a = popxl.variable(data)
            # an explicit partials type overrides the option; it must be float16 or float32
            y = ops.matmul(a, a, partials_type=popxl.float16)
            with pytest.raises(ValueError, match=r"partials_type popxl.dtypes.int32 is not valid"):
                ops.matmul(a, a, partials_type=popxl.int32)
            if not valid:
                with pytest.raises(ValueError, match=r"partialsTypeMatMuls 'foo' is not valid"):
                    ops.matmul(a, a)
                continue
            x = ops.matmul(a, a)
        for got in _run(ir, x, y):
            np.testing.assert_array_equal(got, data @ data)
