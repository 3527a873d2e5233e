"""Every runtime kernel fed strided views of its inputs, against NumPy (derived from the registry).

Whether a kernel may read (and write) a strided NumPy view is a fact of its op class: the
`AcceptsViews` trait (`xl.dialects.traits`). `rt-views` binds a reshape / transpose output as
a view of its input only when every reader declares it; a kernel that does not gets a
contiguous copy. The kernels are those of the registry (`tests/helpers/kernel_cases.py`:
`KERNEL_CLASSES`, every class of `xl.runtime.kernels.KERNELS` and of the replica
collectives); a kernel added later fails `test_every_kernel_has_a_case` until it has one.

- `test_kernel_reads_views`: each kernel that declares `AcceptsViews`, in the straightforward
  plan and in the optimised plan (its template, else its kernel), bound to inputs that are
  transposed, sliced, reshaped-of-transposed and offset views (written operands too), run
  twice with new values written into the views after the plan was built, equals NumPy.
- `test_plan_gives_views_only_to_kernels_that_accept_them`: every kernel reading each input
  through a transpose (and a reshape of a transpose) in both plans equals NumPy, and the
  transposes are views in the optimised plan exactly when the kernel declares the trait.
- `test_xl_run_every_kernel_through_views`: one program holding every kernel, its inputs
  through transposes, through `xl-run` (printed, parsed, `rt-optimize`d, run).

References are NumPy formulas, or the loop references of the ops' own tests
(`tests/helpers/kernel_cases.py`); a case without one (random numbers, float8 scaling, some
gradients) is compared with its kernel on contiguous inputs in the straightforward plan.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue

from tests.helpers.kernel_cases import CASES, KERNEL_CLASSES, Arrays, KernelCase, KernelForm, kernel_form
from xl.compiler import compile_module, lower
from xl.dialects import rt
from xl.dialects.attrs import from_attr, to_attr
from xl.dialects.popxl import ReshapeOp, TransposeOp
from xl.dialects.rt_kernels import kernel_class
from xl.dialects.traits import Elementwise, accepts_views
from xl.dialects.utils import memref_type
from xl.passes.rt_analysis import VIEW_ATTR
from xl.runtime.executable import _Compiler
from xl.runtime.kernels.collectives import COLLECTIVES, Site, bind_site
from xl.runtime.plan import PlanBuilder
from xl.runtime.streams import StreamIn, StreamOut

VIEW_KINDS = ("transposed", "sliced", "reshaped-of-transposed", "offset")
PLAN_KINDS = ("transposed", "reshaped-of-transposed")
IDS = [c.id for c in CASES]


def _with_ids(cases: Sequence[KernelCase]) -> list[Any]:
    seen: dict[str, int] = {}
    out = []
    for c in cases:
        k = seen[c.id] = seen.get(c.id, 0) + 1
        out.append(pytest.param(c, id=c.id if k == 1 else f"{c.id}-{k}"))
    return out


def _present(ins: Arrays) -> list[np.ndarray]:
    return [a for a in ins if a is not None]


# ------------------------------------------------------------------------------------
# Views of every kind
# ------------------------------------------------------------------------------------


def make_view(kind: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A writable view of `kind` and `shape` into a larger buffer (garbage-filled)."""
    n = math.prod(shape)
    if kind == "transposed":
        base = np.empty(shape[::-1], dtype)
        v = base.T
    elif kind == "sliced":
        if not shape:
            v = np.empty((2,), dtype)[1:].reshape(())
        else:
            base = np.empty((*shape[:-1], 2 * shape[-1] + 1), dtype)
            v = base[..., 1::2]
    elif kind == "reshaped-of-transposed":
        lead = math.prod(shape[:-1]) if shape else 1
        last = shape[-1] if shape else 1
        base = np.empty((last, 2 * lead), dtype)
        v = base.T[1::2].reshape(shape)  # a transposed, strided array split into `shape`: no copy
    else:  # offset: contiguous, starting 3 elements into a larger buffer
        v = np.empty(n + 3, dtype)[3:].reshape(shape)
    assert v.shape == tuple(shape) and v.base is not None, (kind, shape)
    _garbage(v)
    return v


