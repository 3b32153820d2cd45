"""Triangle attention's oracle and reference implementation: ``N`` independent attentions per batch
element, one per row of the pair tensor, sharing one learnable bias, in plain PyTorch/JAX math in
float32 (float64 for float64 inputs), written out in ``docs/triangle.md``. The mask selects (a NaN
behind a masked key reaches nothing); a row whose keys are all masked gives exactly zero output and
gradients (never NaN) and log-sum-exp -inf. As an
implementation its backward is autograd through :func:`forward` (``jax.vjp`` through
:func:`forward_jax`).
"""

from __future__ import annotations

import math


def attention(q, k, v, bias, mask=None, scale=None, compute_dtype=None):
    """(out, lse) for q, k, v (B,N,H,N,D), bias (B,1,H,N,N), mask (B,N,1,1,N) bool.

    ``lse`` (B,N,H,N) is the natural-log log-sum-exp of each query's logits in
    float32, -inf for fully masked rows. ``out`` has q's dtype.
    """
    import torch

    from ceiling.attention.reference import row_max

    compute = compute_dtype or torch.float32
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qc, kc, vc, bc = (t.to(compute) for t in (q, k, v, bias))
    if mask is not None:
        mask = mask.bool()
        key_rows = mask[:, :, 0, 0, :, None, None].transpose(2, 3)  # (B, N, 1, N, 1): key k of row i
        kc, vc = torch.where(key_rows, kc, 0.0), torch.where(key_rows, vc, 0.0)
    s = torch.einsum("bihjd,bihkd->bihjk", qc, kc) * scale + bc
    any_key = None
    if mask is not None:
        s = torch.where(mask, s, float("-inf"))
        any_key = mask.any(-1, keepdim=True)  # (B, N, 1, 1, 1)
    # The max is a constant shift of each row: detach it so that autograd sees softmax's own
    # gradient. It propagates NaN (and +Inf gives inf - inf = NaN), so such a row's
    # probabilities are NaN as float math makes them; a row with no valid key is pinned at 0.
    m = row_max(s).detach()
    if any_key is not None:
        m = torch.where(any_key, m, 0.0)
    e = torch.exp(s - m)
    denom = e.sum(dim=-1, keepdim=True)
    p = e / denom if any_key is None else torch.where(any_key, e / torch.where(any_key, denom, 1.0), 0.0)
    out = torch.einsum("bihjk,bihkd->bihjd", p, vc)
    lse = m[..., 0] + torch.log(denom[..., 0])
    if any_key is not None:
        lse = torch.where(any_key[..., 0], lse, float("-inf"))
    return out.to(q.dtype), lse


def attention_jax(q, k, v, bias, mask=None, scale=None):
    """(out, lse) on JAX arrays in float32 (float64 for float64 inputs); same semantics as :func:`attention`."""
    import jax
    import jax.numpy as jnp

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    hi = jax.lax.Precision.HIGHEST
    f32 = jnp.promote_types(q.dtype, jnp.float32)
    qc, kc, vc, bc = (t.astype(f32) for t in (q, k, v, bias))
    any_key = None
    if mask is not None:
        key_rows = jnp.swapaxes(mask[:, :, 0, 0, :, None, None], 2, 3)
        kc, vc = jnp.where(key_rows, kc, 0.0), jnp.where(key_rows, vc, 0.0)
    s = jnp.einsum("bihjd,bihkd->bihjk", qc, kc, precision=hi) * scale + bc
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
        any_key = mask.any(axis=-1, keepdims=True)
    m = jax.lax.stop_gradient(s.max(axis=-1, keepdims=True, initial=-jnp.inf))
    if any_key is not None:
        m = jnp.where(any_key, m, 0.0)
    e = jnp.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    p = e / denom if any_key is None else jnp.where(any_key, e / jnp.where(any_key, denom, 1.0), 0.0)
    out = jnp.einsum("bihjk,bihkd->bihjd", p, vc, precision=hi)
    lse = m[..., 0] + jnp.log(denom[..., 0])
    if any_key is not None:
        lse = jnp.where(any_key[..., 0], lse, -jnp.inf)
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
