"""Flash attention backward for Hopper in Gluon, FlashAttention-3's one-kernel design: one CTA per
128-key block of one (batch, query head), a TMA producer streaming the query blocks that see it to
two consumer warpgroups of 64 keys each, which keep dK and dV in registers and add dQ in float32
by TMA reductions (so dQ is not bitwise reproducible; dK and dV are): five products per block
pair. Inputs as :mod:`ceiling.nvidia.gluon.attention_fwd` writes them; the design in full:
``docs/attention.md``."""

from __future__ import annotations

from ceiling import constants
from ceiling.nvidia.gluon.api import (
    fence_async_shared,
    gl,
    gluon,
    mbarrier,
    tma,
    tma_atomic_add,
    tma_load,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from ceiling.nvidia.gluon.attention_fwd import mma_layout, step_zero

LOG2E = gl.constexpr(constants.LOG2E)
# Keys per consumer warpgroup (the M of one wgmma) and head-dim columns per dQ piece.
WG_N = gl.constexpr(64)
DQ_PIECE = gl.constexpr(64)


@gluon.jit
def query_block_range(start_n, seqlen_q, seqlen_k, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      CAUSAL: gl.constexpr):
    """The query blocks that see keys [start_n, start_n + BLOCK_N): [lo, n_blocks), split as
    [lo, mid) masked (they straddle the causal diagonal), [mid, full_end) unmasked, and
    [tail, n_blocks) masked (the ragged last block). A key block past k_len is masked
    throughout."""
    causal_offset = seqlen_k - seqlen_q
    n_blocks = gl.cdiv(seqlen_q, BLOCK_M)
    full_end = seqlen_q // BLOCK_M
    lo = 0
    mid = 0
    if CAUSAL:
        lo = gl.maximum(start_n - causal_offset, 0) // BLOCK_M
        mid = gl.cdiv(gl.maximum(start_n + BLOCK_N - 1 - causal_offset, 0), BLOCK_M)
        mid = gl.minimum(gl.maximum(mid, lo), full_end)
    if start_n + BLOCK_N > seqlen_k:
        mid = n_blocks
    tail = gl.maximum(gl.maximum(mid, full_end), lo)
    return lo, mid, full_end, tail, n_blocks


# ----------------------------------------------------------------------------------------------
# Producer
# ----------------------------------------------------------------------------------------------


@gluon.jit
def _load_rows(desc, vec_desc, smem, vec_smem, ready, empty, count, b, row, col, vec_offset,
               NUM_STAGES: gl.constexpr):
    """A query block's tile (Q or dO) and its per-row vector (lse or delta) into ring slot
    ``count % NUM_STAGES``, once both consumers released it; one barrier counts both copies."""
    slot = count % NUM_STAGES
    mbarrier.wait(empty.index(slot), ((count // NUM_STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(slot), desc.block_type.nbytes + vec_desc.block_type.nbytes)
    tma_load(desc, [b, row, col], ready.index(slot), smem.index(slot))
    tma_load(vec_desc, [vec_offset], ready.index(slot), vec_smem.index(slot))


@gluon.jit
def _bwd_producer(desc_q, desc_k, desc_v, desc_do, desc_lse, desc_delta, k_smem, v_smem, q_smem, do_smem, lse_smem,
                  delta_smem, kv_ready, q_ready, q_empty, do_ready, do_empty, seqlen_q, seqlen_k, n_heads, group,
                  HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    start_n = gl.program_id(0) * BLOCK_N
    bh = gl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    hk = h // group
    mbarrier.expect(kv_ready, desc_k.block_type.nbytes + desc_v.block_type.nbytes)
    tma_load(desc_k, [b, start_n, hk * HEAD_DIM], kv_ready, k_smem.index(0))
    tma_load(desc_v, [b, start_n, hk * HEAD_DIM], kv_ready, v_smem.index(0))
    lo, mid, full_end, tail, n_blocks = query_block_range(start_n, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
    # The consumers' three loops cover [lo, n_blocks) in order; so does this one. The per-row
    # vectors are (batch * heads * q_len) float32: rows past q_len read the next head's values
    # (or zeros past the end), which the consumers' masks discard.
    row0 = bh * seqlen_q  # TMA coordinates are 32-bit: the host checks batch * heads * q_len < 2^31
    for i in range(n_blocks - lo):
        m0 = (lo + i) * BLOCK_M
        _load_rows(desc_q, desc_lse, q_smem, lse_smem, q_ready, q_empty, i, b, m0, h * HEAD_DIM, row0 + m0,
                   NUM_STAGES)
        _load_rows(desc_do, desc_delta, do_smem, delta_smem, do_ready, do_empty, i, b, m0, h * HEAD_DIM, row0 + m0,
                   NUM_STAGES)


# ----------------------------------------------------------------------------------------------
# Consumers
# ----------------------------------------------------------------------------------------------


@gluon.jit
def _bwd_step(m0, count, k_smem, v_smem, ds_smem, dq_smem, WG, dk, dv, q_smem, do_smem, lse_smem, delta_smem, q_ready,
              q_empty, do_ready, do_empty, desc_dq, b, h, n0, seqlen_q, seqlen_k, qk_scale, sm_scale,
              HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr,
              MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """The five products of one query block (ring block ``count``, rows m0..) against this
    warpgroup's 64 keys (n0..)."""
    st_layout: gl.constexpr = mma_layout(BLOCK_M)  # S^T, dP^T: 64 keys x BLOCK_M queries
    kv_layout: gl.constexpr = mma_layout(HEAD_DIM)  # dK, dV: 64 keys x head_dim
    dq_layout: gl.constexpr = mma_layout(DQ_PIECE)  # a piece of dQ: BLOCK_M queries x 64 columns
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    # This warpgroup's keys of the K and V block, viewed anew each step (see step_zero); so is
    # the Q and dO slot of a one-stage ring (always slot 0).
    zero = step_zero(m0, seqlen_q)
    if NUM_STAGES == 1:
        slot = zero
    else:
        slot = count % NUM_STAGES
    phase = (count // NUM_STAGES) & 1
    k = k_smem.index(zero).reshape([2 * WG_N, HEAD_DIM]).slice(WG * WG_N, WG_N)
    v = v_smem.index(zero).reshape([2 * WG_N, HEAD_DIM]).slice(WG * WG_N, WG_N)
    q = q_smem.index(slot).reshape([BLOCK_M, HEAD_DIM])
    do = do_smem.index(slot).reshape([BLOCK_M, HEAD_DIM])

    mbarrier.wait(q_ready.index(slot), phase)
    s_t = warpgroup_mma(k, q.permute((1, 0)), gl.zeros([WG_N, BLOCK_M], gl.float32, st_layout), use_acc=False,
                        is_async=True)
    mbarrier.wait(do_ready.index(slot), phase)
    dp_t = warpgroup_mma(v, do.permute((1, 0)), gl.zeros([WG_N, BLOCK_M], gl.float32, st_layout), use_acc=False,
                         is_async=True)
    # The log-sum-exp in base 2; -inf (a query that sees no key) becomes +inf so its P is 0.
    lse = lse_smem.index(slot).load(gl.SliceLayout(0, st_layout))
    lse = gl.where(lse == float("-inf"), float("inf"), lse * LOG2E)
    s_t = warpgroup_mma_wait(1, deps=(s_t, ))
    p_t = gl.exp2(s_t * qk_scale - gl.expand_dims(lse, 0))
    if MASKED:
        # Key j is seen by query i when i >= first[j] (0, or j - (k_len - q_len) when causal;
        # never for keys past k_len) and i < q_len (rows past it get a sentinel below every
        # first[j]): one compare per score.
        keys = n0 + gl.arange(0, WG_N, layout=gl.SliceLayout(1, st_layout))
        if CAUSAL:
            first = keys - (seqlen_k - seqlen_q)
        else:
            first = gl.zeros_like(keys)
        first = gl.where(keys < seqlen_k, first, 2147483647)
        rows = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, st_layout))
        rows = gl.where(rows < seqlen_q, rows, -2147483647)
        p_t = gl.where(gl.expand_dims(rows, 0) >= gl.expand_dims(first, 1), p_t, 0.0)
    p_op = gl.convert_layout(p_t.to(q.dtype), a_layout)
    dv = warpgroup_mma(p_op, do, dv, is_async=True)
    # Retired in order: S^T, then dP^T; dV may still run.
    dp_t = warpgroup_mma_wait(1, deps=(dp_t, ))
    delta = delta_smem.index(slot).load(gl.SliceLayout(0, st_layout))
    ds_t = p_t * (dp_t - gl.expand_dims(delta, 0))
    ds_op = gl.convert_layout(ds_t.to(q.dtype), a_layout)
    dk = warpgroup_mma(ds_op, q, dk, is_async=True)
    # dS^T to shared memory for dQ while dK runs; then everything of this block retires, which
    # frees P and dS's registers and both slots (dQ needs only dS^T and K from here on).
    ds_smem.store(ds_t.to(q.dtype))
    fence_async_shared()  # generic-proxy stores before the wgmma (async proxy) reads them
    dv, dk, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, p_op, ds_op))
    mbarrier.arrive(q_empty.index(slot))
    mbarrier.arrive(do_empty.index(slot))
    # dQ_i += dS K, 64 columns at a time: dS^T read back transposed as the [BLOCK_M, 64] A
    # operand; each float32 piece goes out through shared memory as a TMA reduction
    # (cp.reduce.async.bulk.tensor.add; rows past q_len are clipped), two buffers deep so the
    # reduction of one piece overlaps the product of the next.
    for c in gl.static_range(HEAD_DIM // DQ_PIECE):
        dq = warpgroup_mma(ds_smem.permute((1, 0)), k.slice(c * DQ_PIECE, DQ_PIECE, dim=1),
                           gl.zeros([BLOCK_M, DQ_PIECE], gl.float32, dq_layout), use_acc=False, is_async=True)
        dq = warpgroup_mma_wait(0, deps=(dq, ))
        buf = dq_smem.index(2 * WG + (count * (HEAD_DIM // DQ_PIECE) + c) % 2)
        tma.store_wait(1)  # the reduction issued two pieces ago has read this buffer
        buf.reshape([BLOCK_M, DQ_PIECE]).store(dq * sm_scale)
        fence_async_shared()
        tma_atomic_add(desc_dq, [b, m0, h * HEAD_DIM + c * DQ_PIECE], buf)
    return dk, dv


@gluon.jit
def _store_rows(ptr, x, row0, seqlen, col0, row_stride):
    """Rows [row0, row0 + n) of a (.., seq, heads * head_dim) tensor from registers; rows past
    ``seqlen`` are not written."""
    rows = row0 + gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, x.type.layout))
    cols = gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, x.type.layout))
    offs = gl.expand_dims(rows.to(gl.int64) * row_stride, 1) + col0 + gl.expand_dims(cols, 0)
    gl.store(ptr + offs, x.to(ptr.dtype.element_ty), mask=gl.expand_dims(rows, 1) < seqlen)


@gluon.jit
def _bwd_consumer(DK, DV, desc_dq, k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, dq_smem, kv_ready,
                  q_ready, q_empty, do_ready, do_empty, seqlen_q, seqlen_k, n_heads, qk_scale, sm_scale,
                  WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    kv_layout: gl.constexpr = mma_layout(HEAD_DIM)
    start_n = gl.program_id(0) * BLOCK_N
    bh = gl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    n0 = start_n + WG * WG_N  # this warpgroup's first key
    ds = ds_smem.index(WG)
    dk = gl.zeros([WG_N, HEAD_DIM], gl.float32, kv_layout)
    dv = gl.zeros([WG_N, HEAD_DIM], gl.float32, kv_layout)
    lo, mid, full_end, tail, n_blocks = query_block_range(start_n, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
    mbarrier.wait(kv_ready, 0)
    # The query blocks in the order the producer loads them: ring block i is query block lo + i.
    for i in range(mid - lo):
        dk, dv = _bwd_step((lo + i) * BLOCK_M, i, k_smem, v_smem, ds, dq_smem, WG, dk, dv, q_smem, do_smem,
                           lse_smem, delta_smem, q_ready, q_empty, do_ready, do_empty, desc_dq, b, h, n0,
                           seqlen_q, seqlen_k, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, NUM_STAGES, True, CAUSAL)
    for i in range(full_end - mid):
        dk, dv = _bwd_step((mid + i) * BLOCK_M, mid - lo + i, k_smem, v_smem, ds, dq_smem, WG, dk, dv, q_smem,
                           do_smem, lse_smem, delta_smem, q_ready, q_empty, do_ready, do_empty, desc_dq, b, h, n0,
                           seqlen_q, seqlen_k, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, NUM_STAGES, False, CAUSAL)
    for i in range(n_blocks - tail):
        dk, dv = _bwd_step((tail + i) * BLOCK_M, tail - lo + i, k_smem, v_smem, ds, dq_smem, WG, dk, dv, q_smem,
                           do_smem, lse_smem, delta_smem, q_ready, q_empty, do_ready, do_empty, desc_dq, b, h, n0,
                           seqlen_q, seqlen_k, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, NUM_STAGES, True, CAUSAL)
    # dK, dV of this query head's keys (dK = scale dS^T Q); keys no query sees get zeros.
    row_stride = n_heads * HEAD_DIM
    _store_rows(DK + b.to(gl.int64) * seqlen_k * row_stride, dk * sm_scale, n0, seqlen_k, h * HEAD_DIM, row_stride)
    _store_rows(DV + b.to(gl.int64) * seqlen_k * row_stride, dv, n0, seqlen_k, h * HEAD_DIM, row_stride)
    tma.store_wait(0)  # the last dQ reductions read shared memory until they complete


# ----------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------


# Not specialized on lengths and head counts: every problem runs the binary the static check compiled.
@gluon.jit(do_not_specialize=["seqlen_q", "seqlen_k", "n_heads", "group"])
def attention_bwd_kernel(desc_q, desc_k, desc_v, desc_do, desc_lse, desc_delta, desc_dq, DK, DV, seqlen_q, seqlen_k,
                         n_heads, group, qk_scale, sm_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                         BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """Grid (cdiv(k_len, BLOCK_N), batch * heads), ``num_warps=4``. Descriptors over (batch, seq,
    heads * head_dim): q and dO with blocks [1, BLOCK_M, head_dim], k and v with [1, BLOCK_N,
    head_dim], the float32 dQ accumulator (zeroed) with [1, BLOCK_M, 64]; lse and delta 1-D over
    (batch * heads * q_len) with blocks [BLOCK_M]. DK, DV: (batch, k_len, heads, head_dim)
    (float32 slices per query head under GQA). ``qk_scale = scale * log2(e) > 0``."""
    gl.static_assert(BLOCK_N == 2 * WG_N, "two consumer warpgroups of 64 keys each")
    gl.static_assert(HEAD_DIM % DQ_PIECE == 0, "dQ is accumulated in 64-column pieces")
    dtype: gl.constexpr = desc_q.dtype
    # K and V as one-slot rings: the consumers index them by step_zero each step.
    k_smem = gl.allocate_shared_memory(dtype, [1] + desc_k.block_type.shape, desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [1] + desc_v.block_type.shape, desc_v.layout)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + desc_q.block_type.shape, desc_q.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + desc_do.block_type.shape, desc_do.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES] + desc_lse.block_type.shape, desc_lse.layout)
    delta_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES] + desc_delta.block_type.shape, desc_delta.layout)
    # Per consumer: dS^T of the current block, and two float32 dQ pieces on their way out.
    ds_smem = gl.allocate_shared_memory(dtype, [2, WG_N, BLOCK_M],
                                        gl.NVMMASharedLayout.get_default_for([WG_N, BLOCK_M], dtype))
    dq_smem = gl.allocate_shared_memory(gl.float32, [4] + desc_dq.block_type.shape, desc_dq.layout)  # [2 * WG + i]
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    do_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=2)  # both consumers read every query block
        mbarrier.init(do_empty.index(i), count=2)

    gl.warp_specialize([
        # The default partition (the kernel's own 4 warps) is consumer 0.
        (_bwd_consumer, (DK, DV, desc_dq, k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, dq_smem,
                         kv_ready, q_ready, q_empty, do_ready, do_empty, seqlen_q, seqlen_k, n_heads, qk_scale,
                         sm_scale, 0, HEAD_DIM, BLOCK_M, BLOCK_N, NUM_STAGES, CAUSAL)),
        (_bwd_consumer, (DK, DV, desc_dq, k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, ds_smem, dq_smem,
                         kv_ready, q_ready, q_empty, do_ready, do_empty, seqlen_q, seqlen_k, n_heads, qk_scale,
                         sm_scale, 1, HEAD_DIM, BLOCK_M, BLOCK_N, NUM_STAGES, CAUSAL)),
        (_bwd_producer, (desc_q, desc_k, desc_v, desc_do, desc_lse, desc_delta, k_smem, v_smem, q_smem, do_smem,
                         lse_smem, delta_smem, kv_ready, q_ready, q_empty, do_ready, do_empty, seqlen_q, seqlen_k,
                         n_heads, group, HEAD_DIM, BLOCK_M, BLOCK_N, NUM_STAGES, CAUSAL)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
