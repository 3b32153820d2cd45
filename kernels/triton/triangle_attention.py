"""Triangle attention, forward and backward, in Triton (flash-style): the kernels and their launches,
which Hopper and CDNA3 both run.

The problem is B*N*H independent attentions of length N and head dim D (32 in
AlphaFold 3), one per (batch, row i, head), that share one (B, 1, H, N, N) bias.
With D = 32 each logit costs only 64 FLOPs of MMA against one exp, so the kernels
are exp-bound rather than MMA-bound: they work in the exp2 domain with
``scale * log2(e)`` folded into one multiply, and keep the tiles square and
moderate (64x64) so the bias tile (fp32, read once per row) and the softmax
registers fit without spilling.

Kernels (one program per tile; q, k, v, o contiguous (B, N, H, N, D), so row
``r = (b*N + i)*H + h`` starts at ``r*N*D``):

* ``fwd_kernel``: online softmax over key blocks; writes O and the natural-log
  LSE (+inf for a row with no valid key, whose output is written as zeros).
  ``fwd_rows_kernel`` (config ``ROWS`` > 1) is the same for several rows i per
  program, reading each bias tile once for all of them.
* ``bwd_preprocess_kernel``: ``delta = rowsum(dO * O)``.
* ``bwd_dkdv_kernel``: per key block, loops over query blocks (FA2 order).
* ``bwd_dq_kernel``: per query block, loops over key blocks.
* ``bwd_dbias_kernel``: ``dbias[b,h,j,k] = sum_i dS[b,i,h,j,k]``.

Why a separate dbias kernel rather than atomics: the bias is shared by all N rows,
so its gradient is a reduction over i of an (N, N) tile per row. Atomic adds from
the dq kernel would issue H*N^3 fp32 atomics (226 M at N = 384), all N rows
colliding on the same (B, H, N, N) addresses, and the sum would change from run to
run. Instead one program owns a (BLOCK_M, BLOCK_N) tile of dbias, loops over the N
rows recomputing P and dP for that tile (two small MMAs and one exp per element,
the same work as a forward pass), accumulates dS in fp32 registers and writes the
tile once: deterministic, no extra memory beyond the (B, 1, H, N, N) output, and
the q/k/v/dO tiles it rereads stay in L2. The price is one more exp pass.

Configs per device are data, one table per vendor (``kernels/nvidia/configs/`` and
``kernels/amd/configs/triangle_attention.json``, chosen by ``kernels.nvidia.triangle_attention``
and ``kernels.amd.triangle_attention``, which pass it in as ``table``); a table falls back to its
``default`` entry for devices nobody tuned.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels.triton.attention import softmax_exp2
from kernels.triton_runtime import launcher

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
KERNELS = ("fwd", "bwd_dkdv", "bwd_dq", "bwd_dbias")


@triton.jit
def fwd_kernel(Q, K, V, Bias, Mask, O, LSE, N, H, D, qk_scale,
               HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               EXP2_SPLIT: tl.constexpr = False):
    """Flash attention over one (batch, i, head) row of the pair stack, the fp32 bias added to
    the scores. At head dim 32 a score costs 64 tensor-core multiply-adds but one exponential,
    so the exponentials pace a step; ``EXP2_SPLIT`` computes half of them on the FMA pipe
    (:func:`kernels.triton.attention.softmax_exp2`)."""
    pid_m = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)  # (b*N + i)*H + h
    h = r % H
    bi = r // H
    b = bi // N
    row = r * N * D
    bias_base = (b * H + h) * N * N

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    in_m = offs_m < N
    in_d = offs_d < D
    q = tl.load(Q + row + offs_m[:, None] * D + offs_d[None, :], mask=in_m[:, None] & in_d[None, :], other=0.0)

    # -1e30, not -inf, so that alpha = exp2(m_old - m_new) stays finite while a
    # row has seen only masked keys (their logits are -inf and contribute 0).
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, N, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        kv_mask = in_n[:, None] & in_d[None, :]
        k = tl.load(K + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        bias = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :],
                       mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + bias * 1.4426950408889634
        valid = in_n
        if HAS_MASK:
            valid = valid & (tl.load(Mask + bi * N + offs_n, mask=in_n, other=0) != 0)
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = softmax_exp2(s - m_new[:, None], EXP2_SPLIT)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    has_any = l_i > 0.0
    l_safe = tl.where(has_any, l_i, 1.0)
    out = tl.where(has_any[:, None], acc / l_safe[:, None], 0.0)
    lse = tl.where(has_any, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("inf"))
    tl.store(O + row + offs_m[:, None] * D + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=in_m[:, None] & in_d[None, :])
    tl.store(LSE + r * N + offs_m, lse, mask=in_m)


@triton.jit
def fwd_rows_kernel(Q, K, V, Bias, Mask, O, LSE, N, H, D, qk_scale,
                    HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, ROWS: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The forward for ROWS pair rows i at once, sharing each bias tile between them.

    Every row reads the same (BLOCK_M, N) slice of the fp32 bias; at d = 32 that
    slice is twice the bytes of the row's own k and v, so ``fwd_kernel`` moves
    most of its L2 traffic as bias. Here one program owns rows i0..i0+ROWS-1 of one
    (batch, head) and loads each bias tile once for all of them; the per-row
    products are batched dots over a leading ROWS dimension (mma.sync rather than
    wgmma, which takes no batch dimension).
    """
    pid_m = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)  # ((b * G) + g) * H + h, G = cdiv(N, ROWS)
    G = tl.cdiv(N, ROWS)
    h = pid % H
    g = (pid // H) % G
    b = pid // (H * G)
    bias_base = (b * H + h) * N * N

    offs_r = tl.arange(0, ROWS)
    rows_i = g * ROWS + offs_r
    in_r = rows_i < N
    bi = b * N + rows_i                       # (ROWS,)
    row = (bi * H + h) * N * D                # (ROWS,) int64
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    in_m = offs_m < N
    in_d = offs_d < D
    q_mask = in_r[:, None, None] & in_m[None, :, None] & in_d[None, None, :]
    q = tl.load(Q + row[:, None, None] + offs_m[None, :, None] * D + offs_d[None, None, :], mask=q_mask, other=0.0)

    m_i = tl.full([ROWS, BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([ROWS, BLOCK_M], tl.float32)
    acc = tl.zeros([ROWS, BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, N, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        kv_mask = in_r[:, None, None] & in_n[None, :, None] & in_d[None, None, :]
        kv_off = row[:, None, None] + offs_n[None, :, None] * D + offs_d[None, None, :]
        k = tl.load(K + kv_off, mask=kv_mask, other=0.0)
        v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
        bias = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :],
                       mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32)
        s = tl.dot(q, tl.permute(k, (0, 2, 1)), input_precision=PRECISION) * qk_scale
        s += (bias * 1.4426950408889634)[None, :, :]
        valid = in_n[None, :] & in_r[:, None]
        if HAS_MASK:
            key_ok = tl.load(Mask + bi[:, None] * N + offs_n[None, :], mask=in_r[:, None] & in_n[None, :], other=0)
            valid = valid & (key_ok != 0)
        s = tl.where(valid[:, None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 2))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, :, None])
        l_i = l_i * alpha + tl.sum(p, 2)
        acc = acc * alpha[:, :, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    has_any = l_i > 0.0
    l_safe = tl.where(has_any, l_i, 1.0)
    out = tl.where(has_any[:, :, None], acc / l_safe[:, :, None], 0.0)
    lse = tl.where(has_any, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("inf"))
    tl.store(O + row[:, None, None] + offs_m[None, :, None] * D + offs_d[None, None, :],
             out.to(O.dtype.element_ty), mask=q_mask)
    lse_row = (bi * H + h) * N
    tl.store(LSE + lse_row[:, None] + offs_m[None, :], lse, mask=in_r[:, None] & in_m[None, :])


@triton.jit
def bwd_preprocess_kernel(O, DO, Delta, N, D, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    pid_m = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    msk = (offs_m < N)[:, None] & (offs_d < D)[None, :]
    ptr = r * N * D + offs_m[:, None] * D + offs_d[None, :]
    o = tl.load(O + ptr, mask=msk, other=0.0).to(tl.float32)
    do = tl.load(DO + ptr, mask=msk, other=0.0).to(tl.float32)
    tl.store(Delta + r * N + offs_m, tl.sum(o * do, 1), mask=offs_m < N)


@triton.jit
def probs_and_dscores(q, k, v, do, bias, lse2, delta, valid_n, qk_scale, PRECISION: tl.constexpr):
    """P and dS (BLOCK_M, BLOCK_N) of one tile, recomputed from the saved LSE.

    A row with no valid key has lse = +inf, so P, and with it dS, is exactly 0.
    """
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + bias * 1.4426950408889634
    s = tl.where(valid_n[None, :], s, float("-inf"))
    p = tl.exp2(s - lse2[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    return p, ds


@triton.jit
def key_validity(Mask, bi, offs_n, N, HAS_MASK: tl.constexpr):
    valid = offs_n < N
    if HAS_MASK:
        valid = valid & (tl.load(Mask + bi * N + offs_n, mask=offs_n < N, other=0) != 0)
    return valid


@triton.jit
def bwd_dkdv_kernel(Q, K, V, Bias, Mask, DO, LSE, Delta, DK, DV, N, H, D, qk_scale, scale,
                    HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                    DQ_ATOMIC: tl.constexpr = False, DQ32=None):
    """dK, dV for BLOCK_N keys of one (batch, i, head) row, looping over its query blocks.

    With ``DQ_ATOMIC`` it also adds this key block's share of dQ, ``scale * dS K``, into the
    float32 DQ32 (laid out as q, zeroed by the caller) with atomics, and the dq kernel is not
    run: one more dot here instead of that kernel's second recomputation of S, P and dP. The
    programs of one row's key blocks run side by side, so each starts its query loop at a
    different block (``pid_n``) to spread their atomics over different rows of dQ. The order
    of the additions varies from run to run, so dQ is then not bitwise reproducible; dK and dV
    still are."""
    pid_n = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    h = r % H
    bi = r // H
    b = bi // N
    row = r * N * D
    bias_base = (b * H + h) * N * N

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    in_n = offs_n < N
    in_d = offs_d < D
    kv_mask = in_n[:, None] & in_d[None, :]
    k = tl.load(K + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
    valid_n = key_validity(Mask, bi, offs_n, N, HAS_MASK)

    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    num_m = tl.cdiv(N, BLOCK_M)
    for step in range(0, num_m):
        block_m = step
        if DQ_ATOMIC:
            block_m = (step + pid_n) % num_m
        offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
        in_m = offs_m < N
        q_mask = in_m[:, None] & in_d[None, :]
        q = tl.load(Q + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        lse2 = tl.load(LSE + r * N + offs_m, mask=in_m, other=float("inf")) * 1.4426950408889634
        delta = tl.load(Delta + r * N + offs_m, mask=in_m, other=0.0)
        bias = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :],
                       mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32)
        p, ds = probs_and_dscores(q, k, v, do, bias, lse2, delta, valid_n, qk_scale, PRECISION)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
        ds_lo = ds.to(q.dtype)
        dk += tl.dot(tl.trans(ds_lo), q, input_precision=PRECISION)
        if DQ_ATOMIC:
            dq = tl.dot(ds_lo, k, input_precision=PRECISION) * scale
            tl.atomic_add(DQ32 + row + offs_m[:, None] * D + offs_d[None, :], dq, mask=q_mask, sem="relaxed")
    tl.store(DK + row + offs_n[:, None] * D + offs_d[None, :], (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + row + offs_n[:, None] * D + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def bwd_dq_kernel(Q, K, V, Bias, Mask, DO, LSE, Delta, DQ, N, H, D, qk_scale, scale,
                  HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    pid_m = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    h = r % H
    bi = r // H
    b = bi // N
    row = r * N * D
    bias_base = (b * H + h) * N * N

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    in_m = offs_m < N
    in_d = offs_d < D
    q_mask = in_m[:, None] & in_d[None, :]
    q = tl.load(Q + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
    lse2 = tl.load(LSE + r * N + offs_m, mask=in_m, other=float("inf")) * 1.4426950408889634
    delta = tl.load(Delta + r * N + offs_m, mask=in_m, other=0.0)

    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, N, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        kv_mask = in_n[:, None] & in_d[None, :]
        k = tl.load(K + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        valid_n = key_validity(Mask, bi, offs_n, N, HAS_MASK)
        bias = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :],
                       mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32)
        p, ds = probs_and_dscores(q, k, v, do, bias, lse2, delta, valid_n, qk_scale, PRECISION)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + row + offs_m[:, None] * D + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=q_mask)


@triton.jit
def bwd_dbias_kernel(Q, K, V, Bias, Mask, DO, LSE, Delta, DBias, N, H, D, qk_scale,
                     HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     ROW_SPLIT: tl.constexpr = 1):
    """A (BLOCK_M, BLOCK_N) tile of ``dbias = sum_i dS_i``, the sum over the pair rows i kept in
    registers. With ``ROW_SPLIT`` > 1 the rows are cut into that many consecutive runs, one
    program each, and each run's sum goes to its own slice of DBias (ROW_SPLIT, B, H, N, N),
    which the caller adds up in a fixed order: more programs where B*H*(N/BLOCK)^2 alone would
    not fill the GPU (144 at N = 384 for 132 SMs), and still the same sum on every run."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_z = tl.program_id(2).to(tl.int64)  # (b*H + h) * ROW_SPLIT + split
    bh = pid_z // ROW_SPLIT
    split = pid_z % ROW_SPLIT
    h = bh % H
    b = bh // H
    bias_base = bh * N * N
    rows_per_split = tl.cdiv(N, ROW_SPLIT)
    row_lo = split * rows_per_split
    row_hi = tl.minimum(row_lo + rows_per_split, N)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    in_m = offs_m < N
    in_n = offs_n < N
    in_d = offs_d < D
    q_mask = in_m[:, None] & in_d[None, :]
    kv_mask = in_n[:, None] & in_d[None, :]
    tile = in_m[:, None] & in_n[None, :]
    bias = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :], mask=tile, other=0.0).to(tl.float32)

    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for i in range(row_lo, row_hi):
        bi = b * N + i
        r = bi * H + h
        row = r * N * D
        q = tl.load(Q + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        k = tl.load(K + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        lse2 = tl.load(LSE + r * N + offs_m, mask=in_m, other=float("inf")) * 1.4426950408889634
        delta = tl.load(Delta + r * N + offs_m, mask=in_m, other=0.0)
        valid_n = key_validity(Mask, bi, offs_n, N, HAS_MASK)
        p, ds = probs_and_dscores(q, k, v, do, bias, lse2, delta, valid_n, qk_scale, PRECISION)
        acc += ds
    num_bh = tl.num_programs(2) // ROW_SPLIT
    out_base = (split * num_bh + bh) * N * N
    tl.store(DBias + out_base + offs_m[:, None] * N + offs_n[None, :], acc, mask=tile)


# ----------------------------------------------------------------------------- configs


@cache
def _table(path: str) -> dict:
    return json.loads(Path(path).read_text())


def head_dim_block(d: int) -> int:
    """tl.dot needs K >= 16 and a power of two; padded lanes load zeros."""
    return max(16, triton.next_power_of_2(d))


def config_for(device_name: str | None, head_dim: int, dtype: str, table_path: Path) -> dict:
    """The config of each kernel in the table at ``table_path``: the device's entry for this head
    dim, else ``default``.

    Keys are ``"<device substring>"`` -> ``{"d<=32": {...}, "d<=64": ..., "any": ...}``.
    """
    table = _table(str(table_path))
    entry = table["default"]
    if device_name:
        for key, value in table.items():
            if key != "default" and key.lower() in device_name.lower():
                entry = value
                break
    for bucket in ("d<=32", "d<=64", "d<=128"):
        if bucket in entry and head_dim <= int(bucket[3:]):
            chosen = entry[bucket]
            break
    else:
        chosen = entry["any"]
    if dtype == "float32":  # fp32 tiles take twice the registers and shared memory
        chosen = {name: {**cfg, **cfg.get("float32", {})} for name, cfg in chosen.items()}
    return {name: {k: v for k, v in cfg.items() if k != "float32"} for name, cfg in chosen.items()}


def _precision(dtype: torch.dtype) -> str:
    # float32 inputs are computed in full fp32 ("ieee"), to match the reference
    # with TF32 off; 16-bit inputs ignore this.
    return "ieee" if dtype == torch.float32 else "tf32"


def _launch_options(cfg: dict, extra_keys: tuple[str, ...]) -> dict:
    opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    for key in extra_keys:
        if key in cfg:
            opts[key] = cfg[key]
    return opts


def _device_name(t: torch.Tensor) -> str | None:
    return torch.cuda.get_device_name(t.device) if t.is_cuda else None


# ----------------------------------------------------------------------------- entry points


def _run(kernel, only: str | None, name: str):
    """``kernel``, or a launch that does nothing when ``only`` names another kernel."""
    if only is None or only == name:
        return kernel
    return _Skipped()


class _Skipped:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def triangle_attention_fwd(q, k, v, bias, mask, scale, config=None, *, table: Path, extra_keys=()):
    """(out, lse) for contiguous q, k, v (B, N, H, N, D); lse (B, N, H, N) float32. ``config``, else
    the device's entry of ``table``; ``extra_keys``: the vendor's launch options beyond warps and stages."""
    B, N, H, _, D = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    bias = bias.contiguous()
    mask_i8 = mask.reshape(B, N, N).to(torch.int8).contiguous() if mask is not None else q.new_empty(1, dtype=torch.int8)
    cfg = (config or config_for(_device_name(q), D, str(q.dtype).removeprefix("torch."), table))["fwd"]
    out = torch.empty_like(q)
    lse = torch.empty((B, N, H, N), device=q.device, dtype=torch.float32)
    on_gpu = q.is_cuda
    opts = _launch_options(cfg, extra_keys) if on_gpu else {}
    common = dict(HAS_MASK=mask is not None, PRECISION=_precision(q.dtype),
                  BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=head_dim_block(D), **opts)
    rows = cfg.get("ROWS", 1)
    if rows > 1:
        grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * triton.cdiv(N, rows) * H)
        launcher(fwd_rows_kernel, on_gpu=on_gpu)[grid](
            q, k, v, bias, mask_i8, out, lse, N, H, D, scale * LOG2E, ROWS=rows, **common)
    else:
        grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * N * H)
        launcher(fwd_kernel, on_gpu=on_gpu)[grid](q, k, v, bias, mask_i8, out, lse, N, H, D, scale * LOG2E,
                                                 # 16-bit inputs only: its error is below bf16's, not fp32's
                                                 EXP2_SPLIT=bool(cfg.get("EXP2_SPLIT")) and q.dtype != torch.float32,
                                                 **common)
    return out, lse


def triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, config=None, *, table: Path,
                           extra_keys=(), only: str | None = None):
    """(dq, dk, dv, dbias); dbias in float32 before the cast to bias's dtype. ``only`` (a kernel
    name: "bwd_dkdv", "bwd_dq", "bwd_dbias") runs the preprocess and that kernel alone, for the
    tuning sweep to time it; the other outputs are then left unwritten. With ``DQ_ATOMIC`` in the
    bwd_dkdv config, "bwd_dkdv" writes dq too (zeroing its float32 buffer and the final cast
    included) and the dq kernel does not run unless ``only`` names it."""
    B, N, H, _, D = q.shape
    q, k, v, out, dout = (t.contiguous() for t in (q, k, v, out, dout))
    bias_c = bias.contiguous()
    mask_i8 = mask.reshape(B, N, N).to(torch.int8).contiguous() if mask is not None else q.new_empty(1, dtype=torch.int8)
    cfgs = config or config_for(_device_name(q), D, str(q.dtype).removeprefix("torch."), table)
    on_gpu = q.is_cuda
    hd = head_dim_block(D)
    prec = _precision(q.dtype)
    has_mask = mask is not None

    delta = torch.empty((B, N, H, N), device=q.device, dtype=torch.float32)
    pre = cfgs["bwd_dq"]
    launcher(bwd_preprocess_kernel, on_gpu=on_gpu)[(triton.cdiv(N, pre["BLOCK_M"]), B * N * H)](
        out, dout, delta, N, D, BLOCK_M=pre["BLOCK_M"], HEAD_DIM=hd)

    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    c = cfgs["bwd_dkdv"]
    # DQ_ATOMIC: the dK/dV kernel adds dQ into a zeroed float32 buffer and the dq kernel is
    # skipped (unless it is the one being timed).
    dq_atomic = bool(c.get("DQ_ATOMIC")) and only != "bwd_dq"
    atomic = {}
    if dq_atomic:
        dq32 = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
        atomic = dict(DQ_ATOMIC=True, DQ32=dq32)
    _run(launcher(bwd_dkdv_kernel, on_gpu=on_gpu), only, "bwd_dkdv")[(triton.cdiv(N, c["BLOCK_N"]), B * N * H)](
        q, k, v, bias_c, mask_i8, dout, lse, delta, dk, dv, N, H, D, scale * LOG2E, scale,
        HAS_MASK=has_mask, PRECISION=prec, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], HEAD_DIM=hd, **atomic,
        **(_launch_options(c, extra_keys) if on_gpu else {}))
    if dq_atomic:
        if only in (None, "bwd_dkdv"):
            dq.copy_(dq32)
    else:
        c = cfgs["bwd_dq"]
        _run(launcher(bwd_dq_kernel, on_gpu=on_gpu), only, "bwd_dq")[(triton.cdiv(N, c["BLOCK_M"]), B * N * H)](
            q, k, v, bias_c, mask_i8, dout, lse, delta, dq, N, H, D, scale * LOG2E, scale,
            HAS_MASK=has_mask, PRECISION=prec, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], HEAD_DIM=hd,
            **(_launch_options(c, extra_keys) if on_gpu else {}))
    c = cfgs["bwd_dbias"]
    split = int(c.get("ROW_SPLIT", 1))
    dbias = torch.empty((split, B, 1, H, N, N), device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(N, c["BLOCK_M"]), triton.cdiv(N, c["BLOCK_N"]), B * H * split)
    _run(launcher(bwd_dbias_kernel, on_gpu=on_gpu), only, "bwd_dbias")[grid](
        q, k, v, bias_c, mask_i8, dout, lse, delta, dbias, N, H, D, scale * LOG2E,
        HAS_MASK=has_mask, PRECISION=prec, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], HEAD_DIM=hd,
        ROW_SPLIT=split, **(_launch_options(c, extra_keys) if on_gpu else {}))
    dbias = dbias[0] if split == 1 else dbias.sum(0)  # a fixed-order sum: the same bits every run
    return dq, dk, dv, dbias.to(bias.dtype)


# ----------------------------------------------------------------------------- static compile


_TRITON_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def compile_specs(dtype: str, head_dim: int, device: str, *, table: Path, prefix: str = "triangle_attention",
                  extra_keys=()) -> list:
    """A ``kernels.isa.CompileSpec`` per kernel at ``table``'s config for ``device``, specialized as
    a launch at the AlphaFold sizes (N = 384 or 768, head dim 32: multiples of 16) specializes it."""
    cfgs = config_for(device, head_dim, dtype, table)
    return [kernel_spec(name, cfgs["bwd_dkdv" if name == "bwd_dkdv_dq" else name], dtype, head_dim, prefix=prefix,
                        extra_keys=extra_keys, aligned=head_dim % 16 == 0)
            for name in (*KERNELS, "fwd_rows", "bwd_dkdv_dq")]


def kernel_spec(name: str, cfg: dict, dtype: str = "bfloat16", head_dim: int = 32, *,
                prefix: str = "triangle_attention", extra_keys=(), aligned: bool = False):
    """The ``kernels.isa.CompileSpec`` of kernel ``name`` (a key of a config entry) at ``cfg``.
    ``aligned``: compile as a launch with N and D multiples of 16 sees them (Triton specializes
    on that; fresh tensors are 16-byte aligned), as for the tuning shapes."""
    from kernels.isa import CompileSpec

    t = _TRITON_DTYPE[dtype]
    prec = "ieee" if dtype == "float32" else "tf32"
    hd = head_dim_block(head_dim)
    common = {"N": "i32", "H": "i32", "D": "i32"}
    fwd_sig = {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "Bias": "*fp32", "Mask": "*i8",
               "O": f"*{t}", "LSE": "*fp32", **common, "qk_scale": "fp32"}
    kernels = {
        "fwd": (fwd_kernel, fwd_sig),
        "fwd_rows": (fwd_rows_kernel, fwd_sig),
        "bwd_dkdv": (bwd_dkdv_kernel, {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "Bias": "*fp32", "Mask": "*i8",
                                       "DO": f"*{t}", "LSE": "*fp32", "Delta": "*fp32", "DK": f"*{t}", "DV": f"*{t}",
                                       **common, "qk_scale": "fp32", "scale": "fp32"}),
        "bwd_dq": (bwd_dq_kernel, {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "Bias": "*fp32", "Mask": "*i8",
                                   "DO": f"*{t}", "LSE": "*fp32", "Delta": "*fp32", "DQ": f"*{t}",
                                   **common, "qk_scale": "fp32", "scale": "fp32"}),
        "bwd_dbias": (bwd_dbias_kernel, {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "Bias": "*fp32", "Mask": "*i8",
                                         "DO": f"*{t}", "LSE": "*fp32", "Delta": "*fp32", "DBias": "*fp32",
                                         **common, "qk_scale": "fp32"}),
    }
    kernels["bwd_dkdv_dq"] = (bwd_dkdv_kernel, {**kernels["bwd_dkdv"][1], "DQ32": "*fp32"})
    fn, signature = kernels[name]
    constexprs = {"HAS_MASK": True, "PRECISION": prec, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
                  "HEAD_DIM": hd}
    if fn is bwd_dkdv_kernel:  # "bwd_dkdv_dq": the dK/dV kernel with dQ added in it
        constexprs["DQ_ATOMIC"] = name == "bwd_dkdv_dq" or bool(cfg.get("DQ_ATOMIC", False))
        if not constexprs["DQ_ATOMIC"]:
            constexprs["DQ32"] = None
    if fn is fwd_rows_kernel:
        constexprs["ROWS"] = cfg["ROWS"]
    if fn is fwd_kernel:
        constexprs["EXP2_SPLIT"] = bool(cfg.get("EXP2_SPLIT", False))
    if fn is bwd_dbias_kernel:
        constexprs["ROW_SPLIT"] = int(cfg.get("ROW_SPLIT", 1))
    signature = {**signature, **{key: "constexpr" for key in constexprs}}
    opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    for key in extra_keys:
        if key in cfg:
            opts[key] = cfg[key]
    divisible = tuple(n for n in fn.arg_names if n not in constexprs and (n[0].isupper() or n in ("N", "D"))
                      ) if aligned else ()
    return CompileSpec(f"{prefix}_{name}_{dtype}_d{head_dim}", fn, signature, constexprs, opts, cfg,
                       divisible_by_16=divisible)


def default_scale(d: int) -> float:
    return 1.0 / math.sqrt(d)