def _garbage(a: np.ndarray) -> None:
    if a.dtype.kind == "f" or a.dtype.kind == "V" or str(a.dtype).startswith("float8"):
        a[...] = np.nan if a.dtype.kind == "f" else 0
    elif a.dtype.kind == "b":
        a[...] = True
    else:
        a[...] = 7


def _contiguous(a: np.ndarray) -> np.ndarray:
    return np.array(a, order="C", copy=True)


# ------------------------------------------------------------------------------------
# One kernel bound to given arrays, in either plan
# ------------------------------------------------------------------------------------


def _one_kernel(
    form: KernelForm, ins: Sequence[np.ndarray]
) -> tuple[Block, rt.KernelOp, list[SSAValue], list[SSAValue]]:
    block = Block()
    in_vals: list[SSAValue] = []
    for a in ins:
        op = rt.AllocOp(memref_type(a.shape, a.dtype))
        block.add_op(op)
        in_vals.append(op.result)
    out_vals: list[SSAValue] = []
    for o in form.outs:
        if isinstance(o, int):
            out_vals.append(in_vals[o])
        else:
            op = rt.AllocOp(memref_type(*o))
            block.add_op(op)
            out_vals.append(op.result)
    k = rt.KernelOp(form.name, in_vals, out_vals, dict(form.attrs))
    block.add_op(k)
    rt.ProgramOp(Region(block), rt.ProgramOp.program_attributes(1, 1))
    return block, k, in_vals, out_vals


def _bound(base: type, preset: dict[SSAValue, np.ndarray]) -> Any:
    class Bound(base):  # type: ignore[misc, valid-type]
        def bind(self, v: SSAValue, arr: np.ndarray, hint: str) -> None:
            super().bind(v, preset.get(v, arr), hint)

    return Bound


def kernel_runner(
    case: KernelCase, form: KernelForm, ins: list[np.ndarray], optimize: bool
) -> tuple[Callable[[], None], list[np.ndarray]]:
    """A function running the kernel of `case` once on the arrays `ins` (bound now; write
    new values into them between runs), and its output arrays (written inputs are the
    inputs themselves)."""
    if case.replicas > 1:
        return _collective_runner(case, form, ins)
    block, _, in_vals, out_vals = _one_kernel(form, ins)
    preset = dict(zip(in_vals, ins))
    outs = []
    for v, o in zip(out_vals, form.outs):
        if isinstance(o, int):
            outs.append(ins[o])
        else:
            a = np.empty(o[0], o[1])
            _garbage(a)
            preset[v] = a
            outs.append(a)
    if optimize:
        b = _bound(PlanBuilder, preset)(StreamIn, StreamOut)
        for op in block.ops:
            b.visit(op, 0)
        step, _ = b.finish()
        return step, outs
    c = _bound(_Compiler, preset)()
    steps = c.compile_block(block)

    def run() -> None:
        for s in steps:
            s()

    return run, outs


def _collective_runner(
    case: KernelCase, form: KernelForm, ins: list[np.ndarray]
) -> tuple[Callable[[], None], list[np.ndarray]]:
    r = case.replicas
    per_in = [tuple(a[i] for a in ins) for i in range(r)]
    outs: list[np.ndarray] = []
    for o in form.outs:
        if isinstance(o, int):
            outs.append(ins[o])
        else:
            a = np.empty((r, *o[0]), o[1])
            _garbage(a)
            outs.append(a)
    per_out = [tuple(a[i] for a in outs) for i in range(r)]
    props = {k: from_attr(v) for k, v in form.attrs.items()}
    cls = kernel_class(form.name)
    assert cls is not None
    site = Site(form.name, props, r, range(r), ins=per_in, outs=per_out)
    return bind_site(COLLECTIVES[cls], site), outs


