"""The oracles for the two triangle ops: plain PyTorch/JAX math in float32 or float64.

Triangle attention (``attention``): ``N`` independent attentions per batch element,
one per row ``i`` of the pair tensor, that share one learnable bias::

    s[b,i,h,j,k] = scale * q[b,i,h,j,:] . k[b,i,h,k,:] + bias[b,0,h,j,k]   (k valid in row i)
    p = softmax_k(s);  out[b,i,h,j,:] = sum_k p[b,i,h,j,k] v[b,i,h,k,:]

A key ``k`` is valid in row ``i`` when ``mask[b,i,0,0,k]`` is True. A row whose keys
are all masked has no distribution to average over: its output and every gradient
that flows through it are exactly zero (never NaN), and its log-sum-exp is +inf.

Triangle multiplicative update (``trimul``), AlphaFold 3 Algorithms 12/13::

    xn = LayerNorm_in(x)                             over c_z
    ab = sigmoid(xn @ g_in.T + g_in_b) * (xn @ p_in.T + p_in_b) * mask[..., None]
    a, b = ab[..., :c], ab[..., c:]
    outgoing: y[b,i,j,:] = sum_k a[b,i,k,:] * b[b,j,k,:]
    incoming: y[b,i,j,:] = sum_k a[b,k,i,:] * b[b,k,j,:]
    out = sigmoid(xn @ g_out.T + g_out_b) * (LayerNorm_out(y) @ p_out.T + p_out_b)

Both are written so that autograd through them gives the gradients the kernels
must match.
"""

from __future__ import annotations

import math

LOG2E = 1.4426950408889634


# ----------------------------------------------------------------------------- attention (torch)


def attention(q, k, v, bias, mask=None, scale=None, compute_dtype=None):
    """(out, lse) for q, k, v (B,N,H,N,D), bias (B,1,H,N,N), mask (B,N,1,1,N) bool.

    ``lse`` (B,N,H,N) is the natural-log log-sum-exp of each query's logits in
    float32, +inf for fully masked rows. ``out`` has q's dtype.
    """
    import torch

    compute = compute_dtype or torch.float32
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("bihjd,bihkd->bihjk", q.to(compute), k.to(compute)) * scale + bias.to(compute)
    if mask is not None:
        s = s.masked_fill(~mask.bool(), float("-inf"))
    # The max is a constant shift of each row: detach it so that autograd sees
    # softmax's own gradient, and pin fully masked rows (max -inf) at 0 so that
    # exp() gives zeros there instead of NaN.
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    denom = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.einsum("bihjk,bihkd->bihjd", p, v.to(compute))
    lse = torch.where(denom[..., 0] > 0, m[..., 0] + torch.log(denom[..., 0]), torch.full_like(m[..., 0], float("inf")))
    return out.to(q.dtype), lse


def attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, compute_dtype=None):
    """(dq, dk, dv, dbias) by autograd through :func:`attention`, in ``compute_dtype``."""
    import torch

    compute = compute_dtype or torch.float32
    with torch.enable_grad():
        leaves = [t.detach().to(compute).requires_grad_() for t in (q, k, v, bias)]
        o, _ = attention(*leaves, mask=mask, scale=scale, compute_dtype=compute)
        grads = torch.autograd.grad(o, leaves, dout.to(compute))
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v, bias)))


# ----------------------------------------------------------------------------- trimul (torch)


def layer_norm(x, weight, bias, eps):
    import torch

    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def trimul(x, direction, mask, norm_in_weight, norm_in_bias, p_in_weight, p_in_bias, g_in_weight, g_in_bias,
           norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, g_out_weight, g_out_bias, eps=1e-5,
           compute_dtype=None):
    """The triangle multiplicative update on x (B,N,N,c_z); every weight in ``compute_dtype``."""
    import torch
    import torch.nn.functional as F

    compute = compute_dtype or torch.float32

    def cast(t):
        return None if t is None else t.to(compute)

    xc = x.to(compute)
    xn = layer_norm(xc, cast(norm_in_weight), cast(norm_in_bias), eps)
    ab = torch.sigmoid(F.linear(xn, cast(g_in_weight), cast(g_in_bias))) * F.linear(xn, cast(p_in_weight), cast(p_in_bias))
    if mask is not None:
        ab = ab * mask.to(compute)[..., None]
    c = ab.shape[-1] // 2
    a, b = ab[..., :c], ab[..., c:]
    if direction == "outgoing":
        y = torch.einsum("bikc,bjkc->bijc", a, b)
    else:
        y = torch.einsum("bkic,bkjc->bijc", a, b)
    yn = layer_norm(y, cast(norm_out_weight), cast(norm_out_bias), eps)
    out = torch.sigmoid(F.linear(xn, cast(g_out_weight), cast(g_out_bias))) * F.linear(yn, cast(p_out_weight), cast(p_out_bias))
    return out.to(x.dtype)


