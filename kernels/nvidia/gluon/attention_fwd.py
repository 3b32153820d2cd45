"""Flash attention forward for Hopper in Gluon, FlashAttention-3's warp-specialized schedule: one
persistent CTA per SM walks 128-row query tiles (heaviest first when causal); a one-warp TMA
producer feeds a ring of K/V slots to two consumer warpgroups of 64 rows each (240/24 registers
by ``setmaxnreg``), which overlap the softmax of one key block with the products of the next and
take turns on the tensor cores (ping-pong). Layout and log-sum-exp as the Triton kernels write
them; the design in full: ``docs/attention.md``."""

from __future__ import annotations

import triton.language as tl

from ceiling import constants
from ceiling.nvidia.gluon.api import (
    fence_async_shared,
    gl,
    gluon,
    mbarrier,
    tma,
    tma_load,
    tma_store,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LN2 = gl.constexpr(constants.LN2)

# Rows per consumer warpgroup: the M of one wgmma (64 rows x 4 warps).
WG_M = gl.constexpr(64)


# ----------------------------------------------------------------------------------------------
# Work decomposition, shared by the producer and the consumers (they must agree block for block)
# ----------------------------------------------------------------------------------------------


@gluon.jit
def tile_coords(tile, n_mblocks, n_bh, n_heads, group, CAUSAL: gl.constexpr):
    """(query block, batch, head, key/value head) of tile ``tile`` of ``n_mblocks * n_bh``.

    Causal tiles go out heaviest first (the last query blocks see the most keys, so the grid
    ends on a short tail of light tiles); otherwise the query blocks of one head are
    consecutive, so the CTAs that run together share that head's K and V in L2."""
    if CAUSAL:
        mb = n_mblocks - 1 - tile // n_bh
        bh = tile % n_bh
    else:
        mb = tile % n_mblocks
        bh = tile // n_mblocks
    b = bh // n_heads
    h = bh % n_heads
    return mb, b, h, h // group


@gluon.jit
def kv_block_count(m0, seqlen_q, seqlen_k, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key blocks that the query rows [m0, m0 + BLOCK_M) see: blocks 0 .. count - 1 (0 when a
    causal tile lies wholly above the diagonal, q_len > k_len)."""
    hi = seqlen_k
    if CAUSAL:
        hi = gl.minimum(hi, m0 + BLOCK_M + seqlen_k - seqlen_q)
    return gl.cdiv(gl.maximum(hi, 0), BLOCK_N)


@gluon.jit
def unmasked_block_count(m0, seqlen_q, seqlen_k, n_blocks, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """How many of a consumer's key blocks need no mask for its rows [m0, m0 + 64): blocks
    0 .. count - 1, inside k_len and, if causal, left of the diagonal for the first (most
    restricted) row; the highest block, peeled and always masked, is never among them."""
    n_full = seqlen_k // BLOCK_N
    if CAUSAL:
        n_full = gl.minimum(n_full, gl.maximum(m0 + seqlen_k - seqlen_q + 1, 0) // BLOCK_N)
    return gl.maximum(gl.minimum(n_full, n_blocks - 1), 0)


# ----------------------------------------------------------------------------------------------
# Producer: one warp issuing TMA loads
# ----------------------------------------------------------------------------------------------


@gluon.jit
def _load_block(desc, smem, ready, empty, count, b, row, col, NUM_STAGES: gl.constexpr):
    """Block ``count`` of a ring into slot ``count % NUM_STAGES`` once both consumers emptied it.

    An mbarrier completes phase after phase; the slot's n-th reuse waits for phase n - 1 of
    "empty" (a fresh barrier counts its phase before the first as complete, so the first pass
    through the ring does not wait) and arms "ready" for the TMA's byte count."""
    slot = count % NUM_STAGES
    mbarrier.wait(empty.index(slot), ((count // NUM_STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(slot), desc.block_type.nbytes)
    tma_load(desc, [b, row, col], ready.index(slot), smem.index(slot))


@gluon.jit
def _fwd_producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                  v_empty, seqlen_q, seqlen_k, n_heads, group, n_mblocks, n_bh,
                  HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    loaded = 0  # K/V blocks issued so far: the position in both rings
    tiles_done = 0
    for tile in range(gl.program_id(0), n_mblocks * n_bh, gl.num_programs(0)):
        mb, b, h, hk = tile_coords(tile, n_mblocks, n_bh, n_heads, group, CAUSAL)
        m0 = mb * BLOCK_M
        # Each consumer's 64 rows of Q behind its own barrier: consumer 0 starts on its half
        # without waiting for the other. The slot is free once its consumer's last Q K^T of the
        # previous tile completed.
        for wg in gl.static_range(2):
            mbarrier.wait(q_empty.index(wg), (tiles_done & 1) ^ 1)
            mbarrier.expect(q_ready.index(wg), desc_q.block_type.nbytes)
            tma_load(desc_q, [b, m0 + wg * WG_M, h * HEAD_DIM], q_ready.index(wg), q_smem.index(wg))
        n_blocks = kv_block_count(m0, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
        # Last block first (see the consumers); K of block j, then V of block j + 1.
        for i in range(n_blocks):
            j = n_blocks - 1 - i
            _load_block(desc_k, k_smem, k_ready, k_empty, loaded + i, b, j * BLOCK_N, hk * HEAD_DIM, NUM_STAGES)
            if i > 0:
                _load_block(desc_v, v_smem, v_ready, v_empty, loaded + i - 1, b, (j + 1) * BLOCK_N,
                            hk * HEAD_DIM, NUM_STAGES)
        if n_blocks > 0:
            _load_block(desc_v, v_smem, v_ready, v_empty, loaded + n_blocks - 1, b, 0, hk * HEAD_DIM, NUM_STAGES)
        loaded += n_blocks
        tiles_done += 1


# ----------------------------------------------------------------------------------------------
# Consumers: two warpgroups, each 64 rows of the tile
# ----------------------------------------------------------------------------------------------


@gluon.jit
def exp2_fma(x):
    """2^x on the FMA and integer pipes instead of the MUFU unit (a Gluon twin of
    :func:`ceiling.triton.attention.exp2_fma`: MUFU ex2 runs at an eighth of the FMA rate on
    Hopper, so the exponentials, not the tensor cores, can pace a step). x = n + f with
    n = round(x) from the low bits of x + 1.5 * 2^23 and f in [-0.5, 0.5]; 2^f by a cubic
    (relative error under 7.5e-5, below bf16's rounding of P) whose exponent field n is added
    to. x at or below -126 (masked: -inf) gives 0; NaN stays NaN."""
    xc = gl.maximum(x, -127.0, propagate_nan=tl.PropagateNan.ALL)  # a NaN goes on to give NaN bits
    j = xc + 12582912.0
    f = xc - (j - 12582912.0)
    p = 0.99992807 + f * (0.69326099 + f * (0.24261115 + f * 0.05517167))
    bits = p.to(gl.int32, bitcast=True) + (j.to(gl.int32, bitcast=True) << 23)
    return gl.where(x < -126.0, 0.0, bits.to(gl.float32, bitcast=True))


@gluon.jit
def softmax_exp2(x, EXP2_SPLIT: gl.constexpr):
    """exp2 of a score tile; with EXP2_SPLIT the odd columns go to :func:`exp2_fma`, so the MUFU
    and FMA pipes share the work (in the wgmma accumulator layout a thread holds column pairs,
    so the split moves no data)."""
    if EXP2_SPLIT:
        even, odd = gl.split(gl.reshape(x, [x.shape[0], x.shape[1] // 2, 2]))
        y = gl.reshape(gl.join(gl.exp2(even), exp2_fma(odd)), [x.shape[0], x.shape[1]])
        y = gl.convert_layout(y, x.type.layout)  # the same registers: a relabeling, no data moves
    else:
        y = gl.exp2(x)
    return y


@gluon.constexpr_function
def mma_layout(n):
    """The accumulator layout of a 64 x n wgmma of one warpgroup (4 warps along M)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def step_zero(start, length):
    """0, as a value of one loop step: ``start`` (the first row of a block the loop visits) is
    below ``length``, so ``(start - length) >> 31`` is -1. A shared-memory operand that stays
    the same across a loop (Q in the forward, K and V in the backward) is indexed by it, so the
    wgmma descriptors of its k-steps are recomputed each step (a few uniform adds). Computed
    once before the loops instead, they stay live across all of them, and beside the
    accumulators (a 64 x 256 output in the forward at head dim 256; dK, dV, S^T and dP^T in
    the backward at head dim 128) ptxas spills them out of the 240 registers."""
    return ((start - length) >> 31) + 1


@gluon.jit
def _mask_scores(s, j, m0, seqlen_k, causal_offset, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Scores of key block j for rows m0.. with keys past k_len (and, if causal, right of the
    diagonal) set to -inf."""
    cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
    keep = gl.expand_dims(cols, 0) < seqlen_k
    if CAUSAL:
        rows = m0 + gl.arange(0, WG_M, layout=gl.SliceLayout(1, s.type.layout))
        keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1) + causal_offset)
    return gl.where(keep, s, float("-inf"))


@gluon.jit
def _online_softmax(s, m_i, l_i, qk_scale, MASKED: gl.constexpr, EXP2_SPLIT: gl.constexpr):
    """One block of the online softmax in base 2 (FlashAttention-2): the new row max of the
    scaled scores, P = 2^(s * scale - max) (one FMA per score: the scale is folded into the
    exponent, which needs scale > 0), and the factor alpha that rescales the old sums."""
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    if MASKED:
        # A row that has seen only masked keys keeps m = -inf: subtract 0 so no inf - inf appears.
        m_sub = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:  # every score of an unmasked block is finite, so is m_new
        m_sub = m_new
    p = softmax_exp2(s * qk_scale - gl.expand_dims(m_sub, 1), EXP2_SPLIT)
    alpha = gl.exp2(m_i - m_sub)
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gluon.jit
def _fwd_first_block(j, count, q_smem, m_i, l_i, k_smem, k_ready, k_empty, m0, seqlen_k, causal_offset, qk_scale,
                     WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, EXP2_SPLIT: gl.constexpr):
    """The peeled first (highest, always masked) key block of a tile: its scores and P; no P V
    yet, that goes out with the next block's Q K^T."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(HEAD_DIM)
    slot = count % NUM_STAGES
    mbarrier.wait(k_ready.index(slot), (count // NUM_STAGES) & 1)
    q = q_smem.index(WG).reshape([WG_M, HEAD_DIM])
    k = k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM])
    s = warpgroup_mma(q, k.permute((1, 0)), gl.zeros([WG_M, BLOCK_N], gl.float32, s_layout), use_acc=False,
                      is_async=True)
    s = warpgroup_mma_wait(0, deps=(s, ))
    mbarrier.arrive(k_empty.index(slot))
    s = _mask_scores(s, j, m0, seqlen_k, causal_offset, BLOCK_N, CAUSAL)
    p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, qk_scale, True, EXP2_SPLIT)
    p = gl.convert_layout(p.to(q.dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    return p, m_i, l_i


@gluon.jit
def _fwd_step(j, count, turns, q_smem, p, acc, m_i, l_i, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn,
              m0, seqlen_k, causal_offset, qk_scale,
              WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
              MASKED: gl.constexpr, CAUSAL: gl.constexpr, EXP2_SPLIT: gl.constexpr, PINGPONG: gl.constexpr):
    """One step of a consumer: S_j = Q K_j^T and O += P_{j+1} V_{j+1} on the tensor cores, the
    softmax of S_j meanwhile. K_j is ring block ``count``, V_{j+1} is block ``count - 1``."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(HEAD_DIM)
    k_slot = count % NUM_STAGES
    v_slot = (count - 1) % NUM_STAGES
    mbarrier.wait(k_ready.index(k_slot), (count // NUM_STAGES) & 1)
    if PINGPONG:
        # Our turn to issue: consumer 0's n-th wait is on phase n - 1 of its barrier (its first
        # passes at once), consumer 1's on phase n (it starts after consumer 0's first issue).
        mbarrier.wait(turn.index(WG), (turns & 1) ^ (1 - WG))
    # This warpgroup's rows of the tile's Q, viewed anew each step (see step_zero).
    q = q_smem.index(WG + step_zero(j * BLOCK_N, seqlen_k)).reshape([WG_M, HEAD_DIM])
    k = k_smem.index(k_slot).reshape([BLOCK_N, HEAD_DIM])
    s = warpgroup_mma(q, k.permute((1, 0)), gl.zeros([WG_M, BLOCK_N], gl.float32, s_layout), use_acc=False,
                      is_async=True)
    mbarrier.wait(v_ready.index(v_slot), ((count - 1) // NUM_STAGES) & 1)
    acc = warpgroup_mma(p, v_smem.index(v_slot).reshape([BLOCK_N, HEAD_DIM]), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG))  # the other consumer's products go next
    # wgmma groups retire in order: with one outstanding, S_j is done and P V still runs.
    s = warpgroup_mma_wait(1, deps=(s, ))
    mbarrier.arrive(k_empty.index(k_slot))
    if MASKED:
        s = _mask_scores(s, j, m0, seqlen_k, causal_offset, BLOCK_N, CAUSAL)
    p_next, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, qk_scale, MASKED, EXP2_SPLIT)
    # P (a register operand) stays live until its product retires.
    acc, p = warpgroup_mma_wait(0, deps=(acc, p))
    mbarrier.arrive(v_empty.index(v_slot))
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    p = gl.convert_layout(p_next.to(q.dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    return p, acc, m_i, l_i


@gluon.jit
def _fwd_last_pv(p, acc, v_smem, v_ready, v_empty, count, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
                 NUM_STAGES: gl.constexpr):
    """O += P V of the tile's last (lowest) key block, ring block ``count``."""
    slot = count % NUM_STAGES
    mbarrier.wait(v_ready.index(slot), (count // NUM_STAGES) & 1)
    acc = warpgroup_mma(p, v_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]), acc, is_async=True)
    acc, p = warpgroup_mma_wait(0, deps=(acc, p))
    mbarrier.arrive(v_empty.index(slot))
    return acc


@gluon.jit
def _fwd_epilogue(acc, m_i, l_i, desc_o, o_tile, LSE, b, h, m0, seqlen_q, n_heads, HEAD_DIM: gl.constexpr):
    """O = acc / l through shared memory and a TMA store (rows past q_len are clipped), and the
    log-sum-exp in natural log. Rows that saw no key (l = 0) get 0 and -inf."""
    empty = l_i == 0.0
    l_div = gl.where(empty, 1.0, l_i)
    lse = gl.where(empty, float("-inf"), (m_i + gl.log2(l_div)) * LN2)
    out = acc / gl.expand_dims(gl.convert_layout(l_div, gl.SliceLayout(1, acc.type.layout)), 1)
    tma.store_wait(0)  # the previous tile's output has left this buffer
    o_tile.reshape([WG_M, HEAD_DIM]).store(out.to(o_tile.dtype))
    fence_async_shared()  # the generic-proxy writes above, before the TMA (async proxy) reads them
    tma_store(desc_o, [b, m0, h * HEAD_DIM], o_tile)
    rows = m0 + gl.arange(0, WG_M, layout=m_i.type.layout)
    gl.store(LSE + (b * n_heads + h).to(gl.int64) * seqlen_q + rows, lse, mask=rows < seqlen_q)


@gluon.jit
def _fwd_consumer(desc_o, LSE, q_smem, k_smem, v_smem, o_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                  v_empty, turn, seqlen_q, seqlen_k, n_heads, group, n_mblocks, n_bh, qk_scale,
                  WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, EXP2_SPLIT: gl.constexpr,
                  PINGPONG: gl.constexpr, O_IN_Q: gl.constexpr):
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(HEAD_DIM)
    causal_offset = seqlen_k - seqlen_q
    consumed = 0  # K/V blocks taken from the rings so far (the producer counts the same)
    turns = 0  # ping-pong turns taken so far
    tiles_done = 0
    for tile in range(gl.program_id(0), n_mblocks * n_bh, gl.num_programs(0)):
        mb, b, h, hk = tile_coords(tile, n_mblocks, n_bh, n_heads, group, CAUSAL)
        m0 = mb * BLOCK_M + WG * WG_M  # this warpgroup's first row
        # Both consumers walk the tile's key blocks (the same count, so their turns pair up);
        # the unmasked ones for this warpgroup's rows are the lowest n_full, after the peeled one.
        n_blocks = kv_block_count(mb * BLOCK_M, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, CAUSAL)
        n_full = unmasked_block_count(m0, seqlen_q, seqlen_k, n_blocks, BLOCK_N, CAUSAL)

        acc = gl.zeros([WG_M, HEAD_DIM], gl.float32, o_layout)
        m_i = gl.full([WG_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([WG_M], gl.float32, gl.SliceLayout(1, s_layout))
        p = gl.zeros([WG_M, BLOCK_N], q_smem.dtype, gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
        mbarrier.wait(q_ready.index(WG), tiles_done & 1)
        if n_blocks > 0:
            p, m_i, l_i = _fwd_first_block(n_blocks - 1, consumed, q_smem, m_i, l_i, k_smem, k_ready, k_empty, m0,
                                           seqlen_k, causal_offset, qk_scale, WG, HEAD_DIM, BLOCK_N, NUM_STAGES,
                                           CAUSAL, EXP2_SPLIT)
            n_masked = n_blocks - 1 - n_full
            for i in range(n_masked):
                p, acc, m_i, l_i = _fwd_step(n_blocks - 2 - i, consumed + 1 + i, turns + i, q_smem, p, acc, m_i, l_i,
                                             k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn, m0, seqlen_k,
                                             causal_offset, qk_scale, WG, HEAD_DIM, BLOCK_N, NUM_STAGES, True,
                                             CAUSAL, EXP2_SPLIT, PINGPONG)
            for i in range(n_full):
                p, acc, m_i, l_i = _fwd_step(n_full - 1 - i, consumed + 1 + n_masked + i, turns + n_masked + i,
                                             q_smem, p, acc, m_i, l_i, k_smem, v_smem, k_ready, k_empty, v_ready,
                                             v_empty, turn, m0, seqlen_k, causal_offset, qk_scale, WG, HEAD_DIM,
                                             BLOCK_N, NUM_STAGES, False, CAUSAL, EXP2_SPLIT, PINGPONG)
        if not O_IN_Q:
            # Every Q K^T of the tile has retired: the producer may load the next tile's Q.
            mbarrier.arrive(q_empty.index(WG))
        if n_blocks > 0:
            acc = _fwd_last_pv(p, acc, v_smem, v_ready, v_empty, consumed + n_blocks - 1, HEAD_DIM, BLOCK_N,
                               NUM_STAGES)
        consumed += n_blocks
        turns += gl.maximum(n_blocks - 1, 0)
        tiles_done += 1
        _fwd_epilogue(acc, m_i, l_i, desc_o, o_smem.index(WG), LSE, b, h, m0, seqlen_q, n_heads, HEAD_DIM)
        if O_IN_Q:
            # The output went out through Q's buffer: hand it back once the store has read it.
            tma.store_wait(0)
            mbarrier.arrive(q_empty.index(WG))
    tma.store_wait(0)  # the last output store reads shared memory until it completes


# ----------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------


# Lengths and head counts are not specialized on (a launch would otherwise compile per value 1
# and per multiple of 16): every problem runs the one binary the static check compiled.
@gluon.jit(do_not_specialize=["seqlen_q", "seqlen_k", "n_heads", "group", "n_mblocks", "n_bh"])
def attention_fwd_kernel(desc_q, desc_k, desc_v, desc_o, LSE, seqlen_q, seqlen_k, n_heads, group, n_mblocks, n_bh,
                         qk_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, EXP2_SPLIT: gl.constexpr,
                         PINGPONG: gl.constexpr, O_IN_Q: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                         PRODUCER_REGS: gl.constexpr):
    """Launch with ``num_warps=4`` (the default partition: consumer 0) on a grid of at most one CTA
    per SM; ``qk_scale = scale * log2(e) > 0``. Descriptors: q and o with blocks [1, 64, head_dim],
    k and v with [1, BLOCK_N, head_dim], over (batch, seq, heads * head_dim)."""
    gl.static_assert(BLOCK_M == 2 * WG_M, "two consumer warpgroups of 64 rows each")
    dtype: gl.constexpr = desc_q.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2] + desc_q.block_type.shape, desc_q.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + desc_k.block_type.shape, desc_k.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES] + desc_v.block_type.shape, desc_v.layout)
    if O_IN_Q:  # head dim 256: Q, O and two K/V stages of separate buffers would not fit
        o_smem = q_smem
    else:
        o_smem = gl.allocate_shared_memory(dtype, [2] + desc_o.block_type.shape, desc_o.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
        mbarrier.init(turn.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # both consumers read every K and V block
        mbarrier.init(v_empty.index(i), count=2)

    gl.warp_specialize([
        # The default partition (the kernel's own 4 warps) is consumer 0.
        (_fwd_consumer, (desc_o, LSE, q_smem, k_smem, v_smem, o_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                         v_empty, turn, seqlen_q, seqlen_k, n_heads, group, n_mblocks, n_bh, qk_scale, 0, HEAD_DIM,
                         BLOCK_M, BLOCK_N, NUM_STAGES, CAUSAL, EXP2_SPLIT, PINGPONG, O_IN_Q)),
        (_fwd_consumer, (desc_o, LSE, q_smem, k_smem, v_smem, o_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                         v_empty, turn, seqlen_q, seqlen_k, n_heads, group, n_mblocks, n_bh, qk_scale, 1, HEAD_DIM,
                         BLOCK_M, BLOCK_N, NUM_STAGES, CAUSAL, EXP2_SPLIT, PINGPONG, O_IN_Q)),
        (_fwd_producer, (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, k_empty, v_ready,
                         v_empty, seqlen_q, seqlen_k, n_heads, group, n_mblocks, n_bh, HEAD_DIM, BLOCK_M, BLOCK_N,
                         NUM_STAGES, CAUSAL)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
