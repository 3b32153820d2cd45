"""The JAX front end of GEMM: a ``jax.custom_vjp`` whose forward and backward
GEMMs go through the chosen backend.

A backend module provides ``gemm_jax(a, b, bias, activation, out_dtype, config)``
on JAX arrays; the reference computes with ``jnp`` in float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels import backends
from kernels.gemm import reference


def _forward_impl(backend: str, config):
    if backend == "reference":
        return lambda a, b, bias, activation, out_dtype: reference.gemm_jax(a, b, bias, activation, out_dtype)
    impl = backends.implementation("gemm", backend)
    if not hasattr(impl, "gemm_jax"):
        from kernels.errors import BackendUnavailable

        raise BackendUnavailable(f"gemm on backend={backend!r} has no JAX entry point")
    return functools.partial(impl.gemm_jax, config=dict(config) if config else None)


def _activation_grad(z, activation):
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


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _gemm(a, b, bias, activation, out_dtype, backend, config):
    return _forward_impl(backend, config)(a, b, bias, activation, out_dtype)


def _gemm_fwd(a, b, bias, activation, out_dtype, backend, config):
    return _gemm(a, b, bias, activation, out_dtype, backend, config), (a, b, bias)


def _gemm_bwd(activation, out_dtype, backend, config, residuals, grad):
    a, b, bias = residuals
    run = _forward_impl(backend, None)
    if activation is None:
        dz = grad
    else:
        z = run(a, b, bias, None, jnp.float32)
        dz = grad.astype(jnp.float32) * _activation_grad(z, activation)
    dz = dz.astype(a.dtype)
    da = run(dz, jnp.swapaxes(b, -1, -2), None, None, a.dtype)
    if b.ndim == 2 and a.ndim == 3:
        db = run(a.reshape(-1, a.shape[-1]).T, dz.reshape(-1, dz.shape[-1]), None, None, b.dtype)
    else:
        db = run(jnp.swapaxes(a, -1, -2), dz, None, None, b.dtype)
    dbias = None
    if bias is not None:
        dbias = dz.astype(jnp.float32).sum(axis=tuple(range(dz.ndim - 1))).astype(bias.dtype)
    return da, db, dbias


_gemm.defvjp(_gemm_fwd, _gemm_bwd)


def gemm(a, b, bias, activation, out_dtype, backend, config):
    frozen = tuple(sorted(config.items())) if config else None
    return _gemm(a, b, bias, activation, jnp.dtype(out_dtype), backend, frozen)
