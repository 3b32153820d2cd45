"""The JAX front ends: ``jax.custom_vjp`` functions for both triangle ops.

The forward saves only what the backward needs (triangle attention: out and lse;
the triangle multiplicative update: its inputs) and the backward recomputes. The
reference computes in ``jnp`` (float32, HIGHEST precision). The Triton backends
(``nvidia``, ``amd``) run the same kernel sources on JAX arrays: on a GPU through
jax-triton (:mod:`kernels.triton.triangle_attention_jax`,
:mod:`kernels.triton.triangle_multiplication_jax`, with the multiplicative update's
weight-gradient GEMMs and reductions in ``jnp``, at the backend's own table entry); on the CPU through a host callback
into the interpreted kernels (see ``kernels.jax_bridge``). Trainium's kernels are reached
the same way on the CPU, running on the NKI emulator.
"""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp

from kernels.errors import BackendUnavailable
from kernels.triangle import reference


TRITON_BACKENDS = ("nvidia", "amd")
# Backends whose kernels take torch tensors: reached from JAX arrays on the CPU through a host
# callback (Triton interpreted; Trainium on its NKI emulator), and on a GPU through jax-triton.
TORCH_BACKENDS = (*TRITON_BACKENDS, "trainium")


def _on_host(fn, result_shapes, *arrays, backend: str):
    """``fn(*torch tensors) -> tuple of tensors`` applied to JAX arrays by a host callback (CPU only)."""
    import numpy as np

    from kernels.jax_bridge import to_numpy, to_torch

    if jax.default_backend() != "cpu":
        raise BackendUnavailable(
            f"backend={backend!r} on JAX arrays on a {jax.default_backend()} device has no kernel here")

    def host(*xs):
        outs = fn(*[None if x is None else to_torch(np.asarray(x)) for x in xs])
        return tuple(to_numpy(o) for o in outs)

    return jax.pure_callback(host, result_shapes, *arrays)


def _struct(x, dtype=None):
    return jax.ShapeDtypeStruct(x.shape, dtype or x.dtype)


class _TorchBackendJax:
    """A backend with torch entry points, on JAX arrays: jax-triton launchers on a GPU (the
    Triton backends), the torch entry points through the host on the CPU."""

    def __init__(self, backend: str, config: str | None = None):
        from kernels import backends, jax_bridge

        self.backend = backend
        self.config = json.loads(config) if config else None
        self.attention = backends.implementation("triangle_attention", backend)
        self.trimul = backends.implementation("triangle_multiplicative_update", backend)
        self.gpu = jax_bridge.on_gpu() and backend in TRITON_BACKENDS

    def _gpu_config(self, vendor, *shape_key, dtype) -> dict:
        """``config`` merged over the entry for JAX's GPU of the table of ``vendor`` (the
        backend's module for the op, whose ``resolve_config`` checks it against the space)."""
        from kernels import jax_bridge

        return vendor.resolve_config(jax_bridge.device_name(), *shape_key, jnp.dtype(dtype).name, self.config)

    def triangle_attention_fwd_jax(self, q, k, v, bias, mask, scale):
        if self.gpu:
            from kernels.triton import triangle_attention_jax

            cfgs = self._gpu_config(self.attention, q.shape[-1], dtype=q.dtype)
            return triangle_attention_jax.triangle_attention_fwd(q, k, v, bias, mask, scale, cfgs)
        shapes = (_struct(q), jax.ShapeDtypeStruct(q.shape[:-1], jnp.float32))
        return _on_host(lambda *t: self.attention.triangle_attention_fwd(*t, scale, config=self.config), shapes,
                        q, k, v, bias, mask, backend=self.backend)

    def triangle_attention_bwd_jax(self, q, k, v, bias, mask, scale, out, lse, dout):
        if self.gpu:
            from kernels.triton import triangle_attention_jax

            cfgs = self._gpu_config(self.attention, q.shape[-1], dtype=q.dtype)
            return triangle_attention_jax.triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, cfgs)

        def run(q, k, v, bias, mask, out, lse, dout):
            return self.attention.triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout,
                                                         config=self.config)

        shapes = (_struct(q), _struct(k), _struct(v), _struct(bias, jnp.float32))
        return _on_host(run, shapes, q, k, v, bias, mask, out, lse, dout.astype(q.dtype), backend=self.backend)

    def trimul_fwd_jax(self, x, direction, mask, weights, eps):
        if self.gpu:
            from kernels.triton import triangle_multiplication_jax

            cfgs = self._gpu_config(self.trimul, dtype=x.dtype)
            return triangle_multiplication_jax.trimul_fwd(x, direction, mask, weights, eps, cfgs)

        def run(x, mask, *w):
            return (self.trimul.trimul_fwd(x, direction, mask, w, eps, config=self.config)[0],)

        return _on_host(run, (_struct(x),), x, mask, *weights, backend=self.backend)[0]

    def trimul_bwd_jax(self, x, direction, mask, weights, eps, dout):
        if self.gpu:
            from kernels.triton import triangle_multiplication_jax

            cfgs = self._gpu_config(self.trimul, dtype=x.dtype)
            return triangle_multiplication_jax.trimul_bwd(x, direction, mask, weights, eps, dout, cfgs)

        def run(x, mask, dout, *w):
            _, saved = self.trimul.trimul_fwd(x, direction, mask, w, eps, config=self.config)
            return self.trimul.trimul_bwd(x, direction, mask, w, eps, saved, dout, config=self.config)

        grads = _on_host(run, (_struct(x), *(_struct(w) for w in weights)), x, mask, dout.astype(x.dtype), *weights,
                         backend=self.backend)
        return grads[0], tuple(grads[1:])


