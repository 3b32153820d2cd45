"""ceiling kernels: drop-in ops for PyTorch and JAX, one spec and several vendor backends each.

    import kernels
    y = kernels.gemm(a, b, bias=bias, activation="gelu")
    kernels.backends.report()   # which backends can run each op here, and why not
"""

from kernels import backends
from kernels.errors import BackendUnavailable, InputError
from kernels.gemm import gemm
from kernels.triangle import triangle_attention, triangle_multiplicative_update

__all__ = ["gemm", "triangle_attention", "triangle_multiplicative_update", "backends", "InputError", "BackendUnavailable"]
