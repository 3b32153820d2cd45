"""The scale kinds of ``ceiling.scaled_gemm`` applied inside a GEMM kernel, shared by the Hopper and
CDNA3 FP8 kernels: a kind constant along K (``tensor``, ``row``) multiplies the finished
accumulator once (:func:`output_scales`); one that changes every 128 of K (``1x128``,
``128x128``) multiplies each promoted partial sum by its K block's factor (:func:`promote`);
scales are read through pointers and strides (a's over rows and K blocks, b's over K blocks and
columns).
"""

from __future__ import annotations

import triton
import triton.language as tl

K_VARYING = ("1x128", "128x128")  # scale kinds that change along K: applied at each promotion
SCALE_GROUP = tl.constexpr(128)


@triton.jit
def row_block_scales(scale_ptr, offs, kb, LIMIT, stride_outer, stride_k,
                     BLOCK: tl.constexpr, KIND: tl.constexpr):
    """The K block ``kb``'s scales of the BLOCK rows (of a) or columns (of b) from ``offs``: a vector
    for 1x128, and for 128x128 a vector of the one or two 128-blocks the tile spans."""
    idx = offs + tl.arange(0, BLOCK)
    outer = idx if KIND == "1x128" else idx // SCALE_GROUP
    return tl.load(scale_ptr + outer * stride_outer + kb * stride_k, mask=idx < LIMIT, other=0.0)


@triton.jit
def promote(acc, part, a_scale_ptr, b_scale_ptr, offs_m, offs_n, k0, M, N,
            stride_sam, stride_sak, stride_sbk, stride_sbn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, A_SCALE: tl.constexpr, B_SCALE: tl.constexpr):
    """``acc + part * s``: the partial of the 128-deep K block holding k0 times that block's scales.

    Where one operand's scales are uniform over the tile (a 128x128 block covers every row or column
    of it: the tile divides 128) they collapse to one number per tile, so the promotion costs one
    FMA an element, as DeepGEMM's does; only two per-element scale vectors need the outer product.
    """
    kb = k0 // SCALE_GROUP
    A_VARIES: tl.constexpr = (A_SCALE == "1x128") or (A_SCALE == "128x128")
    B_VARIES: tl.constexpr = (B_SCALE == "1x128") or (B_SCALE == "128x128")
    A_UNIFORM: tl.constexpr = (A_SCALE == "128x128") and (SCALE_GROUP % BLOCK_M == 0)
    B_UNIFORM: tl.constexpr = (B_SCALE == "128x128") and (SCALE_GROUP % BLOCK_N == 0)
    if not A_VARIES and not B_VARIES:
        return acc + part
    sa = 1.0
    sb = 1.0
    if A_UNIFORM:
        sa = tl.load(a_scale_ptr + (offs_m // SCALE_GROUP) * stride_sam + kb * stride_sak)
    if B_UNIFORM:
        sb = tl.load(b_scale_ptr + kb * stride_sbk + (offs_n // SCALE_GROUP) * stride_sbn)
    if A_VARIES and not A_UNIFORM:
        rows = row_block_scales(a_scale_ptr, offs_m, kb, M, stride_sam, stride_sak, BLOCK_M, A_SCALE) * sb
        if B_VARIES and not B_UNIFORM:
            cols = row_block_scales(b_scale_ptr, offs_n, kb, N, stride_sbn, stride_sbk, BLOCK_N, B_SCALE)
            return acc + part * rows[:, None] * cols[None, :]
        return acc + part * rows[:, None]
    if B_VARIES and not B_UNIFORM:
        cols = row_block_scales(b_scale_ptr, offs_n, kb, N, stride_sbn, stride_sbk, BLOCK_N, B_SCALE) * sa
        return acc + part * cols[None, :]
    return acc + part * (sa * sb)


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
