"""Triangle attention's oracle and reference implementation: ``N`` independent attentions per batch
element, one per row of the pair tensor, sharing one learnable bias, in plain PyTorch/JAX math in
float32 (float64 for float64 inputs), written out in ``docs/triangle.md``. A row whose keys are all
masked gives exactly zero output and gradients (never NaN) and log-sum-exp +inf. As an
implementation its backward is autograd through :func:`forward` (``jax.vjp`` through
:func:`forward_jax`).
"""

from __future__ import annotations

import math


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


# ----------------------------------------------------------------------------- the implementation's entry points


def forward(problem, config, q, k, v, bias, mask):
    """(out, lse), differentiable: the op's backward is autograd through it."""
    import torch

    return attention(q, k, v, bias, mask, problem.scale,
                     compute_dtype=torch.float64 if problem.dtype == "float64" else torch.float32)


def forward_jax(problem, config, q, k, v, bias, mask):
    return attention_jax(q, k, v, bias, mask, problem.scale)


def backward_jax(problem, config, saved, grads, needs):
    """(dq, dk, dv, dbias) by ``jax.vjp`` through :func:`attention_jax`, in float32 at least."""
    import jax
    import jax.numpy as jnp

    s = saved
    wide = jnp.promote_types(s["q"].dtype, jnp.float32)

    def out(q, k, v, bias):
        return attention_jax(q, k, v, bias, s["mask"], problem.scale)[0].astype(wide)

    _, vjp = jax.vjp(out, s["q"], s["k"], s["v"], s["bias"])
    return vjp(grads["out"].astype(wide))