def reference(case: KernelCase, ins: Arrays, form: KernelForm) -> list[np.ndarray | None]:
    """What the kernel must give on `ins`: the case's NumPy reference, else the
    straightforward plan on contiguous copies."""
    present = [_contiguous(a) for a in _present(ins)]
    if case.ref is not None:
        with np.errstate(all="ignore"):
            return [None if e is None else np.asarray(e) for e in case.ref(*present)]
    run, outs = kernel_runner(case, form, present, optimize=False)
    run()
    return [o.copy() for o in outs]


def _is_f8(a: np.ndarray) -> bool:
    return str(a.dtype).startswith("float8") or a.dtype.kind == "V"


def compare(case: KernelCase, got: Sequence[np.ndarray], want: Sequence[np.ndarray | None], what: str) -> None:
    assert len(got) == len(want), (what, len(got), len(want))
    for j, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        assert g.shape == w.shape, f"{what}: output {j} has shape {g.shape}, expected {w.shape}"
        if _is_f8(g) or _is_f8(w):  # .npz gives float8 back as raw bytes (|V1)
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=f"{what}: output {j}")
        elif g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: output {j}")
        else:
            np.testing.assert_allclose(
                np.asarray(g, np.float64),
                np.asarray(w, np.float64),
                rtol=case.rtol,
                atol=case.atol,
                equal_nan=True,
                err_msg=f"{what}: output {j}",
            )


# ------------------------------------------------------------------------------------
# The registry and the trait
# ------------------------------------------------------------------------------------


def test_every_kernel_has_a_case() -> None:
    covered = {c.cls for c in CASES}
    missing = [c.name for c in KERNEL_CLASSES if c not in covered]
    assert not missing, f"kernels without a case in tests/helpers/kernel_cases.py: {missing}"
    assert len(KERNEL_CLASSES) > 120


def test_elementwise_kernels_accept_views() -> None:
    """`xl.fused` runs chains of elementwise kernels and declares `accepts_views`: every
    elementwise kernel must."""
    bad = [c.name for c in KERNEL_CLASSES if c.has_trait(Elementwise) and not accepts_views(c)]
    assert not bad, bad


def test_most_kernels_accept_views() -> None:
    """The fast paths stay fast: the kernels that need contiguous inputs are few, and
    each is listed here with its reason (the class declares no `AcceptsViews`)."""
    contiguous = sorted(c.name for c in KERNEL_CLASSES if not accepts_views(c))
    # binds a flat view of its input when the plan is built
    assert contiguous == ["replica.sharded_slice"]


# ------------------------------------------------------------------------------------
# Kernels fed views directly, in both plans
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", _with_ids([c for c in CASES if accepts_views(c.cls)]))
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_kernel_reads_views(case: KernelCase, optimize: bool) -> None:
    data = [case.inputs(np.random.default_rng(s)) for s in (1, 2)]
    form = kernel_form(case, data[0])
    present0 = _present(data[0])
    if not present0:
        pytest.skip("no inputs")
    wants = [reference(case, d, form) for d in data]
    for kind in VIEW_KINDS:
        views = [make_view(kind, a.shape, a.dtype) for a in present0]
        run, outs = kernel_runner(case, form, views, optimize)
        for k, d in enumerate(data):
            for v, a in zip(views, _present(d)):
                v[...] = a
            for j, o in enumerate(form.outs):
                if not isinstance(o, int):
                    _garbage(outs[j])
            run()
            compare(
                case,
                outs,
                wants[k],
                f"{case.id} ({'optimised' if optimize else 'straightforward'}), {kind} views, run {k + 1}",
            )


# ------------------------------------------------------------------------------------
# Programs: each input through a transpose (and a reshape of it)
# ------------------------------------------------------------------------------------


def _chain(
    kind: str, shape: tuple[int, ...]
) -> tuple[tuple[int, ...], list[tuple[str, dict[str, Any], tuple[int, ...]]]]:
    """(host buffer shape, view kernels from it to `shape`): (kernel, attrs, output shape)."""
    if len(shape) < 2:
        if kind == "transposed" or not shape:
            return shape, []
    if kind == "transposed":
        perm = tuple(range(len(shape)))[::-1]
        return shape[::-1], [(TransposeOp.name, {"perm": perm}, shape)]
    lead, last = math.prod(shape[:-1]), shape[-1]
    return (last, lead), [(TransposeOp.name, {"perm": (1, 0)}, (lead, last)), (ReshapeOp.name, {}, shape)]