def _attention_impl(backend: str, config: str | None = None):
    if backend == "reference":
        return _ReferenceJax
    if backend in TORCH_BACKENDS:
        return _TorchBackendJax(backend, config)
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
        wide = jnp.promote_types(q.dtype, jnp.float32)

        def f(q, k, v, bias):
            return reference.attention_jax(q, k, v, bias, mask, scale)[0].astype(wide)

        _, vjp = jax.vjp(f, q, k, v, bias)
        return vjp(dout.astype(wide))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _attention(q, k, v, bias, mask, scale, backend, config):
    return _attention_impl(backend, config).triangle_attention_fwd_jax(q, k, v, bias, mask, scale)[0]


def _attention_fwd(q, k, v, bias, mask, scale, backend, config):
    out, lse = _attention_impl(backend, config).triangle_attention_fwd_jax(q, k, v, bias, mask, scale)
    return out, (q, k, v, bias, mask, out, lse)


def _attention_bwd(scale, backend, config, residuals, dout):
    q, k, v, bias, mask, out, lse = residuals
    dq, dk, dv, dbias = _attention_impl(backend, config).triangle_attention_bwd_jax(q, k, v, bias, mask, scale, out,
                                                                                   lse, dout)
    dmask = None if mask is None else jnp.zeros(mask.shape, jax.dtypes.float0)
    return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dbias.astype(bias.dtype), dmask)


_attention.defvjp(_attention_fwd, _attention_bwd)


def _frozen(config: dict | None) -> str | None:
    """The config as a hashable (static) argument of the custom VJP."""
    return json.dumps(config, sort_keys=True) if config else None


def triangle_attention(q, k, v, bias, mask, scale, backend, config=None):
    return _attention(q, k, v, bias, mask, float(scale), backend, _frozen(config))


def _trimul_check(backend: str, config: str | None = None):
    if backend == "reference":
        return None
    if backend in TORCH_BACKENDS:
        return _TorchBackendJax(backend, config)
    if backend == "tpu":
        from kernels import backends

        return backends.implementation("triangle_multiplicative_update", "tpu")
    raise BackendUnavailable(f"triangle_multiplicative_update on backend={backend!r} has no JAX entry point")


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 4, 5, 6))
def _trimul(x, direction, mask, weights, eps, backend, config):
    impl = _trimul_check(backend, config)
    if impl is not None:
        return impl.trimul_fwd_jax(x, direction, mask, weights, eps)
    return reference.trimul_jax(x, direction, mask, *weights, eps=eps)


def _trimul_fwd(x, direction, mask, weights, eps, backend, config):
    return _trimul(x, direction, mask, weights, eps, backend, config), (x, mask, weights)


def _trimul_bwd(direction, eps, backend, config, residuals, dout):
    x, mask, weights = residuals
    impl = _trimul_check(backend, config)
    if impl is not None:
        dx, dweights = impl.trimul_bwd_jax(x, direction, mask, weights, eps, dout)
    else:
        wide = jnp.promote_types(x.dtype, jnp.float32)

        def f(x, weights):
            return reference.trimul_jax(x, direction, mask, *weights, eps=eps).astype(wide)

        _, vjp = jax.vjp(f, x, weights)
        dx, dweights = vjp(dout.astype(wide))
    dmask = None if mask is None else jnp.zeros_like(mask) if jnp.issubdtype(mask.dtype, jnp.floating) else \
        jnp.zeros(mask.shape, jax.dtypes.float0)
    return (dx.astype(x.dtype), dmask, tuple(d.astype(w.dtype) for d, w in zip(dweights, weights)))


_trimul.defvjp(_trimul_fwd, _trimul_bwd)


def triangle_multiplicative_update(x, direction, mask, weights, eps, backend, config=None):
    return _trimul(x, direction, mask, tuple(weights), float(eps), backend, _frozen(config))
