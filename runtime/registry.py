"""The kernel class lookup for the runtime modules that still import it from here; it is
defined in the `rt` dialect (`xl.dialects.rt_kernels.kernel_class`)."""

from xl.dialects.rt_kernels import KernelClass, kernel_class

__all__ = ["KernelClass", "kernel_class"]
