"""`popxl_addons.optimizers`: optimizer steps as addons Modules (upstream has Adam only)."""

from popxl_addons.optimizers.adam import AdamOptimizerStep

__all__ = ["AdamOptimizerStep"]
