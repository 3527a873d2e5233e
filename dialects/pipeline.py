"""The `pipeline` dialect: a pipelined loop over stages, and activation stashes.

A `pipeline.region` is a loop body that runs `steps` times, split into stages by the
discardable attribute `pipeline.stage` on every op of the region. The `pipeline` pass
(`xl-opt -p pipeline`) turns it into ramp-up, a `call.repeat` main loop and ramp-down so
that stage `i` works on micro-batch `n - i` while stage 0 works on micro-batch `n`:

```mlir
graph.h2d_stream @x : tensor<ui32>
graph.d2h_stream @y : tensor<ui32>
graph.main {
  %one = graph.constant dense<1> : tensor<ui32>
  pipeline.region steps 10 {
    %x = graph.host_load @x {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : tensor<ui32>
    %a = popxl.add %x, %one {ipu.id = 0 : i64, pipeline.stage = 0 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %c = ipu.copy %a {source = 0 : i64, destination = 1 : i64, ipu.id = 1 : i64, pipeline.stage = 0 : i64}
        : (tensor<ui32>) -> tensor<ui32>
    %s = pipeline.stash %x {pipeline.stage = 0 : i64} : tensor<ui32> -> tensor<3xui32>
    %b = popxl.add %c, %one {ipu.id = 1 : i64, pipeline.stage = 1 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    %d = ipu.copy %b {source = 1 : i64, destination = 0 : i64, pipeline.stage = 1 : i64}
        : (tensor<ui32>) -> tensor<ui32>
    %r = pipeline.restore %s {pipeline.stage = 2 : i64} : tensor<3xui32> -> tensor<ui32>
    %e = popxl.add %d, %r {ipu.id = 0 : i64, pipeline.stage = 2 : i64} : (tensor<ui32>, tensor<ui32>) -> tensor<ui32>
    graph.host_store @y, %e {pipeline.stage = 2 : i64} : tensor<ui32>
  }
}
```

Rules (checked by the verifiers):

- every op of the region carries `pipeline.stage`; the stages are 0..S-1 and first
  appear in that order (ops of an earlier stage may follow, e.g. a stash added later);
- `steps >= 2 * S`;
- a value is used in its own stage or later, never earlier; it reaches a later stage only
  as the result of an `ipu.copy` used in the next stage, or through a stash: a
  `pipeline.stash` in the producer stage and a `pipeline.restore` in the consumer stage;
- a stash is a ring buffer whose leading dimension is its depth, `to_stage - from_stage + 1`,
  which must be > 1.

Values defined outside the region (variables, weights, constants) can be used anywhere.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerAttr, TensorType, i64
from xdsl.ir import Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, NoTerminator
from xdsl.utils.exceptions import VerifyException

from xl.dialects.graph import parse_body_region, print_body_region
from xl.dialects.ipu import CopyOp as IpuCopyOp
from xl.dialects.traits import NotDifferentiable
from xl.dialects.utils import fmt_type

STAGE_ATTR = "pipeline.stage"


def stage_of(op: Operation) -> int | None:
    """The pipeline stage of `op` (None when it has no valid `pipeline.stage`)."""
    a = op.attributes.get(STAGE_ATTR)
    if isinstance(a, IntegerAttr) and a.value.data >= 0:
        return a.value.data
    return None


def set_stage(op: Operation, stage: int) -> None:
    op.attributes[STAGE_ATTR] = IntegerAttr(stage, i64)


def _value_str(v: SSAValue) -> str:
    if v.name_hint:
        return f"%{v.name_hint}"
    return f"a result of '{v.owner.name}'" if isinstance(v.owner, Operation) else "a block argument"


@irdl_op_definition
class RegionOp(IRDLOperation):
    """A pipelined loop: its body runs `steps` times, stage by stage (see the module docstring).

    ```mlir
    pipeline.region steps 4 {
      %x = graph.host_load @x {pipeline.stage = 0 : i64} : tensor<ui32>
      %c = ipu.copy %x {source = 0 : i64, destination = 1 : i64, pipeline.stage = 0 : i64}
          : (tensor<ui32>) -> tensor<ui32>
      graph.host_store @y, %c {pipeline.stage = 1 : i64} : tensor<ui32>
    }
    ```
    """

    name = "pipeline.region"
    steps = prop_def(IntegerAttr)
    body = region_def("single_block")
    # autodiff does not differentiate through a pipeline: differentiate the stage graphs
    traits = traits_def(NoTerminator(), NotDifferentiable())

    def __init__(self, steps: int, region: Region | None = None):
        super().__init__(
            properties={"steps": IntegerAttr(steps, i64)},
            regions=[region if region is not None else Region(Block())],
        )

    @classmethod
    def parse(cls, parser: Parser) -> RegionOp:
        parser.parse_keyword("steps")
        steps = parser.parse_integer(allow_boolean=False, allow_negative=True)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        op = cls(steps, parse_body_region(parser))
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" steps {self.steps.value.data}")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        print_body_region(printer, self.body)

    @property
    def num_stages(self) -> int:
        stages = [stage_of(op) for op in self.body.block.ops]
        return max((s for s in stages if s is not None), default=-1) + 1

    def verify_region(self) -> None:
        """Verifies the body's ops and the pipeline rules, not the enclosing block (which a
        frontend may still be building)."""
        for op in self.body.block.ops:
            op.verify()
        self.verify_()

    def verify_(self) -> None:
        n = self.steps.value.data
        order: list[int] = []  # stages in order of first appearance
        for op in self.body.block.ops:
            a = op.attributes.get(STAGE_ATTR)
            if a is None:
                raise VerifyException(
                    f"pipeline.region: '{op.name}' is in no stage: every op of a pipeline "
                    f"region needs a '{STAGE_ATTR}' attribute"
                )
            s = stage_of(op)
            if s is None:
                raise VerifyException(
                    f"pipeline.region: '{op.name}' has {STAGE_ATTR} = {a}, expected a non-negative integer"
                )
            if op.regions and not isinstance(op, RegionOp):
                raise VerifyException(
                    f"pipeline.region: '{op.name}' has regions; a stage holds only plain ops (call subgraphs instead)"
                )
            if isinstance(op, RegionOp):
                raise VerifyException("pipeline.region: pipelines cannot be nested")
            if s not in order:
                order.append(s)
        if not order:
            raise VerifyException("pipeline.region: the region has no ops (no stages)")
        num = max(order) + 1
        for i in range(num):
            if i not in order:
                raise VerifyException(f"pipeline.region: stage {i} is never used (stages must be 0..{num - 1})")
        for earlier, later in zip(order, order[1:]):
            if later < earlier:
                raise VerifyException(
                    f"pipeline.region: stage {later} starts after stage {earlier} (stages must "
                    "first appear in order 0, 1, ..., S-1)"
                )
        if n < 2 * num:
            raise VerifyException(
                f"pipeline.region: steps = {n} is too few for {num} stages (pipelining needs "
                f"steps >= 2 * stages = {2 * num})"
            )
        self._verify_crossings()

    def _verify_crossings(self) -> None:
        block = self.body.block
        for op in block.ops:
            t = stage_of(op)
            assert t is not None
            for v in op.operands:
                producer = v.owner
                if not isinstance(producer, Operation) or producer.parent_block() is not block:
                    continue  # defined outside the region: usable by every stage
                s = stage_of(producer)
                assert s is not None
                if s > t:
                    raise VerifyException(
                        f"pipeline.region: {_value_str(v)} (stage {s}) is used in stage {t} by "
                        f"'{op.name}': values cross stages only forward in stage order"
                    )
                if s == t:
                    if isinstance(producer, IpuCopyOp) and is_stage_copy(producer):
                        raise VerifyException(
                            f"pipeline.region: the ipu.copy {_value_str(v)} (stage {s}) is used "
                            f"both in stage {s} and in stage {s + 1}; a copy between stages is "
                            "used only by the next stage"
                        )
                    continue
                if isinstance(producer, IpuCopyOp) and t == s + 1:
                    continue
                if isinstance(producer, StashOp) and isinstance(op, RestoreOp):
                    continue
                raise VerifyException(
                    f"pipeline.region: {_value_str(v)} (stage {s}) is used in stage {t} by "
                    f"'{op.name}': a value reaches a later stage only through an ipu.copy "
                    "used by the next stage, or a pipeline.stash / pipeline.restore"
                )


def is_stage_copy(op: IpuCopyOp) -> bool:
    """Whether an `ipu.copy` of a pipeline region carries its value to the next stage
    (some use is in a later stage) rather than within its own stage."""
    s = stage_of(op)
    return s is not None and any((t := stage_of(u.operation)) is not None and t > s for u in op.result.uses)


def _check_stash_types(name: str, value: TensorType, buffer: TensorType) -> int:
    vshape, bshape = value.get_shape(), buffer.get_shape()
    if (
        len(bshape) != len(vshape) + 1
        or bshape[1:] != vshape
        or (value.get_element_type() != buffer.get_element_type())
    ):
        raise VerifyException(
            f"{name}: the stash buffer {fmt_type(buffer)} must be the tensor type "
            f"{fmt_type(value)} with a leading depth dimension"
        )
    return bshape[0]


@irdl_op_definition
class StashOp(IRDLOperation):
    """Pushes a value into a ring buffer of `depth` entries (the buffer's leading dimension).

    Used in the stage producing the value; `pipeline.restore` reads it back in a later
    stage. The depth is `to_stage - from_stage + 1` (> 1).

    ```mlir
    %s = pipeline.stash %x {pipeline.stage = 0 : i64} : tensor<4xf32> -> tensor<3x4xf32>
    ```
    """

    name = "pipeline.stash"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(HasParent(RegionOp), NotDifferentiable())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, value: SSAValue, depth: int):
        assert isinstance(value.type, TensorType)
        t = value.type
        super().__init__(
            operands=[value],
            result_types=[TensorType(t.get_element_type(), [depth, *t.get_shape()])],
        )

    @property
    def depth(self) -> int:
        t = self.result.type
        assert isinstance(t, TensorType)
        return t.get_shape()[0] if t.get_shape() else 0

    def verify_(self) -> None:
        assert isinstance(self.input.type, TensorType) and isinstance(self.result.type, TensorType)
        depth = _check_stash_types("pipeline.stash", self.input.type, self.result.type)
        if depth <= 1:
            raise VerifyException(
                f"pipeline.stash: stash depth must be > 1, got {depth} (the depth is "
                "to_stage - from_stage + 1: restore in a later stage)"
            )


@irdl_op_definition
class RestoreOp(IRDLOperation):
    """Pops the oldest value of a stash (in the stage that consumes it).

    ```mlir
    %r = pipeline.restore %s {pipeline.stage = 2 : i64} : tensor<3x4xf32> -> tensor<4xf32>
    ```
    """

    name = "pipeline.restore"
    stash = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(HasParent(RegionOp), NotDifferentiable())
    assembly_format = "$stash attr-dict `:` type($stash) `->` type($result)"

    def __init__(self, stash: SSAValue):
        t = stash.type
        assert isinstance(t, TensorType)
        super().__init__(
            operands=[stash],
            result_types=[TensorType(t.get_element_type(), t.get_shape()[1:])],
        )

    def verify_(self) -> None:
        assert isinstance(self.stash.type, TensorType) and isinstance(self.result.type, TensorType)
        depth = _check_stash_types("pipeline.restore", self.result.type, self.stash.type)
        stash = self.stash.owner
        if not isinstance(stash, StashOp):
            raise VerifyException("pipeline.restore: the operand must be the result of a pipeline.stash")
        s, t = stage_of(stash), stage_of(self)
        if s is not None and t is not None and depth != t - s + 1:
            raise VerifyException(
                f"pipeline.restore: restores in stage {t} a stash of depth {depth} made in "
                f"stage {s}; the depth must be to_stage - from_stage + 1 = {t - s + 1}"
            )


Pipeline = Dialect("pipeline", [RegionOp, StashOp, RestoreOp], [])
