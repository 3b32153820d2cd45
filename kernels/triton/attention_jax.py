"""Flash attention on JAX arrays on a GPU: thin ``@triton.jit`` wrappers of the kernels of
:mod:`ceiling.triton.attention` in jax-triton's argument order (inputs, then outputs; pointer
loads, strides from the head count and head dim), and their launchers at a resolved config, which
the nvidia and amd implementations' ``forward_jax``/``backward_jax`` call. Why they are built so:
``docs/attention.md``."""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ceiling import jax_bridge
from ceiling.triton.attention import (
    _attn_bwd_dkdv,
    _attn_bwd_dq,
    _attn_bwd_preprocess,
    _attn_fwd,
    _dbias_mode,
    head_dim_pad,
)
from ceiling.triton import attention as flash

PREPROCESS_BLOCK_M = 64  # as the torch launcher
LAUNCH_OPTIONS = ("num_warps", "num_stages")  # the compiler options jax-triton takes


# ----------------------------------------------------------------------------------------------
# The kernels in jax-triton's argument order
# ----------------------------------------------------------------------------------------------


@triton.jit
def attn_fwd_kernel_jax(
    Q, K, V, Bias, Mask,
    stride_bb, stride_bh, stride_bm, stride_bn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    n_heads, kv_heads, seqlen_q, seqlen_k, sm_scale,
    O, LSE,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, PRE_LOAD_V: tl.constexpr,
):
    """``_attn_fwd`` on contiguous (batch, seq, heads, HEAD_DIM) arrays, pointer loads."""
    q_row = n_heads * HEAD_DIM
    kv_row = kv_heads * HEAD_DIM
    _attn_fwd(
        Q, K, V, Bias, Mask, O, LSE, Q, K, V,
        seqlen_q * q_row, q_row, HEAD_DIM,
        seqlen_k * kv_row, kv_row, HEAD_DIM,
        seqlen_k * kv_row, kv_row, HEAD_DIM,
        seqlen_q * q_row, q_row, HEAD_DIM,
        stride_bb, stride_bh, stride_bm, stride_bn,
        stride_mb, stride_mh, stride_mm, stride_mn,
        n_heads, n_heads // kv_heads, seqlen_q, seqlen_k, sm_scale,
        HEAD_DIM, HEAD_DIM_PAD, BLOCK_M, BLOCK_N, CAUSAL, HAS_BIAS, HAS_MASK, False, PRE_LOAD_V,
    )


