"""The JAX front ends: ``jax.custom_vjp`` functions for both triangle ops.

The forward saves only what the backward needs (triangle attention: out and lse;
the triangle multiplicative update: its inputs) and the backward recomputes. A
backend module reaches JAX through ``triangle_attention_fwd_jax`` /
``triangle_attention_bwd_jax`` and ``trimul_fwd_jax`` / ``trimul_bwd_jax``; the
reference provides them in ``jnp`` (float32, HIGHEST precision).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels.errors import BackendUnavailable
from kernels.triangle import reference


def _attention_impl(backend: str):
    if backend == "reference":
        return _ReferenceJax
    from kernels import backends

    impl = backends.implementation("triangle_attention", backend)
    if not hasattr(impl, "triangle_attention_fwd_jax"):
        raise BackendUnavailable(f"triangle_attention on backend={backend!r} has no JAX entry point")
    return impl


class _ReferenceJax:
    @staticmethod
    def triangle_attention_fwd_jax(q, k, v, bias, mask, scale):
        return reference.attention_jax(q, k, v, bias, mask, scale)

    @staticmethod
    def triangle_attention_bwd_jax(q, k, v, bias, mask, scale, out, lse, dout):
        def f(q, k, v, bias):
            return reference.attention_jax(q, k, v, bias, mask, scale)[0].astype(jnp.float32)

        _, vjp = jax.vjp(f, q, k, v, bias)
        return vjp(dout.astype(jnp.float32))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _attention(q, k, v, bias, mask, scale, backend):
    return _attention_impl(backend).triangle_attention_fwd_jax(q, k, v, bias, mask, scale)[0]


def _attention_fwd(q, k, v, bias, mask, scale, backend):
    out, lse = _attention_impl(backend).triangle_attention_fwd_jax(q, k, v, bias, mask, scale)
    return out, (q, k, v, bias, mask, out, lse)


def _attention_bwd(scale, backend, residuals, dout):
    q, k, v, bias, mask, out, lse = residuals
    dq, dk, dv, dbias = _attention_impl(backend).triangle_attention_bwd_jax(q, k, v, bias, mask, scale, out, lse, dout)
    dmask = None if mask is None else jnp.zeros(mask.shape, jax.dtypes.float0)
    return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dbias.astype(bias.dtype), dmask)


_attention.defvjp(_attention_fwd, _attention_bwd)


def triangle_attention(q, k, v, bias, mask, scale, backend):
    return _attention(q, k, v, bias, mask, float(scale), backend)


def _trimul_check(backend: str):
    if backend != "reference":
        from kernels import backends

        impl = backends.implementation("triangle_multiplicative_update", backend)
        if not hasattr(impl, "trimul_fwd_jax"):
            raise BackendUnavailable(f"triangle_multiplicative_update on backend={backend!r} has no JAX entry point")
        return impl
    return None


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 4, 5))
def _trimul(x, direction, mask, weights, eps, backend):
    impl = _trimul_check(backend)
    if impl is not None:
        return impl.trimul_fwd_jax(x, direction, mask, weights, eps)
    return reference.trimul_jax(x, direction, mask, *weights, eps=eps)


def _trimul_fwd(x, direction, mask, weights, eps, backend):
    return _trimul(x, direction, mask, weights, eps, backend), (x, mask, weights)


def _trimul_bwd(direction, eps, backend, residuals, dout):
    x, mask, weights = residuals
    impl = _trimul_check(backend)
    if impl is not None:
        dx, dweights = impl.trimul_bwd_jax(x, direction, mask, weights, eps, dout)
    else:
        def f(x, weights):
            return reference.trimul_jax(x, direction, mask, *weights, eps=eps).astype(jnp.float32)

        _, vjp = jax.vjp(f, x, weights)
        dx, dweights = vjp(dout.astype(jnp.float32))
    dmask = None if mask is None else jnp.zeros_like(mask) if jnp.issubdtype(mask.dtype, jnp.floating) else \
        jnp.zeros(mask.shape, jax.dtypes.float0)
    return (dx.astype(x.dtype), dmask, tuple(d.astype(w.dtype) for d, w in zip(dweights, weights)))


_trimul.defvjp(_trimul_fwd, _trimul_bwd)


def triangle_multiplicative_update(x, direction, mask, weights, eps, backend):
    return _trimul(x, direction, mask, tuple(weights), float(eps), backend)
