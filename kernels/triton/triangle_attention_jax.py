"""Triangle attention on JAX arrays on a GPU: the kernels of
:mod:`ceiling.triton.triangle_attention` through jax-triton, each behind a ``@triton.jit``
wrapper in jax-triton's argument order (inputs, outputs, constexprs) that makes the head dim ``D``
a constexpr and marks ``N`` a multiple of 16 when it is one (jax-triton does not specialize
integers on divisibility as Triton's own launcher does); the launchers (:func:`forward`,
:func:`backward`) take the problem and its resolved config (AMD's extra compiler options are not
options jax-triton passes on).
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ceiling import jax_bridge
from ceiling.constants import LOG2E
from ceiling.triton.triangle_attention import (
    bwd_dbias_kernel,
    bwd_dkdv_kernel,
    bwd_dq_kernel,
    bwd_preprocess_kernel,
    KEY_PAD,
    fwd_kernel,
    head_dim_block,
)

LAUNCH_OPTIONS = ("num_warps", "num_stages")


@triton.jit
def multiple_of_16(x, IS_MULTIPLE: tl.constexpr):
    """``x``, known to the compiler as a multiple of 16 when the launcher says it is one.
    (``x // 16 * 16`` is ``x`` then; the multiply by 16 is what the divisibility analysis sees.)"""
    if IS_MULTIPLE:
        x = x // 16 * 16
    return x


@triton.jit
def fwd_kernel_jax(Q, K, V, Bias, KeyBias, N, H, kb_row_stride, qk_scale, O, LSE,
                   D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr):
    fwd_kernel(Q, K, V, Bias, KeyBias, O, LSE, multiple_of_16(N, N_16), H, D, multiple_of_16(kb_row_stride, True),
               qk_scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM, False, ROWS)


@triton.jit
def bwd_preprocess_kernel_jax(O, DO, N, Delta, D: tl.constexpr, N_16: tl.constexpr,
                              BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_preprocess_kernel(O, DO, Delta, multiple_of_16(N, N_16), D, BLOCK_M, HEAD_DIM)


@triton.jit
def bwd_dkdv_kernel_jax(Q, K, V, Bias, KeyBias, DO, LSE, Delta, N, H, kb_row_stride, qk_scale, scale, DK, DV,
                        D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dkdv_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DK, DV, multiple_of_16(N, N_16), H, D,
                    multiple_of_16(kb_row_stride, True), qk_scale, scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def bwd_dq_kernel_jax(Q, K, V, Bias, KeyBias, DO, LSE, Delta, N, H, kb_row_stride, qk_scale, scale, DQ,
                      D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dq_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DQ, multiple_of_16(N, N_16), H, D,
                  multiple_of_16(kb_row_stride, True), qk_scale, scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


@triton.jit
def bwd_dbias_kernel_jax(Q, K, V, Bias, KeyBias, DO, LSE, Delta, N, H, kb_row_stride, qk_scale, DBias,
                         D: tl.constexpr, N_16: tl.constexpr, PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    bwd_dbias_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DBias, multiple_of_16(N, N_16), H, D,
                     multiple_of_16(kb_row_stride, True), qk_scale, PRECISION, BLOCK_M, BLOCK_N, HEAD_DIM)


# ----------------------------------------------------------------------------- launchers


def _options(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k in LAUNCH_OPTIONS}


def _key_bias(mask, B: int, N: int):
    """(key bias, row stride) as :func:`ceiling.triton.triangle_attention.key_bias` builds them: 0 at
    a key that may be attended to, -inf at a masked key and in the padding to ``KEY_PAD`` keys."""
    import jax.numpy as jnp

    n_pad = triton.cdiv(N, KEY_PAD) * KEY_PAD
    pad = jnp.arange(n_pad) >= N
    if mask is None:
        return jnp.where(pad, -jnp.inf, 0.0).astype(jnp.float32)[None, :], 0
    keep = jnp.pad(mask.reshape(B * N, N).astype(bool), ((0, 0), (0, n_pad - N)))
    return jnp.where(keep, 0.0, -jnp.inf).astype(jnp.float32), n_pad


def _meta(q, D: int, N: int, config) -> dict:
    import jax.numpy as jnp

    from ceiling.amd import cdna4

    return dict(D=D, N_16=N % 16 == 0, HEAD_DIM=head_dim_block(D),
                PRECISION=cdna4.input_precision(q.dtype == jnp.float32, getattr(config, "target", None)))


def forward(problem, config, q, k, v, bias, mask):
    """(out like q, lse (B, N, H, N) float32) for q, k, v (B, N, H, N, D)."""
    import jax
    import jax.numpy as jnp

    B, N, H, D, scale = problem.batch, problem.n, problem.heads, problem.head_dim, problem.scale
    cfg = config["fwd"]
    rows = cfg.get("ROWS", 1)
    kb, kb_stride = _key_bias(mask, B, N)
    return jax_bridge.triton_call(
        q, k, v, bias, kb, N, H, kb_stride, np.float32(scale * LOG2E), kernel=fwd_kernel_jax,
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, N, H, N), jnp.float32)),
        grid=(triton.cdiv(N, cfg["BLOCK_M"]), B * triton.cdiv(N, rows) * H),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], ROWS=rows, **_meta(q, D, N, config), **_options(cfg))


def backward(problem, config, saved, grads, needs):
    """(dq, dk, dv, dbias); dbias reduced over the rows in float32, then cast to bias's dtype."""
    import jax
    import jax.numpy as jnp

    q, k, v, bias, mask, out, lse = (saved[n] for n in ("q", "k", "v", "bias", "mask", "out", "lse"))
    B, N, H, D, scale = problem.batch, problem.n, problem.heads, problem.head_dim, problem.scale
    dout = grads["out"].astype(q.dtype)
    meta = _meta(q, D, N, config)
    kb, kb_stride = _key_bias(mask, B, N)
    scales = (np.float32(scale * LOG2E), np.float32(scale))

    pre = config["bwd_dq"]
    delta = jax_bridge.triton_call(
        out, dout, N, kernel=bwd_preprocess_kernel_jax, out_shape=jax.ShapeDtypeStruct((B, N, H, N), jnp.float32),
        grid=(triton.cdiv(N, pre["BLOCK_M"]), B * N * H),
        D=D, N_16=meta["N_16"], BLOCK_M=pre["BLOCK_M"], HEAD_DIM=meta["HEAD_DIM"])
    operands = (q, k, v, bias, kb, dout, lse, delta, N, H, kb_stride)
    c = config["bwd_dkdv"]
    dk, dv = jax_bridge.triton_call(
        *operands, *scales, kernel=bwd_dkdv_kernel_jax,
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        grid=(triton.cdiv(N, c["BLOCK_N"]), B * N * H),
        BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], **meta, **_options(c))
    c = config["bwd_dq"]
    dq = jax_bridge.triton_call(
        *operands, *scales, kernel=bwd_dq_kernel_jax, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(triton.cdiv(N, c["BLOCK_M"]), B * N * H),
        BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], **meta, **_options(c))
    c = config["bwd_dbias"]
    dbias = jax_bridge.triton_call(
        *operands, scales[0], kernel=bwd_dbias_kernel_jax, out_shape=jax.ShapeDtypeStruct((B, 1, H, N, N), jnp.float32),
        grid=(triton.cdiv(N, c["BLOCK_M"]), triton.cdiv(N, c["BLOCK_N"]), B * H),
        BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], **meta, **_options(c))
    return dq, dk, dv, dbias.astype(bias.dtype)
