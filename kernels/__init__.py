"""ceiling kernels: drop-in ops for PyTorch and JAX, one spec and several vendor backends each.

    import kernels
    y = kernels.gemm(a, b, bias=bias, activation="gelu")
    y = kernels.scaled_gemm(a8, w8.mT, a_scale, w_scale.mT)   # FP8 operands and their scales
    y = kernels.fp8_gemm(x, w.mT, recipe="block")            # bf16 in, FP8 inside, trainable
    o = kernels.attention(q, k, v, causal=True)   # (batch, seq, heads, head_dim)
    kernels.backends.report()   # which backends can run each op here, and why not
"""

from kernels import backends
from kernels.errors import BackendUnavailable, InputError
from kernels.attention import attention
from kernels.gemm import gemm
from kernels.scaled_gemm import fp8_gemm, scaled_gemm
from kernels.triangle import triangle_attention, triangle_multiplicative_update

__all__ = ["gemm", "scaled_gemm", "fp8_gemm", "attention", "triangle_attention", "triangle_multiplicative_update",
           "backends", "InputError", "BackendUnavailable"]
