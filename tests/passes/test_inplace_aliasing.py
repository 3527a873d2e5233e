"""Every in-place op with its destination also passed as another operand, against NumPy.

An in-place kernel must read all its inputs before it writes its destination: with
`scaled_add_(y, y, a, b)` the result is `a*y + b*y`, not `a*y + b*(a*y)`. The list of
in-place ops is derived from the `popxl` dialect (every op class with the `InPlaceInterface` trait), and
`test_every_inplace_op_has_a_case` fails when an in-place op is added without a case
here. Each case runs a program twice (variables persist) through the straightforward
plan, the optimised plan and `popxl.Session`, and compares the variables (and stored
results) with NumPy formulas applied to copies taken before each update.

Aliasing comes in two forms: the very same tensor (`X = t`) and an overlapping view
(`X = t.T` of a square `t`, which the optimised plan must not turn into a stale view).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.runtime_check import check_all
from xl.dialects.effects import InPlaceInterface
from xl.dialects.popxl import Popxl

T0 = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [3.0, -2.5, 1.25]], np.float32)
S0 = np.array(0.5, np.float32)
V0 = np.array([[0.5, 1.0, 2.0], [1.5, 0.25, 0.75], [3.0, 2.5, 1.25]], np.float32)  # > 0


def inplace_op_names() -> set[str]:
    """The popxl ops that update an operand in place, as the dialect declares them."""
    return {c.name for c in Popxl.operations if c.get_trait(InPlaceInterface) is not None}


@dataclass
class Case:
    op: str
    init: dict[str, np.ndarray]  # variables
    build: Callable[[dict[str, popxl.Tensor]], dict[str, popxl.Tensor]]  # -> stored tensors
    step: Callable[
        [dict[str, np.ndarray]], Mapping[str, np.ndarray | np.generic]
    ]  # NumPy: updates vars, returns stored


def _np_adam(m, v, w, t, b1, b2, eps, wd, kind):
    c1 = 1.0 / (1.0 - b1**t)
    if kind == "adamax":
        return m * c1 / (v + eps) + wd * w
    c2 = 1.0 / (1.0 - b2**t)
    return m * c1 / (np.sqrt(v * c2) + eps) + wd * w


def _updater_case(kind: str) -> Case:
    fn = {
        "adam": ops.var_updates.adam_updater,
        "lamb": ops.var_updates.lamb_updater,
        "adamax": ops.var_updates.adamax_updater,
    }[kind]
    b1, b2, eps, wd = 0.9, 0.99, 1e-3, 0.1

    def build(t):
        extra = {} if kind == "adamax" else {"beta2": b2}
        # m, v and weight are all the same variable; time_step too (all scalars)
        r = fn(t["s"], t["s"], t["s"], t["s"], weight_decay=wd, beta1=b1, epsilon=eps, **extra)
        return {"r": r}

    def step(vs):
        s = vs["s"].astype(np.float64)
        t = s + 1.0
        r = _np_adam(s, s, s, t, b1, b2, eps, wd, kind)
        vs["s"] = np.float32(s + 1.0)
        return {"r": np.float32(r)}

    return Case(f"popxl.{kind}_updater", {"s": np.array(1.5, np.float32)}, build, step)


def _cases() -> list[Case]:
    vu = ops.var_updates
    cases: list[Case] = []

    def add(op, init, build, step):
        cases.append(Case(op, init, build, step))

    def upd(vs, name, value):
        vs[name] = np.asarray(value, np.float32)
        return {}

    # scaled_add_
    add(
        "popxl.scaled_add_",
        {"t": T0},
        lambda t: (ops.scaled_add_(t["t"], t["t"], a=0.5, b=-2.0), {})[1],
        lambda vs: upd(vs, "t", 0.5 * vs["t"] - 2.0 * vs["t"]),
    )
    add(
        "popxl.scaled_add_",
        {"t": T0},
        lambda t: (ops.scaled_add_(t["t"], t["t"].transpose((1, 0)), a=0.5, b=1.0), {})[1],
        lambda vs: upd(vs, "t", 0.5 * vs["t"] + vs["t"].T),
    )
    add(
        "popxl.scaled_add_",
        {"t": T0},
        lambda t: (ops.scaled_add_(t["t"], t["t"], a=3.0, b=1.0), {})[1],
        lambda vs: upd(vs, "t", 3.0 * vs["t"] + vs["t"]),
    )
    # accumulators
    add(
        "popxl.accumulate_",
        {"t": T0},
        lambda t: (vu.accumulate_(t["t"], t["t"].transpose((1, 0)), f=0.5), {})[1],
        lambda vs: upd(vs, "t", vs["t"] + 0.5 * vs["t"].T),
    )
    add(
        "popxl.accumulate_",
        {"s": S0},
        lambda t: (vu.accumulate_(t["s"], t["s"], f=t["s"]), {})[1],
        lambda vs: upd(vs, "s", vs["s"] + vs["s"] * vs["s"]),
    )
    add(
        "popxl.accumulate_square_",
        {"t": T0},
        lambda t: (vu.accumulate_square_(t["t"], t["t"].transpose((1, 0)), f=0.5), {})[1],
        lambda vs: upd(vs, "t", vs["t"] + 0.5 * vs["t"].T ** 2),
    )
    add(
        "popxl.accumulate_mean_",
        {"t": T0},
        lambda t: (vu.accumulate_mean_(t["t"], t["t"].transpose((1, 0)), step=2.0), {})[1],
        lambda vs: upd(vs, "t", vs["t"] * (2.0 / 3.0) + vs["t"].T / 3.0),
    )
    add(
        "popxl.accumulate_mean_",
        {"s": S0},
        lambda t: (vu.accumulate_mean_(t["s"], t["s"], step=t["s"]), {})[1],
        lambda vs: upd(vs, "s", vs["s"] * (vs["s"] / (vs["s"] + 1)) + vs["s"] / (vs["s"] + 1)),
    )
    add(
        "popxl.accumulate_moving_average_",
        {"t": T0},
        lambda t: (vu.accumulate_moving_average_(t["t"], t["t"].transpose((1, 0)), f=0.25), {})[1],
        lambda vs: upd(vs, "t", 0.25 * vs["t"] + 0.75 * vs["t"].T),
    )
    add(
        "popxl.accumulate_moving_average_square_",
        {"t": T0},
        lambda t: (vu.accumulate_moving_average_square_(t["t"], t["t"].transpose((1, 0)), f=0.25), {})[1],
        lambda vs: upd(vs, "t", 0.25 * vs["t"] + 0.75 * vs["t"].T ** 2),
    )
    add(
        "popxl.accumulator_scale_",
        {"s": S0},
        lambda t: (vu.accumulator_scale_(t["s"], t["s"]), {})[1],
        lambda vs: upd(vs, "s", vs["s"] * vs["s"]),
    )
    add(
        "popxl.accumulator_zero_",
        {"t": T0},
        lambda t: (vu.accumulator_zero_(t["t"]), {"r": t["t"] + 1.0})[1],
        lambda vs: (upd(vs, "t", 0 * vs["t"]), {"r": vs["t"] + 1.0})[1],
    )

    def sparse_ref(vs):
        t = vs["t"]
        new = t.copy()
        np.add.at(new, np.array([2, 0, 2]), 0.5 * t)
        return upd(vs, "t", new)

    add(
        "popxl.sparse_accumulate_",
        {"t": T0},
        lambda t: (
            vu.sparse_accumulate_(t["t"], t["t"], popxl.constant(np.array([2, 0, 2], np.int32)), axis=0, f=0.5),
            {},
        )[1],
        sparse_ref,
    )
    add(
        "popxl.copy_var_update_",
        {"t": T0},
        lambda t: (vu.copy_var_update_(t["t"], t["t"].transpose((1, 0))), {})[1],
        lambda vs: upd(vs, "t", vs["t"].T),
    )
    add(
        "popxl.increment_mod_",
        {"t": T0},
        lambda t: (ops.increment_mod_(t["t"], 1.5, 4.0), {})[1],
        lambda vs: upd(vs, "t", np.fmod(vs["t"] + 1.5, 4.0)),
    )

    def dyn_ref(vs):
        t = vs["t"]
        new = t.copy()
        new[1:3, :] = t.T[0:2, :]  # index 1 on axis 0, update = rows 0..1 of t.T
        return upd(vs, "t", new)

    add(
        "popxl.dynamic_update_",
        {"t": T0},
        lambda t: (
            ops.dynamic_update_(
                t["t"], popxl.constant(np.array([1], np.uint32)), t["t"].transpose((1, 0))[0:2], axes=[0], sizes=[2]
            ),
            {},
        )[1],
        dyn_ref,
    )
    add(
        "popxl.dynamic_update_",
        {"t": T0},
        lambda t: (
            ops.dynamic_update_(
                t["t"], popxl.constant(np.array([0, 0], np.uint32)), t["t"].transpose((1, 0)), axes=[0, 1], sizes=[3, 3]
            ),
            {},
        )[1],
        lambda vs: upd(vs, "t", vs["t"].T),
    )
    for kind in ("adam", "lamb", "adamax"):
        cases.append(_updater_case(kind))

    def avu_ref(vs):
        s = vs["s"].astype(np.float64)
        ratio = np.sqrt(s) / np.sqrt(s)
        return upd(vs, "s", s - 0.1 * ratio * s)

    add(
        "popxl.adam_var_update",
        {"s": np.array(2.0, np.float32)},
        lambda t: (vu.adam_var_update(t["s"], t["s"], t["s"], t["s"], learning_rate=0.1), {})[1],
        avu_ref,
    )
    return cases


CASES = _cases()


def test_every_inplace_op_has_a_case() -> None:
    names = inplace_op_names()
    assert names, "the dialect declares no in-place op?"
    missing = names - {c.op for c in CASES}
    assert not missing, f"in-place ops without an aliasing case: {sorted(missing)}"


@pytest.mark.parametrize("k", range(len(CASES)), ids=[f"{c.op}-{i}" for i, c in enumerate(CASES)])
def test_aliased_operands(k: int) -> None:
    case = CASES[k]
    ir = popxl.Ir()
    with ir.main_graph:
        tensors: dict[str, popxl.Tensor] = {name: popxl.variable(v.copy(), name=name) for name, v in case.init.items()}
        stored = case.build(tensors)
        for name, t in stored.items():
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    vs = {n: v.copy() for n, v in case.init.items()}
    expected = []
    for _ in range(2):
        expected.append({n: np.asarray(v, np.float32) for n, v in case.step(vs).items()})
    check_all(ir, expected, [{}, {}], state=vs, rtol=1e-5, atol=1e-6)
