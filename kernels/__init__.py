"""ceiling: drop-in ops for PyTorch and JAX (``gemm``, ``scaled_gemm``, ``fp8_gemm``, ``attention``,
``triangle_attention``, ``triangle_multiplicative_update``), one spec and several vendor backends
each; ``ceiling.backends.report()`` says which backends can run each op here, and why not. The
README shows how to call them.
"""

from ceiling import backends
from ceiling.errors import BackendUnavailable, InputError
from ceiling.attention import attention
from ceiling.gemm import gemm
from ceiling.scaled_gemm import fp8_gemm, scaled_gemm
from ceiling.triangle import triangle_attention, triangle_multiplicative_update

__all__ = ["gemm", "scaled_gemm", "fp8_gemm", "attention", "triangle_attention", "triangle_multiplicative_update",
           "backends", "InputError", "BackendUnavailable"]
