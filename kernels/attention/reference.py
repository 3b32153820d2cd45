"""The attention oracle, plain framework math in float32 (float64 for float64 input or on request),
and the op's ``reference`` implementation: ``attention_fwd`` gives (out, lse) and ``attention_bwd``
(dq, dk, dv, dbias) from the closed-form softmax backward, in PyTorch and JAX. It materializes the
(batch, heads, q_len, k_len) scores, so it is for checking and small problems."""

from __future__ import annotations


def _visible(q_len: int, k_len: int, causal: bool, mask, xp, device=None):
    """Boolean (.., q_len, k_len): which keys each query may see (None when all)."""
    keep = None
    if causal:
        if xp.__name__ == "torch":
            i = xp.arange(q_len, device=device)[:, None]
            j = xp.arange(k_len, device=device)[None, :]
        else:
            i = xp.arange(q_len)[:, None]
            j = xp.arange(k_len)[None, :]
        keep = j <= i + (k_len - q_len)
    if mask is not None:
        keep = mask if keep is None else (keep & mask)
    return keep


def _group(heads: int, kv_heads: int) -> int:
    """Query heads per key/value head (1 for a problem with no heads)."""
    return heads // kv_heads if kv_heads else 1


def row_max(s):
    """The max over the last dimension, keeping it; NaN where a NaN is in the row, -inf for a
    row of no keys (an empty dimension, where ``amax`` has nothing to reduce)."""
    import torch

    if s.shape[-1] == 0:
        return torch.full((*s.shape[:-1], 1), float("-inf"), dtype=s.dtype, device=s.device)
    return s.amax(dim=-1, keepdim=True)


# ----------------------------------------------------------------------------------------------
# PyTorch
# ----------------------------------------------------------------------------------------------


def _compute_dtype(q, compute_dtype):
    import torch

    if compute_dtype is not None:
        return compute_dtype
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _probs(q, k, bias, mask, causal, scale, ct):
    """(p, lse, kf) in compute dtype, p (B, H, Sq, Sk), lse (B, H, Sq), kf (B, H, Sk, D)."""
    import torch

    heads, kv_heads = q.shape[2], k.shape[2]
    qf = q.to(ct).transpose(1, 2)
    kf = k.to(ct).transpose(1, 2).repeat_interleave(_group(heads, kv_heads), dim=1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias.to(ct)
    keep = _visible(q.shape[1], k.shape[1], causal, mask, torch, q.device)
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    # The row's max propagates NaN, and a +inf score (an Inf in q or k) gives inf - inf = NaN:
    # such a row's probabilities and log-sum-exp are NaN, as the softmax's float math makes
    # them (logsumexp would say +inf and leave the other keys' probabilities finite). A row that
    # sees no key has lse -inf and gets p = 0.
    m = row_max(s)
    m = torch.where(m == float("-inf"), 0.0, m)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    lse = torch.where(total[..., 0] == 0, float("-inf"), torch.log(torch.where(total == 0, 1.0, total))[..., 0] + m[..., 0])
    p = e / torch.where(total == 0, 1.0, total)
    return p, lse, qf, kf


def attention_fwd(q, k, v, bias, mask, causal, scale, config=None, compute_dtype=None):
    """(out like q, lse (batch, heads, q_len) float32); rows that see nothing give 0 and -inf."""
    import torch

    ct = _compute_dtype(q, compute_dtype)
    heads, kv_heads = q.shape[2], k.shape[2]
    p, lse, _, _ = _probs(q, k, bias, mask, causal, scale, ct)
    vf = v.to(ct).transpose(1, 2).repeat_interleave(_group(heads, kv_heads), dim=1)
    out = torch.matmul(p, vf).transpose(1, 2)
    return out.to(q.dtype), lse.to(torch.float32 if ct != torch.float64 else ct)


def _sum_to(x, shape):
    """Sum ``x`` over the dimensions broadcast to reach it from ``shape``."""
    lead = x.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1]
    return x.sum(dim=dims, keepdim=True).reshape(shape) if dims else x.reshape(shape)


def attention_bwd(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, config=None, compute_dtype=None):
    """(dq, dk, dv, dbias or None) from dO; dK/dV summed over each GQA group, dbias over broadcast dims."""
    import torch

    ct = _compute_dtype(q, compute_dtype)
    batch, q_len, heads, head_dim = q.shape
    k_len, kv_heads = k.shape[1], k.shape[2]
    group = _group(heads, kv_heads)
    p, _, qf, kf = _probs(q, k, bias, mask, causal, scale, ct)
    vf = v.to(ct).transpose(1, 2).repeat_interleave(group, dim=1)
    dof = do.to(ct).transpose(1, 2)
    dv = torch.matmul(p.transpose(-1, -2), dof)
    dp = torch.matmul(dof, vf.transpose(-1, -2))
    delta = (p * dp).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    dq = torch.matmul(ds, kf) * scale
    dk = torch.matmul(ds.transpose(-1, -2), qf) * scale

    def per_kv_head(x):  # (B, H, Sk, D) -> (B, Sk, Hk, D), summed over each group
        return x.reshape(batch, kv_heads, group, k_len, head_dim).sum(2).transpose(1, 2)

    dbias = _sum_to(ds, tuple(bias.shape)).to(bias.dtype) if (bias is not None and bias_grad) else None
    return (
        dq.transpose(1, 2).to(q.dtype),
        per_kv_head(dk).to(k.dtype),
        per_kv_head(dv).to(v.dtype),
        dbias,
    )


