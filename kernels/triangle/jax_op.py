"""The JAX front ends: ``jax.custom_vjp`` functions for both triangle ops.

The forward saves only what the backward needs (triangle attention: out and lse;
the triangle multiplicative update: its inputs) and the backward recomputes. The
reference computes in ``jnp`` (float32, HIGHEST precision). The Triton backends
(``nvidia``, ``amd``) take JAX arrays on the CPU through a host callback into the
same kernels, interpreted (see ``kernels.jax_bridge``); on a GPU, JAX would need
jax-triton, which these kernels are not wired to yet, and the call is refused.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels.errors import BackendUnavailable
from kernels.triangle import reference


TRITON_BACKENDS = ("nvidia", "amd")


def _on_host(fn, result_shapes, *arrays, backend: str):
    """``fn(*torch tensors) -> tuple of tensors`` applied to JAX arrays by a host callback (CPU only)."""
    import numpy as np

    from kernels.jax_bridge import to_numpy, to_torch

    if jax.default_backend() != "cpu":
        raise BackendUnavailable(
            f"backend={backend!r} on JAX arrays runs through the CPU interpreter only; on a "
            f"{jax.default_backend()} device JAX needs jax-triton, which the triangle kernels are not wired to yet")

    def host(*xs):
        outs = fn(*[None if x is None else to_torch(np.asarray(x)) for x in xs])
        return tuple(to_numpy(o) for o in outs)

    return jax.pure_callback(host, result_shapes, *arrays)


def _struct(x, dtype=None):
    return jax.ShapeDtypeStruct(x.shape, dtype or x.dtype)


class _TritonJax:
    """The Triton backends' torch entry points, called on JAX arrays through the host."""

    def __init__(self, backend: str):
        from kernels import backends

        self.backend = backend
        self.attention = backends.implementation("triangle_attention", backend)
        self.trimul = backends.implementation("triangle_multiplicative_update", backend)

    def triangle_attention_fwd_jax(self, q, k, v, bias, mask, scale):
        shapes = (_struct(q), jax.ShapeDtypeStruct(q.shape[:-1], jnp.float32))
        return _on_host(lambda *t: self.attention.triangle_attention_fwd(*t, scale), shapes, q, k, v, bias, mask,
                        backend=self.backend)

    def triangle_attention_bwd_jax(self, q, k, v, bias, mask, scale, out, lse, dout):
        def run(q, k, v, bias, mask, out, lse, dout):
            return self.attention.triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout)

        shapes = (_struct(q), _struct(k), _struct(v), _struct(bias, jnp.float32))
        return _on_host(run, shapes, q, k, v, bias, mask, out, lse, dout.astype(q.dtype), backend=self.backend)

    def trimul_fwd_jax(self, x, direction, mask, weights, eps):
        def run(x, mask, *w):
            return (self.trimul.trimul_fwd(x, direction, mask, w, eps)[0],)

        return _on_host(run, (_struct(x),), x, mask, *weights, backend=self.backend)[0]

    def trimul_bwd_jax(self, x, direction, mask, weights, eps, dout):
        def run(x, mask, dout, *w):
            _, saved = self.trimul.trimul_fwd(x, direction, mask, w, eps)
            return self.trimul.trimul_bwd(x, direction, mask, w, eps, saved, dout)

        grads = _on_host(run, (_struct(x), *(_struct(w) for w in weights)), x, mask, dout.astype(x.dtype), *weights,
                         backend=self.backend)
        return grads[0], tuple(grads[1:])


def _attention_impl(backend: str):
    if backend == "reference":
        return _ReferenceJax
    if backend in TRITON_BACKENDS:
        return _TritonJax(backend)
    if backend == "tpu":  # Pallas: JAX arrays natively
        from kernels import backends

        return backends.implementation("triangle_attention", "tpu")
    raise BackendUnavailable(f"triangle_attention on backend={backend!r} has no JAX entry point")


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
    if backend == "reference":
        return None
    if backend in TRITON_BACKENDS:
        return _TritonJax(backend)
    if backend == "tpu":
        from kernels import backends

        return backends.implementation("triangle_multiplicative_update", "tpu")
    raise BackendUnavailable(f"triangle_multiplicative_update on backend={backend!r} has no JAX entry point")


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
