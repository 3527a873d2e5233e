"""The deep chain program of xl-run-outline.mlir and its NumPy reference.

N layers `tanh(x @ W_i + b_i)` (the same ops, different weights), x of shape (2, 4).

    python deep_chain.py program N          # prints the program
    python deep_chain.py check N x.npy out.npz [other.npz]
        # prints the largest difference of y from NumPy (and from other.npz's y)
"""

import sys

import numpy as np

T = "tensor<2x4xf32>"


def weight(i: int) -> np.ndarray:
    return np.array([[((r * 4 + c) * (i % 5 + 2)) % 7 * 0.25 - 0.75 for c in range(4)] for r in range(4)])


def bias(i: int) -> float:
    return (i % 3 - 1) * 0.25


def program(n: int) -> str:
    lines = [
        f"graph.h2d_stream @x : {T}",
        f"graph.d2h_stream @y : {T}",
        "graph.main {",
        f"  %v0 = graph.host_load @x : {T}",
    ]
    for i in range(n):
        w = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in weight(i))
        lines += [
            f'  %w{i} = graph.variable "w{i}" = dense<[{w}]> : tensor<4x4xf32>',
            f'  %b{i} = graph.variable "b{i}" = dense<{bias(i)}> : tensor<4xf32>',
            f"  %m{i} = popxl.matmul %v{i}, %w{i} : ({T}, tensor<4x4xf32>) -> {T}",
            f"  %a{i} = popxl.add %m{i}, %b{i} : ({T}, tensor<4xf32>) -> {T}",
            f"  %v{i + 1} = popxl.tanh %a{i} : ({T}) -> {T}",
        ]
    return "\n".join([*lines, f"  graph.host_store @y, %v{n} : {T}", "}"])


def reference(x: np.ndarray, n: int) -> np.ndarray:
    x = x.astype(np.float64)
    for i in range(n):
        x = np.tanh(x @ weight(i) + bias(i))
    return x


if __name__ == "__main__":
    n = int(sys.argv[2])
    if sys.argv[1] == "program":
        print(program(n))
    else:
        y = np.load(sys.argv[4])["y"]
        print(f"numpy: {np.abs(y - reference(np.load(sys.argv[3]), n)).max():.1e}")
        if len(sys.argv) > 5:
            print(f"other: {np.abs(y - np.load(sys.argv[5])['y']).max():.1e}")