@triton.jit
def attn_bwd_preprocess_kernel_jax(
    O, DO, n_heads, seqlen_q,
    Delta,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """``_attn_bwd_preprocess`` (delta = rowsum(dO * O)) on contiguous arrays."""
    row = n_heads * HEAD_DIM
    _attn_bwd_preprocess(O, DO, Delta, seqlen_q * row, row, HEAD_DIM, seqlen_q * row, row, HEAD_DIM,
                         n_heads, seqlen_q, HEAD_DIM, HEAD_DIM_PAD, BLOCK_M)


@triton.jit
def attn_bwd_dkdv_kernel_jax(
    Q, K, V, DO, LSE, Delta, Bias, Mask,
    stride_bb, stride_bh, stride_bm, stride_bn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    n_heads, kv_heads, seqlen_q, seqlen_k, sm_scale,
    DK, DV,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
):
    """``_attn_bwd_dkdv``; DK and DV are (batch, k_len, heads, HEAD_DIM): one slice per query
    head, summed over each GQA group by the caller (with no GQA, heads == kv_heads)."""
    q_row = n_heads * HEAD_DIM
    kv_row = kv_heads * HEAD_DIM
    _attn_bwd_dkdv(
        Q, K, V, DO, LSE, Delta, Bias, Mask, DK, DV, Q, K, V, DO,
        seqlen_q * q_row, q_row, HEAD_DIM,
        seqlen_k * kv_row, kv_row, HEAD_DIM,
        seqlen_k * kv_row, kv_row, HEAD_DIM,
        seqlen_q * q_row, q_row, HEAD_DIM,
        seqlen_k * q_row, q_row, HEAD_DIM,
        seqlen_k * q_row, q_row, HEAD_DIM,
        stride_bb, stride_bh, stride_bm, stride_bn,
        stride_mb, stride_mh, stride_mm, stride_mn,
        n_heads, n_heads // kv_heads, seqlen_q, seqlen_k, sm_scale,
        HEAD_DIM, HEAD_DIM_PAD, BLOCK_M, BLOCK_N, CAUSAL, HAS_BIAS, HAS_MASK, False,
    )


@triton.jit
def attn_bwd_dq_kernel_jax(
    Q, K, V, DO, LSE, Delta, Bias, Mask,
    stride_bb, stride_bh, stride_bm, stride_bn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    n_heads, kv_heads, seqlen_q, seqlen_k, sm_scale,
    DQ, DBias,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, DBIAS: tl.constexpr,
):
    """``_attn_bwd_dq``, and dBias in mode ``DBIAS`` (see ``_dbias_mode``). DBias has the
    bias's (contiguous) shape, so it shares the bias's broadcast strides."""
    q_row = n_heads * HEAD_DIM
    kv_row = kv_heads * HEAD_DIM
    _attn_bwd_dq(
        Q, K, V, DO, LSE, Delta, Bias, Mask, DQ, DBias, Q, K, V, DO,
        seqlen_q * q_row, q_row, HEAD_DIM,
        seqlen_k * kv_row, kv_row, HEAD_DIM,
        seqlen_k * kv_row, kv_row, HEAD_DIM,
        seqlen_q * q_row, q_row, HEAD_DIM,
        seqlen_q * q_row, q_row, HEAD_DIM,
        stride_bb, stride_bh, stride_bm, stride_bn,
        stride_mb, stride_mh, stride_mm, stride_mn,
        stride_bb, stride_bh, stride_bm, stride_bn,
        n_heads, n_heads // kv_heads, seqlen_q, seqlen_k, sm_scale,
        HEAD_DIM, HEAD_DIM_PAD, BLOCK_M, BLOCK_N, CAUSAL, HAS_BIAS, HAS_MASK, DBIAS, False,
    )


# ----------------------------------------------------------------------------------------------
# Launchers (JAX arrays in and out; validated by ceiling.attention.spec)
# ----------------------------------------------------------------------------------------------


def launch_options(section: dict) -> dict:
    """The compiler options of a config section that jax-triton passes on."""
    return {k: v for k, v in section.items() if k in LAUNCH_OPTIONS}


def _broadcast4(x, full: tuple[int, int, int, int]):
    """(x as 4-D, its strides read as (batch, heads, q_len, k_len)): a size-1 dim gets stride 0."""
    shape = (1,) * (4 - x.ndim) + tuple(x.shape)
    strides = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(4)]
    return x.reshape(shape), tuple(0 if n == 1 else s for n, s in zip(shape, strides))


def _operands(q, bias, mask, full):
    """(bias, mask, their 8 strides); absent ones are q (never read: HAS_BIAS/HAS_MASK False)."""
    import jax.numpy as jnp

    bias4, sb = (q, (0, 0, 0, 0)) if bias is None else _broadcast4(bias, full)
    if mask is None:
        mask4, sm = q, (0, 0, 0, 0)
    else:
        # int32, as the torch launcher: 1-byte loads cannot go through cp.async.
        mask4, sm = _broadcast4(mask.astype(jnp.int32), full)
    return bias4, mask4, (*sb, *sm)


def _padded(x, pad: int):
    import jax.numpy as jnp

    return x if x.shape[-1] == pad else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad - x.shape[-1])])


def _work_dim(head_dim: int, vendor: str) -> int:
    """The head dim the arrays carry into the kernels: padded to a power of two on NVIDIA."""
    return head_dim_pad(head_dim) if vendor == "nvidia" else head_dim


def attention_fwd(q, k, v, bias, mask, causal: bool, scale: float, cfg: dict, vendor: str = "nvidia"):
    """(out like q, lse (batch, heads, q_len) float32) through jax-triton, at the resolved ``cfg``."""
    import jax
    import jax.numpy as jnp

    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    f = cfg["fwd"]
    d = _work_dim(head_dim, vendor)
    qp, kp, vp = (_padded(t, d) for t in (q, k, v))
    # The forward kernel takes the row max before scaling, so it needs scale > 0, as in the
    # torch launcher: softmax(s q k^T) = softmax(|s| q (-k)^T), and a zero scale is a zero q.
    if scale < 0:
        kp, scale = -kp, -scale
    elif scale == 0:
        qp, scale = jnp.zeros_like(qp), 1.0
    bias4, mask4, strides = _operands(qp, bias, mask, (batch, heads, seqlen_q, seqlen_k))
    out, lse = jax_bridge.triton_call(
        qp, kp, vp, bias4, mask4, *strides, heads, kv_heads, seqlen_q, seqlen_k, np.float32(scale),
        kernel=attn_fwd_kernel_jax,
        out_shape=(jax.ShapeDtypeStruct(qp.shape, q.dtype), jax.ShapeDtypeStruct((batch, heads, seqlen_q), jnp.float32)),
        grid=(triton.cdiv(seqlen_q, f["block_m"]), batch * heads),
        HEAD_DIM=d, HEAD_DIM_PAD=head_dim_pad(d), BLOCK_M=f["block_m"], BLOCK_N=f["block_n"],
        CAUSAL=bool(causal), HAS_BIAS=bias is not None, HAS_MASK=mask is not None,
        PRE_LOAD_V=flash.fwd_knobs(cfg)["PRE_LOAD_V"], **launch_options(f),
    )
    return out[..., :head_dim], lse


