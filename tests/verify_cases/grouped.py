"""Grouped-ordering matmuls (one program per C tile, GROUP_M rows of tiles at a time): the correct one,
and one whose last group is not clipped to the tiles that remain."""

import triton
import triton.language as tl


@triton.jit
def _tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, CLIP: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    if CLIP:
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    else:
        group_size_m = GROUP_M
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def grouped_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   CLIP: tl.constexpr):
    pid_m, pid_n = _tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M, CLIP)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a_tile = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BLOCK_K), other=0.0)
        b_tile = tl.load(b, mask=(rk[:, None] < K - k * BLOCK_K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_tile, b_tile)
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
