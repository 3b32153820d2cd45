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