def attention_bwd(do, q, k, v, o, lse, bias, mask, causal: bool, scale: float, bias_grad: bool, cfg: dict,
                  vendor: str = "nvidia"):
    """(dq, dk, dv, dbias or None) through jax-triton, each gradient like its input, at ``cfg``."""
    import jax
    import jax.numpy as jnp

    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    d = _work_dim(head_dim, vendor)
    pad = head_dim_pad(d)
    qp, kp, vp, op, dop = (_padded(t, d) for t in (q, k, v, o, do.astype(q.dtype)))
    full = (batch, heads, seqlen_q, seqlen_k)
    bias4, mask4, strides = _operands(qp, bias, mask, full)
    shape = dict(HEAD_DIM=d, HEAD_DIM_PAD=pad)
    flags = dict(CAUSAL=bool(causal), HAS_BIAS=bias is not None, HAS_MASK=mask is not None)
    scalars = (heads, kv_heads, seqlen_q, seqlen_k, np.float32(scale))

    delta = jax_bridge.triton_call(
        op, dop, heads, seqlen_q,
        kernel=attn_bwd_preprocess_kernel_jax, out_shape=jax.ShapeDtypeStruct(lse.shape, jnp.float32),
        grid=(triton.cdiv(seqlen_q, PREPROCESS_BLOCK_M), batch * heads), BLOCK_M=PREPROCESS_BLOCK_M, **shape,
    )

    # With GQA, one float32 slice per query head, summed over each group below.
    dkv_dtype = k.dtype if group == 1 else jnp.float32
    dkv = jax.ShapeDtypeStruct((batch, seqlen_k, heads, d), dkv_dtype)
    c = cfg["dkdv"]
    dk, dv = jax_bridge.triton_call(
        qp, kp, vp, dop, lse, delta, bias4, mask4, *strides, *scalars,
        kernel=attn_bwd_dkdv_kernel_jax, out_shape=(dkv, dkv),
        grid=(triton.cdiv(seqlen_k, c["block_n"]), batch * heads),
        BLOCK_M=c["block_m"], BLOCK_N=c["block_n"], **shape, **flags, **launch_options(c),
    )

    mode = _dbias_mode(tuple(bias4.shape), full) if bias is not None and bias_grad else 0
    if mode == 0:
        dbias_shape = jax.ShapeDtypeStruct((1,), jnp.float32)  # never written
    elif mode == 1:  # full-size: every element stored once, in the bias's dtype
        dbias_shape = jax.ShapeDtypeStruct(bias4.shape, bias.dtype)
    else:  # float32 atomics into a zeroed buffer
        dbias_shape = jax.ShapeDtypeStruct(bias4.shape, jnp.float32)
    c = cfg["dq"]
    dq, dbias4 = jax_bridge.triton_call(
        qp, kp, vp, dop, lse, delta, bias4, mask4, *strides, *scalars,
        kernel=attn_bwd_dq_kernel_jax, out_shape=(jax.ShapeDtypeStruct(qp.shape, q.dtype), dbias_shape),
        grid=(triton.cdiv(seqlen_q, c["block_m"]), batch * heads),
        zeroed_outputs=(1,) if mode >= 2 else (),
        BLOCK_M=c["block_m"], BLOCK_N=c["block_n"], DBIAS=mode, **shape, **flags, **launch_options(c),
    )
    if group > 1:
        dk = dk.reshape(batch, seqlen_k, kv_heads, group, d).sum(3).astype(k.dtype)
        dv = dv.reshape(batch, seqlen_k, kv_heads, group, d).sum(3).astype(v.dtype)
    dbias = dbias4.reshape(bias.shape).astype(bias.dtype) if mode else None
    return dq[..., :head_dim], dk[..., :head_dim], dv[..., :head_dim], dbias
