"""Flash attention, forward and backward, in Triton: the kernels (FlashAttention-2's online
softmax in base 2, the unmasked/masked split of the key loop, dK/dV and dQ backward kernels, the
dBias reduction) and their launches, with TMA descriptors (Hopper) or pointer loads (CDNA3, the
interpreter), at a config the implementation's launcher resolved (``ceiling.nvidia.attention``,
``ceiling.amd.attention``). Their design: ``docs/attention.md``."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ceiling.constants import LN2, LOG2E
from ceiling.triton_runtime import launcher

# The kernels read these as compile-time constants (a Triton kernel may only read constexpr globals).
_LOG2E = tl.constexpr(LOG2E)
_LN2 = tl.constexpr(LN2)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _load_rows(ptrs, rows, n_rows, offs_d, HEAD_DIM: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_D: tl.constexpr):
    """A [rows, HEAD_DIM_PAD] tile; out-of-range rows and padded columns read as 0."""
    if CHECK_ROWS:
        if CHECK_D:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM), other=0.0)
        else:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
    else:
        if CHECK_D:
            x = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _keep(rows, cols, seqlen_q, seqlen_k, causal_offset, CAUSAL: tl.constexpr):
    """Which (query, key) pairs exist: inside both lengths and, if causal, on or left of the
    diagonal aligned to the bottom right (key j is seen by query i when j <= i + k_len - q_len)."""
    keep = (rows[:, None] < seqlen_q) & (cols[None, :] < seqlen_k)
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None] + causal_offset)
    return keep


@triton.jit
def exp2_fma(x):
    """2^x on the FMA and integer pipes instead of the MUFU unit (whose ex2 runs at an eighth of
    the FMA rate on Hopper, so the softmax exponentials, not the tensor cores, can pace a
    step). x = n + f with n = round(x), taken from the low bits of x + 1.5 * 2^23, and
    f in [-0.5, 0.5]; 2^f by a cubic (relative error under 7.5e-5, below bf16's rounding of P)
    whose exponent field n is added to. Scores at or below -126 (masked: -inf) give 0; a NaN
    stays NaN, as the MUFU's would."""
    xc = tl.maximum(x, -127.0, propagate_nan=tl.PropagateNan.ALL)  # a NaN goes on to give NaN bits
    j = xc + 12582912.0
    f = xc - (j - 12582912.0)
    p = 0.99992807 + f * (0.69326099 + f * (0.24261115 + f * 0.05517167))
    bits = p.to(tl.int32, bitcast=True) + (j.to(tl.int32, bitcast=True) << 23)
    return tl.where(x < -126.0, 0.0, bits.to(tl.float32, bitcast=True))


@triton.jit
def softmax_exp2(x, EXP2_SPLIT: tl.constexpr):
    """exp2 of a score tile; with EXP2_SPLIT the odd columns go to :func:`exp2_fma`, so the
    MUFU and FMA pipes share the work (a thread holds column pairs, so the split moves no data)."""
    if EXP2_SPLIT:
        even, odd = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))
        return tl.reshape(tl.join(tl.math.exp2(even), exp2_fma(odd)), (x.shape[0], x.shape[1]))
    return tl.math.exp2(x)


