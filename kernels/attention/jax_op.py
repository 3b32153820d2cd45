"""The JAX front end of attention: a ``jax.custom_vjp`` whose forward and backward run on the
chosen backend.

The reference backend computes with ``jnp`` (so it jits, differentiates and vmaps like any
JAX code). The Triton backends (``nvidia``, ``amd``) run the same kernel sources on JAX
arrays: on a GPU through jax-triton (:mod:`kernels.triton.attention_jax`: pointer loads,
since jax-triton cannot build TMA descriptors), on the CPU through ``jax.pure_callback``
into the interpreted kernels; both stay usable under ``jax.jit`` and ``jax.grad``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.attention import reference


def _to_torch(x):
    import torch

    if x is None:
        return None
    a = np.asarray(x)
    if a.dtype == jnp.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _to_numpy(t, dtype):
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).view(jnp.bfloat16)
    return t.numpy().astype(dtype)


def _thaw(config):
    """The hashable config tuple back into the nested dict the kernels take."""
    if not config:
        return None
    return {s: dict(c) if isinstance(c, tuple) else c for s, c in config}


def _triton_module(backend: str):
    """The backend's torch entry points, reached from JAX arrays on the CPU by a host callback."""
    from kernels import backends
    from kernels.errors import BackendUnavailable

    if jax.default_backend() != "cpu":
        raise BackendUnavailable(
            f"attention on backend={backend!r} from JAX arrays on {jax.default_backend()} has no kernel here; "
            "use backend='reference'"
        )
    return backends.implementation("attention", backend)


def _on_gpu(backend: str):
    """(the jax-triton launchers, the backend's module that picks their config) when a Triton
    backend runs on JAX's GPU, else None."""
    from kernels import jax_bridge

    if backend not in ("nvidia", "amd") or not jax_bridge.on_gpu():
        return None
    from kernels import backends
    from kernels.triton import attention_jax

    vendor = backends.implementation("attention", backend)  # raises when the backend cannot run here
    return attention_jax, vendor


def _native_module(backend: str):
    """The backend's own JAX kernels (Pallas on TPU), when it has them."""
    from kernels import backends

    impl = backends.implementation("attention", backend)
    return impl if hasattr(impl, "attention_fwd_jax") else None


def _fwd_impl(q, k, v, bias, mask, causal, scale, backend, config):
    if backend == "reference":
        return reference.attention_fwd_jax(q, k, v, bias, mask, causal, scale)
    native = _native_module(backend)
    if native is not None:
        return native.attention_fwd_jax(q, k, v, bias, mask, causal, scale, config=_thaw(config))
    gpu = _on_gpu(backend)
    if gpu is not None:
        launchers, vendor = gpu
        cfg = vendor.jax_config(q.shape[-1], _thaw(config), biased=bias is not None or mask is not None)
        return launchers.attention_fwd(q, k, v, bias, mask, causal, scale, cfg, vendor=backend)
    impl = _triton_module(backend)
    cfg = _thaw(config)
    shapes = (
        jax.ShapeDtypeStruct(q.shape, q.dtype),
        jax.ShapeDtypeStruct((q.shape[0], q.shape[2], q.shape[1]), jnp.float32),
    )

    def host(q, k, v, bias, mask):
        out, lse = impl.attention_fwd(_to_torch(q), _to_torch(k), _to_torch(v), _to_torch(bias), _to_torch(mask),
                                      causal, scale, config=cfg)
        return _to_numpy(out, q.dtype), _to_numpy(lse, np.float32)

    return jax.pure_callback(host, shapes, q, k, v, bias, mask)


def _bwd_impl(do, q, k, v, out, lse, bias, mask, causal, scale, bias_grad, backend, config):
    if backend == "reference":
        return reference.attention_bwd_jax(do, q, k, v, out, lse, bias, mask, causal, scale, bias_grad)
    native = _native_module(backend)
    if native is not None:
        return native.attention_bwd_jax(do, q, k, v, out, lse, bias, mask, causal, scale, bias_grad, config=_thaw(config))
    gpu = _on_gpu(backend)
    if gpu is not None:
        launchers, vendor = gpu
        cfg = vendor.jax_config(q.shape[-1], _thaw(config), biased=bias is not None or mask is not None)
        return launchers.attention_bwd(do, q, k, v, out, lse, bias, mask, causal, scale, bias_grad, cfg,
                                       vendor=backend)
    impl = _triton_module(backend)
    cfg = _thaw(config)
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)]
    if bias is not None and bias_grad:
        shapes.append(jax.ShapeDtypeStruct(bias.shape, bias.dtype))

    def host(do, q, k, v, out, lse, bias, mask):
        grads = impl.attention_bwd(*(_to_torch(x) for x in (do, q, k, v, out, lse, bias, mask)), causal, scale,
                                   bias_grad, config=cfg)
        return tuple(_to_numpy(g, s.dtype) for g, s in zip(grads, shapes))

    res = jax.pure_callback(host, tuple(shapes), do, q, k, v, out, lse, bias, mask)
    return (*res[:3], res[3] if len(res) == 4 else None)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8))
def _attention(q, k, v, bias, mask, causal, scale, backend, config):
    return _fwd_impl(q, k, v, bias, mask, causal, scale, backend, config)


def _attention_fwd(q, k, v, bias, mask, causal, scale, backend, config):
    out, lse = _fwd_impl(q, k, v, bias, mask, causal, scale, backend, config)
    return (out, lse), (q, k, v, out, lse, bias, mask)


def _attention_bwd(causal, scale, backend, config, residuals, grads):
    q, k, v, out, lse, bias, mask = residuals
    grad_out, _ = grads  # the log-sum-exp is not differentiated
    dq, dk, dv, dbias = _bwd_impl(grad_out, q, k, v, out, lse, bias, mask, causal, scale, bias is not None, backend, config)
    dmask = None if mask is None else np.zeros(mask.shape, dtype=jax.dtypes.float0)
    return dq, dk, dv, dbias, dmask


_attention.defvjp(_attention_fwd, _attention_bwd)


def attention(q, k, v, bias, mask, causal, scale, backend, config):
    """(out, lse) through the custom VJP."""
    frozen = tuple(sorted((s, tuple(sorted(c.items())) if isinstance(c, dict) else c) for s, c in config.items())) if config else None
    return _attention(q, k, v, bias, mask, causal, scale, backend, frozen)
