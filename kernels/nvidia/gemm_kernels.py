"""The Hopper GEMM's Triton kernels: the persistent kernel (TMA or pointer loads, grouped tile
order, wgmma, the fused epilogue, split-K partial planes), the split-K reduction and the stream-K
schedule for small M, with the tile loads, stores and epilogue they share (the FP8 GEMM reuses
``grouped_tile`` and ``store_tile``). Launched by :mod:`ceiling.nvidia.gemm` and, on JAX arrays,
:mod:`ceiling.nvidia.gemm_jax`."""

from __future__ import annotations

import triton
import triton.language as tl

from ceiling.constants import SQRT1_2
from ceiling.nvidia.stream_k import fixup, range_start

_SQRT1_2 = tl.constexpr(SQRT1_2)
H100_H200_SMS = 132  # the SMs of the Hopper parts the schedules are sized for


def cdiv(a: int, b: int) -> int:
    """Host-side ceil division (``triton.cdiv`` is a slower constexpr-function wrapper on the host)."""
    return -(-a // b)


@triton.jit
def grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of ``tile_id`` in grouped order: GROUP_M tile-rows per column sweep."""
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    """bias and activation on the fp32 accumulator tile."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * _SQRT1_2))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
    return acc


@triton.jit
def load_a(a, batch, offs_m, offs_k, M, K, stride_ab, stride_am, stride_ak,
           BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
           A_TRANS: tl.constexpr, BATCHED: tl.constexpr, USE_TMA: tl.constexpr):
    """A tile (BLOCK_M, BLOCK_K).

    With TMA, ``a`` is a tensor descriptor; a transposed A is stored (K, M) and
    loaded as such. Without (the JAX path, see ``gemm_jax``), ``a`` is a pointer
    and the strides place the tile; masks zero the out-of-bounds part.
    """
    if USE_TMA:
        if A_TRANS:
            if BATCHED:
                t = a.load([batch, offs_k, offs_m]).reshape(BLOCK_K, BLOCK_M)
            else:
                t = a.load([offs_k, offs_m])
            return t.T
        else:
            if BATCHED:
                return a.load([batch, offs_m, offs_k]).reshape(BLOCK_M, BLOCK_K)
            else:
                return a.load([offs_m, offs_k])
    else:
        rm = offs_m + tl.arange(0, BLOCK_M)
        rk = offs_k + tl.arange(0, BLOCK_K)
        # 64-bit offsets: a row index times its stride passes 2^31 once an operand has 2^31 elements
        ptrs = a + (batch.to(tl.int64) * stride_ab + rm[:, None].to(tl.int64) * stride_am
                    + rk[None, :].to(tl.int64) * stride_ak)
        return tl.load(ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)


@triton.jit
def load_b(b, batch, offs_k, offs_n, K, N, stride_bb, stride_bk, stride_bn,
           BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
           B_TRANS: tl.constexpr, BATCHED: tl.constexpr, USE_TMA: tl.constexpr):
    """B tile (BLOCK_K, BLOCK_N); a transposed B (an nn.Linear weight) is stored (N, K)."""
    if USE_TMA:
        if B_TRANS:
            if BATCHED:
                t = b.load([batch, offs_n, offs_k]).reshape(BLOCK_N, BLOCK_K)
            else:
                t = b.load([offs_n, offs_k])
            return t.T
        else:
            if BATCHED:
                return b.load([batch, offs_k, offs_n]).reshape(BLOCK_K, BLOCK_N)
            else:
                return b.load([offs_k, offs_n])
    else:
        rk = offs_k + tl.arange(0, BLOCK_K)
        rn = offs_n + tl.arange(0, BLOCK_N)
        ptrs = b + (batch.to(tl.int64) * stride_bb + rk[:, None].to(tl.int64) * stride_bk
                    + rn[None, :].to(tl.int64) * stride_bn)
        return tl.load(ptrs, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)


@triton.jit
def store_c(c, batch, offs_m, offs_n, tile, rows, N, stride_cb, stride_cm,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BATCHED: tl.constexpr, USE_TMA: tl.constexpr):
    """Store a (BLOCK_M, BLOCK_N) tile at (offs_m, offs_n); ``rows`` bounds the rows written."""
    if USE_TMA:
        if BATCHED:
            c.store([batch, offs_m, offs_n], tile.reshape(1, BLOCK_M, BLOCK_N))
        else:
            c.store([offs_m, offs_n], tile)
    else:
        rm = offs_m + tl.arange(0, BLOCK_M)
        rn = offs_n + tl.arange(0, BLOCK_N)
        ptrs = c + (batch.to(tl.int64) * stride_cb + rm[:, None].to(tl.int64) * stride_cm + rn[None, :])
        tl.store(ptrs, tile, mask=(rm[:, None] < rows) & (rn[None, :] < N))


@triton.jit
def gemm_kernel(
    a, b, c, bias_ptr,
    M, N, K, BATCH, PLANE_ROWS,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm,
    A_TRANS: tl.constexpr, B_TRANS: tl.constexpr, BATCHED: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, SPLIT_K: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    k_tiles_per_split = tl.cdiv(k_tiles, SPLIT_K)
    tiles_per_batch = num_pid_m * num_pid_n
    num_tiles = tiles_per_batch * BATCH
    # With SPLIT_K > 1 each work item is (K slice, tile); the slices' fp32 partial
    # tiles go to a workspace of SPLIT_K stacked planes of PLANE_ROWS (= M) rows that
    # splitk_reduce_kernel sums and finishes. A plane is addressed as the leading
    # index of a 3-D (SPLIT_K, M, N) view, so rows past M (most of a tile when M is
    # skinny) are clipped instead of written.
    num_items = num_tiles * SPLIT_K
    if USE_TMA:
        out_dtype = c.dtype
    else:
        out_dtype = c.dtype.element_ty

    # The epilogue trails the main loop by one tile in the flattened schedule, so it
    # recomputes its own tile coordinates from a second counter.
    tile_id_c = start_pid - NUM_SMS
    # Flattening lets the TMA pipeline run across tiles; the pointer path pipelines only
    # its K loop (cp.async), which flattening would prevent.
    for item in tl.range(start_pid, num_items, NUM_SMS, flatten=USE_TMA, warp_specialize=WARP_SPECIALIZE):
        tile_id = item % num_tiles
        k_first = (item // num_tiles) * k_tiles_per_split
        k_last = min(k_first + k_tiles_per_split, k_tiles)
        batch = tile_id // tiles_per_batch
        pid_m, pid_n = grouped_tile(tile_id % tiles_per_batch, num_pid_m, num_pid_n, GROUP_M)
        offs_am = pid_m * BLOCK_M
        offs_bn = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_first, k_last):
            offs_k = ki * BLOCK_K
            a_tile = load_a(a, batch, offs_am, offs_k, M, K, stride_ab, stride_am, stride_ak,
                            BLOCK_M, BLOCK_K, A_TRANS, BATCHED, USE_TMA)
            b_tile = load_b(b, batch, offs_k, offs_bn, K, N, stride_bb, stride_bk, stride_bn,
                            BLOCK_K, BLOCK_N, B_TRANS, BATCHED, USE_TMA)
            acc = tl.dot(a_tile, b_tile, acc)

        tile_id_c += NUM_SMS
        split_c = tile_id_c // num_tiles
        batch_c = (tile_id_c % num_tiles) // tiles_per_batch
        pid_m, pid_n = grouped_tile(tile_id_c % tiles_per_batch, num_pid_m, num_pid_n, GROUP_M)
        offs_cm = pid_m * BLOCK_M
        offs_cn = pid_n * BLOCK_N
        if SPLIT_K > 1:  # a partial sum: no epilogue yet
            store_c(c, split_c, offs_cm, offs_cn, acc, M, N, PLANE_ROWS * stride_cm, stride_cm,
                    BLOCK_M, BLOCK_N, True, USE_TMA)
        elif EPILOGUE_SUBTILE:
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            acc0, acc1 = tl.split(halves)
            offs_n0 = offs_cn + tl.arange(0, BLOCK_N // 2)
            c0 = epilogue(acc0, bias_ptr, offs_n0, N, HAS_BIAS, ACTIVATION).to(out_dtype)
            store_c(c, batch_c, offs_cm, offs_cn, c0, M, N, stride_cb, stride_cm,
                    BLOCK_M, BLOCK_N // 2, BATCHED, USE_TMA)
            c1 = epilogue(acc1, bias_ptr, offs_n0 + BLOCK_N // 2, N, HAS_BIAS, ACTIVATION).to(out_dtype)
            store_c(c, batch_c, offs_cm, offs_cn + BLOCK_N // 2, c1, M, N, stride_cb, stride_cm,
                    BLOCK_M, BLOCK_N // 2, BATCHED, USE_TMA)
        else:
            offs_n = offs_cn + tl.arange(0, BLOCK_N)
            tile = epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION).to(out_dtype)
            store_c(c, batch_c, offs_cm, offs_cn, tile, M, N, stride_cb, stride_cm,
                    BLOCK_M, BLOCK_N, BATCHED, USE_TMA)


@triton.jit
def splitk_reduce_kernel(ws_ptr, c_ptr, bias_ptr, M, N, PLANE_ROWS, stride_ws, stride_cm,
                         SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Sum the SPLIT_K partial planes, then bias, activation and cast. Row offsets are 64-bit: SPLIT_K
    planes of M rows times the row stride pass 2^31 elements at shapes the space allows."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for split in range(SPLIT_K):
        rows = (split * PLANE_ROWS + offs_m).to(tl.int64)
        acc += tl.load(ws_ptr + rows[:, None] * stride_ws + offs_n[None, :], mask=mask, other=0.0)
    acc = epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    tl.store(c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def store_tile(acc, c, bias_ptr, offs_m, offs_n, M, N,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
               EPILOGUE_SUBTILE: tl.constexpr):
    """Epilogue and TMA store of one finished 2-D tile (in two halves if EPILOGUE_SUBTILE)."""
    if EPILOGUE_SUBTILE:
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(halves)
        cols0 = offs_n + tl.arange(0, BLOCK_N // 2)
        c.store([offs_m, offs_n], epilogue(acc0, bias_ptr, cols0, N, HAS_BIAS, ACTIVATION).to(c.dtype))
        c.store([offs_m, offs_n + BLOCK_N // 2],
                epilogue(acc1, bias_ptr, cols0 + BLOCK_N // 2, N, HAS_BIAS, ACTIVATION).to(c.dtype))
    else:
        cols = offs_n + tl.arange(0, BLOCK_N)
        c.store([offs_m, offs_n], epilogue(acc, bias_ptr, cols, N, HAS_BIAS, ACTIVATION).to(c.dtype))


@triton.jit
def gemm_streamk_kernel(
    a, b, c, bias_ptr, ws_ptr, sem_ptr, M, N, K,
    A_TRANS: tl.constexpr, B_TRANS: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
):
    """The small-M schedule: program ``pid`` runs the steps [range_start(pid), range_start(pid + 1))
    of the (tile, K step) space: whole tiles, and at most a split tile at each end, whose
    partials the last contributor sums (:func:`ceiling.nvidia.stream_k.fixup`). 2-D, TMA only."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    total = num_pid_m * num_pid_n * k_tiles
    begin = range_start(pid, total, NUM_SMS)
    end = range_start(pid + 1, total, NUM_SMS)
    for tile in tl.range(begin // k_tiles, (end - 1) // k_tiles + 1, flatten=True):
        k_lo = tl.maximum(begin - tile * k_tiles, 0)
        k_hi = tl.minimum(end - tile * k_tiles, k_tiles)
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_lo, k_hi):
            a_tile = load_a(a, 0, offs_m, ki * BLOCK_K, M, K, 0, 0, 0, BLOCK_M, BLOCK_K, A_TRANS, False, True)
            b_tile = load_b(b, 0, ki * BLOCK_K, offs_n, K, N, 0, 0, 0, BLOCK_K, BLOCK_N, B_TRANS, False, True)
            acc = tl.dot(a_tile, b_tile, acc)
        if (k_lo == 0) & (k_hi == k_tiles):  # the whole tile ran here
            store_tile(acc, c, bias_ptr, offs_m, offs_n, M, N, BLOCK_M, BLOCK_N, HAS_BIAS, ACTIVATION,
                       EPILOGUE_SUBTILE)
        else:
            is_last, summed = fixup(acc, tile, pid, begin, k_tiles, total, ws_ptr, sem_ptr, M - offs_m,
                                    NUM_SMS, BLOCK_M, BLOCK_N)
            if is_last:
                store_tile(summed, c, bias_ptr, offs_m, offs_n, M, N, BLOCK_M, BLOCK_N, HAS_BIAS, ACTIVATION,
                           EPILOGUE_SUBTILE)
