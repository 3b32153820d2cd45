"""ceiling kernels: drop-in ops for PyTorch and JAX, one spec and several vendor backends each.

    import ceiling
    y = ceiling.gemm(a, b, bias=bias, activation="gelu")
    y = ceiling.scaled_gemm(a8, w8.mT, a_scale, w_scale.mT)   # FP8 operands and their scales
    y = ceiling.fp8_gemm(x, w.mT, recipe="block")            # bf16 in, FP8 inside, trainable
    o = ceiling.attention(q, k, v, causal=True)   # (batch, seq, heads, head_dim)
    ceiling.backends.report()   # which backends can run each op here, and why not
"""

from ceiling import backends
from ceiling.errors import BackendUnavailable, InputError
from ceiling.attention import attention
from ceiling.gemm import gemm
from ceiling.scaled_gemm import fp8_gemm, scaled_gemm
from ceiling.triangle import triangle_attention, triangle_multiplicative_update

__all__ = ["gemm", "scaled_gemm", "fp8_gemm", "attention", "triangle_attention", "triangle_multiplicative_update",
           "backends", "InputError", "BackendUnavailable"]