# ----------------------------------------------------------------------------------------------
# JAX
# ----------------------------------------------------------------------------------------------


def _probs_jax(q, k, bias, mask, causal, scale, ct):
    import jax
    import jax.numpy as jnp

    heads, kv_heads = q.shape[2], k.shape[2]
    qf = jnp.swapaxes(q.astype(ct), 1, 2)
    kf = jnp.repeat(jnp.swapaxes(k.astype(ct), 1, 2), _group(heads, kv_heads), axis=1)
    s = jnp.matmul(qf, jnp.swapaxes(kf, -1, -2), precision=jax.lax.Precision.HIGHEST) * scale
    if bias is not None:
        s = s + bias.astype(ct)
    keep = _visible(q.shape[1], k.shape[1], causal, mask, jnp)
    if keep is not None:
        s = jnp.where(keep, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True, initial=-jnp.inf)  # -inf for no key at all
    m = jnp.where(m == -jnp.inf, 0.0, m)  # a row that sees nothing; +inf (an Inf input) stays and gives NaN
    e = jnp.exp(s - m)
    total = e.sum(-1, keepdims=True)
    lse = jnp.where(total[..., 0] == 0, -jnp.inf, jnp.log(jnp.where(total == 0, 1.0, total))[..., 0] + m[..., 0])
    p = e / jnp.where(total == 0, 1.0, total)
    return p, lse, qf, kf


def _ct_jax(q):
    import jax.numpy as jnp

    return jnp.float64 if q.dtype == jnp.float64 else jnp.float32


def attention_fwd_jax(q, k, v, bias, mask, causal, scale):
    import jax
    import jax.numpy as jnp

    ct = _ct_jax(q)
    heads, kv_heads = q.shape[2], k.shape[2]
    p, lse, _, _ = _probs_jax(q, k, bias, mask, causal, scale, ct)
    vf = jnp.repeat(jnp.swapaxes(v.astype(ct), 1, 2), _group(heads, kv_heads), axis=1)
    out = jnp.swapaxes(jnp.matmul(p, vf, precision=jax.lax.Precision.HIGHEST), 1, 2)
    return out.astype(q.dtype), lse.astype(jnp.float32 if ct != jnp.float64 else ct)


def attention_bwd_jax(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad):
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST
    ct = _ct_jax(q)
    batch, q_len, heads, head_dim = q.shape
    k_len, kv_heads = k.shape[1], k.shape[2]
    group = _group(heads, kv_heads)
    p, _, qf, kf = _probs_jax(q, k, bias, mask, causal, scale, ct)
    vf = jnp.repeat(jnp.swapaxes(v.astype(ct), 1, 2), group, axis=1)
    dof = jnp.swapaxes(do.astype(ct), 1, 2)
    dv = jnp.matmul(jnp.swapaxes(p, -1, -2), dof, precision=hi)
    dp = jnp.matmul(dof, jnp.swapaxes(vf, -1, -2), precision=hi)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = jnp.matmul(ds, kf, precision=hi) * scale
    dk = jnp.matmul(jnp.swapaxes(ds, -1, -2), qf, precision=hi) * scale

    def per_kv_head(x):
        return jnp.swapaxes(x.reshape(batch, kv_heads, group, k_len, head_dim).sum(2), 1, 2)

    dbias = None
    if bias is not None and bias_grad:
        lead = ds.ndim - bias.ndim
        dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(bias.shape) if s == 1 and ds.shape[lead + i] != 1)
        dbias = ds.sum(axis=dims, keepdims=True).reshape(bias.shape).astype(bias.dtype)
    return (jnp.swapaxes(dq, 1, 2).astype(q.dtype), per_kv_head(dk).astype(k.dtype), per_kv_head(dv).astype(v.dtype), dbias)


# ----------------------------------------------------------------------------------------------
# The reference implementation's entry points (ceiling.op.Implementation)
# ----------------------------------------------------------------------------------------------


def forward(problem, config, q, k, v, bias, mask):
    out, lse = attention_fwd(q, k, v, bias, mask, problem.causal, problem.scale)
    return out, lse.float()


def backward(problem, config, saved, grads, needs):
    s = saved
    return attention_bwd(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"], s["mask"],
                         problem.causal, problem.scale, needs["bias"])


def forward_jax(problem, config, q, k, v, bias, mask):
    return attention_fwd_jax(q, k, v, bias, mask, problem.causal, problem.scale)


def backward_jax(problem, config, saved, grads, needs):
    s = saved
    return attention_bwd_jax(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"], s["mask"],
                             problem.causal, problem.scale, needs["bias"])
