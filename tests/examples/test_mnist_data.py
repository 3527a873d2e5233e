"""examples/mnist_data.py: bundled data, IDX reading, batching."""

import gzip
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import mnist_data  # noqa: E402
from mnist_data import batches, load_mnist, read_idx  # noqa: E402


def write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> None:
    codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}
    header = bytes([0, 0, codes[arr.dtype], arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    body = arr.astype(arr.dtype.newbyteorder(">")).tobytes()
    data = header + body
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def tiny(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, size=(n,), dtype=np.uint8),
    )


def test_bundled_default():
    assert mnist_data.BUNDLED.is_file()
    tx, ty, vx, vy = load_mnist()
    assert tx.shape == (8000, 28, 28) and vx.shape == (2000, 28, 28)
    assert tx.dtype == np.float32 and ty.dtype == np.int32
    assert ty.shape == (8000,) and vy.shape == (2000,)
    assert set(np.unique(ty)) <= set(range(10))
    raw = np.load(mnist_data.BUNDLED)
    expect = (raw["images"][:3].astype(np.float32) / 255 - 0.1307) / 0.3081
    np.testing.assert_allclose(tx[:3], expect, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(vy, raw["labels"][8000:])
    # normalised like torchvision ToTensor + Normalize
    assert abs(float(tx.mean())) < 0.1 and 0.9 < float(tx.std()) < 1.1


@pytest.mark.parametrize("layout", ["torchvision", "flat", "gz"])
def test_idx_layouts(tmp_path, layout):
    trx, try_ = tiny(5, 0)
    tex, tey = tiny(3, 1)
    if layout == "torchvision":
        d = tmp_path / "MNIST" / "raw"
    else:
        d = tmp_path
    d.mkdir(parents=True, exist_ok=True)
    gz = layout == "gz"
    sfx = ".gz" if gz else ""
    write_idx(d / f"train-images-idx3-ubyte{sfx}", trx, gz)
    write_idx(d / f"train-labels-idx1-ubyte{sfx}", try_, gz)
    write_idx(d / f"t10k-images-idx3-ubyte{sfx}", tex, gz)
    write_idx(d / f"t10k-labels-idx1-ubyte{sfx}", tey, gz)
    a, b, c, e = load_mnist(tmp_path)
    assert a.shape == (5, 28, 28) and c.shape == (3, 28, 28)
    assert a.dtype == np.float32 and b.dtype == np.int32
    np.testing.assert_array_equal(b, try_.astype(np.int32))
    np.testing.assert_array_equal(e, tey.astype(np.int32))
    np.testing.assert_allclose(a, (trx / 255.0 - 0.1307) / 0.3081, rtol=1e-5, atol=1e-5)
    # str paths work too
    assert load_mnist(str(tmp_path))[0].shape == (5, 28, 28)


def test_read_idx_int32(tmp_path):
    arr = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    write_idx(tmp_path / "x.idx", arr)
    np.testing.assert_array_equal(read_idx(tmp_path / "x.idx"), arr)


def test_missing_file_error_names_it(tmp_path):
    trx, try_ = tiny(2, 0)
    write_idx(tmp_path / "train-images-idx3-ubyte", trx)
    write_idx(tmp_path / "train-labels-idx1-ubyte", try_)
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte"):
        load_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_mnist(tmp_path / "nope")


def test_bad_idx(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="magic"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + b"\x00")
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "short")


def test_mismatched_label_count(tmp_path):
    trx, _ = tiny(4, 0)
    write_idx(tmp_path / "train-images-idx3-ubyte", trx)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="labels"):
        load_mnist(tmp_path)


def test_batches_len_and_content():
    x = np.arange(10 * 2 * 2, dtype=np.float32).reshape(10, 2, 2)
    y = np.arange(10, dtype=np.int32)
    b = batches(x, y, 3, shuffle=False)
    assert len(b) == 3
    got = list(b)
    assert len(got) == 3
    np.testing.assert_array_equal(got[0][1], [0, 1, 2])
    np.testing.assert_array_equal(got[0][0], x[:3])
    b2 = batches(x, y, 3, shuffle=False, drop_last=False)
    assert len(b2) == 4 and len(list(b2)) == 4
    assert list(b2)[-1][1].tolist() == [9]


def test_batches_shuffle_reproducible_and_reshuffles():
    x = np.arange(100, dtype=np.float32)[:, None]
    y = np.arange(100, dtype=np.int32)
    b1 = batches(x, y, 10, seed=3)
    b2 = batches(x, y, 10, seed=3)
    e1 = np.concatenate([l for _, l in b1])
    e2 = np.concatenate([l for _, l in b2])
    np.testing.assert_array_equal(e1, e2)
    assert sorted(e1.tolist()) == list(range(100))
    assert e1.tolist() != list(range(100))
    e1b = np.concatenate([l for _, l in b1])  # second epoch: a new order
    assert e1b.tolist() != e1.tolist()
    for xb, yb in b1:
        np.testing.assert_array_equal(xb[:, 0], yb.astype(np.float32))


def test_batches_validation():
    with pytest.raises(ValueError):
        batches(np.zeros((3, 2)), np.zeros(2), 1)
    with pytest.raises(ValueError):
        batches(np.zeros((3, 2)), np.zeros(3), 0)
