"""Programs without their weights: `Ir.to_mlir(weights=..., elide_larger_than=...)`,
`xl-opt --elide-elementsattrs-if-larger`, `xl-run --vars` for external variables, and error
messages that never print large constants (checked on the MNIST training program)."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.tool_runner import xl_opt as _xl_opt
from tests.helpers.tool_runner import xl_run as _xl_run

ROOT = Path(__file__).resolve().parents[2]


W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
B = np.array([0.5, -1.0, 2.0], np.float32)
X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


def linear_ir() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(W, name="w")
        b = popxl.variable(B, name="b")
        xs = popxl.h2d_stream((2, 4), popxl.float32, "x")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        ops.host_store(ys, ops.matmul(ops.host_load(xs), w) + b)
    return ir


def test_weights_go_to_npz_and_xl_run_reads_them(tmp_path: Path) -> None:
    npz = tmp_path / "prog.npz"
    text = linear_ir().to_mlir(weights=str(npz))
    assert 'graph.variable "w" : tensor<4x3xf32> {graph.external = "prog.npz"}' in text
    assert 'graph.variable "b" : tensor<3xf32> {graph.external = "prog.npz"}' in text
    assert "dense<" not in text
    data = np.load(npz)
    assert sorted(data.files) == ["b", "w"]
    np.testing.assert_array_equal(data["w"], W)
    np.testing.assert_array_equal(data["b"], B)
    prog = tmp_path / "prog.mlir"
    prog.write_text(text)
    np.save(tmp_path / "x.npy", X)
    code, _, err = _xl_run(str(prog), f"x={tmp_path / 'x.npy'}", "--vars", str(npz), "-o", str(tmp_path / "out.npz"))
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], X @ W + B, rtol=1e-6)


def test_weights_keep_the_current_values_of_a_session(tmp_path: Path) -> None:
    ir = linear_ir()
    session = popxl.Session(ir, "cpu")
    w = next(v for v in ir.main_graph.variables if v.name == "w")
    session.write_variable_data(w, W * 2)
    npz = tmp_path / "cur.npz"
    ir.to_mlir(weights=str(npz))
    np.testing.assert_array_equal(np.load(npz)["w"], W * 2)
    ir.to_mlir("initial", weights=str(npz))
    np.testing.assert_array_equal(np.load(npz)["w"], W)


def test_missing_external_weight_is_a_located_error(tmp_path: Path) -> None:
    npz = tmp_path / "prog.npz"
    prog = tmp_path / "prog.mlir"
    prog.write_text(linear_ir().to_mlir(weights=str(npz)))
    np.save(tmp_path / "x.npy", X)
    lines = prog.read_text().split("\n")
    line_w = next(i for i, ln in enumerate(lines) if 'graph.variable "w"' in ln) + 1
    code, _, err = _xl_run(str(prog), f"x={tmp_path / 'x.npy'}")
    assert code == 1
    assert err.startswith(
        f'{prog}:{line_w}:5: error: graph.variable "w": its value is not in the program but in '
        f'"prog.npz" (written by to_mlir(weights=...)): run with --vars prog.npz '
        "(1 more external variable missing)"
    ), err
    only_b = tmp_path / "only_b.npz"
    np.savez(only_b, b=B)
    code, _, err = _xl_run(str(prog), f"x={tmp_path / 'x.npy'}", "--vars", str(only_b))
    assert code == 1
    assert f"error: graph.variable \"w\": --vars '{only_b}' has no value for this external variable" in err


def test_to_mlir_elides_large_values() -> None:
    text = linear_ir().to_mlir(elide_larger_than=3)
    assert 'graph.variable "w" = dense_resource<__elided__> : tensor<4x3xf32>' in text
    assert 'graph.variable "b" = dense<[5.000000e-01, -1.000000e+00, 2.000000e+00]> : tensor<3xf32>' in text
    assert linear_ir().to_mlir(elide_larger_than=12) == linear_ir().to_mlir()


# -- the MNIST program --------------------------------------------------------------------


@pytest.fixture(scope="module")
def mnist_session() -> popxl.Session:
    sys.path.insert(0, str(ROOT / "examples"))
    import mnist as mnist_example

    np.random.seed(0)
    session, *_ = mnist_example.train_program(4, "cpu", 0.05)
    return session


@pytest.fixture(scope="module")
def mnist_ir(mnist_session: popxl.Session) -> popxl.Ir:
    return mnist_session.ir


def test_mnist_without_weights_is_small(mnist_session: popxl.Session, mnist_ir: popxl.Ir, tmp_path: Path) -> None:
    full = mnist_ir.to_mlir()
    npz = tmp_path / "mnist.npz"
    lean = mnist_ir.to_mlir(weights=str(npz))
    elided = mnist_ir.to_mlir(elide_larger_than=16)
    assert len(full) > 1_000_000
    assert len(lean) < 50_000 and len(elided) < 50_000, (len(lean), len(elided))
    variables = {v.name: v for v in mnist_ir.main_graph.variables}
    data = np.load(npz)
    assert set(data.files) == set(variables)
    for name, var in variables.items():
        np.testing.assert_array_equal(data[name], mnist_session.get_tensor_data(var))
        assert f'graph.variable "{name}" : ' in lean
    assert lean.count('{graph.external = "mnist.npz"}') == len(variables)
    # The text without weights is a valid program.
    prog_lean = tmp_path / "lean.mlir"
    prog_lean.write_text(lean)
    code, _, err = _xl_opt(str(prog_lean))
    assert code == 0, err
    # The elided text is refused with a located message, not parsed into zeros.
    prog_elided = tmp_path / "elided.mlir"
    prog_elided.write_text(elided)
    code, _, err = _xl_opt(str(prog_elided))
    assert code == 1 and "this constant was elided when the program was printed" in err
    assert len(err) < 2000


def test_mnist_errors_never_print_weights(mnist_ir: popxl.Ir, tmp_path: Path) -> None:
    text = mnist_ir.to_mlir()
    prog = tmp_path / "mnist.mlir"
    prog.write_text(text)
    # A pass leaves an invalid op holding the largest weight: the message shows the op
    # with the weight elided.
    code, out, err = _xl_opt(str(prog), "-p", "xl-test-fail{kind=verify-constant}")
    assert code == 1 and out == ""
    assert "graph.constant: attribute tensor<1xf32> expected from variable 'T', but got" in err
    assert "dense_resource<__elided__>" in err
    assert len(err) < 2000, len(err)
    # A parse error inside a megabyte-long line of weights: the line is clipped around
    # the caret.
    lines = text.split("\n")
    i = max(range(len(lines)), key=lambda k: len(lines[k]))
    assert len(lines[i]) > 100_000
    lines[i] = lines[i] + " @@@"
    bad = tmp_path / "bad.mlir"
    bad.write_text("\n".join(lines))
    for tool in (_xl_opt, _xl_run):
        code, _, err = tool(str(bad))
        assert code == 1
        assert err.startswith(f"{bad}:{i + 1}:"), err[:200]
        assert len(err) < 2000, len(err)
        shown = err.split("\n")
        assert any(s.startswith("...") and s.endswith("@@@") for s in shown), err


@pytest.mark.parametrize("dtype", [popxl.float8_143, popxl.float8_152])
def test_xl_run_reads_float8_npy_saved_untyped(tmp_path: Path, dtype: popxl.dtype) -> None:
    """np.save keeps a float8 array's bytes but not its type (it reads back as |V1): xl-run takes
    such a file for a float8 stream as those bits, as it takes popxl's host format (a one-field
    structured dtype of the bits); bytes of another width are refused."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((5,), dtype, "x")
        ys = popxl.d2h_stream((5,), popxl.float32, "y")
        ops.host_store(ys, ops.pow2scale_cast_from_fp8(ops.host_load(xs), 0, popxl.float32))
    prog = tmp_path / "prog.mlir"
    prog.write_text(ir.to_mlir())
    np_type = np.dtype({"float8_143": ml_dtypes.float8_e4m3fnuz, "float8_152": ml_dtypes.float8_e5m2fnuz}[dtype.name])
    x = np.array([1.0, -2.0, 0.375, 12.0, -0.0625], np.float32).astype(np_type)
    np.save(tmp_path / "x.npy", x)
    assert np.load(tmp_path / "x.npy").dtype == np.dtype("V1")  # what the file holds
    out = tmp_path / "y.npz"
    code, _, err = _xl_run(str(prog), str(tmp_path / "x.npy"), "-o", str(out))
    assert code == 0, err
    np.testing.assert_array_equal(np.load(out)["y"], x.astype(np.float32))
    np.save(tmp_path / "host.npy", x.view(np.uint8).view([(dtype.name, "u1")]))
    code, _, err = _xl_run(str(prog), str(tmp_path / "host.npy"), "-o", str(out))
    assert code == 0, err
    np.testing.assert_array_equal(np.load(out)["y"], x.astype(np.float32))
    other = "float8_152" if dtype.name == "float8_143" else "float8_143"  # the other format's bits: refused
    np.save(tmp_path / "other.npy", x.view(np.uint8).view([(other, "u1")]))
    code, _, err = _xl_run(str(prog), str(tmp_path / "other.npy"))
    assert code == 1 and f'stream "x": expected dtype {np_type}, got float8_' in err, err
    np.save(tmp_path / "v2.npy", np.zeros(5, "V2"))
    code, _, err = _xl_run(str(prog), str(tmp_path / "v2.npy"))
    assert code == 1 and f'stream "x": expected dtype {np_type}, got |V2' in err, err
