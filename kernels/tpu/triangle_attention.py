"""Triangle attention on TPU (v5e, v5p, v6e): the Pallas flash attention of :mod:`ceiling.tpu.attention`
in the triangle's layout, one attention per batch element whose batch is the pair tensor's rows, its
config resolved once and its axes moved at the boundary, where a key the mask removes has its k and
v rows and gradients zeroed (``docs/triangle.md``). Head dims 32 to 256 (AlphaFold 3 uses 32).
"""

from __future__ import annotations

import jax.numpy as jnp

from ceiling.tpu import attention as flash
from ceiling.triangle.spec import rows_attention


def resolve(problem, impl, user):
    """The flash attention's blocks for the per-element problem (its table for the attached
    generation, fitted to N; or ``config=`` checked by its rules), resolved once per call."""
    from ceiling.spaces.config import Config

    config = flash.resolve(rows_attention(problem), impl, user)
    return Config(config.as_dict(), "triangle_attention", config.target, config.source)


def _rows_major(t, b):
    """(B, N, H, N, D)[b] -> (rows, keys, heads, D), the flash attention's layout."""
    return jnp.swapaxes(t[b], 1, 2)


def _key_rows(mask, b: int):
    """Row b's valid keys as (rows, keys, 1, 1), to select k, v and their gradients by."""
    return mask[b, :, 0, 0, :, None, None]


def _kept(t, mask, b: int):
    """``t``'s rows-major slice b with the keys the mask removes set to 0."""
    t = _rows_major(t, b)
    return t if mask is None else jnp.where(_key_rows(mask, b), t, jnp.zeros((), t.dtype))


def forward_jax(problem, config, q, k, v, bias, mask):
    """(out (B, N, H, N, D), lse (B, N, H, N) float32) on JAX arrays."""
    rows = rows_attention(problem)
    outs, lses = [], []
    for b in range(problem.batch):
        o, lse = flash.forward_jax(rows, config, _rows_major(q, b), _kept(k, mask, b), _kept(v, mask, b), bias[b],
                                   None if mask is None else mask[b])
        outs.append(jnp.swapaxes(o, 1, 2))
        lses.append(lse)
    return jnp.stack(outs), jnp.stack(lses)


def backward_jax(problem, config, saved, grads, needs):
    """(dq, dk, dv, dbias (B, 1, H, N, N) in bias's dtype) on JAX arrays."""
    s, rows = saved, rows_attention(problem)
    dout = grads["out"].astype(s["q"].dtype)
    out = []
    for b in range(problem.batch):
        mask = s["mask"]
        per_row = {"q": _rows_major(s["q"], b), "k": _kept(s["k"], mask, b), "v": _kept(s["v"], mask, b),
                   "out": _rows_major(s["out"], b), "lse": s["lse"][b], "bias": s["bias"][b],
                   "mask": None if mask is None else mask[b]}
        dq, dk, dv, dbias = flash.backward_jax(rows, config, per_row, {"out": _rows_major(dout, b)}, {"bias": True})
        if mask is not None:  # a removed key's gradients are 0 (0 times a NaN query is not)
            dk, dv = (jnp.where(_key_rows(mask, b), g, jnp.zeros((), g.dtype)) for g in (dk, dv))
        out.append((jnp.swapaxes(dq, 1, 2), jnp.swapaxes(dk, 1, 2), jnp.swapaxes(dv, 1, 2), dbias))
    return tuple(jnp.stack(g) for g in zip(*out))


def forward(problem, config, q, k, v, bias, mask):
    """:func:`forward_jax` on torch tensors (copied to JAX and back to q's device)."""
    out, lse = forward_jax(problem, config, *(flash._torch_to_jax(t) for t in (q, k, v, bias, mask)))
    return flash._jax_to_torch(out, q.device), flash._jax_to_torch(lse, q.device)


def backward(problem, config, saved, grads, needs):
    j = flash._torch_to_jax
    grads = backward_jax(problem, config, {n: j(t) for n, t in saved.items()}, {"out": j(grads["out"])}, needs)
    dq, dk, dv, dbias = (flash._jax_to_torch(g, saved["q"].device) for g in grads)
    return dq, dk, dv, dbias.to(saved["bias"].dtype)


def export_triangle_attention(target: str = "tpu-v5e", dtype: str = "bfloat16", n: int = 384, heads: int = 4,
                              head_dim: int = 32) -> dict:
    """Export the forward and backward for TPU on AlphaFold 3's triangle shape (one batch element):
    rows n as the flash attention's batch, a (1, heads, n, n) float32 bias shared by the rows, a
    (n, 1, 1, n) key mask. Reports blocks, grids, VMEM and whether the Mosaic lowering passed."""
    config = flash.select_config(target, jnp.dtype(dtype), head_dim, n, n, bias_dtype=jnp.float32, has_mask=True)
    return flash.export_attention(target, jnp.dtype(dtype), config, batch=n, heads=heads, kv_heads=heads, q_len=n,
                                  k_len=n, head_dim=head_dim, causal=False, bias_shape=(1, heads, n, n), with_mask=True)


def inspect_tpu_triangle_attention(target: str, dtype: str = "bfloat16", config: dict | None = None) -> list[dict]:
    """``ceiling inspect triangle_attention --target tpu-v5e``: the export at AlphaFold 3's shapes (N = 384, 768)."""
    rows = []
    for n in (384, 768):
        r = export_triangle_attention(target, dtype, n=n)
        rows.append({"name": f"triangle_attention_tpu_n{n}", **r})
    return rows
