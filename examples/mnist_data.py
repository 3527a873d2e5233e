"""MNIST for the examples, without torchvision or a download.

    from mnist_data import load_mnist, batches
    train_x, train_y, test_x, test_y = load_mnist()          # bundled 10k digits
    train_x, train_y, test_x, test_y = load_mnist("~/.torch/datasets")   # full MNIST IDX files
    for images, labels in batches(train_x, train_y, 8):       # like a torch DataLoader
        ...

Images are float32 (N, 28, 28) normalised as the tutorials do
(`ToTensor()` then `Normalize((0.1307,), (0.3081,))`); labels are int32 (N,).

Default data: `examples/data/mnist10k.npz`, 10,000 real MNIST digits (first 8,000 for
training, last 2,000 for testing). With `data_dir`, the IDX files of full MNIST are read
in the torchvision layout `<data_dir>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte`
(optionally `.gz`), or directly from `data_dir`.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["load_mnist", "batches", "Batches", "read_idx", "normalise", "BUNDLED", "MEAN", "STD"]

MEAN = 0.1307
STD = 0.3081
BUNDLED = Path(__file__).resolve().parent / "data" / "mnist10k.npz"
N_TRAIN_BUNDLED = 8000

_IDX_DTYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def normalise(images: np.ndarray) -> np.ndarray:
    """uint8 0..255 -> float32 `(x / 255 - 0.1307) / 0.3081`."""
    x = np.asarray(images, dtype=np.float32) / np.float32(255.0)
    return ((x - np.float32(MEAN)) / np.float32(STD)).astype(np.float32)


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped): magic `00 00 <dtype> <ndim>`, big-endian dims."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX data type 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[code])
    count = int(np.prod(dims)) if dims else 1
    if len(data) - header < count * dtype.itemsize:
        raise ValueError(
            f"{path}: truncated IDX data: shape {dims} needs {count * dtype.itemsize} bytes, found {len(data) - header}"
        )
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="))


def _find_idx(data_dir: Path, stem: str) -> Path:
    candidates = []
    for d in (data_dir / "MNIST" / "raw", data_dir):
        for suffix in ("", ".gz"):
            candidates.append(d / f"{stem}{suffix}")
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(f"MNIST file '{stem}' not found; looked for: " + ", ".join(str(c) for c in candidates))


def _load_idx_split(data_dir: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(_find_idx(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(_find_idx(data_dir, f"{prefix}-labels-idx1-ubyte"))
    if images.ndim != 3:
        raise ValueError(f"MNIST {prefix} images must have 3 dims (N, 28, 28), got {images.shape}")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"MNIST {prefix}: {images.shape[0]} images but labels of shape {labels.shape}")
    return normalise(images), labels.astype(np.int32)


def load_mnist(
    data_dir: str | Path | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_images, train_labels, test_images, test_labels).

    Without `data_dir`: the bundled 10k digits (8,000 train / 2,000 test). With it: full
    MNIST from IDX files (torchvision's `MNIST/raw/` layout or flat in `data_dir`).
    """
    if data_dir is None:
        if not BUNDLED.is_file():
            raise FileNotFoundError(f"bundled MNIST data not found at {BUNDLED}")
        with np.load(BUNDLED) as d:
            images, labels = d["images"], d["labels"]
        x = normalise(images)
        y = labels.astype(np.int32)
        n = N_TRAIN_BUNDLED
        return x[:n], y[:n], x[n:], y[n:]
    root = Path(os.path.expanduser(str(data_dir)))
    if not root.is_dir():
        raise FileNotFoundError(f"MNIST data directory '{root}' does not exist")
    train_x, train_y = _load_idx_split(root, "train")
    test_x, test_y = _load_idx_split(root, "t10k")
    return train_x, train_y, test_x, test_y


class Batches:
    """An iterable of `(images, labels)` mini-batches with `len()`, like a DataLoader.

    Each iteration reshuffles (when `shuffle`) with a generator seeded once by `seed`,
    so the sequence of epochs is reproducible. `drop_last` drops a final partial batch.
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = True,
        seed: int | None = None,
    ):
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.images = images
        self.labels = labels
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        n = len(self.images)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = len(self.images)
        order = self._rng.permutation(n) if self.shuffle else np.arange(n)
        for i in range(len(self)):
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.images[idx], self.labels[idx]


def batches(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    shuffle: bool = True,
    drop_last: bool = True,
    seed: int | None = None,
) -> Batches:
    """Mini-batches of `(images, labels)`; see `Batches`."""
    return Batches(images, labels, batch_size, shuffle, drop_last, seed)
