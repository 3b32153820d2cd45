"""A tiled matmul with a planted bug chosen by BUG: 0 none, 1 the K tail unmasked, 2 the K loop steps by
half a block so every index is read twice."""

import triton
import triton.language as tl


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BUG: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    STEP: tl.constexpr = BLOCK_K // 2 if BUG == 2 else BLOCK_K
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, STEP)):
        if BUG == 1:
            a_mask = rm[:, None] < M
        else:
            a_mask = (rm[:, None] < M) & (rk[None, :] < K - k * STEP)
        a_tile = tl.load(a, mask=a_mask, other=0.0)
        b_tile = tl.load(b, mask=(rk[:, None] < K - k * STEP) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_tile, b_tile)
        a += STEP * stride_ak
        b += STEP * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
