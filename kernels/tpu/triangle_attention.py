"""Triangle attention on TPU (v5e, v5p, v6e): the Pallas flash attention of
:mod:`kernels.tpu.attention` in the triangle's layout.

Triangle attention is, per batch element b, an attention whose batch is the N
rows i of the pair tensor, whose bias (1, H, N, N) is shared by all rows, and
whose mask (N, 1, 1, N) is a key mask per row. The flash attention takes exactly
those broadcast patterns: its forward adds the bias block by block, and its
backward sums the bias gradient over the broadcast row axis in a float32 VMEM
accumulator of one bias block (a grid with the rows as its last, "arbitrary"
axis), so dbias never exists in HBM at more than the bias's own size. This module
only moves axes: q, k, v (B, N, H, N, D) become per-b (rows, keys, heads, D), and
the results move back.

The log-sum-exp of a row with no valid key is +inf here (the triangle ops'
convention; the flash attention writes -inf) and is mapped at the boundary. The
head dim must be in [32, 256] (the flash attention's spec; AlphaFold 3 uses 32).
"""

from __future__ import annotations

import jax.numpy as jnp

from kernels.tpu import attention as flash


def _rows_major(t, b):
    """(B, N, H, N, D)[b] -> (rows, keys, heads, D), the flash attention's layout."""
    return jnp.swapaxes(t[b], 1, 2)


def triangle_attention_fwd_jax(q, k, v, bias, mask, scale, config=None):
    """(out (B, N, H, N, D), lse (B, N, H, N) float32) on JAX arrays."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        o, lse = flash.attention_fwd_jax(
            _rows_major(q, b), _rows_major(k, b), _rows_major(v, b), bias[b],
            None if mask is None else mask[b], False, scale, config)
        outs.append(jnp.swapaxes(o, 1, 2))
        lses.append(lse)
    lse = jnp.stack(lses)
    return jnp.stack(outs), jnp.where(jnp.isneginf(lse), jnp.inf, lse)


def triangle_attention_bwd_jax(q, k, v, bias, mask, scale, out, lse, dout, config=None):
    """(dq, dk, dv, dbias (B, 1, H, N, N) float32) on JAX arrays."""
    grads = []
    for b in range(q.shape[0]):
        lse_b = jnp.where(jnp.isposinf(lse[b]), -jnp.inf, lse[b])
        dq, dk, dv, dbias = flash.attention_bwd_jax(
            _rows_major(dout.astype(q.dtype), b), _rows_major(q, b), _rows_major(k, b), _rows_major(v, b),
            _rows_major(out, b), lse_b, bias[b], None if mask is None else mask[b], False, scale, True, config)
        grads.append((jnp.swapaxes(dq, 1, 2), jnp.swapaxes(dk, 1, 2), jnp.swapaxes(dv, 1, 2),
                      dbias.astype(jnp.float32)))
    return tuple(jnp.stack(g) for g in zip(*grads))


def triangle_attention_fwd(q, k, v, bias, mask, scale, config=None):
    """The same on torch tensors (copied to JAX and back to q's device)."""
    out, lse = triangle_attention_fwd_jax(*(flash._torch_to_jax(t) for t in (q, k, v, bias, mask)), scale, config)
    return flash._jax_to_torch(out, q.device), flash._jax_to_torch(lse, q.device)


def triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, config=None):
    args = (flash._torch_to_jax(t) for t in (q, k, v, bias, mask))
    *qkvbm, = args
    grads = triangle_attention_bwd_jax(*qkvbm, scale, *(flash._torch_to_jax(t) for t in (out, lse, dout)), config)
    dq, dk, dv, dbias = (flash._jax_to_torch(g, q.device) for g in grads)
    return dq, dk, dv, dbias.to(bias.dtype)


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
