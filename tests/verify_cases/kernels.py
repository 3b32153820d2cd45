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
