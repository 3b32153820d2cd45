"""Small kernels with one planted bug each, and their correct twins, for tests/test_verify.py."""

import triton
import triton.language as tl


@triton.jit
def copy_ok(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def copy_off_by_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs <= n), mask=offs < n)


@triton.jit
def copy_unmasked_tail(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)


@triton.jit
def rows_wrap(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    # row * cols in 32 bits: wraps once rows * cols passes 2**31
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    tl.store(y_ptr + row * cols + c, tl.load(x_ptr + row * cols + c, mask=c < cols), mask=c < cols)


@triton.jit
def rows_wide(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    tl.store(y_ptr + row * cols + c, tl.load(x_ptr + row * cols + c, mask=c < cols), mask=c < cols)


@triton.jit
def copy_overlap(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # each program writes one element past its block: the next program writes it too
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + 1
    tl.store(y_ptr + offs - 1, tl.load(x_ptr + offs - 1, mask=offs - 1 < n), mask=offs - 1 < n)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs - 1, mask=offs < n), mask=offs < n)


@triton.jit
def copy_hole(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # the last lane of every block is never written
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = (offs < n) & (tl.arange(0, BLOCK) < BLOCK - 1)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def strided_loop_ok(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # a grid-stride loop: the pointer advances by the grid's span each iteration
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, n, step):
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)
        offs += step


@triton.jit
def _row_sweep(y_ptr, R, C, START: tl.constexpr, STOP_SHORT: tl.constexpr, BLOCK_R: tl.constexpr,
               BLOCK_C: tl.constexpr):
    # a block of rows per program, stored one column block per loop iteration, as the FP8 row quantizer's
    # second sweep does
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    for c0 in range(START, C - STOP_SHORT, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = (rows[:, None] < R) & (cols[None, :] < C)
        tl.store(y_ptr + rows[:, None] * C + cols[None, :], tl.zeros((BLOCK_R, BLOCK_C), tl.float32), mask=mask)


@triton.jit
def row_sweep_ok(y_ptr, R, C, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    _row_sweep(y_ptr, R, C, 0, 0, BLOCK_R, BLOCK_C)


@triton.jit
def row_sweep_first_block_skipped(y_ptr, R, C, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    _row_sweep(y_ptr, R, C, BLOCK_C, 0, BLOCK_R, BLOCK_C)


@triton.jit
def row_sweep_stops_short(y_ptr, R, C, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # the loop ends before C - 1: when C is one past a block boundary, the last column is never stored
    _row_sweep(y_ptr, R, C, 0, 1, BLOCK_R, BLOCK_C)


@triton.jit
def _halves(part_ptr, C, SHORT: tl.constexpr, BLOCK: tl.constexpr):
    # each program stores a (2, C) row of partials as two stores, one per half, as the multiplicative
    # update's LayerNorm backward does; SHORT leaves the second half's last element unstored
    offs = tl.arange(0, BLOCK)
    row = part_ptr + tl.program_id(0) * 2 * C
    tl.store(row + offs, tl.zeros((BLOCK,), tl.float32), mask=offs < C)
    tl.store(row + C + offs, tl.zeros((BLOCK,), tl.float32), mask=offs < C - SHORT)


@triton.jit
def halves_ok(part_ptr, C, BLOCK: tl.constexpr):
    _halves(part_ptr, C, 0, BLOCK)


@triton.jit
def halves_second_short(part_ptr, C, BLOCK: tl.constexpr):
    _halves(part_ptr, C, 1, BLOCK)


@triton.jit
def _pair_rows(o_ptr, N, H, D, DROP_HEAD: tl.constexpr, LAST_QUERY: tl.constexpr, BLOCK_M: tl.constexpr,
               HEAD_DIM: tl.constexpr):
    # one (batch, i, head) pair row of a contiguous (B, N, H, N, D) tensor per program on axis 1, BLOCK_M of
    # its queries on axis 0, addressed as triangle attention's kernels do (row * N * D: a product stride);
    # DROP_HEAD writes every head's row into head 0's, LAST_QUERY leaves the last query unstored
    r = tl.program_id(1).to(tl.int64)
    if DROP_HEAD:
        r = r // H * H
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = (offs_m < N - LAST_QUERY)[:, None] & (offs_d < D)[None, :]
    tl.store(o_ptr + r * N * D + offs_m[:, None] * D + offs_d[None, :], tl.zeros((BLOCK_M, HEAD_DIM), tl.float32),
             mask=mask)


@triton.jit
def pair_rows_ok(o_ptr, N, H, D, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    _pair_rows(o_ptr, N, H, D, False, 0, BLOCK_M, HEAD_DIM)


@triton.jit
def pair_rows_head_dropped(o_ptr, N, H, D, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    _pair_rows(o_ptr, N, H, D, True, 0, BLOCK_M, HEAD_DIM)


@triton.jit
def pair_rows_last_query_missed(o_ptr, N, H, D, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    _pair_rows(o_ptr, N, H, D, False, 1, BLOCK_M, HEAD_DIM)


@triton.jit
def _grouped_heads(k_ptr, o_ptr, S, H, group, stride_kb, stride_ks, stride_ob, stride_os, SHIFT: tl.constexpr,
                   BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr):
    # grouped-query heads as attention's kernels address them: program (row block, batch * H + head) reads
    # the rows of key head h // group from (B, S, HK, D) and writes them to (B, S, H, D); SHIFT maps
    # head h to (h + 1) // group, past the last key head when group is 1
    pid = tl.program_id(1)
    b = pid // H
    h = pid % H
    hk = (h + SHIFT) // group
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = rows[:, None] < S
    x = tl.load(k_ptr + b.to(tl.int64) * stride_kb + hk * HEAD_DIM + rows[:, None] * stride_ks + offs_d[None, :],
                mask=mask)
    tl.store(o_ptr + b.to(tl.int64) * stride_ob + h * HEAD_DIM + rows[:, None] * stride_os + offs_d[None, :], x,
             mask=mask)


@triton.jit
def grouped_heads_ok(k_ptr, o_ptr, S, H, group, stride_kb, stride_ks, stride_ob, stride_os, BLOCK: tl.constexpr,
                     HEAD_DIM: tl.constexpr):
    _grouped_heads(k_ptr, o_ptr, S, H, group, stride_kb, stride_ks, stride_ob, stride_os, 0, BLOCK, HEAD_DIM)


@triton.jit
def grouped_heads_shifted(k_ptr, o_ptr, S, H, group, stride_kb, stride_ks, stride_ob, stride_os, BLOCK: tl.constexpr,
                          HEAD_DIM: tl.constexpr):
    _grouped_heads(k_ptr, o_ptr, S, H, group, stride_kb, stride_ks, stride_ob, stride_os, 1, BLOCK, HEAD_DIM)


@triton.jit
def _key_masked_copy(x_ptr, keep_ptr, y_ptr, n, PAST_END: tl.constexpr, BLOCK: tl.constexpr):
    # the mask ANDs a bound with a loaded flag (a key mask), which the encoder cannot read: the bound alone
    # bounds it from above, enough for bounds and race; PAST_END lets the bound run one past the end
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = tl.load(keep_ptr + offs, mask=offs < n, other=0) != 0
    m = (offs < n + PAST_END) & keep
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def key_masked_copy_ok(x_ptr, keep_ptr, y_ptr, n, BLOCK: tl.constexpr):
    _key_masked_copy(x_ptr, keep_ptr, y_ptr, n, 0, BLOCK)


@triton.jit
def key_masked_copy_past_end(x_ptr, keep_ptr, y_ptr, n, BLOCK: tl.constexpr):
    _key_masked_copy(x_ptr, keep_ptr, y_ptr, n, 1, BLOCK)


@triton.jit
def _flat_rows_tile(y_ptr, M, C, LAST_ROW: tl.constexpr, COL_STEP: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    # (batch, row) flattened into one row index over a contiguous (B, R, C) output, the program id split
    # into (row tile, column tile) by division, as the multiplicative update's output kernel does
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(C, BLOCK_N)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * COL_STEP + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M - LAST_ROW) & (cols[None, :] < C)
    tl.store(y_ptr + rows[:, None] * C + cols[None, :], tl.zeros((BLOCK_M, BLOCK_N), tl.float32), mask=mask)


@triton.jit
def flat_rows_ok(y_ptr, M, C, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _flat_rows_tile(y_ptr, M, C, 0, BLOCK_N, BLOCK_M, BLOCK_N)


@triton.jit
def flat_rows_last_row_missed(y_ptr, M, C, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _flat_rows_tile(y_ptr, M, C, 1, BLOCK_N, BLOCK_M, BLOCK_N)


@triton.jit
def flat_rows_overlap(y_ptr, M, C, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # column tiles step by half a tile: neighbours store the same columns
    _flat_rows_tile(y_ptr, M, C, 0, BLOCK_N // 2, BLOCK_M, BLOCK_N)
