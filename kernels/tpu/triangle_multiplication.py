"""The triangle multiplicative update on TPU (v5e, v5p, v6e).

The per-pair work (LayerNorm, the gated projections, the mask, the output
LayerNorm and gate) is XLA, which fuses each LayerNorm with the projection that
reads it and keeps the gates in the matmul epilogues; the triangular contraction,
the op's N^3 part, is the Pallas TPU GEMM of :mod:`kernels.tpu.gemm`, batched
over (batch, channel) on channel-first operands, with float32 accumulation. Its
gradient is two more such GEMMs (``custom_vjp`` below); everything else is
differentiated by JAX. The backward recomputes the forward (nothing but the
input is kept between them).

Entry points: ``trimul_fwd_jax`` / ``trimul_bwd_jax`` on JAX arrays (what the
``jax.custom_vjp`` front end calls), ``trimul_fwd`` / ``trimul_bwd`` on torch
tensors (the torch custom op's backend interface).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from kernels.tpu import gemm as tpu_gemm


def _bmm(a, b):
    """(Z, M, K) @ (Z, K, N) on the MXU through the Pallas GEMM, float32 result."""
    return tpu_gemm.gemm_jax(a, b, out_dtype=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def contract(a, b, direction):
    """Channel-first a, b (Z, N, N) -> y (Z, N, N) float32: outgoing a b^T, incoming a^T b."""
    if direction == "outgoing":
        return _bmm(a, jnp.swapaxes(b, 1, 2))
    return _bmm(jnp.swapaxes(a, 1, 2), b)


def _contract_fwd(a, b, direction):
    return contract(a, b, direction), (a, b)


def _contract_bwd(direction, residuals, dy):
    a, b = residuals
    dy = dy.astype(a.dtype)
    if direction == "outgoing":  # y = a b^T: da = dy b, db = dy^T a
        da, db = _bmm(dy, b), _bmm(jnp.swapaxes(dy, 1, 2), a)
    else:  # y = a^T b: da = b dy^T, db = a dy
        da, db = _bmm(b, jnp.swapaxes(dy, 1, 2)), _bmm(a, dy)
    return da.astype(a.dtype), db.astype(b.dtype)


contract.defvjp(_contract_fwd, _contract_bwd)


def _layer_norm(t, w, b, eps):
    mu = t.mean(-1, keepdims=True)
    var = jnp.square(t - mu).mean(-1, keepdims=True)
    return (t - mu) * jax.lax.rsqrt(var + eps) * w.astype(jnp.float32) + b.astype(jnp.float32)


def trimul(x, direction, mask, weights, eps):
    """The forward, differentiable by JAX; weights in ``kernels.triangle.TRIMUL_WEIGHTS`` order."""
    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    dt = x.dtype
    B, N, _, _ = x.shape
    C = wp.shape[0] // 2
    hi = jax.lax.Precision.HIGHEST if dt == jnp.float32 else None

    def linear(t, w, b):
        y = jnp.einsum("...c,oc->...o", t.astype(dt), w.astype(dt), precision=hi, preferred_element_type=jnp.float32)
        return y + b.astype(jnp.float32)

    xn = _layer_norm(x.astype(jnp.float32), lnw, lnb, eps)
    ab = jax.nn.sigmoid(linear(xn, wg, bg)) * linear(xn, wp, bp)
    if mask is not None:
        ab = ab * mask.astype(jnp.float32)[..., None]
    ab = jnp.transpose(ab.astype(dt), (0, 3, 1, 2))  # (B, 2c, N, N), channel-first
    a = ab[:, :C].reshape(B * C, N, N)
    b = ab[:, C:].reshape(B * C, N, N)
    y = contract(a, b, direction).reshape(B, C, N, N).transpose(0, 2, 3, 1)
    yn = _layer_norm(y, lnw_o, lnb_o, eps)
    out = jax.nn.sigmoid(linear(xn, wgo, bgo)) * linear(yn, wpo, bpo)
    return out.astype(dt)


# Both run under jit: in TPU interpret mode the Pallas calls talk to the host through
# callbacks that run JAX ops themselves, which deadlocks when the caller dispatches op by op.
@functools.partial(jax.jit, static_argnames=("direction", "eps"))
def _trimul_fwd(x, mask, weights, direction, eps):
    return trimul(x, direction, mask, weights, eps)


@functools.partial(jax.jit, static_argnames=("direction", "eps"))
def _trimul_bwd(x, mask, weights, dout, direction, eps):
    _, vjp = jax.vjp(lambda x, w: trimul(x, direction, mask, w, eps), x, weights)
    dx, dw = vjp(dout.astype(x.dtype))
    return dx, tuple(dw)


def trimul_fwd_jax(x, direction, mask, weights, eps):
    return _trimul_fwd(x, mask, tuple(weights), direction=direction, eps=float(eps))


def trimul_bwd_jax(x, direction, mask, weights, eps, dout):
    return _trimul_bwd(x, mask, tuple(weights), dout, direction=direction, eps=float(eps))


def _to_jax(t):
    return None if t is None else tpu_gemm._torch_to_jax(t)


def trimul_fwd(x, direction, mask, weights, eps, config=None):
    """On torch tensors (copied to JAX and back): (out, residuals), no residuals kept."""
    j = _to_jax
    out = trimul_fwd_jax(j(x), direction, j(mask), [j(w) for w in weights], eps)
    return tpu_gemm._jax_to_torch(out, x.device), ()


def trimul_bwd(x, direction, mask, weights, eps, saved, dout, config=None):
    j = _to_jax
    dx, dw = trimul_bwd_jax(j(x), direction, j(mask), [j(w) for w in weights], eps, j(dout))
    back = tpu_gemm._jax_to_torch
    return (back(dx, x.device), *(back(g, x.device).to(w.dtype) for g, w in zip(dw, weights)))