TRIMUL_WEIGHTS = (
    "norm_in_weight", "norm_in_bias", "p_in_weight", "p_in_bias", "g_in_weight", "g_in_bias",
    "norm_out_weight", "norm_out_bias", "p_out_weight", "p_out_bias", "g_out_weight", "g_out_bias",
)


def trimul_bwd(x, direction, mask, weights, eps, dout, compute_dtype=None):
    """(dx, *dweights) by autograd through :func:`trimul`; weights in TRIMUL_WEIGHTS order."""
    import torch

    compute = compute_dtype or torch.float32
    with torch.enable_grad():
        leaves = [t.detach().to(compute).requires_grad_() for t in (x, *weights)]
        out = trimul(leaves[0], direction, mask, *leaves[1:], eps=eps, compute_dtype=compute)
        grads = torch.autograd.grad(out, leaves, dout.to(compute))
    return tuple(g.to(t.dtype) for g, t in zip(grads, (x, *weights)))


# ----------------------------------------------------------------------------- JAX


def attention_jax(q, k, v, bias, mask=None, scale=None):
    """(out, lse) on JAX arrays in float32 (float64 for float64 inputs); same semantics as :func:`attention`."""
    import jax
    import jax.numpy as jnp

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    hi = jax.lax.Precision.HIGHEST
    f32 = jnp.promote_types(q.dtype, jnp.float32)
    s = jnp.einsum("bihjd,bihkd->bihjk", q.astype(f32), k.astype(f32), precision=hi) * scale + bias.astype(f32)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    m = jax.lax.stop_gradient(s.max(axis=-1, keepdims=True))
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    e = jnp.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    p = e / jnp.where(denom > 0, denom, 1.0)
    out = jnp.einsum("bihjk,bihkd->bihjd", p, v.astype(f32), precision=hi)
    lse = jnp.where(denom[..., 0] > 0, m[..., 0] + jnp.log(jnp.where(denom[..., 0] > 0, denom[..., 0], 1.0)), jnp.inf)
    return out.astype(q.dtype), lse


def trimul_jax(x, direction, mask, norm_in_weight, norm_in_bias, p_in_weight, p_in_bias, g_in_weight, g_in_bias,
               norm_out_weight, norm_out_bias, p_out_weight, p_out_bias, g_out_weight, g_out_bias, eps=1e-5):
    """:func:`trimul` on JAX arrays in float32 (float64 for float64 inputs)."""
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    f32 = jnp.promote_types(x.dtype, jnp.float32)

    def ln(t, w, b):
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        t = (t - mu) * jax.lax.rsqrt(var + eps)
        return t * w.astype(f32) + b.astype(f32)

    def linear(t, w, b):
        y = jnp.einsum("...c,oc->...o", t, w.astype(f32), precision=hi)
        return y if b is None else y + b.astype(f32)

    xn = ln(x.astype(f32), norm_in_weight, norm_in_bias)
    ab = jax.nn.sigmoid(linear(xn, g_in_weight, g_in_bias)) * linear(xn, p_in_weight, p_in_bias)
    if mask is not None:
        ab = ab * mask.astype(f32)[..., None]
    c = ab.shape[-1] // 2
    a, b = ab[..., :c], ab[..., c:]
    eq = "bikc,bjkc->bijc" if direction == "outgoing" else "bkic,bkjc->bijc"
    y = jnp.einsum(eq, a, b, precision=hi)
    out = jax.nn.sigmoid(linear(xn, g_out_weight, g_out_bias)) * linear(ln(y, norm_out_weight, norm_out_bias), p_out_weight, p_out_bias)
    return out.astype(x.dtype)

