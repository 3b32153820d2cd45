"""The scaled-GEMM oracle: dequantize both operands (codes times their scales), then the plain
GEMM and epilogue, in float32 (or float64 for the tests' ground truth)."""

from __future__ import annotations

from ceiling.fp8 import reference as fp8_reference
from ceiling.gemm.reference import activate_torch, epilogue_jax
from ceiling.scaled_gemm.spec import kinds


def dequantize_a(a, a_scale, kind: str, dtype=None):
    """(M, K) values of ``a``: codes times the scales of ``kind`` (in ``dtype``, float32 by default)."""
    import torch

    dtype = dtype or torch.float32
    m, k = a.shape
    scale = a_scale.to(dtype).reshape(()) if kind == "tensor" else a_scale.to(dtype)
    return a.to(dtype) * fp8_reference.expand(scale, kind, m, k).to(dtype)


def dequantize_b(b, b_scale, kind: str, dtype=None):
    """(K, N) values of ``b``; its scales are laid out over (K, N), so expand them as for b.T."""
    scale = b_scale.reshape(()) if kind == "tensor" else b_scale.mT
    return dequantize_a(b.mT, scale, kind, dtype).mT


def scaled_gemm(a, b, a_scale, b_scale, bias=None, activation=None, out_dtype=None, compute_dtype=None):
    """activation(deq(a) @ deq(b) + bias) on torch tensors, computed in ``compute_dtype`` (float32)."""
    import torch

    compute = compute_dtype or torch.float32
    ka, kb = kinds(a.shape, b.shape, a_scale.shape, b_scale.shape)
    z = torch.matmul(dequantize_a(a, a_scale, ka, compute), dequantize_b(b, b_scale, kb, compute))
    if bias is not None:
        z = z + bias.to(compute)
    return activate_torch(z, activation).to(out_dtype or torch.bfloat16)


def scaled_gemm_jax(a, b, a_scale, b_scale, bias=None, activation=None, out_dtype=None):
    """The same on JAX arrays, in float32 at full precision."""
    import jax
    import jax.numpy as jnp

    ka, kb = kinds(a.shape, b.shape, a_scale.shape, b_scale.shape)
    da = a.astype(jnp.float32) * fp8_reference.expand_jax(a_scale, ka, *a.shape)
    db = (b.T.astype(jnp.float32) * fp8_reference.expand_jax(b_scale.reshape(()) if kb == "tensor" else b_scale.T, kb,
                                               b.shape[1], b.shape[0])).T
    z = jnp.matmul(da, db, precision=jax.lax.Precision.HIGHEST)
    z = epilogue_jax(z, bias, activation)
    return z.astype(out_dtype or jnp.bfloat16)


# --------------------------------------------------------------------------- the reference implementation

JAX = "native"  # forward_jax and backward_jax are jnp: XLA runs them on any device


def forward(problem, config, a, b, a_scale, b_scale, bias):
    import torch

    return (scaled_gemm(a, b, a_scale, b_scale, bias, problem.activation, getattr(torch, problem.out_dtype)),)


def backward(problem, config, saved, grads, needs):
    from ceiling.scaled_gemm.backward import bias_grad

    return bias_grad("reference", problem, saved, grads, needs)


def forward_jax(problem, config, a, b, a_scale, b_scale, bias):
    import jax.numpy as jnp

    return (scaled_gemm_jax(a, b, a_scale, b_scale, bias, problem.activation, jnp.dtype(problem.out_dtype)),)


def backward_jax(problem, config, saved, grads, needs):
    from ceiling.scaled_gemm.backward import bias_grad_jax

    return bias_grad_jax(forward_jax, problem, config, saved, grads, needs)
