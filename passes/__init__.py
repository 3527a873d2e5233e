"""xl passes, one per file; `get_all_passes()` is the registry used by xl-opt and the Python API.

It holds xl's passes (`builtin_passes()`), then the passes of installed `xl.passes` entry
points and of plugin files loaded with `load_pass_plugin` (see `xl.passes.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Lazy factories for every pass (xl's, then plugins'), keyed by kebab-case name."""
    from xl.passes.plugins import entry_point_passes, loaded_plugin_passes

    passes = builtin_passes()
    for name, factory in {**entry_point_passes(), **loaded_plugin_passes()}.items():
        passes.setdefault(name, factory)  # xl's own passes keep their names
    return passes


def builtin_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Lazy factories for every xl pass, keyed by its kebab-case name."""

    def get_accumulate() -> type[ModulePass]:
        from xl.passes.accumulate import AccumulatePass

        return AccumulatePass

    def get_recompute() -> type[ModulePass]:
        from xl.passes.recompute import RecomputePass

        return RecomputePass

    def get_autodiff() -> type[ModulePass]:
        from xl.passes.autodiff import AutodiffPass

        return AutodiffPass

    def get_functionalize() -> type[ModulePass]:
        from xl.passes.functionalize import FunctionalizePass

        return FunctionalizePass

    def get_pipeline() -> type[ModulePass]:
        from xl.passes.pipeline import PipelinePass

        return PipelinePass

    def get_outline() -> type[ModulePass]:
        from xl.passes.outline import OutlinePass

        return OutlinePass

    def get_hoist_updates() -> type[ModulePass]:
        from xl.passes.hoist_updates import HoistUpdatesPass

        return HoistUpdatesPass

    def get_inline() -> type[ModulePass]:
        from xl.passes.inline import InlinePass

        return InlinePass

    def get_lower_to_rt() -> type[ModulePass]:
        from xl.passes.lower_to_rt import LowerToRtPass

        return LowerToRtPass

    # -- rt optimisations (runtime speed) ------------------------------------------------
    def get_rt_fold_update() -> type[ModulePass]:
        from xl.passes.rt_fold_update import RtFoldUpdatePass

        return RtFoldUpdatePass

    def get_rt_fuse_elementwise() -> type[ModulePass]:
        from xl.passes.rt_fuse_elementwise import RtFuseElementwisePass

        return RtFuseElementwisePass

    def get_rt_fuse_softmax() -> type[ModulePass]:
        from xl.passes.rt_fuse_softmax import RtFuseSoftmaxPass

        return RtFuseSoftmaxPass

    def get_rt_keep_gelu_factor() -> type[ModulePass]:
        from xl.passes.rt_keep_gelu_factor import RtKeepGeluFactorPass

        return RtKeepGeluFactorPass

    def get_rt_fold_all_reduce() -> type[ModulePass]:
        from xl.passes.rt_fold_all_reduce import RtFoldAllReducePass

        return RtFoldAllReducePass

    def get_rt_fold_all_reduce_gemm() -> type[ModulePass]:
        from xl.passes.rt_fold_all_reduce_gemm import RtFoldAllReduceGemmPass

        return RtFoldAllReduceGemmPass

    def get_clamp_log2_scale() -> type[ModulePass]:
        from xl.passes.clamp_log2_scale import ClampLog2ScalePass

        return ClampLog2ScalePass

    def get_rt_trivial_collectives() -> type[ModulePass]:
        from xl.passes.rt_trivial_collectives import RtTrivialCollectivesPass

        return RtTrivialCollectivesPass

    def get_rt_views() -> type[ModulePass]:
        from xl.passes.rt_views import RtViewsPass

        return RtViewsPass

    def get_rt_reuse_buffers() -> type[ModulePass]:
        from xl.passes.rt_reuse_buffers import RtReuseBuffersPass

        return RtReuseBuffersPass

    def get_rt_broadcast_operands() -> type[ModulePass]:
        from xl.passes.rt_broadcast_operands import RtBroadcastOperandsPass

        return RtBroadcastOperandsPass

    def get_rt_optimize() -> type[ModulePass]:
        from xl.passes.rt_optimize import RtOptimizePass

        return RtOptimizePass

    return {
        "accumulate": get_accumulate,
        "recompute": get_recompute,
        "autodiff": get_autodiff,
        "functionalize": get_functionalize,
        "inline": get_inline,
        "hoist-updates": get_hoist_updates,
        "outline": get_outline,
        "pipeline": get_pipeline,
        "lower-to-rt": get_lower_to_rt,
        "rt-fold-all-reduce": get_rt_fold_all_reduce,
        "rt-fold-all-reduce-gemm": get_rt_fold_all_reduce_gemm,
        "rt-fold-update": get_rt_fold_update,
        "rt-fuse-elementwise": get_rt_fuse_elementwise,
        "rt-fuse-softmax": get_rt_fuse_softmax,
        "rt-keep-gelu-factor": get_rt_keep_gelu_factor,
        "clamp-log2-scale": get_clamp_log2_scale,
        "rt-trivial-collectives": get_rt_trivial_collectives,
        "rt-views": get_rt_views,
        "rt-reuse-buffers": get_rt_reuse_buffers,
        "rt-broadcast-operands": get_rt_broadcast_operands,
        "rt-optimize": get_rt_optimize,
    }