def _host_layout(kind: str, x: np.ndarray) -> np.ndarray:
    """The host buffer whose view chain gives `x`."""
    if x.ndim < 2 and (kind == "transposed" or x.ndim == 0):
        return x
    if kind == "transposed":
        return x.T.copy()
    return x.reshape(-1, x.shape[-1]).T.copy()


class Prog:
    """An `rt.program` of several kernel cases, each input loaded from the host through a view chain."""

    def __init__(self, kind: str, replicas: int) -> None:
        self.kind = kind
        self.replicas = replicas
        self.block = Block()
        self.chains: list[tuple[Operation, KernelCase]] = []  # view kernel feeding a case's kernel

    def add(self, tag: str, case: KernelCase, ins: Arrays) -> list[str]:
        """The case's kernel on inputs like `ins`; returns its output stream names."""
        form = kernel_form(case, ins)
        present = _present(ins)
        written = {o for o in form.outs if isinstance(o, int)}
        vals: list[SSAValue] = []
        for i, a in enumerate(present):
            shape = a.shape[1:] if self.replicas > 1 else a.shape
            host, chain = _chain(self.kind, shape)
            buf = self._alloc(host, a.dtype)
            self.block.add_op(rt.H2DOp(f"{tag}_in{i}", buf))
            for name, attrs, out_shape in chain:
                out = self._alloc(out_shape, a.dtype)
                k = rt.KernelOp(name, [buf], [out], {n: to_attr(v) for n, v in attrs.items()})
                self.block.add_op(k)
                if i not in written and name == chain[-1][0]:
                    self.chains.append((k, case))
                buf = out
            vals.append(buf)
        outs: list[SSAValue] = []
        for o in form.outs:
            outs.append(vals[o] if isinstance(o, int) else self._alloc(o[0], o[1]))
        self.block.add_op(rt.KernelOp(form.name, vals, outs, dict(form.attrs)))
        names = []
        for j, v in enumerate(outs):
            names.append(f"{tag}_out{j}")
            self.block.add_op(rt.D2HOp(names[-1], v))
        return names

    def _alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> SSAValue:
        op = rt.AllocOp(memref_type(shape, dtype))
        self.block.add_op(op)
        return op.result

    def module(self) -> ModuleOp:
        prog = rt.ProgramOp(Region(self.block), rt.ProgramOp.program_attributes(1, self.replicas))
        return ModuleOp([prog])

    def feeds(self, tag: str, ins: Arrays) -> dict[str, np.ndarray]:
        out = {}
        for i, a in enumerate(_present(ins)):
            if self.replicas > 1:
                out[f"{tag}_in{i}"] = np.stack([_host_layout(self.kind, a[r]) for r in range(self.replicas)])
            else:
                out[f"{tag}_in{i}"] = _host_layout(self.kind, a)
        return out


def _input_marks(module: ModuleOp, name: str) -> list[bool]:
    """For each input of the kernel `name` that it does not write and that a view kernel
    produces: is that view kernel marked `rt.view`?"""
    marks = []
    for op in module.walk():
        if not (isinstance(op, rt.KernelOp) and op.kernel.data == name):
            continue
        ins, outs = op.io()
        for v in ins:
            writers = [
                u.operation
                for u in v.uses
                if isinstance(u.operation, rt.KernelOp)
                and u.operation.kernel.data in (TransposeOp.name, ReshapeOp.name)
                and v in u.operation.io()[1]
            ]
            if v not in outs and writers and len(v.type.get_shape()) >= 2:  # pyright: ignore[reportAttributeAccessIssue]
                marks.append(VIEW_ATTR in writers[0].attributes)
    return marks


