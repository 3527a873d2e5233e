"""`popxl_addons.transforms.available_memory_proportion` (upstream's module path): the
available-memory-proportion setters, defined in `popxl_addons.tuning`."""

from popxl_addons.tuning import set_available_memory_proportion_by_ipu, set_graph_available_memory_proportion_by_ipu

__all__ = ["set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu"]