@triton.jit
def _fwd_step(
    acc, l_i, m_i, q,
    K, V, k_ptrs, v_ptrs, bias_ptrs, mask_ptrs,
    kv_row0, kv_col0, start_n,
    offs_m, offs_n, offs_d,
    seqlen_q, seqlen_k, causal_offset, qk_scale,
    stride_ks, stride_vs, stride_bm, stride_bn, stride_mm, stride_mn,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
    MASKED: tl.constexpr, USE_TMA: tl.constexpr, PRE_LOAD_V: tl.constexpr, EXP2_SPLIT: tl.constexpr,
):
    cols = start_n + offs_n
    if USE_TMA:
        k = K.load([kv_row0 + start_n, kv_col0])
    else:
        k = _load_rows(k_ptrs + cols[:, None] * stride_ks + offs_d[None, :], cols, seqlen_k, offs_d, HEAD_DIM, MASKED, HEAD_DIM != HEAD_DIM_PAD)
    if PRE_LOAD_V:  # issue the V load before the softmax math (helps CDNA3, where loads are not async)
        if USE_TMA:
            v = V.load([kv_row0 + start_n, kv_col0])
        else:
            v = _load_rows(v_ptrs + cols[:, None] * stride_vs + offs_d[None, :], cols, seqlen_k, offs_d, HEAD_DIM, MASKED, HEAD_DIM != HEAD_DIM_PAD)
    qk = tl.dot(q, tl.trans(k))
    if HAS_BIAS:  # the bias joins the scores before the max: scale them first (log2 domain)
        inside = (offs_m[:, None] < seqlen_q) & (cols[None, :] < seqlen_k)
        bias = tl.load(bias_ptrs + offs_m[:, None] * stride_bm + cols[None, :] * stride_bn, mask=inside, other=0.0)
        qk = qk * qk_scale + bias.to(tl.float32) * _LOG2E
    if HAS_MASK:
        inside = (offs_m[:, None] < seqlen_q) & (cols[None, :] < seqlen_k)
        attend = tl.load(mask_ptrs + offs_m[:, None] * stride_mm + cols[None, :] * stride_mn, mask=inside, other=0)
        qk = tl.where(attend != 0, qk, float("-inf"))
    if MASKED:
        qk = tl.where(_keep(offs_m, cols, seqlen_q, seqlen_k, causal_offset, CAUSAL), qk, float("-inf"))
    # Without a bias the scale is folded into the exponent, as in the Triton tutorial: the row max
    # of the raw scores times the (positive) scale, then one FMA per score, qk * scale - m.
    if HAS_BIAS:
        m_new = tl.maximum(m_i, tl.max(qk, 1))
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    if MASKED or HAS_MASK or HAS_BIAS:
        # A row with nothing to attend to yet keeps m = -inf; subtract 0 there so no inf - inf appears.
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:  # every score of an unmasked block is finite, so m_new is
        m_sub = m_new
    if HAS_BIAS:
        p = softmax_exp2(qk - m_sub[:, None], EXP2_SPLIT)
    else:
        p = softmax_exp2(qk * qk_scale - m_sub[:, None], EXP2_SPLIT)
    alpha = tl.math.exp2(m_i - m_sub)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if not PRE_LOAD_V:
        if USE_TMA:
            v = V.load([kv_row0 + start_n, kv_col0])
        else:
            v = _load_rows(v_ptrs + cols[:, None] * stride_vs + offs_d[None, :], cols, seqlen_k, offs_d, HEAD_DIM, MASKED, HEAD_DIM != HEAD_DIM_PAD)
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _attn_fwd(
    Q, K, V, Bias, Mask, O, LSE, desc_q, desc_k, desc_v,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_ob, stride_os, stride_oh,
    stride_bb, stride_bh, stride_bm, stride_bn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    n_heads, group, seqlen_q, seqlen_k, sm_scale,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
    USE_TMA: tl.constexpr, PRE_LOAD_V: tl.constexpr, WARP_SPECIALIZE: tl.constexpr = False,
    EXP2_SPLIT: tl.constexpr = False,
):
    """Needs ``sm_scale > 0`` (the row max is taken before scaling); ``forward`` flips the sign
    of K for a negative scale and zeroes Q for a zero one."""
    pid_m = tl.program_id(0)
    if CAUSAL:  # the last query blocks see the most keys: launch them first, shorten the tail
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    hk = h // group
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    causal_offset = seqlen_k - seqlen_q
    qk_scale = sm_scale * _LOG2E

    b64 = b.to(tl.int64)
    # Q stays in registers for the whole key loop. With TMA, Q/K/V are 2-D descriptors over
    # (batch * seq, heads * head_dim); rows past the sequence belong to the next batch and are
    # masked out of the scores (keys) or never stored (queries).
    if USE_TMA:
        q = desc_q.load([b * seqlen_q + start_m, h * HEAD_DIM])
    else:
        q_ptrs = Q + b64 * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :]
        q = _load_rows(q_ptrs, offs_m, seqlen_q, offs_d, HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD)
    # Scalar bases; each step forms its tile's addresses (pointer tensors kept live across the
    # loop cost 64-bit registers per element, which spills on CDNA3).
    k_ptrs = K + b64 * stride_kb + hk * stride_kh
    v_ptrs = V + b64 * stride_vb + hk * stride_vh
    bias_ptrs = Bias + b64 * stride_bb + h * stride_bh
    mask_ptrs = Mask + b64 * stride_mb + h * stride_mh
    kv_row0 = b * seqlen_k
    kv_col0 = hk * HEAD_DIM

    m_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32) - float("inf")
    l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, HEAD_DIM_PAD], 0.0, dtype=tl.float32)

    # Key blocks [0, full_end) need no mask: inside k_len and, if causal, left of the diagonal
    # for every row of this block. [full_end, end) gets the masks.
    full_end = (seqlen_k // BLOCK_N) * BLOCK_N
    end = seqlen_k
    if CAUSAL:
        visible = tl.maximum(start_m + causal_offset + 1, 0)  # keys every row of the block sees
        full_end = tl.minimum(full_end, (visible // BLOCK_N) * BLOCK_N)
        end = tl.minimum(end, tl.maximum(start_m + BLOCK_M + causal_offset, 0))
    # WARP_SPECIALIZE: Triton's automatic warp specialization (a producer warp issues the TMA
    # loads, the others compute); a config knob because on Hopper it is not always a win.
    for start_n in tl.range(0, full_end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        acc, l_i, m_i = _fwd_step(
            acc, l_i, m_i, q, desc_k, desc_v, k_ptrs, v_ptrs, bias_ptrs, mask_ptrs, kv_row0, kv_col0, start_n,
            offs_m, offs_n, offs_d, seqlen_q, seqlen_k, causal_offset, qk_scale,
            stride_ks, stride_vs, stride_bm, stride_bn, stride_mm, stride_mn,
            HEAD_DIM, HEAD_DIM_PAD, CAUSAL, HAS_BIAS, HAS_MASK, False, USE_TMA, PRE_LOAD_V, EXP2_SPLIT,
        )
    for start_n in range(full_end, end, BLOCK_N):
        acc, l_i, m_i = _fwd_step(
            acc, l_i, m_i, q, desc_k, desc_v, k_ptrs, v_ptrs, bias_ptrs, mask_ptrs, kv_row0, kv_col0, start_n,
            offs_m, offs_n, offs_d, seqlen_q, seqlen_k, causal_offset, qk_scale,
            stride_ks, stride_vs, stride_bm, stride_bn, stride_mm, stride_mn,
            HEAD_DIM, HEAD_DIM_PAD, CAUSAL, HAS_BIAS, HAS_MASK, True, USE_TMA, PRE_LOAD_V, EXP2_SPLIT,
        )

    # Rows that attended to nothing (l = 0) give output 0 and lse = -inf.
    empty = l_i == 0.0
    l_div = tl.where(empty, 1.0, l_i)
    out = acc / l_div[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_div)) * _LN2)
    o_ptrs = O + b64 * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DIM))
    tl.store(LSE + pid_bh.to(tl.int64) * seqlen_q + offs_m, lse, mask=offs_m < seqlen_q)


