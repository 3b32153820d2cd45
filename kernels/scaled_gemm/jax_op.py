"""The JAX front end of the scaled GEMM: ``scaled_gemm`` on FP8 arrays, and ``fp8_gemm`` as a
``jax.custom_vjp`` whose forward and backward GEMMs go through the chosen backend.

Quantization on JAX arrays is the jnp oracle (``kernels.fp8.reference.quantize_jax``: the same
rules and codes as the Triton quantizers, and XLA fuses it on any device). A backend module
provides ``scaled_gemm_jax(a, b, a_scale, b_scale, bias, activation, out_dtype, config)``;
the reference computes with ``jnp`` in float32. The backward mirrors the PyTorch one
(:mod:`kernels.scaled_gemm.torch_op`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels import backends
from kernels.fp8.reference import dequantize_jax, quantize_jax
from kernels.scaled_gemm import reference
from kernels.scaled_gemm.spec import RECIPES


def _impl(backend: str, config=None):
    if backend == "reference":
        return reference.scaled_gemm_jax
    if jax.default_backend() != "cpu":
        from kernels.errors import BackendUnavailable

        raise BackendUnavailable(
            f"scaled_gemm on JAX arrays on a {jax.default_backend()} device with backend={backend!r}: the FP8 "
            "kernels have no jax-triton launcher (they read their operands through TMA descriptors or, on "
            "CDNA3, FNUZ conversions PyTorch does); use backend='reference', which XLA runs on the device")
    impl = backends.implementation("scaled_gemm", backend)
    return functools.partial(impl.scaled_gemm_jax, config=dict(config) if config else None)


def scaled_gemm(a, b, a_scale, b_scale, bias, activation, out_dtype, backend, config):
    return _impl(backend, config)(a, b, a_scale, b_scale, bias, activation, jnp.dtype(out_dtype))


def _formats(backend: str):
    if backend == "amd":
        return jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz
    return jnp.float8_e4m3fn, jnp.float8_e5m2


def _recipe(recipe: str):
    return RECIPES[recipe]


def _b_scale(bt_scale, kind):
    return bt_scale if kind == "tensor" else bt_scale.T


def _quantized(a, b, recipe, backend):
    ka, kb = _recipe(recipe)
    e4, _ = _formats(backend)
    aq, a_s = quantize_jax(a, ka, e4)
    bq, b_s = quantize_jax(b, kb, e4, transpose=True)  # the (N, K) weight b.T
    return aq, a_s, bq, b_s


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7, 8))
def _fp8_gemm(a, b, bias, activation, out_dtype, recipe, grad_precision, backend, config):
    aq, a_s, bq, b_s = _quantized(a, b, recipe, backend)
    kb = _recipe(recipe)[1]
    return _impl(backend, config)(aq, bq.T, a_s, _b_scale(b_s, kb), bias, activation, out_dtype)


def _fwd(a, b, bias, activation, out_dtype, recipe, grad_precision, backend, config):
    aq, a_s, bq, b_s = _quantized(a, b, recipe, backend)
    kb = _recipe(recipe)[1]
    out = _impl(backend, config)(aq, bq.T, a_s, _b_scale(b_s, kb), bias, activation, out_dtype)
    # empty arrays carry the primal dtypes (residuals must be arrays); the cotangents take them
    return out, (aq, a_s, bq, b_s, bias, jnp.zeros((0,), a.dtype), jnp.zeros((0,), b.dtype))


def _activation_grad(z, activation):
    from kernels.gemm.jax_op import _activation_grad as grad

    return grad(z, activation)


def _bwd(activation, out_dtype, recipe, grad_precision, backend, config, residuals, grad):
    aq, a_s, bq, b_s, bias, a_like, b_like = residuals
    a_dtype, b_dtype = a_like.dtype, b_like.dtype
    ka, kb = _recipe(recipe)
    run = _impl(backend)
    dz = grad.astype(jnp.float32)
    if activation is not None:
        z = run(aq, bq.T, a_s, _b_scale(b_s, kb), bias, None, jnp.float32)
        dz = dz * _activation_grad(z, activation)
    if grad_precision == "bf16":
        from kernels.gemm.jax_op import _forward_impl

        gemm = _forward_impl(backend, None)
        lo = dz.astype(jnp.bfloat16)
        da = gemm(lo, dequantize_jax(bq, b_s, kb).astype(jnp.bfloat16), None, None, a_dtype)
        db = gemm(dequantize_jax(aq, a_s, ka).astype(jnp.bfloat16).T, lo, None, None, b_dtype)
    else:
        e4, e5 = _formats(backend)
        one = jnp.ones((), jnp.float32)
        g, w, w_s = (dz * b_s.reshape(1, -1), bq, one) if kb == "row" else (dz, bq, b_s)
        gq, g_s = quantize_jax(g, ka, e5)
        da = run(gq, w, g_s, w_s, None, None, a_dtype)
        if ka == "row":
            g, x, x_s = dz * a_s.reshape(-1, 1), aq.T, one
        elif ka == "tensor":
            g, x, x_s = dz, aq.T, a_s
        else:
            g = dz
            x, x_s = quantize_jax(dequantize_jax(aq, a_s, ka), "1x128", e4, transpose=True)
        gq, g_s = quantize_jax(g, ka, e5, transpose=True)
        db = run(x, gq.T, x_s, _b_scale(g_s, ka), None, None, b_dtype)
    dbias = None if bias is None else dz.sum(axis=0).astype(bias.dtype)
    return da, db, dbias


_fp8_gemm.defvjp(_fwd, _bwd)


def fp8_gemm(a, b, bias, activation, out_dtype, recipe, grad_precision, backend, config):
    frozen = tuple(sorted(config.items())) if config else None
    return _fp8_gemm(a, b, bias, activation, jnp.dtype(out_dtype), recipe, grad_precision, backend, frozen)
