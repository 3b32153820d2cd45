"""The triangle multiplicative update, forward and backward, in Triton: the kernels Hopper and CDNA3
both run and their launcher (:func:`forward`, :func:`backward`), at a config whose target names its
launch options. Three stages, one kernel each, fuse the row-wise work around the GEMMs so that
LayerNorm outputs, projections and gates stay in registers (``docs/triangle.md``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ceiling import spaces
from ceiling.amd import cdna4
from ceiling.triangle.spec import TRIMUL_WEIGHTS
from ceiling.triton_runtime import launcher


# ----------------------------------------------------------------------------- helpers


@triton.jit
def layer_norm_rows(x, w, b, in_cols, C, eps):
    """(xhat, y, rstd) of an fp32 tile (BLOCK_M, C_BLOCK) whose padded columns are 0."""
    mean = tl.sum(x, 1) / C
    diff = tl.where(in_cols[None, :], x - mean[:, None], 0.0)
    var = tl.sum(diff * diff, 1) / C
    rstd = 1.0 / tl.sqrt(var + eps)
    xhat = diff * rstd[:, None]
    return xhat, xhat * w[None, :] + b[None, :], rstd


@triton.jit
def layer_norm_rows_bwd(xhat, dy_affine, w, rstd, in_cols, C):
    """dx of LayerNorm given dL/d(output) and the normalized input xhat."""
    dxhat = tl.where(in_cols[None, :], dy_affine * w[None, :], 0.0)
    m1 = tl.sum(dxhat, 1) / C
    m2 = tl.sum(dxhat * xhat, 1) / C
    return (dxhat - m1[:, None] - xhat * m2[:, None]) * rstd[:, None]


@triton.jit
def load_ln_input(X, Lw, Lb, offs_m, in_m, offs_cz, in_cz, CZ, eps):
    """LayerNorm_in of rows ``offs_m`` of x (M, CZ), in fp32."""
    x = tl.load(X + offs_m[:, None] * CZ + offs_cz[None, :], mask=in_m[:, None] & in_cz[None, :], other=0.0)
    lw = tl.load(Lw + offs_cz, mask=in_cz, other=0.0).to(tl.float32)
    lb = tl.load(Lb + offs_cz, mask=in_cz, other=0.0).to(tl.float32)
    return layer_norm_rows(x.to(tl.float32), lw, lb, in_cz, CZ, eps)


@triton.jit
def load_weight_t(W, offs_out, in_out, offs_in, in_in, K):
    """W (OUT, K) row-major, loaded transposed as a (K_BLOCK, BLOCK_N) tile."""
    return tl.load(W + offs_out[None, :] * K + offs_in[:, None], mask=in_out[None, :] & in_in[:, None], other=0.0)


@triton.jit
def row_major_tile(pid, COLS, BLOCK_N: tl.constexpr):
    """(row block, column block) of program ``pid``, column blocks of one row block adjacent.

    Every column block of a row tile reads the same input rows (and recomputes their
    LayerNorm); launched back to back, the programs after the first find those rows
    in L2 instead of reading them from HBM again.
    """
    num_n = tl.cdiv(COLS, BLOCK_N)
    return pid // num_n, pid % num_n


@triton.jit
def channel_first_offsets(offs_m, NN, CH):
    """Offsets of rows m = b*NN + p in a (B, CH, N, N) tensor, channel 0."""
    return (offs_m // NN) * CH * NN + offs_m % NN


# ----------------------------------------------------------------------------- forward


@triton.jit
def ln_gate_proj_kernel(X, Mask, Lw, Lb, Wp, Bp, Wg, Bg, AB, M, NN, CZ, C2, eps,
                        HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CZ_BLOCK: tl.constexpr):
    pid_m, pid_n = row_major_tile(tl.program_id(0), C2, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_cz = tl.arange(0, CZ_BLOCK)
    in_m, in_n, in_cz = offs_m < M, offs_n < C2, offs_cz < CZ

    _, xn, _ = load_ln_input(X, Lw, Lb, offs_m, in_m, offs_cz, in_cz, CZ, eps)
    xn = xn.to(AB.dtype.element_ty)
    p = tl.dot(xn, load_weight_t(Wp, offs_n, in_n, offs_cz, in_cz, CZ), input_precision=PRECISION)
    g = tl.dot(xn, load_weight_t(Wg, offs_n, in_n, offs_cz, in_cz, CZ), input_precision=PRECISION)
    p += tl.load(Bp + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
    g += tl.load(Bg + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
    ab = tl.sigmoid(g) * p
    if HAS_MASK:
        ab *= tl.load(Mask + offs_m, mask=in_m, other=0.0)[:, None]
    dst = channel_first_offsets(offs_m, NN, C2)[:, None] + offs_n[None, :].to(tl.int64) * NN
    tl.store(AB + dst, ab.to(AB.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


@triton.jit
def channel_gemm_kernel(A, B, Y, N, C, a_batch, a_chan, s_am, s_ak, b_batch, b_chan, s_bk, s_bn,
                        y_batch, y_chan, s_ym, s_yn, PRECISION: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Y[z] = A[z] @ B[z] for z = (batch, channel), each an N x N matrix given by strides."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    z = tl.program_id(2).to(tl.int64)
    bz, cz = z // C, z % C
    A += bz * a_batch + cz * a_chan
    B += bz * b_batch + cz * b_chan
    Y += bz * y_batch + cz * y_chan
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    in_m, in_n = offs_m < N, offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, N, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        in_k = offs_k < N
        a = tl.load(A + offs_m[:, None] * s_am + offs_k[None, :] * s_ak, mask=in_m[:, None] & in_k[None, :], other=0.0)
        b = tl.load(B + offs_k[:, None] * s_bk + offs_n[None, :] * s_bn, mask=in_k[:, None] & in_n[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision=PRECISION)
    tl.store(Y + offs_m[:, None] * s_ym + offs_n[None, :] * s_yn, acc.to(Y.dtype.element_ty),
             mask=in_m[:, None] & in_n[None, :])


@triton.jit
def ln_out_gate_kernel(X, Yc, Lw_in, Lb_in, Lw_out, Lb_out, Wpo, Bpo, Wgo, Bgo, Out, M, NN, CZ, C, eps,
                       PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CZ_BLOCK: tl.constexpr, C_BLOCK: tl.constexpr):
    pid_m, pid_n = row_major_tile(tl.program_id(0), CZ, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_cz = tl.arange(0, CZ_BLOCK)
    offs_c = tl.arange(0, C_BLOCK)
    in_m, in_n, in_cz, in_c = offs_m < M, offs_n < CZ, offs_cz < CZ, offs_c < C
    dtype = Out.dtype.element_ty

    src = channel_first_offsets(offs_m, NN, C)[:, None] + offs_c[None, :].to(tl.int64) * NN
    y = tl.load(Yc + src, mask=in_m[:, None] & in_c[None, :], other=0.0).to(tl.float32)
    lw = tl.load(Lw_out + offs_c, mask=in_c, other=0.0).to(tl.float32)
    lb = tl.load(Lb_out + offs_c, mask=in_c, other=0.0).to(tl.float32)
    _, yn, _ = layer_norm_rows(y, lw, lb, in_c, C, eps)
    u = tl.dot(yn.to(dtype), load_weight_t(Wpo, offs_n, in_n, offs_c, in_c, C), input_precision=PRECISION)
    u += tl.load(Bpo + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]

    _, xn, _ = load_ln_input(X, Lw_in, Lb_in, offs_m, in_m, offs_cz, in_cz, CZ, eps)
    gz = tl.dot(xn.to(dtype), load_weight_t(Wgo, offs_n, in_n, offs_cz, in_cz, CZ), input_precision=PRECISION)
    gz += tl.load(Bgo + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
    out = tl.sigmoid(gz) * u
    tl.store(Out + offs_m[:, None] * CZ + offs_n[None, :], out.to(dtype), mask=in_m[:, None] & in_n[None, :])


# ----------------------------------------------------------------------------- backward


@triton.jit
def out_gate_bwd_kernel(X, Yc, DOut, Lw_in, Lb_in, Lw_out, Lb_out, Wpo, Bpo, Wgo, Bgo,
                        DU, DGz, Yn, Xn, row0, M_rows, NN, CZ, C, eps,
                        PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        CZ_BLOCK: tl.constexpr, C_BLOCK: tl.constexpr):
    """Rows [row0, row0 + M_rows): the output gating's backward. Recomputes u and the
    gate from yn and xn and writes d_u = dout * g and d_gz = dout * u * g (1 - g),
    plus yn and xn, the operands of the output weight gradients."""
    pid_m = tl.program_id(0)
    local = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_m = row0 + local
    offs_cz = tl.arange(0, CZ_BLOCK)
    offs_c = tl.arange(0, C_BLOCK)
    in_m, in_cz, in_c = local < M_rows, offs_cz < CZ, offs_c < C
    dtype = DOut.dtype.element_ty

    src = channel_first_offsets(offs_m, NN, C)[:, None] + offs_c[None, :].to(tl.int64) * NN
    y_mask = in_m[:, None] & in_c[None, :]
    lw_out = tl.load(Lw_out + offs_c, mask=in_c, other=0.0).to(tl.float32)
    lb_out = tl.load(Lb_out + offs_c, mask=in_c, other=0.0).to(tl.float32)
    _, yn, _ = layer_norm_rows(tl.load(Yc + src, mask=y_mask, other=0.0).to(tl.float32), lw_out, lb_out, in_c, C, eps)
    yn_lo = yn.to(dtype)
    _, xn, _ = load_ln_input(X, Lw_in, Lb_in, offs_m, in_m, offs_cz, in_cz, CZ, eps)
    xn_lo = xn.to(dtype)
    tl.store(Yn + local[:, None] * C + offs_c[None, :], yn_lo, mask=y_mask)
    tl.store(Xn + local[:, None] * CZ + offs_cz[None, :], xn_lo, mask=in_m[:, None] & in_cz[None, :])

    for n0 in range(0, CZ, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        in_n = offs_n < CZ
        tile = in_m[:, None] & in_n[None, :]
        u = tl.dot(yn_lo, load_weight_t(Wpo, offs_n, in_n, offs_c, in_c, C), input_precision=PRECISION)
        u += tl.load(Bpo + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
        gz = tl.dot(xn_lo, load_weight_t(Wgo, offs_n, in_n, offs_cz, in_cz, CZ), input_precision=PRECISION)
        gz += tl.load(Bgo + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
        g = tl.sigmoid(gz)
        do = tl.load(DOut + offs_m[:, None] * CZ + offs_n[None, :], mask=tile, other=0.0).to(tl.float32)
        tl.store(DU + local[:, None] * CZ + offs_n[None, :], (do * g).to(dtype), mask=tile)
        tl.store(DGz + offs_m[:, None] * CZ + offs_n[None, :], (do * u * g * (1.0 - g)).to(dtype), mask=tile)


@triton.jit
def ln_out_bwd_kernel(Yc, DU, Lw_out, Lb_out, Wpo, DYc, Part, row0, M_rows, NN, CZ, C, eps,
                      PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                      C_BLOCK: tl.constexpr):
    """Rows [row0, row0 + M_rows): d_yn = d_u @ W_po, then LayerNorm_out backward to
    dy (channel-first, for the contraction's backward) and the LayerNorm_out
    parameter gradients' per-program partial sums."""
    pid_m = tl.program_id(0)
    local = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_m = row0 + local
    offs_c = tl.arange(0, C_BLOCK)
    in_m, in_c = local < M_rows, offs_c < C

    d_yn = tl.zeros([BLOCK_M, C_BLOCK], tl.float32)
    for k0 in range(0, CZ, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        in_k = offs_k < CZ
        du = tl.load(DU + local[:, None] * CZ + offs_k[None, :], mask=in_m[:, None] & in_k[None, :], other=0.0)
        w = tl.load(Wpo + offs_k[:, None] * C + offs_c[None, :], mask=in_k[:, None] & in_c[None, :], other=0.0)
        d_yn += tl.dot(du, w, input_precision=PRECISION)

    src = channel_first_offsets(offs_m, NN, C)[:, None] + offs_c[None, :].to(tl.int64) * NN
    y_mask = in_m[:, None] & in_c[None, :]
    lw_out = tl.load(Lw_out + offs_c, mask=in_c, other=0.0).to(tl.float32)
    lb_out = tl.load(Lb_out + offs_c, mask=in_c, other=0.0).to(tl.float32)
    yhat, _, rstd = layer_norm_rows(tl.load(Yc + src, mask=y_mask, other=0.0).to(tl.float32), lw_out, lb_out,
                                    in_c, C, eps)
    dy = layer_norm_rows_bwd(yhat, d_yn, lw_out, rstd, in_c, C)
    tl.store(DYc + src, dy.to(DYc.dtype.element_ty), mask=y_mask)
    part = Part + pid_m.to(tl.int64) * 2 * C
    tl.store(part + offs_c, tl.sum(tl.where(in_m[:, None], d_yn * yhat, 0.0), 0), mask=in_c)
    tl.store(part + C + offs_c, tl.sum(tl.where(in_m[:, None], d_yn, 0.0), 0), mask=in_c)


@triton.jit
def ln_gate_proj_bwd_kernel(X, Mask, DABc, DGz, Lw, Lb, Wp, Bp, Wg, Bg, Wgo, DX, DP, DG, Xn, Part,
                            row0, M_rows, NN, CZ, C2, eps,
                            HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CZ_BLOCK: tl.constexpr):
    """Rows [row0, row0 + M_rows): dx, and dP, dG, xn for the input weight gradients.

    dxn gathers three terms: the output gate's (d_gz @ W_go) and the two input
    projections' (dP @ W_p + dG @ W_g); then LayerNorm_in backward.
    """
    pid_m = tl.program_id(0)
    local = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    offs_m = row0 + local
    offs_cz = tl.arange(0, CZ_BLOCK)
    in_m, in_cz = local < M_rows, offs_cz < CZ
    dtype = DP.dtype.element_ty

    _, xn, _ = load_ln_input(X, Lw, Lb, offs_m, in_m, offs_cz, in_cz, CZ, eps)
    xn_lo = xn.to(dtype)
    tl.store(Xn + local[:, None] * CZ + offs_cz[None, :], xn_lo, mask=in_m[:, None] & in_cz[None, :])
    if HAS_MASK:
        m = tl.load(Mask + offs_m, mask=in_m, other=0.0)

    d_xn = tl.zeros([BLOCK_M, CZ_BLOCK], tl.float32)
    for k0 in range(0, CZ, BLOCK_N):  # the output gate's share: d_gz @ W_go
        offs_k = k0 + tl.arange(0, BLOCK_N)
        in_k = offs_k < CZ
        dgz = tl.load(DGz + offs_m[:, None] * CZ + offs_k[None, :], mask=in_m[:, None] & in_k[None, :], other=0.0)
        wgo = tl.load(Wgo + offs_k[:, None] * CZ + offs_cz[None, :], mask=in_k[:, None] & in_cz[None, :], other=0.0)
        d_xn += tl.dot(dgz, wgo, input_precision=PRECISION)

    src_rows = channel_first_offsets(offs_m, NN, C2)
    for n0 in range(0, C2, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        in_n = offs_n < C2
        tile = in_m[:, None] & in_n[None, :]
        wp_t = load_weight_t(Wp, offs_n, in_n, offs_cz, in_cz, CZ)
        wg_t = load_weight_t(Wg, offs_n, in_n, offs_cz, in_cz, CZ)
        p = tl.dot(xn_lo, wp_t, input_precision=PRECISION)
        p += tl.load(Bp + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
        gz = tl.dot(xn_lo, wg_t, input_precision=PRECISION)
        gz += tl.load(Bg + offs_n, mask=in_n, other=0.0).to(tl.float32)[None, :]
        g = tl.sigmoid(gz)
        dab = tl.load(DABc + src_rows[:, None] + offs_n[None, :].to(tl.int64) * NN, mask=tile, other=0.0)
        dab = dab.to(tl.float32)
        if HAS_MASK:
            dab *= m[:, None]
        dp = (dab * g).to(dtype)
        dg = (dab * p * g * (1.0 - g)).to(dtype)
        tl.store(DP + local[:, None] * C2 + offs_n[None, :], dp, mask=tile)
        tl.store(DG + local[:, None] * C2 + offs_n[None, :], dg, mask=tile)
        d_xn += tl.dot(dp, tl.trans(wp_t), input_precision=PRECISION)
        d_xn += tl.dot(dg, tl.trans(wg_t), input_precision=PRECISION)

    lw = tl.load(Lw + offs_cz, mask=in_cz, other=0.0).to(tl.float32)
    xhat, _, rstd = load_ln_input(X, Lw, Lb, offs_m, in_m, offs_cz, in_cz, CZ, eps)
    dx = layer_norm_rows_bwd(xhat, d_xn, lw, rstd, in_cz, CZ)
    tl.store(DX + offs_m[:, None] * CZ + offs_cz[None, :], dx.to(DX.dtype.element_ty), mask=in_m[:, None] & in_cz[None, :])
    part = Part + pid_m.to(tl.int64) * 2 * CZ
    tl.store(part + offs_cz, tl.sum(tl.where(in_m[:, None], d_xn * xhat, 0.0), 0), mask=in_cz)
    tl.store(part + CZ + offs_cz, tl.sum(tl.where(in_m[:, None], d_xn, 0.0), 0), mask=in_cz)


# ----------------------------------------------------------------------------- the launcher


def _precision(dtype: torch.dtype, config) -> str:
    return cdna4.input_precision(dtype == torch.float32, getattr(config, "target", None))


def _opts(cfg, on_gpu: bool, options: tuple[str, ...]) -> dict:
    """A kernel's compiler options: the ones its target's space names that ``cfg`` sets."""
    return {k: cfg[k] for k in options if k in cfg} if on_gpu else {}


def _mask_rows(mask, x):
    if mask is None:
        return x.new_empty(1, dtype=torch.float32), False
    return mask.reshape(-1).to(torch.float32).contiguous(), True


def _contract(a, b, y, *, a_strides, b_strides, y_strides, n, c, cfg, on_gpu, options, prec):
    """y[z] = a[z] @ b[z] for z over (batch, channel); each stride tuple is (batch, chan, row, col)."""
    B = y.shape[0]
    grid = (triton.cdiv(n, cfg["BLOCK_M"]), triton.cdiv(n, cfg["BLOCK_N"]), B * c)
    launcher(channel_gemm_kernel, on_gpu=on_gpu)[grid](
        a, b, y, n, c, *a_strides, *b_strides, *y_strides, PRECISION=prec,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], **_opts(cfg, on_gpu, options))


def forward_products(direction, n, c):
    """Strides (batch, chan, row, col) of the a and b operands inside AB (B, 2c, N, N)."""
    nn_, bstride = n * n, 2 * c * n * n
    if direction == "outgoing":  # y = a b^T
        return (bstride, nn_, n, 1), (bstride, nn_, 1, n)
    return (bstride, nn_, 1, n), (bstride, nn_, n, 1)  # incoming: y = a^T b


def saves(config) -> bool:
    """Whether the forward keeps [a; b] and y for the backward."""
    return bool(config.get("save_for_backward", False))


def _launch_options(config) -> tuple[str, ...]:
    return tuple(spaces.get("triangle_multiplication", config.target).launch_options)


def _project_and_contract(problem, config, x, mask_rows, has_mask, weights, on_gpu, prec):
    """Stages 1 and 2: ab (B, 2c, N, N) and y (B, c, N, N), both channel-first."""
    lnw, lnb, wp, bp, wg, bg = weights[:6]
    B, N, CZ, C = problem.batch, problem.n, problem.c_z, problem.c
    C2 = 2 * C
    M, NN = B * N * N, N * N
    options = _launch_options(config)
    ab = torch.empty((B, C2, N, N), device=x.device, dtype=x.dtype)
    cfg = config["ln_gate_proj"]
    launcher(ln_gate_proj_kernel, on_gpu=on_gpu)[(triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(C2, cfg["BLOCK_N"]),)](
        x, mask_rows, lnw, lnb, wp, bp, wg, bg, ab, M, NN, CZ, C2, problem.eps,
        HAS_MASK=has_mask, PRECISION=prec, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
        CZ_BLOCK=triton.next_power_of_2(CZ), **_opts(cfg, on_gpu, options))
    y = torch.empty((B, C, N, N), device=x.device, dtype=x.dtype)
    a_s, b_s = forward_products(problem.direction, N, C)
    _contract(ab[:, :C], ab[:, C:], y, a_strides=a_s, b_strides=b_s, y_strides=(C * NN, NN, N, 1), n=N, c=C,
              cfg=config["contract"], on_gpu=on_gpu, options=options, prec=prec)
    return ab, y


def forward(problem, config, x, mask, *weights):
    """(out (B, N, N, c_z), ab, y): with ``save_for_backward`` in the config ab (B, 2c, N, N) and
    y (B, c, N, N), three pair-sized tensors the backward then reads; without it (the default)
    both are empty and the backward recomputes stages 1 and 2, so a layer's activation memory
    between forward and backward is its input alone."""
    weights = tuple(w.contiguous() for w in weights)
    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    x = x.contiguous()
    CZ, C = problem.c_z, problem.c
    M, NN = problem.batch * problem.n * problem.n, problem.n * problem.n
    on_gpu, prec = x.is_cuda, _precision(x.dtype, config)
    mask_rows, has_mask = _mask_rows(mask, x)
    ab, y = _project_and_contract(problem, config, x, mask_rows, has_mask, weights, on_gpu, prec)

    out = torch.empty_like(x)
    cfg = config["ln_out_gate"]
    launcher(ln_out_gate_kernel, on_gpu=on_gpu)[(triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(CZ, cfg["BLOCK_N"]),)](
        x, y, lnw, lnb, lnw_o, lnb_o, wpo, bpo, wgo, bgo, out, M, NN, CZ, C, problem.eps,
        PRECISION=prec, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CZ_BLOCK=triton.next_power_of_2(CZ),
        C_BLOCK=triton.next_power_of_2(C), **_opts(cfg, on_gpu, _launch_options(config)))
    if saves(config):
        return out, ab, y
    return out, x.new_empty(0), x.new_empty(0)


def _row_blocks(M: int, rows: int, block_m: int):
    rows = max(block_m, (rows // block_m) * block_m)
    for start in range(0, M, rows):
        yield start, min(rows, M - start)


def backward(problem, config, saved, grads, needs):
    """(dx, d norm_in_w, d norm_in_b, dWp, dbp, dWg, dbg, d norm_out_w, d norm_out_b, dWpo, dbpo, dWgo, dbgo)."""
    weights = tuple(saved[n].contiguous() for n in TRIMUL_WEIGHTS)
    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    x, dout = saved["x"].contiguous(), grads["out"].contiguous()
    B, N, CZ, C = problem.batch, problem.n, problem.c_z, problem.c
    C2 = 2 * C
    M, NN = B * N * N, N * N
    eps = problem.eps
    options = _launch_options(config)
    on_gpu, prec = x.is_cuda, _precision(x.dtype, config)
    mask_rows, has_mask = _mask_rows(saved["mask"], x)
    if saves(config):
        ab, y = saved["ab"], saved["y"]
    else:
        ab, y = _project_and_contract(problem, config, x, mask_rows, has_mask, weights, on_gpu, prec)
    czb, cb = triton.next_power_of_2(CZ), triton.next_power_of_2(C)
    f32 = torch.float32
    dev, dt = x.device, x.dtype

    # Stage 3 backward, one block of rows at a time.
    cfg, lcfg = config["out_gate_bwd"], config["ln_out_bwd"]
    rows = config["bwd_rows"]
    dy = torch.empty((B, C, N, N), device=dev, dtype=dt)
    dgz = torch.empty((M, CZ), device=dev, dtype=dt)  # kept whole: stage 1 needs it
    dwpo, dwgo = torch.zeros((CZ, C), device=dev, dtype=f32), torch.zeros((CZ, CZ), device=dev, dtype=f32)
    dbpo, dbgo = torch.zeros(CZ, device=dev, dtype=f32), torch.zeros(CZ, device=dev, dtype=f32)
    dlno = torch.zeros(2 * C, device=dev, dtype=f32)
    for row0, m_rows in _row_blocks(M, rows, max(cfg["BLOCK_M"], lcfg["BLOCK_M"])):
        du = torch.empty((m_rows, CZ), device=dev, dtype=dt)
        yn = torch.empty((m_rows, C), device=dev, dtype=dt)
        xn = torch.empty((m_rows, CZ), device=dev, dtype=dt)
        launcher(out_gate_bwd_kernel, on_gpu=on_gpu)[(triton.cdiv(m_rows, cfg["BLOCK_M"]),)](
            x, y, dout, lnw, lnb, lnw_o, lnb_o, wpo, bpo, wgo, bgo, du, dgz, yn, xn,
            row0, m_rows, NN, CZ, C, eps, PRECISION=prec, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
            CZ_BLOCK=czb, C_BLOCK=cb, **_opts(cfg, on_gpu, options))
        grid = (triton.cdiv(m_rows, lcfg["BLOCK_M"]),)
        part = torch.empty((grid[0], 2, C), device=dev, dtype=f32)  # per program: (d weight, d bias) rows
        launcher(ln_out_bwd_kernel, on_gpu=on_gpu)[grid](
            y, du, lnw_o, lnb_o, wpo, dy, part, row0, m_rows, NN, CZ, C, eps, PRECISION=prec,
            BLOCK_M=lcfg["BLOCK_M"], BLOCK_K=lcfg["BLOCK_K"], C_BLOCK=cb, **_opts(lcfg, on_gpu, options))
        dwpo += _wgrad(du, yn)
        dwgo += _wgrad(dgz[row0:row0 + m_rows], xn)
        dbpo += du.sum(0, dtype=f32)
        dbgo += dgz[row0:row0 + m_rows].sum(0, dtype=f32)
        dlno += part.sum(0).flatten()
        del du, yn, xn

    del y  # (when recomputed, its memory is free from here)

    # Contraction backward: dA, dB into one channel-first (B, 2c, N, N) buffer.
    dab = torch.empty((B, C2, N, N), device=dev, dtype=dt)
    bstride, cstride = 2 * C * NN, NN
    dy_s = (C * NN, NN, N, 1)
    dy_t = (C * NN, NN, 1, N)
    a_rm, b_rm = (bstride, cstride, N, 1), (bstride, cstride, N, 1)
    out_a, out_b = (bstride, cstride, N, 1), (bstride, cstride, N, 1)
    ccfg = config["contract"]
    if problem.direction == "outgoing":  # y = a b^T:  da = dy b,  db = dy^T a
        _contract(dy, ab[:, C:], dab[:, :C], a_strides=dy_s, b_strides=b_rm, y_strides=out_a, n=N, c=C, cfg=ccfg,
                  on_gpu=on_gpu, options=options, prec=prec)
        _contract(dy, ab[:, :C], dab[:, C:], a_strides=dy_t, b_strides=a_rm, y_strides=out_b, n=N, c=C, cfg=ccfg,
                  on_gpu=on_gpu, options=options, prec=prec)
    else:  # y = a^T b:  da = b dy^T,  db = a dy
        _contract(ab[:, C:], dy, dab[:, :C], a_strides=b_rm, b_strides=dy_t, y_strides=out_a, n=N, c=C, cfg=ccfg,
                  on_gpu=on_gpu, options=options, prec=prec)
        _contract(ab[:, :C], dy, dab[:, C:], a_strides=a_rm, b_strides=dy_s, y_strides=out_b, n=N, c=C, cfg=ccfg,
                  on_gpu=on_gpu, options=options, prec=prec)
    del dy, ab

    # Stage 1 backward.
    cfg = config["ln_gate_proj_bwd"]
    dx = torch.empty_like(x)
    dwp, dwg = torch.zeros((C2, CZ), device=dev, dtype=f32), torch.zeros((C2, CZ), device=dev, dtype=f32)
    dbp, dbg = torch.zeros(C2, device=dev, dtype=f32), torch.zeros(C2, device=dev, dtype=f32)
    dlni = torch.zeros(2 * CZ, device=dev, dtype=f32)
    for row0, m_rows in _row_blocks(M, rows, cfg["BLOCK_M"]):
        grid = (triton.cdiv(m_rows, cfg["BLOCK_M"]),)
        dp = torch.empty((m_rows, C2), device=dev, dtype=dt)
        dg = torch.empty((m_rows, C2), device=dev, dtype=dt)
        xn = torch.empty((m_rows, CZ), device=dev, dtype=dt)
        part = torch.empty((grid[0], 2, CZ), device=dev, dtype=f32)
        launcher(ln_gate_proj_bwd_kernel, on_gpu=on_gpu)[grid](
            x, mask_rows, dab, dgz, lnw, lnb, wp, bp, wg, bg, wgo, dx, dp, dg, xn, part,
            row0, m_rows, NN, CZ, C2, eps, HAS_MASK=has_mask, PRECISION=prec,
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CZ_BLOCK=czb, **_opts(cfg, on_gpu, options))
        dwp += _wgrad(dp, xn)
        dwg += _wgrad(dg, xn)
        dbp += dp.sum(0, dtype=f32)
        dbg += dg.sum(0, dtype=f32)
        dlni += part.sum(0).flatten()
        del dp, dg, xn

    # (LayerNorm halves are cloned: a custom op's outputs may not alias each other.)
    grads = (dx, dlni[:CZ].clone(), dlni[CZ:].clone(), dwp, dbp, dwg, dbg, dlno[:C].clone(), dlno[C:].clone(), dwpo, dbpo,
             dwgo, dbgo)
    return tuple(g if i == 0 else g.to(w.dtype) for i, (g, w) in enumerate(zip(grads, (x, *weights))))


_OUT_DTYPE_OK: dict[str, bool] = {}


def _wgrad(d, inp):
    """d^T @ inp with fp32 output (a weight gradient over a block of rows).

    16-bit operands go through the tensor cores with an fp32 result where this
    PyTorch has ``matmul(..., out_dtype=)`` for the device; elsewhere the 16-bit
    product is widened, as PyTorch's own autograd of a bf16 linear would keep it.
    """
    if d.dtype == torch.float32:
        return d.mT @ inp
    kind = d.device.type
    if _OUT_DTYPE_OK.get(kind, True):
        try:
            out = torch.matmul(d.mT, inp, out_dtype=torch.float32)
            _OUT_DTYPE_OK[kind] = True
            return out
        except (TypeError, RuntimeError, NotImplementedError):
            _OUT_DTYPE_OK[kind] = False
    return (d.mT @ inp).float()
