"""The GEMM oracle: plain framework math, computed in float32 (or float64 on request); also the
``reference`` implementation of the op (:func:`forward`, :func:`forward_jax`)."""

from __future__ import annotations

import math


def activate_torch(z, activation: str | None):
    import torch

    if activation is None:
        return z
    if activation == "relu":
        return torch.relu(z)
    if activation == "gelu":
        return torch.nn.functional.gelu(z)
    if activation == "silu":
        return torch.nn.functional.silu(z)
    raise ValueError(activation)


def activation_grad_torch(z, activation: str | None):
    """d activation / dz at z, in z's dtype."""
    import torch

    if activation is None:
        return torch.ones_like(z)
    if activation == "relu":
        return (z > 0).to(z.dtype)
    if activation == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
        pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
        return cdf + z * pdf
    if activation == "silu":
        s = torch.sigmoid(z)
        return s * (1.0 + z * (1.0 - s))
    raise ValueError(activation)


def activation_grad_jax(z, activation: str | None):
    """d activation / dz at z, on a JAX array."""
    import jax
    import jax.numpy as jnp

    if activation is None:
        return jnp.ones_like(z)
    if activation == "relu":
        return (z > 0).astype(z.dtype)
    if activation == "gelu":
        cdf = 0.5 * (1.0 + jax.lax.erf(z / jnp.sqrt(2.0)))
        pdf = jnp.exp(-0.5 * z * z) / jnp.sqrt(2.0 * jnp.pi)
        return cdf + z * pdf
    if activation == "silu":
        s = jax.nn.sigmoid(z)
        return s * (1.0 + z * (1.0 - s))
    raise ValueError(activation)


def gemm(a, b, bias=None, activation=None, out_dtype=None, compute_dtype=None):
    """activation(a @ b + bias) on torch tensors, computed in ``compute_dtype`` (float32)."""
    import torch

    compute = compute_dtype or torch.float32
    z = torch.matmul(a.to(compute), b.to(compute))
    if bias is not None:
        z = z + bias.to(compute)
    return activate_torch(z, activation).to(out_dtype or a.dtype)


def epilogue_jax(z, bias, activation: str | None):
    """``activation(z + bias)`` on a float32 JAX array (the bias cast to float32)."""
    import jax
    import jax.numpy as jnp

    if bias is not None:
        z = z + bias.astype(jnp.float32)
    if activation == "relu":
        z = jax.nn.relu(z)
    elif activation == "gelu":
        z = jax.nn.gelu(z, approximate=False)
    elif activation == "silu":
        z = jax.nn.silu(z)
    return z


def gemm_jax(a, b, bias=None, activation=None, out_dtype=None):
    """The same on JAX arrays, in float32 at full precision."""
    import jax
    import jax.numpy as jnp

    z = jnp.matmul(a.astype(jnp.float32), b.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
    z = epilogue_jax(z, bias, activation)
    return z.astype(out_dtype or a.dtype)


def forward(problem, config, a, b, bias):
    import torch

    return (gemm(a, b, bias, problem.activation, getattr(torch, problem.out_dtype)),)


def forward_jax(problem, config, a, b, bias):
    return (gemm_jax(a, b, bias, problem.activation, problem.out_dtype),)
