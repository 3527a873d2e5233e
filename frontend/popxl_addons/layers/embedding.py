"""`Embedding(dtype, vocab_size, hidden_size)`: a lookup table (popxl_addons/layers/embedding.py)."""

from __future__ import annotations

from functools import partial
from math import ceil
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.layers._torch import param
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.utils import WeightsDict, truncated_normal

__all__ = ["Embedding"]

# rows per shard are rounded up to a multiple of this (the IPU's multi-slice likes it)
MULTISLICE_MAGIC_NUMBER = 16


class Embedding(Module):
    """`gather(weight, indices, axis)`: row `i` of `weight` for each index `i`.

    `weight` has `get_vocab_shard_size(vocab_size, n_shards)` rows (the vocabulary per
    shard rounded up to a multiple of 16; the extra rows are never selected by valid
    indices) and `hidden_size` columns; truncated normal, std 0.02. With a replica
    grouping of more than one group the table is sharded by vocabulary: indices must be
    offset by `get_offsets(...)[shard]` and out-of-range ones give zeros.
    """

    def __init__(
        self,
        dtype: popxl.dtype,
        vocab_size: int,
        hidden_size: int,
        axis: int = 0,
        replica_grouping: Any | None = None,
    ):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("hidden_size", hidden_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Embedding: {name} must be a positive int, got {v!r}")
        self.dtype = dtype
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.axis = axis
        self.replica_grouping = replica_grouping
        self.n_shards = int(replica_grouping.num_groups) if replica_grouping is not None else 1
        self.vocab_shard_size = self.get_vocab_shard_size(vocab_size, self.n_shards)
        self.offsets = self.get_offsets(vocab_size, self.n_shards)

    @staticmethod
    def get_vocab_shard_size(vocab_size: int, n_shards: int) -> int:
        """Rows of the table per shard: `ceil(vocab_size / n_shards)` rounded up to 16."""
        shard = ceil(vocab_size / n_shards)
        return MULTISLICE_MAGIC_NUMBER * ceil(shard / MULTISLICE_MAGIC_NUMBER)

    @staticmethod
    def get_offsets(vocab_size: int, n_shards: int) -> np.ndarray:
        """The first vocabulary index of each shard."""
        size = Embedding.get_vocab_shard_size(vocab_size, n_shards)
        return np.arange(n_shards * size, step=size)

    def build(self, indices: popxl.Tensor) -> popxl.Tensor:
        """`ops.gather(weight, indices, axis)`: the rows (columns for `axis=1`) the integer `indices` select."""
        if self.axis == 0:
            shape = (self.vocab_shard_size, self.hidden_size)
        else:
            shape = (self.hidden_size, self.vocab_shard_size)
        self.weight = self.add_variable_input(
            "weight", partial(truncated_normal, shape), self.dtype, replica_grouping=self.replica_grouping
        )
        return ops.gather(self.weight, indices, axis=self.axis, zero_OOR=self.n_shards > 1)

    @staticmethod
    def torch_mapping(variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """{variable: data} from a `torch.nn.Embedding` `(vocab, hidden)`: its rows, padded
        with zero rows to the table's size."""
        w = param(nn_layer, "weight", dtype, "Embedding")
        var = variables.weight
        rows, cols = var.shape
        if w.shape[1] != cols or w.shape[0] > rows:
            raise ValueError(
                f"Embedding.torch_mapping: the torch weight {w.shape} does not fit the table {tuple(var.shape)}"
            )
        out = np.zeros((rows, cols), dtype=w.dtype)
        out[: w.shape[0]] = w
        return WeightsDict({var: out})