@triton.jit
def _attn_bwd_preprocess(
    O, DO, Delta,
    stride_ob, stride_os, stride_oh,
    stride_dob, stride_dos, stride_doh,
    n_heads, seqlen_q,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """delta = rowsum(dO * O), the softmax-backward term shared by every key block."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // n_heads).to(tl.int64)
    h = pid_bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    mask = (offs_m[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DIM)
    o = tl.load(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :], mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta + pid_bh.to(tl.int64) * seqlen_q + offs_m, delta, mask=offs_m < seqlen_q)


@triton.jit
def _dkdv_step(
    dk, dv, k, v,
    Q, DO, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, bias_ptrs, mask_ptrs,
    q_row0, q_col0, start_m,
    offs_m, offs_n, offs_d,
    seqlen_q, seqlen_k, causal_offset, qk_scale,
    stride_qs, stride_dos, stride_bm, stride_bn, stride_mm, stride_mn,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr,
    MASKED: tl.constexpr, USE_TMA: tl.constexpr,
    dq_ptrs, stride_dq32s, sm_scale, DQ_ATOMIC: tl.constexpr,
):
    rows = start_m + offs_m
    if USE_TMA:
        q = Q.load([q_row0 + start_m, q_col0])
        do = DO.load([q_row0 + start_m, q_col0])
    else:
        q = _load_rows(q_ptrs + rows[:, None] * stride_qs + offs_d[None, :], rows, seqlen_q, offs_d, HEAD_DIM, MASKED, HEAD_DIM != HEAD_DIM_PAD)
        do = _load_rows(do_ptrs + rows[:, None] * stride_dos + offs_d[None, :], rows, seqlen_q, offs_d, HEAD_DIM, MASKED, HEAD_DIM != HEAD_DIM_PAD)
    # lse = -inf marks a row that attends to nothing; +inf there makes its probabilities 0.
    lse = tl.load(lse_ptrs + rows, mask=rows < seqlen_q, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse) * _LOG2E
    delta = tl.load(delta_ptrs + rows, mask=rows < seqlen_q, other=0.0)
    # Transposed scores [BLOCK_N, BLOCK_M], so dV and dK come out of plain dots.
    sT = tl.dot(k, tl.trans(q)) * qk_scale
    if HAS_BIAS or HAS_MASK:
        insideT = (offs_n[:, None] < seqlen_k) & (rows[None, :] < seqlen_q)
        if HAS_BIAS:
            biasT = tl.load(bias_ptrs + rows[None, :] * stride_bm + offs_n[:, None] * stride_bn, mask=insideT, other=0.0)
            sT += biasT.to(tl.float32) * _LOG2E
    pT = tl.math.exp2(sT - lse[None, :])
    if HAS_MASK:
        attendT = tl.load(mask_ptrs + rows[None, :] * stride_mm + offs_n[:, None] * stride_mn, mask=insideT, other=0)
        pT = tl.where(attendT != 0, pT, 0.0)
    if MASKED:
        keepT = (offs_n[:, None] < seqlen_k) & (rows[None, :] < seqlen_q)
        if CAUSAL:
            keepT = keepT & (offs_n[:, None] <= rows[None, :] + causal_offset)
        pT = tl.where(keepT, pT, 0.0)
    dv = tl.dot(pT.to(do.dtype), do, dv)
    dpT = tl.dot(v, tl.trans(do))
    dsT = pT * (dpT - delta[None, :])
    dk = tl.dot(dsT.to(q.dtype), q, dk)
    if DQ_ATOMIC:
        # This key block's share of dQ for these query rows, dS K, added into a float32
        # accumulator that the programs of every other key block add to as well: one more
        # dot here instead of the dq kernel's recomputation of S, P and dP (5 dots per
        # block pair instead of 7). The order of the additions varies, so dQ is not
        # bitwise deterministic.
        dq = tl.dot(tl.trans(dsT.to(k.dtype)), k) * sm_scale
        tl.atomic_add(dq_ptrs + rows[:, None] * stride_dq32s + offs_d[None, :], dq,
                      mask=(rows[:, None] < seqlen_q) & (offs_d[None, :] < HEAD_DIM), sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv(
    Q, K, V, DO, LSE, Delta, Bias, Mask, DK, DV, desc_q, desc_k, desc_v, desc_do,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dkb, stride_dks, stride_dkh,
    stride_dvb, stride_dvs, stride_dvh,
    stride_bb, stride_bh, stride_bm, stride_bn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    n_heads, group, seqlen_q, seqlen_k, sm_scale,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, USE_TMA: tl.constexpr,
    DQ_ATOMIC: tl.constexpr = False, DQ32=None, stride_dq32b=0, stride_dq32s=0, stride_dq32h=0,
):
    """dK, dV for BLOCK_N keys of one (batch, query head). With GQA each query head writes its own
    slice of a (batch, k_len, heads, head_dim) buffer that the host sums over the group: a loop
    over the group's heads around the query loops made the compiler spill, and atomics would
    make dK/dV non-deterministic. With ``DQ_ATOMIC`` it also adds dQ into the float32 DQ32
    (batch, q_len, heads, head_dim), zeroed by the caller, and the dq kernel is not run."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    hk = h // group
    b64 = b.to(tl.int64)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    causal_offset = seqlen_k - seqlen_q
    qk_scale = sm_scale * _LOG2E

    if USE_TMA:
        k = desc_k.load([b * seqlen_k + start_n, hk * HEAD_DIM])
        v = desc_v.load([b * seqlen_k + start_n, hk * HEAD_DIM])
    else:
        k = _load_rows(K + b64 * stride_kb + hk * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
                       offs_n, seqlen_k, offs_d, HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD)
        v = _load_rows(V + b64 * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :],
                       offs_n, seqlen_k, offs_d, HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD)
    dk = tl.full([BLOCK_N, HEAD_DIM_PAD], 0.0, dtype=tl.float32)
    dv = tl.full([BLOCK_N, HEAD_DIM_PAD], 0.0, dtype=tl.float32)

    # Query blocks: [lo, mid) straddle the causal diagonal (masked), [mid, full_end) are fully
    # visible and inside q_len (unmasked), [tail, end) is the ragged last block (masked). A key
    # block that runs past k_len is masked throughout.
    m_blocks_end = ((seqlen_q + BLOCK_M - 1) // BLOCK_M) * BLOCK_M
    full_end = (seqlen_q // BLOCK_M) * BLOCK_M
    lo = 0
    mid = 0
    if CAUSAL:
        lo = (tl.maximum(start_n - causal_offset, 0) // BLOCK_M) * BLOCK_M
        mid = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - causal_offset, 0), BLOCK_M) * BLOCK_M
        mid = tl.minimum(tl.maximum(mid, lo), full_end)
    if start_n + BLOCK_N > seqlen_k:
        mid = m_blocks_end
    tail = tl.maximum(mid, full_end)

    q_ptrs = Q + b64 * stride_qb + h * stride_qh
    do_ptrs = DO + b64 * stride_dob + h * stride_doh
    lse_ptrs = LSE + (b64 * n_heads + h) * seqlen_q
    delta_ptrs = Delta + (b64 * n_heads + h) * seqlen_q
    bias_ptrs = Bias + b64 * stride_bb + h * stride_bh
    mask_ptrs = Mask + b64 * stride_mb + h * stride_mh
    q_row0 = b * seqlen_q
    q_col0 = h * HEAD_DIM
    dq_ptrs = DQ32
    if DQ_ATOMIC:
        dq_ptrs = DQ32 + b64 * stride_dq32b + h * stride_dq32h
    for start_m in range(lo, mid, BLOCK_M):
        dk, dv = _dkdv_step(
            dk, dv, k, v, desc_q, desc_do, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, bias_ptrs, mask_ptrs,
            q_row0, q_col0, start_m, offs_m, offs_n, offs_d, seqlen_q, seqlen_k, causal_offset, qk_scale,
            stride_qs, stride_dos, stride_bm, stride_bn, stride_mm, stride_mn,
            HEAD_DIM, HEAD_DIM_PAD, CAUSAL, HAS_BIAS, HAS_MASK, True, USE_TMA,
            dq_ptrs, stride_dq32s, sm_scale, DQ_ATOMIC,
        )
    for start_m in range(mid, full_end, BLOCK_M):
        dk, dv = _dkdv_step(
            dk, dv, k, v, desc_q, desc_do, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, bias_ptrs, mask_ptrs,
            q_row0, q_col0, start_m, offs_m, offs_n, offs_d, seqlen_q, seqlen_k, causal_offset, qk_scale,
            stride_qs, stride_dos, stride_bm, stride_bn, stride_mm, stride_mn,
            HEAD_DIM, HEAD_DIM_PAD, CAUSAL, HAS_BIAS, HAS_MASK, False, USE_TMA,
            dq_ptrs, stride_dq32s, sm_scale, DQ_ATOMIC,
        )
    for start_m in range(tail, m_blocks_end, BLOCK_M):
        dk, dv = _dkdv_step(
            dk, dv, k, v, desc_q, desc_do, q_ptrs, do_ptrs, lse_ptrs, delta_ptrs, bias_ptrs, mask_ptrs,
            q_row0, q_col0, start_m, offs_m, offs_n, offs_d, seqlen_q, seqlen_k, causal_offset, qk_scale,
            stride_qs, stride_dos, stride_bm, stride_bn, stride_mm, stride_mn,
            HEAD_DIM, HEAD_DIM_PAD, CAUSAL, HAS_BIAS, HAS_MASK, True, USE_TMA,
            dq_ptrs, stride_dq32s, sm_scale, DQ_ATOMIC,
        )

    dk = dk * sm_scale
    out_mask = (offs_n[:, None] < seqlen_k) & (offs_d[None, :] < HEAD_DIM)
    tl.store(DK + b64 * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dks + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=out_mask)
    tl.store(DV + b64 * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvs + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=out_mask)


@triton.jit
def _dq_step(
    dq, dbias_rows, q, do, lse, delta,
    K, V, k_ptrs, v_ptrs, bias_ptrs, mask_ptrs, dbias_ptrs,
    kv_row0, kv_col0, start_n,
    offs_m, offs_n, offs_d,
    seqlen_q, seqlen_k, causal_offset, qk_scale,
    stride_ks, stride_vs, stride_bm, stride_bn, stride_mm, stride_mn, stride_dbm, stride_dbn,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, DBIAS: tl.constexpr,
    MASKED: tl.constexpr, USE_TMA: tl.constexpr,
):
    cols = start_n + offs_n
    if USE_TMA:
        k = K.load([kv_row0 + start_n, kv_col0])
        v = V.load([kv_row0 + start_n, kv_col0])
    else:
        k = _load_rows(k_ptrs + cols[:, None] * stride_ks + offs_d[None, :], cols, seqlen_k, offs_d, HEAD_DIM, MASKED, HEAD_DIM != HEAD_DIM_PAD)
        v = _load_rows(v_ptrs + cols[:, None] * stride_vs + offs_d[None, :], cols, seqlen_k, offs_d, HEAD_DIM, MASKED, HEAD_DIM != HEAD_DIM_PAD)
    s = tl.dot(q, tl.trans(k)) * qk_scale
    inside = (offs_m[:, None] < seqlen_q) & (cols[None, :] < seqlen_k)
    if HAS_BIAS:
        bias = tl.load(bias_ptrs + offs_m[:, None] * stride_bm + cols[None, :] * stride_bn, mask=inside, other=0.0)
        s += bias.to(tl.float32) * _LOG2E
    p = tl.math.exp2(s - lse[:, None])
    if HAS_MASK:
        attend = tl.load(mask_ptrs + offs_m[:, None] * stride_mm + cols[None, :] * stride_mn, mask=inside, other=0)
        p = tl.where(attend != 0, p, 0.0)
    if MASKED:
        p = tl.where(_keep(offs_m, cols, seqlen_q, seqlen_k, causal_offset, CAUSAL), p, 0.0)
    dp = tl.dot(do, tl.trans(v))
    ds = p * (dp - delta[:, None])
    dq = tl.dot(ds.to(k.dtype), k, dq)
    # d(loss)/d(bias) = dS (the bias adds to the scaled scores).
    if DBIAS == 1:  # full-size bias: each element is written by exactly one program
        tl.store(dbias_ptrs + offs_m[:, None] * stride_dbm + cols[None, :] * stride_dbn,
                 ds.to(dbias_ptrs.dtype.element_ty), mask=inside)
    elif DBIAS == 2:  # broadcast over batch and/or heads only
        tl.atomic_add(dbias_ptrs + offs_m[:, None] * stride_dbm + cols[None, :] * stride_dbn, ds, mask=inside)
    elif DBIAS == 3:  # broadcast over queries: sum the tile's columns first
        tl.atomic_add(dbias_ptrs + cols * stride_dbn, tl.sum(ds, 0), mask=cols < seqlen_k)
    elif DBIAS >= 4:  # broadcast over keys: accumulate row sums over the whole key loop
        dbias_rows += tl.sum(ds, 1)
    return dq, dbias_rows


@triton.jit
def _attn_bwd_dq(
    Q, K, V, DO, LSE, Delta, Bias, Mask, DQ, DBias, desc_q, desc_k, desc_v, desc_do,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dqb, stride_dqs, stride_dqh,
    stride_bb, stride_bh, stride_bm, stride_bn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    stride_dbb, stride_dbh, stride_dbm, stride_dbn,
    n_heads, group, seqlen_q, seqlen_k, sm_scale,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, DBIAS: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    """dQ (and dBias) for BLOCK_M queries of one (batch, head)."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    hk = h // group
    b64 = b.to(tl.int64)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    causal_offset = seqlen_k - seqlen_q
    qk_scale = sm_scale * _LOG2E

    if USE_TMA:
        q = desc_q.load([b * seqlen_q + start_m, h * HEAD_DIM])
        do = desc_do.load([b * seqlen_q + start_m, h * HEAD_DIM])
    else:
        q = _load_rows(Q + b64 * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                       offs_m, seqlen_q, offs_d, HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD)
        do = _load_rows(DO + b64 * stride_dob + h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :],
                        offs_m, seqlen_q, offs_d, HEAD_DIM, True, HEAD_DIM != HEAD_DIM_PAD)
    row_ok = offs_m < seqlen_q
    lse = tl.load(LSE + pid_bh.to(tl.int64) * seqlen_q + offs_m, mask=row_ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse) * _LOG2E
    delta = tl.load(Delta + pid_bh.to(tl.int64) * seqlen_q + offs_m, mask=row_ok, other=0.0)

    k_ptrs = K + b64 * stride_kb + hk * stride_kh
    v_ptrs = V + b64 * stride_vb + hk * stride_vh
    bias_ptrs = Bias + b64 * stride_bb + h * stride_bh
    mask_ptrs = Mask + b64 * stride_mb + h * stride_mh
    dbias_ptrs = DBias + b64 * stride_dbb + h * stride_dbh
    kv_row0 = b * seqlen_k
    kv_col0 = hk * HEAD_DIM

    dq = tl.full([BLOCK_M, HEAD_DIM_PAD], 0.0, dtype=tl.float32)
    dbias_rows = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    full_end = (seqlen_k // BLOCK_N) * BLOCK_N
    end = seqlen_k
    if CAUSAL:
        visible = tl.maximum(start_m + causal_offset + 1, 0)
        full_end = tl.minimum(full_end, (visible // BLOCK_N) * BLOCK_N)
        end = tl.minimum(end, tl.maximum(start_m + BLOCK_M + causal_offset, 0))
    for start_n in range(0, full_end, BLOCK_N):
        dq, dbias_rows = _dq_step(
            dq, dbias_rows, q, do, lse, delta, desc_k, desc_v, k_ptrs, v_ptrs, bias_ptrs, mask_ptrs, dbias_ptrs,
            kv_row0, kv_col0, start_n, offs_m, offs_n, offs_d, seqlen_q, seqlen_k, causal_offset, qk_scale,
            stride_ks, stride_vs, stride_bm, stride_bn, stride_mm, stride_mn, stride_dbm, stride_dbn,
            HEAD_DIM, HEAD_DIM_PAD, CAUSAL, HAS_BIAS, HAS_MASK, DBIAS, False, USE_TMA,
        )
    for start_n in range(full_end, end, BLOCK_N):
        dq, dbias_rows = _dq_step(
            dq, dbias_rows, q, do, lse, delta, desc_k, desc_v, k_ptrs, v_ptrs, bias_ptrs, mask_ptrs, dbias_ptrs,
            kv_row0, kv_col0, start_n, offs_m, offs_n, offs_d, seqlen_q, seqlen_k, causal_offset, qk_scale,
            stride_ks, stride_vs, stride_bm, stride_bn, stride_mm, stride_mn, stride_dbm, stride_dbn,
            HEAD_DIM, HEAD_DIM_PAD, CAUSAL, HAS_BIAS, HAS_MASK, DBIAS, True, USE_TMA,
        )

    if DBIAS == 1:
        # Keys right of the causal diagonal get dBias = 0: a full-size dBias is not zero-filled
        # beforehand, so the program that owns a row writes all of it.
        covered = tl.maximum(full_end, ((end + BLOCK_N - 1) // BLOCK_N) * BLOCK_N)
        for start_n in range(covered, ((seqlen_k + BLOCK_N - 1) // BLOCK_N) * BLOCK_N, BLOCK_N):
            inside = row_ok[:, None] & (start_n + offs_n[None, :] < seqlen_k)
            zeros = tl.full([BLOCK_M, BLOCK_N], 0.0, dtype=DBias.dtype.element_ty)
            tl.store(dbias_ptrs + offs_m[:, None] * stride_dbm + (start_n + offs_n)[None, :] * stride_dbn, zeros, mask=inside)

    dq = dq * sm_scale
    tl.store(DQ + b64 * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqs + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM))
    if DBIAS == 4:  # broadcast over keys only: one value per query row
        tl.atomic_add(DBias + b64 * stride_dbb + h * stride_dbh + offs_m * stride_dbm, dbias_rows, mask=row_ok)
    elif DBIAS == 5:  # broadcast over queries and keys: one value per (batch, head)
        tl.atomic_add(DBias + b64 * stride_dbb + h * stride_dbh, tl.sum(dbias_rows, 0))


# ----------------------------------------------------------------------------------------------
# Host side: configs, descriptors, launches
# ----------------------------------------------------------------------------------------------

KERNELS = {"fwd": _attn_fwd, "preprocess": _attn_bwd_preprocess, "dkdv": _attn_bwd_dkdv, "dq": _attn_bwd_dq}
SECTIONS = ("fwd", "dkdv", "dq")


def head_dim_pad(head_dim: int) -> int:
    """The power of two the kernels compute on (padded columns are masked to 0)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def merge_config(base: dict, *overrides: dict | None) -> dict:
    """``base`` with each override applied section by section (``{"fwd": {"block_n": 32}}``);
    top-level flags (``use_tma``, ``pre_load_v``) replace."""
    chosen = {s: dict(v) if isinstance(v, dict) else v for s, v in base.items()}
    for overrides_ in overrides:
        for s, v in (overrides_ or {}).items():
            if isinstance(v, dict):
                chosen.setdefault(s, {}).update(v)
            else:
                chosen[s] = v
    return chosen


def _empty(shape, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Every buffer a kernel must fill completely comes from here (tests poison it with NaN)."""
    return torch.empty(shape, device=like.device, dtype=dtype or like.dtype)


def _bshd_strides(x: torch.Tensor) -> tuple[int, int, int]:
    return x.stride(0), x.stride(1), x.stride(2)


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _tma_ok(head_dim: int, *tensors: torch.Tensor) -> bool:
    """TMA needs a power-of-two head dim (the box would read the next head otherwise) and
    (batch, seq, heads, head_dim) tensors that view as a 16-byte-aligned 2-D (batch*seq, heads*head_dim)."""
    if head_dim != head_dim_pad(head_dim) or head_dim > 256:
        return False
    for t in tensors:
        b, s, h, d = t.shape
        if t.stride() != (s * h * d, h * d, d, 1) or t.data_ptr() % 16 or (h * d * t.element_size()) % 16:
            return False
    return True


def _descriptor(t: torch.Tensor, block_rows: int):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from ceiling.nvidia import tma_descriptors as td

    desc = td.attention_rows("", *t.shape, t.element_size(), block_rows)
    return TensorDescriptor(t, list(desc.shape), list(desc.strides), list(desc.block))


def _broadcast4(x: torch.Tensor | None, shape4: tuple[int, int, int, int]):
    """(tensor, strides) of ``x`` read as (batch, heads, q_len, k_len); broadcast dims get stride 0."""
    if x is None:
        return None, (0, 0, 0, 0)
    x4 = x.reshape((1,) * (4 - x.dim()) + tuple(x.shape))
    if x4.dtype == torch.bool:
        # int32, not bytes: 1-byte loads cannot go through cp.async, so the pipeliner keeps
        # them (and their 64-bit addresses) in registers, which spills on Hopper.
        x4 = x4.to(torch.int32)
    return x4, x4.expand(shape4).stride()


def _dbias_mode(bias4_shape: tuple[int, ...], full: tuple[int, int, int, int]) -> int:
    """How the dQ kernel writes dBias for a bias of ``bias4_shape`` broadcast to ``full``.

    1: full-size bias, plain stores (deterministic, no zero-fill).
    2: broadcast over batch and/or heads only: float32 atomics of whole tiles.
    3: broadcast over queries: each tile's column sums, then atomics.
    4: broadcast over keys: row sums kept in registers over the key loop, one atomic per row.
    5: broadcast over queries and keys: one atomic per (batch, head) program.
    Atomics rather than per-program partials: partials of a batch- or head-broadcast bias
    would need a (batch, heads, q_len, k_len) float32 buffer, the attention matrix we refuse
    to store; the in-register pre-reduction keeps the atomic count to at most one per element
    per (batch, head).
    """
    bcast = [s == 1 and f > 1 for s, f in zip(bias4_shape, full)]
    if bcast[2] and bcast[3]:
        return 5
    if bcast[3]:
        return 4
    if bcast[2]:
        return 3
    if bcast[0] or bcast[1]:
        return 2
    return 1


# Config keys that are kernel constants rather than compiler options: section key -> constexpr.
KNOBS = {"block_m": "BLOCK_M", "block_n": "BLOCK_N", "pre_load_v": "PRE_LOAD_V", "warp_specialize": "WARP_SPECIALIZE",
         "dq_atomic": "DQ_ATOMIC", "exp2_split": "EXP2_SPLIT"}


def launch_options(section: dict) -> dict:
    """Compiler options of a config section (num_warps, num_stages, ...): everything that is not
    a kernel constant."""
    return {k: v for k, v in section.items() if k not in KNOBS}


def fwd_knobs(cfg: dict) -> dict:
    """The forward's switches: ``pre_load_v`` from the fwd section or, as before, the top level."""
    f = cfg["fwd"]
    return {"PRE_LOAD_V": bool(f.get("pre_load_v", cfg.get("pre_load_v", False))),
            "WARP_SPECIALIZE": bool(f.get("warp_specialize", False)),
            "EXP2_SPLIT": bool(f.get("exp2_split", False))}


class _Skip:
    """Stands in for a kernel that ``backward(only=...)`` does not run."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


_skip = _Skip()


def on_vendor_gpu(t: torch.Tensor, vendor: str) -> bool:
    """Whether ``t`` lives on a GPU of ``vendor``, where the kernel is compiled; anywhere else
    (the CPU, or the other vendor's GPU) the interpreter runs it."""
    return t.is_cuda and (vendor == "amd") == bool(getattr(torch.version, "hip", None))


def forward(q, k, v, bias, mask, causal: bool, scale: float, cfg: dict, use_tma: bool, vendor: str = "nvidia"):
    """Run the forward kernel: (o, lse) with o like q and lse (batch, heads, q_len) float32."""
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    # The kernel takes the row max before scaling, which needs scale > 0 (0 * -inf is NaN):
    # softmax(s q k^T) = softmax(|s| q (-k)^T), and a zero scale gives the scores of a zero q.
    if scale < 0:
        k, scale = -k, -scale
    elif scale == 0:
        q, scale = torch.zeros_like(q), 1.0
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    pad = head_dim_pad(head_dim)
    f = cfg["fwd"]
    bm, bn = f["block_m"], f["block_n"]
    o = _empty(q.shape, q)
    lse = _empty((batch, heads, seqlen_q), q, torch.float32)
    full = (batch, heads, seqlen_q, seqlen_k)
    bias4, sb = _broadcast4(bias, full)
    mask4, sm = _broadcast4(mask, full)
    if use_tma:
        dq_, dk_, dv_ = _descriptor(q, bm), _descriptor(k, bn), _descriptor(v, bn)
    else:
        dq_, dk_, dv_ = q, k, v
    grid = (triton.cdiv(seqlen_q, bm), batch * heads)
    launcher(_attn_fwd, on_gpu=on_vendor_gpu(q, vendor))[grid](
        q, k, v, bias4 if bias4 is not None else q, mask4 if mask4 is not None else q, o, lse, dq_, dk_, dv_,
        *_bshd_strides(q), *_bshd_strides(k), *_bshd_strides(v), *_bshd_strides(o), *sb, *sm,
        heads, heads // kv_heads, seqlen_q, seqlen_k, float(scale),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=pad, BLOCK_M=bm, BLOCK_N=bn,
        CAUSAL=bool(causal), HAS_BIAS=bias is not None, HAS_MASK=mask is not None,
        USE_TMA=bool(use_tma), **fwd_knobs(cfg),
        **launch_options(f),
    )
    return o, lse


def backward(do, q, k, v, o, lse, bias, mask, causal: bool, scale: float, bias_grad: bool, cfg: dict, use_tma: bool,
             vendor: str = "nvidia", only: str | None = None):
    """Run the three backward kernels: (dq, dk, dv, dbias or None), gradients like their inputs.
    ``only="dkdv"`` or ``"dq"`` runs the preprocess and that one kernel (the tuning sweep times
    them apart); the other outputs are then left unwritten."""
    q, k, v, o, do = (_unit_last(t) for t in (q, k, v, o, do))
    if use_tma and not do.is_contiguous():
        do = do.contiguous()
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    pad = head_dim_pad(head_dim)
    on_gpu = on_vendor_gpu(q, vendor)
    full = (batch, heads, seqlen_q, seqlen_k)
    bias4, sb = _broadcast4(bias, full)
    mask4, sm = _broadcast4(mask, full)
    bias_arg = bias4 if bias4 is not None else q
    mask_arg = mask4 if mask4 is not None else q

    delta = _empty(lse.shape, lse)
    pre_bm = 64
    launcher(_attn_bwd_preprocess, on_gpu=on_gpu)[(triton.cdiv(seqlen_q, pre_bm), batch * heads)](
        o, do, delta, *_bshd_strides(o), *_bshd_strides(do), heads, seqlen_q,
        HEAD_DIM=head_dim, HEAD_DIM_PAD=pad, BLOCK_M=pre_bm,
    )

    dq = _empty(q.shape, q)
    if group == 1:
        dk, dv = _empty(k.shape, k), _empty(v.shape, v)
    else:  # one float32 slice per query head, summed over each group below
        dk = _empty((batch, seqlen_k, heads, head_dim), k, torch.float32)
        dv = _empty((batch, seqlen_k, heads, head_dim), v, torch.float32)

    c = cfg["dkdv"]
    bm, bn = c["block_m"], c["block_n"]
    # "dq_atomic": the dK/dV kernel adds dQ into a float32 buffer and the dq kernel is skipped,
    # unless the dq kernel is needed for the bias gradient (or is the one being timed).
    dq_atomic = bool(c.get("dq_atomic")) and not (bias is not None and bias_grad) and only != "dq"
    atomic = {}
    if dq_atomic:
        dq32 = torch.zeros((batch, seqlen_q, heads, head_dim), device=q.device, dtype=torch.float32)
        atomic = dict(DQ_ATOMIC=True, DQ32=dq32, stride_dq32b=dq32.stride(0), stride_dq32s=dq32.stride(1),
                      stride_dq32h=dq32.stride(2))
    descs = (_descriptor(q, bm), _descriptor(k, bn), _descriptor(v, bn), _descriptor(do, bm)) if use_tma else (q, k, v, do)
    launch = launcher(_attn_bwd_dkdv, on_gpu=on_gpu) if only in (None, "dkdv") else _skip
    launch[(triton.cdiv(seqlen_k, bn), batch * heads)](
        q, k, v, do, lse, delta, bias_arg, mask_arg, dk, dv, *descs,
        *_bshd_strides(q), *_bshd_strides(k), *_bshd_strides(v), *_bshd_strides(do),
        *_bshd_strides(dk), *_bshd_strides(dv), *sb, *sm,
        heads, group, seqlen_q, seqlen_k, float(scale),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=pad, BLOCK_M=bm, BLOCK_N=bn,
        CAUSAL=bool(causal), HAS_BIAS=bias is not None, HAS_MASK=mask is not None, USE_TMA=bool(use_tma),
        **atomic, **launch_options(c),
    )
    if dq_atomic:
        dq.copy_(dq32)

    dbias = None
    mode = 0
    if bias is not None and bias_grad:
        mode = _dbias_mode(tuple(bias4.shape), full)
        if mode == 1:
            dbias4 = _empty(bias4.shape, q, bias.dtype)
        else:
            dbias4 = torch.zeros(bias4.shape, device=q.device, dtype=torch.float32)
        sdb = dbias4.expand(full).stride()
    else:
        dbias4, sdb = q, (0, 0, 0, 0)
    c = cfg["dq"]
    bm, bn = c["block_m"], c["block_n"]
    descs = (_descriptor(q, bm), _descriptor(k, bn), _descriptor(v, bn), _descriptor(do, bm)) if use_tma else (q, k, v, do)
    launch = launcher(_attn_bwd_dq, on_gpu=on_gpu) if only in (None, "dq") and not dq_atomic else _skip
    launch[(triton.cdiv(seqlen_q, bm), batch * heads)](
        q, k, v, do, lse, delta, bias_arg, mask_arg, dq, dbias4, *descs,
        *_bshd_strides(q), *_bshd_strides(k), *_bshd_strides(v), *_bshd_strides(do), *_bshd_strides(dq),
        *sb, *sm, *sdb,
        heads, group, seqlen_q, seqlen_k, float(scale),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=pad, BLOCK_M=bm, BLOCK_N=bn,
        CAUSAL=bool(causal), HAS_BIAS=bias is not None, HAS_MASK=mask is not None, DBIAS=mode,
        USE_TMA=bool(use_tma),
        **launch_options(c),
    )
    if mode:
        dbias = dbias4.reshape(bias.shape).to(bias.dtype)
    if group > 1:
        dk = dk.view(batch, seqlen_k, kv_heads, group, head_dim).sum(3).to(k.dtype)
        dv = dv.view(batch, seqlen_k, kv_heads, group, head_dim).sum(3).to(v.dtype)
    return dq, dk, dv, dbias
