"""The scale kinds of ``kernels.scaled_gemm`` applied inside a GEMM kernel: Triton helpers shared by
the Hopper (``kernels.nvidia.gemm_fp8``) and CDNA3 (``kernels.amd.gemm_fp8``) kernels.

A kind that is constant along K (``tensor``, ``row``) factors out of the K sum and multiplies
the finished accumulator once (:func:`output_scales`); a kind that changes every 128 of K
(``1x128``, ``128x128``) multiplies each promoted partial sum by its K block's factor
(:func:`k_block_scales`). Scales are read through pointers and strides: a's scales over
(rows of a, K blocks), b's over (K blocks, columns of b).
"""

from __future__ import annotations

import triton
import triton.language as tl

K_VARYING = ("1x128", "128x128")  # scale kinds that change along K: applied at each promotion
SCALE_GROUP = tl.constexpr(128)


@triton.jit
def k_block_scales(a_scale_ptr, b_scale_ptr, offs_m, offs_n, k0, M, N,
                   stride_sam, stride_sak, stride_sbk, stride_sbn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, A_SCALE: tl.constexpr, B_SCALE: tl.constexpr):
    """The (BLOCK_M, BLOCK_N) factor of the K-varying scales for the 128-deep K block holding k0."""
    kb = k0 // SCALE_GROUP
    rows = offs_m + tl.arange(0, BLOCK_M)
    cols = offs_n + tl.arange(0, BLOCK_N)
    if A_SCALE == "1x128":
        sa = tl.load(a_scale_ptr + rows * stride_sam + kb * stride_sak, mask=rows < M, other=0.0)
    elif A_SCALE == "128x128":
        sa = tl.load(a_scale_ptr + (rows // SCALE_GROUP) * stride_sam + kb * stride_sak, mask=rows < M, other=0.0)
    else:
        sa = tl.full((BLOCK_M,), 1.0, tl.float32)
    if B_SCALE == "1x128":
        sb = tl.load(b_scale_ptr + kb * stride_sbk + cols * stride_sbn, mask=cols < N, other=0.0)
    elif B_SCALE == "128x128":
        sb = tl.load(b_scale_ptr + kb * stride_sbk + (cols // SCALE_GROUP) * stride_sbn, mask=cols < N, other=0.0)
    else:
        sb = tl.full((BLOCK_N,), 1.0, tl.float32)
    return sa[:, None] * sb[None, :]


@triton.jit
def output_scales(acc, a_scale_ptr, b_scale_ptr, offs_m, offs_n, M, N, stride_sam, stride_sbn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, A_SCALE: tl.constexpr, B_SCALE: tl.constexpr):
    """The K-invariant scales, once per output element."""
    if A_SCALE == "tensor":
        acc = acc * tl.load(a_scale_ptr)
    elif A_SCALE == "row":
        rows = offs_m + tl.arange(0, BLOCK_M)
        acc = acc * tl.load(a_scale_ptr + rows * stride_sam, mask=rows < M, other=0.0)[:, None]
    if B_SCALE == "tensor":
        acc = acc * tl.load(b_scale_ptr)
    elif B_SCALE == "row":
        cols = offs_n + tl.arange(0, BLOCK_N)
        acc = acc * tl.load(b_scale_ptr + cols * stride_sbn, mask=cols < N, other=0.0)[None, :]
    return acc