@pytest.mark.parametrize("case", _with_ids(CASES))
@pytest.mark.parametrize("kind", PLAN_KINDS)
def test_plan_gives_views_only_to_kernels_that_accept_them(case: KernelCase, kind: str) -> None:
    data = [case.inputs(np.random.default_rng(s)) for s in (3, 4)]
    p = Prog(kind, case.replicas)
    names = p.add("k", case, data[0])
    module = p.module()
    form = kernel_form(case, data[0])
    # rt-optimize makes the inputs views exactly when the kernel accepts them (an input the
    # kernel writes stays a copy: a view is never written)
    marks = _input_marks(lower(module.clone(), "rt-optimize"), form.name)
    if accepts_views(case.cls):
        assert all(marks), f"{case.id}: an input is copied although the kernel accepts views: {marks}"
    else:
        assert not any(marks), f"{case.id}: a kernel without AcceptsViews reads a view: {marks}"
    for optimize in (False, True):
        exe = compile_module(module.clone(), optimize=optimize)
        for k, d in enumerate(data):
            got = exe.run(p.feeds("k", d))
            want = reference(case, d, form)
            outs = [got[n] for n in names]
            compare(
                case, outs, want, f"{case.id} ({'optimised' if optimize else 'straightforward'}), {kind}, run {k + 1}"
            )


# ------------------------------------------------------------------------------------
# Every kernel through xl-run
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", PLAN_KINDS)
@pytest.mark.parametrize("replicas", [1, 2])
def test_xl_run_every_kernel_through_views(tmp_path, kind: str, replicas: int) -> None:
    from xl.tools.run import main

    p = Prog(kind, replicas)
    feeds: dict[str, Any] = {}
    expected: dict[str, tuple[KernelCase, np.ndarray | None]] = {}
    cases = [c for c in CASES if (c.replicas > 1) == (replicas > 1)]
    for n, case in enumerate(cases):
        if case.cls.name == "popxl.print_tensor":
            continue  # prints on every run
        ins = case.inputs(np.random.default_rng(5 + n))
        if any(str(a.dtype).startswith("float8") for a in _present(ins)):
            continue  # .npz holds float8 host data as raw bytes, which xl-run does not read back yet
        tag = f"c{n}"
        names = p.add(tag, case, ins)
        feeds.update(p.feeds(tag, ins))
        for name, want in zip(names, reference(case, ins, kernel_form(case, ins))):
            expected[name] = (case, want)
    prog = tmp_path / "p.mlir"
    prog.write_text(str(p.module()))
    np.savez(tmp_path / "in.npz", **feeds)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([str(prog), str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")])
    assert code in (0, None), err.getvalue()
    got = np.load(tmp_path / "out.npz")
    for name, (case, want) in expected.items():
        compare(case, [got[name]], [want], f"xl-run: {case.id}, {kind}, {name}")


# ------------------------------------------------------------------------------------
# The program that found the class: a sharded slice of a transpose
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("replicas", "group_size"), [(1, 1), (2, 2), (4, 2), (4, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_replica_sharded_slice_of_a_transpose(replicas: int, group_size: int, dtype: type) -> None:
    import popxl
    from popxl import ops

    x = (np.arange(replicas * 12).reshape(replicas, 3, 4) + 1).astype(dtype)
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        xs = popxl.h2d_stream((3, 4), popxl.dtypes.dtype.as_dtype(dtype), "x")
        group = ir.replica_grouping(1, group_size)
        y = ops.collectives.replica_sharded_slice(ops.host_load(xs).transpose((1, 0)), group=group)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    s = 12 // group_size
    want = np.stack([x[r].T.reshape(-1)[(r % group_size) * s : (r % group_size + 1) * s] for r in range(replicas)])
    want = want.reshape((replicas, s) if replicas > 1 else (s,))
    for optimize in (False, True):
        got = compile_module(ir._module, optimize=optimize).run({"x": x if replicas > 1 else x[0]})["y"]
        np.testing.assert_array_equal(got, want, err_msg=f"optimize={optimize}")
