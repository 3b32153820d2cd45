"""Triangle attention, forward and backward, in Triton (flash-style): the kernels Hopper and CDNA3
both run and their launcher (:func:`forward`, :func:`backward`), at a config whose target names its
launch options. At AlphaFold 3's head dim of 32 the kernels are bound by the exponentials, which
shapes their design; the key mask selects, so a NaN behind a masked key reaches nothing
(``docs/triangle.md``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ceiling import spaces
from ceiling.amd import cdna4
from ceiling.constants import LN2, LOG2E
from ceiling.triton.attention import softmax_exp2
from ceiling.triton_runtime import launcher

_LOG2E = tl.constexpr(LOG2E)
_LN2 = tl.constexpr(LN2)

KERNELS = ("fwd", "bwd_dkdv", "bwd_dq", "bwd_dbias")
KEY_PAD = 256  # key-bias rows are padded with -inf to a multiple of this, the largest BLOCK_N


def head_dim_block(d: int) -> int:
    """tl.dot needs K >= 16 and a power of two; padded lanes load zeros."""
    return max(16, triton.next_power_of_2(d))


@triton.jit
def fwd_kernel(Q, K, V, Bias, KeyBias, O, LSE, N, H, D, kb_row_stride, qk_scale,
               PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               EXP2_SPLIT: tl.constexpr = False, ROWS: tl.constexpr = 1):
    """Flash attention over ROWS pair rows i of one (batch, head), BLOCK_M queries each, the
    fp32 bias added to the scores.

    The bias tile of a key step is the same for every row i, so it is read once per program for
    all ROWS rows (its L2 traffic divided by ROWS) and each row runs its own 2-D dots (wgmma).
    Per score the step issues one multiply and one select before the max: the bias, scaled by
    ``1/scale`` once per tile, seeds the QK^T accumulator, ``s * qk_scale`` turns the sum into
    base-2 logits, and the key mask (0 or -inf per key, -inf past N: ``KeyBias`` rows of
    ``kb_row_stride``, 0 when every row shares one) selects -inf at a masked key, where an
    added -inf would let a NaN bias or k through. ``EXP2_SPLIT``
    computes half of the exponentials on the FMA pipe
    (:func:`ceiling.triton.attention.softmax_exp2`).
    """
    pid_m = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)  # ((b * G) + g) * H + h, G = cdiv(N, ROWS)
    G = tl.cdiv(N, ROWS)
    h = pid % H
    g = (pid // H) % G
    b = pid // (H * G)
    bias_base = (b * H + h) * N * N

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    in_m = offs_m < N
    in_d = offs_d < D
    q_mask = in_m[:, None] & in_d[None, :]
    inv_scale = _LOG2E / qk_scale

    # Per row r: where its q/k/v/o rows start, its key-mask row, which of its queries it stores
    # (the last group may run past N: such a row computes row N - 1 again and stores nothing), its q tile
    # and its softmax state. -1e30, not -inf, starts the max so that alpha = exp2(m_old - m_new)
    # stays finite while a row has seen only masked keys (their logits are -inf and give 0).
    rows, kb_rows, lse_rows, real, qs, ms, ls, accs = (), (), (), (), (), (), (), ()
    for r in tl.static_range(ROWS):
        i = g * ROWS + r
        i_c = tl.minimum(i, N - 1)
        rr = ((b * N + i_c) * H + h)
        rows = rows + (rr * N * D,)
        kb_rows = kb_rows + ((b * N + i_c) * kb_row_stride,)
        lse_rows = lse_rows + (rr * N,)
        real = real + (in_m & ((offs_m * 0 + i) < N),)  # (a vector: the interpreter masks with blocks only)
        qs = qs + (tl.load(Q + rr * N * D + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0),)
        ms = ms + (tl.full([BLOCK_M], -1.0e30, tl.float32),)
        ls = ls + (tl.zeros([BLOCK_M], tl.float32),)
        accs = accs + (tl.zeros([BLOCK_M, HEAD_DIM], tl.float32),)

    for start_n in range(0, N, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        kv_mask = in_n[:, None] & in_d[None, :]
        # bias / scale: once multiplied by qk_scale with the products it is bias * log2(e)
        bias_seed = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :],
                            mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32) * inv_scale
        new_m, new_l, new_acc = (), (), ()
        for r in tl.static_range(ROWS):
            valid = tl.load(KeyBias + kb_rows[r] + offs_n) == 0.0
            k = tl.load(K + rows[r] + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)
            v = tl.load(V + rows[r] + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)
            s = tl.dot(qs[r], tl.trans(k), acc=bias_seed, input_precision=PRECISION) * qk_scale
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(ms[r], tl.max(s, 1))
            alpha = tl.exp2(ms[r] - m_new)
            p = softmax_exp2(s - m_new[:, None], EXP2_SPLIT)
            new_l = new_l + (ls[r] * alpha + tl.sum(p, 1),)
            new_acc = new_acc + (accs[r] * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION),)
            new_m = new_m + (m_new,)
        ms, ls, accs = new_m, new_l, new_acc

    for r in tl.static_range(ROWS):
        # l == 0 only for a row that saw no valid key; a NaN l (a NaN score) is not 0 and flows on
        l_i = ls[r]
        empty = l_i == 0.0
        l_safe = tl.where(empty, 1.0, l_i)
        out = tl.where(empty[:, None], 0.0, accs[r] / l_safe[:, None])
        lse = tl.where(empty, float("-inf"), (ms[r] + tl.log2(l_safe)) * _LN2)
        tl.store(O + rows[r] + offs_m[:, None] * D + offs_d[None, :], out.to(O.dtype.element_ty),
                 mask=real[r][:, None] & in_d[None, :])
        tl.store(LSE + lse_rows[r] + offs_m, lse, mask=real[r])


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
def probs_and_dscores(q, k, v, do, logit_bias, lse2, delta, qk_scale, live, PRECISION: tl.constexpr):
    """P and dS (BLOCK_M, BLOCK_N) of one tile, recomputed from the saved LSE; ``logit_bias`` is
    the tile's bias in base-2 units, ``live`` the (query in range, key valid) pairs.

    Both are selected to exactly 0 off ``live``: at a masked key (whatever its bias, or a NaN
    row's lse, would make of it) and in a row with no valid key (lse -inf).
    """
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + logit_bias
    p = tl.where(live, tl.exp2(s - lse2[:, None]), 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = tl.where(live, p * (dp - delta[:, None]), 0.0)
    return p, ds


@triton.jit
def bwd_dkdv_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DK, DV, N, H, D, kb_row_stride, qk_scale, scale,
                    PRECISION: tl.constexpr,
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
    valid = tl.load(KeyBias + bi * kb_row_stride + offs_n) == 0.0
    k = tl.load(K + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)
    v = tl.load(V + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)

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
        lse2 = tl.load(LSE + r * N + offs_m, mask=in_m, other=float("inf")) * _LOG2E
        delta = tl.load(Delta + r * N + offs_m, mask=in_m, other=0.0)
        bias = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :],
                       mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32)
        p, ds = probs_and_dscores(q, k, v, do, bias * _LOG2E, lse2, delta, qk_scale,
                                  in_m[:, None] & valid[None, :], PRECISION)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
        ds_lo = ds.to(q.dtype)
        dk += tl.dot(tl.trans(ds_lo), q, input_precision=PRECISION)
        if DQ_ATOMIC:
            dq = tl.dot(ds_lo, k, input_precision=PRECISION) * scale
            tl.atomic_add(DQ32 + row + offs_m[:, None] * D + offs_d[None, :], dq, mask=q_mask, sem="relaxed")
    # a masked key's gradients are 0: dS is 0 there, but 0 times a NaN q would not be
    dk = tl.where(valid[:, None], dk * scale, 0.0)
    dv = tl.where(valid[:, None], dv, 0.0)
    tl.store(DK + row + offs_n[:, None] * D + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + row + offs_n[:, None] * D + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def bwd_dq_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DQ, N, H, D, kb_row_stride, qk_scale, scale,
                  PRECISION: tl.constexpr,
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
    lse2 = tl.load(LSE + r * N + offs_m, mask=in_m, other=float("inf")) * _LOG2E
    delta = tl.load(Delta + r * N + offs_m, mask=in_m, other=0.0)

    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, N, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_n = offs_n < N
        kv_mask = in_n[:, None] & in_d[None, :]
        valid = tl.load(KeyBias + bi * kb_row_stride + offs_n) == 0.0
        k = tl.load(K + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)
        v = tl.load(V + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)
        bias = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :],
                       mask=in_m[:, None] & in_n[None, :], other=0.0).to(tl.float32)
        p, ds = probs_and_dscores(q, k, v, do, bias * _LOG2E, lse2, delta, qk_scale,
                                  in_m[:, None] & valid[None, :], PRECISION)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + row + offs_m[:, None] * D + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=q_mask)


@triton.jit
def bwd_dbias_kernel(Q, K, V, Bias, KeyBias, DO, LSE, Delta, DBias, N, H, D, kb_row_stride, qk_scale,
                     PRECISION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     ROW_SPLIT: tl.constexpr = 1):
    """A (BLOCK_M, BLOCK_N) tile of ``dbias = sum_i dS_i``, the sum over the pair rows i kept in
    registers. With ``ROW_SPLIT`` > 1 the rows are cut into that many consecutive runs, one
    program each, and each run's sum goes to its own slice of DBias (ROW_SPLIT, B, H, N, N),
    which the caller adds up in a fixed order: more programs where B*H*(N/BLOCK)^2 alone would
    not fill the GPU (144 at N = 384 for 132 SMs), and still the same sum on every run.

    Why a kernel of its own rather than atomics from the dq kernel: the bias is shared by all N
    rows, so those would be H*N^3 fp32 atomics (226 M at N = 384), all N rows colliding on the
    same (B, H, N, N) addresses, and the sum would change from run to run. Here one program
    recomputes P and dP for its tile row by row (two small MMAs and one exp per element, the
    work of a forward pass) while the q/k/v/dO tiles it rereads stay in L2, and writes the tile
    once: deterministic, and no memory beyond the (B, 1, H, N, N) output."""
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
    bias2 = tl.load(Bias + bias_base + offs_m[:, None] * N + offs_n[None, :], mask=tile,
                    other=0.0).to(tl.float32) * _LOG2E

    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for i in range(row_lo, row_hi):
        bi = b * N + i
        r = bi * H + h
        row = r * N * D
        q = tl.load(Q + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + row + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        valid = tl.load(KeyBias + bi * kb_row_stride + offs_n) == 0.0
        k = tl.load(K + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)
        v = tl.load(V + row + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask & valid[:, None], other=0.0)
        lse2 = tl.load(LSE + r * N + offs_m, mask=in_m, other=float("inf")) * _LOG2E
        delta = tl.load(Delta + r * N + offs_m, mask=in_m, other=0.0)
        p, ds = probs_and_dscores(q, k, v, do, bias2, lse2, delta, qk_scale, in_m[:, None] & valid[None, :],
                                  PRECISION)
        acc += ds
    num_bh = tl.num_programs(2) // ROW_SPLIT
    out_base = (split * num_bh + bh) * N * N
    tl.store(DBias + out_base + offs_m[:, None] * N + offs_n[None, :], acc, mask=tile)


# ----------------------------------------------------------------------------- the launcher


def _precision(dtype: torch.dtype, config) -> str:
    return cdna4.input_precision(dtype == torch.float32, getattr(config, "target", None))


def launch_options(config, section: str, on_gpu: bool) -> dict:
    """The compiler options of one kernel's config: the ones its target's space names
    (``num_warps``, ``num_stages``; CDNA3's ``waves_per_eu`` and ``matrix_instr_nonkdim``)."""
    if not on_gpu:
        return {}
    cfg = config[section]
    return {k: cfg[k] for k in spaces.get("triangle_attention", config.target).launch_options if k in cfg}


def _run(kernel, only: str | None, name: str):
    """``kernel``, or a launch that does nothing when ``only`` names another kernel."""
    if only is None or only == name:
        return kernel
    return _Skipped()


class _Skipped:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def key_bias(mask, B: int, N: int, device) -> tuple[torch.Tensor, int]:
    """(key_bias, row stride): float32 rows of 0 for a key that may be attended to and -inf for a
    masked key, padded with -inf to a multiple of ``KEY_PAD`` keys so that a kernel reads any key
    block without a bounds check; one row per (batch, pair row) under ``mask``, else a single row
    (stride 0) that every pair row shares."""
    n_pad = triton.cdiv(N, KEY_PAD) * KEY_PAD
    if mask is None:
        kb = torch.full((1, n_pad), float("-inf"), device=device, dtype=torch.float32)
        kb[:, :N] = 0.0
        return kb, 0
    kb = torch.full((B * N, n_pad), float("-inf"), device=device, dtype=torch.float32)
    kb[:, :N].masked_fill_(mask.reshape(B * N, N).to(device=device, dtype=torch.bool), 0.0)
    return kb, n_pad


def forward(problem, config, q, k, v, bias, mask):
    """(out, lse (B, N, H, N) float32) for q, k, v (B, N, H, N, D) and a bool key mask. A ``fwd``
    config with ``ROWS`` > 1 runs each program over that many pair rows, sharing the bias tiles."""
    B, N, H, D = problem.batch, problem.n, problem.heads, problem.head_dim
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    bias = bias.contiguous()
    cfg = config["fwd"]
    if cfg["BLOCK_N"] > KEY_PAD:
        raise ValueError(f"BLOCK_N: at most {KEY_PAD}, got {cfg['BLOCK_N']}")
    kb, kb_stride = key_bias(mask, B, N, q.device)
    out = torch.empty_like(q)
    lse = torch.empty((B, N, H, N), device=q.device, dtype=torch.float32)
    on_gpu = q.is_cuda
    rows = cfg.get("ROWS", 1)
    grid = (triton.cdiv(N, cfg["BLOCK_M"]), B * triton.cdiv(N, rows) * H)
    launcher(fwd_kernel, on_gpu=on_gpu)[grid](
        q, k, v, bias, kb, out, lse, N, H, D, kb_stride, problem.scale * LOG2E,
        PRECISION=_precision(q.dtype, config), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], HEAD_DIM=head_dim_block(D),
        # 16-bit inputs only: its error is below bf16's, not fp32's
        EXP2_SPLIT=bool(cfg.get("EXP2_SPLIT")) and q.dtype != torch.float32, ROWS=rows,
        **launch_options(config, "fwd", on_gpu))
    return out, lse


def backward(problem, config, saved, grads, needs, only: str | None = None):
    """(dq, dk, dv, dbias); dbias in float32 before the cast to bias's dtype. ``only`` (a kernel
    name: "bwd_dkdv", "bwd_dq", "bwd_dbias") runs the preprocess and that kernel alone, for the
    tuning sweep to time it; the other outputs are then left unwritten. With ``DQ_ATOMIC`` in the
    bwd_dkdv config, "bwd_dkdv" writes dq too (zeroing its float32 buffer and the final cast
    included) and the dq kernel does not run unless ``only`` names it."""
    B, N, H, D = problem.batch, problem.n, problem.heads, problem.head_dim
    q, k, v, out, dout = (t.contiguous() for t in (saved["q"], saved["k"], saved["v"], saved["out"], grads["out"]))
    bias, mask, lse = saved["bias"], saved["mask"], saved["lse"]
    bias_c = bias.contiguous()
    on_gpu = q.is_cuda
    hd = head_dim_block(D)
    prec = _precision(q.dtype, config)
    scale = problem.scale
    if max(config[name]["BLOCK_N"] for name in ("bwd_dkdv", "bwd_dq", "bwd_dbias")) > KEY_PAD:
        raise ValueError(f"BLOCK_N: at most {KEY_PAD}")
    kb, kb_stride = key_bias(mask, B, N, q.device)

    delta = torch.empty((B, N, H, N), device=q.device, dtype=torch.float32)
    pre = config["bwd_dq"]
    launcher(bwd_preprocess_kernel, on_gpu=on_gpu)[(triton.cdiv(N, pre["BLOCK_M"]), B * N * H)](
        out, dout, delta, N, D, BLOCK_M=pre["BLOCK_M"], HEAD_DIM=hd)

    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    c = config["bwd_dkdv"]
    # DQ_ATOMIC: the dK/dV kernel adds dQ into a zeroed float32 buffer and the dq kernel is
    # skipped (unless it is the one being timed; nor is the buffer made when another kernel is).
    dq_atomic = bool(c.get("DQ_ATOMIC")) and only in (None, "bwd_dkdv")
    atomic = {}
    if dq_atomic:
        dq32 = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
        atomic = dict(DQ_ATOMIC=True, DQ32=dq32)
    _run(launcher(bwd_dkdv_kernel, on_gpu=on_gpu), only, "bwd_dkdv")[(triton.cdiv(N, c["BLOCK_N"]), B * N * H)](
        q, k, v, bias_c, kb, dout, lse, delta, dk, dv, N, H, D, kb_stride, scale * LOG2E, scale,
        PRECISION=prec, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], HEAD_DIM=hd, **atomic,
        **launch_options(config, "bwd_dkdv", on_gpu))
    if dq_atomic:
        dq.copy_(dq32)
    else:
        c = config["bwd_dq"]
        _run(launcher(bwd_dq_kernel, on_gpu=on_gpu), only, "bwd_dq")[(triton.cdiv(N, c["BLOCK_M"]), B * N * H)](
            q, k, v, bias_c, kb, dout, lse, delta, dq, N, H, D, kb_stride, scale * LOG2E, scale,
            PRECISION=prec, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], HEAD_DIM=hd,
            **launch_options(config, "bwd_dq", on_gpu))
    c = config["bwd_dbias"]
    split = int(c.get("ROW_SPLIT", 1))
    dbias = torch.empty((split, B, 1, H, N, N), device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(N, c["BLOCK_M"]), triton.cdiv(N, c["BLOCK_N"]), B * H * split)
    _run(launcher(bwd_dbias_kernel, on_gpu=on_gpu), only, "bwd_dbias")[grid](
        q, k, v, bias_c, kb, dout, lse, delta, dbias, N, H, D, kb_stride, scale * LOG2E,
        PRECISION=prec, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], HEAD_DIM=hd,
        ROW_SPLIT=split, **launch_options(config, "bwd_dbias", on_gpu))
    dbias = dbias[0] if split == 1 else dbias.sum(0)  # a fixed-order sum: the same bits every run
    return dq, dk, dv, dbias.to(bias.dtype)
