"""The triangle multiplicative update on Trainium in NKI (on the emulator where no Neuron toolchain
is installed): fused kernels for the per-pair work of the forward (``trimul_in_kernel``: input
LayerNorm, gated projections, mask and output gate; ``trimul_out_kernel``: output LayerNorm,
projection and gate) and of the backward (``trimul_out_bwd_kernel``, ``trimul_in_bwd_kernel``, every
weight gradient reduced over all pairs inside them), around the contraction and its gradient on the
NKI GEMM of :mod:`ceiling.trainium.gemm`; only the inputs are kept between the passes. How each
kernel maps onto the engines, its layouts and its width limits: ``kernels/trainium/README.md``.
"""

from __future__ import annotations

import numpy as np
import torch

from ceiling.trainium import gemm as nki_gemm
from ceiling.trainium.nki_compat import EMULATED, nisa, nki, nl

P = 128  # partitions: rows per tile, channels per chunk, contraction depth per matmul
GROUP = 512  # pair rows per group: the moving free size of a matmul (one fp32 PSUM bank)


def _chunks(n: int, size: int = P):
    return [(i, min(size, n - i)) for i in range(0, n, size)]


def _ones(shape):
    t = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=1.0)
    return t


def _broadcast_rows(dst, ones_row, row, parts, cols):
    """dst[0:parts, 0:cols] = row (1, cols) repeated on ``parts`` partitions: a K=1 matmul
    against a ones row (TensorE), then one copy to SBUF."""
    ps = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps[0:parts, 0:cols], stationary=ones_row[0:1, 0:parts], moving=row)
    nisa.tensor_copy(dst=dst[0:parts, 0:cols], src=ps[0:parts, 0:cols])


def _load_columns(vec, chunks):
    """A (n, 1) fp32 HBM vector as per-partition columns, one SBUF tile per chunk."""
    cols = []
    for c0, cc in chunks:
        t = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:cc, :], src=vec[c0 : c0 + cc, :])
        cols.append(t)
    return cols


def _pieces(n: int):
    """Moving-operand / PSUM-bank pieces of a free axis: at most 512 fp32 columns each."""
    return _chunks(n, GROUP)


def _affine_columns(xT_ps, chunks, lnw_c, lnb_c, rs, kd):
    """The LayerNorm affine of transposed normalized rows, leaving PSUM: per channel chunk, a
    (chunk, rows) SBUF tile xhat^T * w + b in the kernel dtype, ready as a TensorE operand."""
    out = []
    for (c0, cc), ps, w_col, b_col in zip(chunks, xT_ps, lnw_c, lnb_c):
        t = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=t[0:cc, 0:rs], data=ps[0:cc, 0:rs], op0=nl.multiply, operand0=w_col[0:cc, :],
                           op1=nl.add, operand1=b_col[0:cc, :])
        out.append(t)
    return out


def _mask_columns(mask, b, r0, rs, ones_row, parts):
    """The pair mask of rows [r0, r0 + rs) of batch b, broadcast over ``parts`` partitions (channels)."""
    mrow = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=mrow[0:1, 0:rs], src=mask[b : b + 1, r0 : r0 + rs])
    mask_b = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
    _broadcast_rows(mask_b, ones_row, mrow[0:1, 0:rs], parts, rs)
    return mask_b


def _row_norm(xhat, xt, ts, eps_col):
    """xhat[0:ts] = LayerNorm of the rows of ``xt`` (rows on partitions, c_z along the free axis),
    without the affine; returns the per-row 1/std column. The mean by ``tensor_reduce`` on VectorE,
    the squared deviations summed by ScalarE's fused ``activation`` reduction, ``rsqrt`` on ScalarE."""
    CZ = xt.shape[1]
    neg_mean = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=neg_mean[0:ts, :], op=nl.add, data=xt[0:ts, :], axis=1, negate=True, keepdims=True)
    nisa.tensor_scalar(dst=neg_mean[0:ts, :], data=neg_mean[0:ts, :], op0=nl.multiply, operand0=1.0 / CZ)
    xc = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=xc[0:ts, :], data=xt[0:ts, :], op0=nl.add, operand0=neg_mean[0:ts, :])
    sq = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
    ssq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=sq[0:ts, :], op=nl.square, data=xc[0:ts, :], reduce_op=nl.add, reduce_res=ssq[0:ts, :],
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=rstd[0:ts, :], op=nl.rsqrt, data=ssq[0:ts, :], scale=1.0 / CZ, bias=eps_col[0:ts, :])
    nisa.tensor_scalar(dst=xhat[0:ts, 0:CZ], data=xc[0:ts, :], op0=nl.multiply, operand0=rstd[0:ts, :])
    return rstd


def _channel_sum(tiles, c_chunks, ones_col, rs):
    """(1, rs) sum over every channel chunk (the partition axis): ones-column matmuls accumulated in PSUM."""
    ps = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.psum)
    for (c0, cc), t in zip(c_chunks, tiles):
        nisa.nc_matmul(dst=ps[0:1, 0:rs], stationary=ones_col[0:cc, 0:1], moving=t[0:cc, 0:rs])
    return ps


def _channel_norm(ys, c_chunks, rs, ones_col, ones_row, eps_col):
    """(y_hat tiles fp32, 1/std broadcast over the channels (P, GROUP) fp32) of channel-first tiles
    (channels on partitions, pair rows along the free axis): LayerNorm over the partition axis,
    two passes of ones-column sums on TensorE, each broadcast back by a K=1 matmul."""
    C = sum(cc for _, cc in c_chunks)
    mean_row = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=mean_row[0:1, 0:rs], data=_channel_sum(ys, c_chunks, ones_col, rs)[0:1, 0:rs],
                       op0=nl.multiply, operand0=1.0 / C)
    mean_b = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
    _broadcast_rows(mean_b, ones_row, mean_row[0:1, 0:rs], min(C, P), rs)
    centred, squares = [], []
    for (c0, cc), t in zip(c_chunks, ys):
        yc = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=yc[0:cc, 0:rs], data1=t[0:cc, 0:rs], data2=mean_b[0:cc, 0:rs], op=nl.subtract)
        sq = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[0:cc, 0:rs], op=nl.square, data=yc[0:cc, 0:rs])
        centred.append(yc)
        squares.append(sq)
    del mean_b
    rstd_row = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=rstd_row[0:1, 0:rs], op=nl.rsqrt, data=_channel_sum(squares, c_chunks, ones_col, rs)[0:1, 0:rs],
                    scale=1.0 / C, bias=eps_col[0:1, :])
    del squares
    rstd_b = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
    _broadcast_rows(rstd_b, ones_row, rstd_row[0:1, 0:rs], min(C, P), rs)
    y_hat = []
    for (c0, cc), yc in zip(c_chunks, centred):
        t = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t[0:cc, 0:rs], data1=yc[0:cc, 0:rs], data2=rstd_b[0:cc, 0:rs], op=nl.multiply)
        y_hat.append(t)
    return y_hat, rstd_b


@nki.jit
def trimul_in_kernel(x, mask, lnw, lnb, w_inT, b_in, wgoT, bgo, eps, has_mask):
    """a, b (B, c, R) and gate (B, R, c_z) in x's dtype from x (B, R, c_z) (R = N*N pair rows),
    mask (B, R) fp32, lnw/lnb (c_z, 1) fp32, w_inT (c_z, 4c) = [p_in; g_in]^T, b_in (4c, 1) fp32,
    wgoT (c_z, c_z) = g_out^T, bgo (1, c_z) fp32."""
    B, R, CZ = x.shape
    C = w_inT.shape[1] // 4
    kd = x.dtype
    d_chunks = _chunks(CZ)
    c_chunks = _chunks(C)

    a_out = nl.ndarray((B, C, R), dtype=kd, buffer=nl.shared_hbm)
    b_out = nl.ndarray((B, C, R), dtype=kd, buffer=nl.shared_hbm)
    gate_out = nl.ndarray((B, R, CZ), dtype=kd, buffer=nl.shared_hbm)

    # Resident for the whole kernel: weights with c_z on partitions, biases and LN affine as
    # per-partition columns, the gate bias broadcast to every row, constants.
    w_t, wgo_t = [], []
    for d0, dc in d_chunks:
        t = nl.ndarray((P, 4 * C), dtype=kd, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:dc, :], src=w_inT[d0 : d0 + dc, :])
        w_t.append(t)
        t = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:dc, :], src=wgoT[d0 : d0 + dc, :])
        wgo_t.append(t)
    lnw_c, lnb_c = _load_columns(lnw, d_chunks), _load_columns(lnb, d_chunks)
    # Bias columns of the four projections: p_a, p_b, g_a, g_b, each chunked like c.
    bias_c = [_load_columns(b_in[q * C : (q + 1) * C, :], c_chunks) for q in range(4)]
    ones_row = _ones((1, P))
    eps_col = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=eps_col, value=float(eps))
    bgo_row = nl.ndarray((1, CZ), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=bgo_row, src=bgo)
    bgo_b = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
    _broadcast_rows(bgo_b, ones_row, bgo_row[0:1, 0:CZ], P, CZ)

    for b in nl.affine_range(B):
        for r0, rs in _chunks(R, GROUP):
            # LayerNorm of each 128-row tile, rows on partitions, then transposed so c_z is
            # the contraction axis; the affine is applied per partition on the way out of PSUM.
            xT_ps = [nl.ndarray((P, GROUP), dtype=kd, buffer=nl.psum) for _ in d_chunks]
            for t0, ts in _chunks(rs):
                xt = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=xt[0:ts, :], src=x[b, r0 + t0 : r0 + t0 + ts, :])
                xhat = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
                _row_norm(xhat, xt, ts, eps_col)
                for (d0, dc), ps in zip(d_chunks, xT_ps):
                    nisa.nc_transpose(dst=ps[0:dc, t0 : t0 + ts], data=xhat[0:ts, d0 : d0 + dc])
            xnT = _affine_columns(xT_ps, d_chunks, lnw_c, lnb_c, rs, kd)
            del xT_ps
            mask_b = _mask_columns(mask, b, r0, rs, ones_row, min(C, P)) if has_mask else None

            # [a; b] channel-first: per channel chunk, p and g on TensorE, the gate on ScalarE
            # straight from PSUM, bias and mask on VectorE.
            for half, dst_hbm in ((0, a_out), (1, b_out)):
                for ci, (c0, cc) in enumerate(c_chunks):
                    p_ps = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.psum)
                    g_ps = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.psum)
                    pc, gc = half * C + c0, (2 + half) * C + c0
                    for (d0, dc), w, xn in zip(d_chunks, w_t, xnT):
                        nisa.nc_matmul(dst=p_ps[0:cc, 0:rs], stationary=w[0:dc, pc : pc + cc], moving=xn[0:dc, 0:rs])
                        nisa.nc_matmul(dst=g_ps[0:cc, 0:rs], stationary=w[0:dc, gc : gc + cc], moving=xn[0:dc, 0:rs])
                    sig = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.activation(dst=sig[0:cc, 0:rs], op=nl.sigmoid, data=g_ps[0:cc, 0:rs], bias=bias_c[2 + half][ci][0:cc, :])
                    val = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
                    if mask_b is not None:
                        nisa.scalar_tensor_tensor(dst=val[0:cc, 0:rs], data=p_ps[0:cc, 0:rs], op0=nl.add,
                                                  operand0=bias_c[half][ci][0:cc, :], op1=nl.multiply,
                                                  operand1=mask_b[0:cc, 0:rs])
                    else:
                        nisa.tensor_scalar(dst=val[0:cc, 0:rs], data=p_ps[0:cc, 0:rs], op0=nl.add,
                                           operand0=bias_c[half][ci][0:cc, :])
                    ab = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                    nisa.tensor_tensor(dst=ab[0:cc, 0:rs], data1=sig[0:cc, 0:rs], data2=val[0:cc, 0:rs], op=nl.multiply)
                    nisa.dma_copy(dst=dst_hbm[b, c0 : c0 + cc, r0 : r0 + rs], src=ab[0:cc, 0:rs])

            # Output gate, row-major: the normalized tile is the stationary operand.
            for t0, ts in _chunks(rs):
                go_ps = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.psum)
                for (d0, dc), xn, wg in zip(d_chunks, xnT, wgo_t):
                    nisa.nc_matmul(dst=go_ps[0:ts, :], stationary=xn[0:dc, t0 : t0 + ts], moving=wg[0:dc, 0:CZ])
                logit = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=logit[0:ts, :], data1=go_ps[0:ts, :], data2=bgo_b[0:ts, :], op=nl.add)
                gate = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
                nisa.activation(dst=gate[0:ts, :], op=nl.sigmoid, data=logit[0:ts, :])
                nisa.dma_copy(dst=gate_out[b, r0 + t0 : r0 + t0 + ts, :], src=gate[0:ts, :])
    return a_out, b_out, gate_out


@nki.jit
def trimul_out_kernel(y, gate, lnw_o, lnb_o, wpoT, bpo, eps, out_dtype):
    """out (B, R, c_z) from channel-first y (B, c, R) fp32, gate (B, R, c_z), lnw_o/lnb_o (c, 1)
    fp32, wpoT (c, c_z) = p_out^T in the gate's dtype, bpo (1, c_z) fp32."""
    B, C, R = y.shape
    CZ = wpoT.shape[1]
    kd = wpoT.dtype
    c_chunks = _chunks(C)

    out = nl.ndarray((B, R, CZ), dtype=out_dtype, buffer=nl.shared_hbm)

    wpo_t = []
    for c0, cc in c_chunks:
        t = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:cc, :], src=wpoT[c0 : c0 + cc, :])
        wpo_t.append(t)
    lnw_c, lnb_c = _load_columns(lnw_o, c_chunks), _load_columns(lnb_o, c_chunks)
    ones_row = _ones((1, P))
    ones_col = _ones((P, 1))
    eps_col = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=eps_col, value=float(eps))
    bpo_row = nl.ndarray((1, CZ), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=bpo_row, src=bpo)
    bpo_b = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
    _broadcast_rows(bpo_b, ones_row, bpo_row[0:1, 0:CZ], P, CZ)

    for b in nl.affine_range(B):
        for r0, rs in _chunks(R, GROUP):
            ys = []
            for c0, cc in c_chunks:
                t = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t[0:cc, 0:rs], src=y[b, c0 : c0 + cc, r0 : r0 + rs])
                ys.append(t)
            # LayerNorm over channels (the partition axis), two passes on TensorE.
            y_hat, rstd_b = _channel_norm(ys, c_chunks, rs, ones_col, ones_row, eps_col)
            del ys, rstd_b
            yn = []
            for (c0, cc), yh, w_col, b_col in zip(c_chunks, y_hat, lnw_c, lnb_c):
                t = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=t[0:cc, 0:rs], data=yh[0:cc, 0:rs], op0=nl.multiply, operand0=w_col[0:cc, :],
                                   op1=nl.add, operand1=b_col[0:cc, :])
                yn.append(t)
            del y_hat

            # Output projection, row-major: the channel-first normalized tile is the stationary operand.
            for t0, ts in _chunks(rs):
                z_ps = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.psum)
                for (c0, cc), t, w in zip(c_chunks, yn, wpo_t):
                    nisa.nc_matmul(dst=z_ps[0:ts, :], stationary=t[0:cc, t0 : t0 + ts], moving=w[0:cc, 0:CZ])
                g = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=g[0:ts, :], src=gate[b, r0 + t0 : r0 + t0 + ts, :])
                z = nl.ndarray((P, CZ), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=z[0:ts, :], data1=z_ps[0:ts, :], data2=bpo_b[0:ts, :], op=nl.add)
                o = nl.ndarray((P, CZ), dtype=out_dtype, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=o[0:ts, :], data1=z[0:ts, :], data2=g[0:ts, :], op=nl.multiply)
                nisa.dma_copy(dst=out[b, r0 + t0 : r0 + t0 + ts, :], src=o[0:ts, :])
    return out


def _load_rows(mat, chunks, dtype):
    """Row chunks of a 2-D HBM matrix, one (P, cols) SBUF tile per chunk."""
    tiles = []
    for r0, rc in chunks:
        t = nl.ndarray((P, mat.shape[1]), dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:rc, :], src=mat[r0 : r0 + rc, :])
        tiles.append(t)
    return tiles


def _row_broadcast(vec, ones_row, cols):
    """A (cols, 1) fp32 HBM vector as a (P, cols) SBUF tile, the vector repeated on every partition."""
    row = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=row[0:1, 0:cols], src=vec[0:cols, :])
    out = nl.ndarray((P, cols), dtype=nl.float32, buffer=nl.sbuf)
    for f0, fs in _pieces(cols):
        _broadcast_rows(out[:, f0 : f0 + fs], ones_row, row[0:1, f0 : f0 + fs], P, fs)
    return out


def _evacuate(dst, src, parts, cols, i=0):
    """PSUM -> SBUF copy of [0:parts, 0:cols], one PSUM bank per instruction, alternating VectorE and
    ScalarE so that neither carries every copy."""
    per_bank = 2048 // src.dtype.itemsize
    for k, (f0, fs) in enumerate(_chunks(cols, per_bank)):
        if (i + k) % 2:
            nisa.activation(dst=dst[0:parts, f0 : f0 + fs], op=nl.copy, data=src[0:parts, f0 : f0 + fs])
        else:
            nisa.tensor_copy(dst=dst[0:parts, f0 : f0 + fs], src=src[0:parts, f0 : f0 + fs])


def _accumulate(acc, ps, parts, cols, first):
    """acc[0:parts, 0:cols] (SBUF fp32) = or += a PSUM partial sum, bank by bank."""
    for f0, fs in _pieces(cols):
        if first:
            nisa.tensor_copy(dst=acc[0:parts, f0 : f0 + fs], src=ps[0:parts, f0 : f0 + fs])
        else:
            nisa.tensor_tensor(dst=acc[0:parts, f0 : f0 + fs], data1=acc[0:parts, f0 : f0 + fs],
                               data2=ps[0:parts, f0 : f0 + fs], op=nl.add)


def _affine_weight_grads(h_acc, chunks, w32, lnw_b, lnb_b, ones_col, width, dw_out, dbias_out, dlnw_ps, dlnb_ps):
    """The weight, bias and LayerNorm-affine gradients of a linear layer fed by ``LN(t) = t_hat * w + b``,
    from H = sum over rows of [d_out^T t_hat, d_out^T 1] (``h_acc``: per output chunk, (rows, width + 1)
    fp32, the last column the bias gradient):

        dW = H * w (along the input axis) + dbias (x) b,   dLN_w += sum_out W * H,   dLN_b += sum_out dbias * W

    (the LayerNorm parameters' gradients summed over rows, without a pass over the rows).
    ``w32`` are the layer's weight rows (output on partitions) in fp32; the two sums accumulate in the
    (1, width) PSUM tiles ``dlnw_ps`` / ``dlnb_ps`` across calls."""
    for (o0, oc), h, w in zip(chunks, h_acc, w32):
        dbias = h[0:oc, width : width + 1]
        nisa.dma_copy(dst=dbias_out[o0 : o0 + oc, :], src=dbias)
        hw = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=hw[0:oc, :], data1=h[0:oc, 0:width], data2=lnw_b[0:oc, 0:width], op=nl.multiply)
        dw = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=dw[0:oc, :], data=lnb_b[0:oc, 0:width], op0=nl.multiply, operand0=dbias,
                                  op1=nl.add, operand1=hw[0:oc, :])
        nisa.dma_copy(dst=dw_out[o0 : o0 + oc, :], src=dw[0:oc, :])
        wh = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=wh[0:oc, :], data1=w[0:oc, 0:width], data2=h[0:oc, 0:width], op=nl.multiply)
        for f0, fs in _pieces(width):
            nisa.nc_matmul(dst=dlnw_ps[0:1, f0 : f0 + fs], stationary=ones_col[0:oc, 0:1], moving=wh[0:oc, f0 : f0 + fs])
            nisa.nc_matmul(dst=dlnb_ps[0:1, f0 : f0 + fs], stationary=dbias, moving=w[0:oc, f0 : f0 + fs])


def _store_row(dst_hbm, ps, width):
    """A (1, width) PSUM row to a (1, width) HBM output."""
    t = nl.ndarray((1, width), dtype=nl.float32, buffer=nl.sbuf)
    for f0, fs in _pieces(width):
        nisa.tensor_copy(dst=t[0:1, f0 : f0 + fs], src=ps[0:1, f0 : f0 + fs])
    nisa.dma_copy(dst=dst_hbm[0:1, 0:width], src=t[0:1, 0:width])


@nki.jit
def trimul_out_bwd_kernel(y, gate, dout, lnw_o, lnb_o, wpoT, wpo, wpo32, bpo, eps):
    """Backward of ``trimul_out_kernel``: from channel-first y (B, c, R) fp32, the gate and dout
    (B, R, c_z) in the kernel dtype, lnw_o/lnb_o (c, 1) fp32, wpoT (c, c_z) = p_out^T and
    wpo (c_z, c) = p_out in the kernel dtype, wpo32 = p_out in fp32, bpo (1, c_z) fp32:

    dy (B, c, R) channel-first in the kernel dtype (for the contraction's backward), the gradient
    of the output gate's logits (B, R, c_z) in the kernel dtype, and, reduced over every pair row of
    every batch element, fp32: d p_out (c_z, c), d p_out bias (c_z, 1), d norm_out weight and bias (1, c)."""
    B, C, R = y.shape
    CZ = wpoT.shape[1]
    kd = wpoT.dtype
    f32 = nl.float32
    c_chunks, z_chunks = _chunks(C), _chunks(CZ)

    dy_out = nl.ndarray((B, C, R), dtype=kd, buffer=nl.shared_hbm)
    dgl_out = nl.ndarray((B, R, CZ), dtype=kd, buffer=nl.shared_hbm)
    dwpo_out = nl.ndarray((CZ, C), dtype=f32, buffer=nl.shared_hbm)
    dbpo_out = nl.ndarray((CZ, 1), dtype=f32, buffer=nl.shared_hbm)
    dlnw_out = nl.ndarray((1, C), dtype=f32, buffer=nl.shared_hbm)
    dlnb_out = nl.ndarray((1, C), dtype=f32, buffer=nl.shared_hbm)

    wpoT_t = _load_rows(wpoT, c_chunks, kd)  # stationary-side rows of the recomputed projection
    wpo_t = _load_rows(wpo, z_chunks, kd)  # c_z on partitions: dyn = p_out^T dz^T contracts c_z
    lnw_c, lnb_c = _load_columns(lnw_o, c_chunks), _load_columns(lnb_o, c_chunks)
    ones_row, ones_col = _ones((1, P)), _ones((P, 1))
    eps_col = nl.ndarray((1, 1), dtype=f32, buffer=nl.sbuf)
    nisa.memset(dst=eps_col, value=float(eps))
    bpo_row = nl.ndarray((1, CZ), dtype=f32, buffer=nl.sbuf)
    nisa.dma_copy(dst=bpo_row, src=bpo)
    bpo_b = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
    _broadcast_rows(bpo_b, ones_row, bpo_row[0:1, 0:CZ], P, CZ)

    # G^T = sum over rows of dz^T [y_hat^T, 1]: (c_z, c + 1) fp32, per c_z chunk, the whole kernel long.
    g_acc = [nl.ndarray((P, C + 1), dtype=f32, buffer=nl.sbuf) for _ in z_chunks]
    first = True

    for b in nl.affine_range(B):
        for r0, rs in _chunks(R, GROUP):
            ys = []
            for c0, cc in c_chunks:
                t = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t[0:cc, 0:rs], src=y[b, c0 : c0 + cc, r0 : r0 + rs])
                ys.append(t)
            # Recompute LN(y) over the channels (partition axis), as the forward.
            y_hat, rstd_b = _channel_norm(ys, c_chunks, rs, ones_col, ones_row, eps_col)
            del ys
            yn, yhat_k = [], []
            for ci, ((c0, cc), yh, w_col, b_col) in enumerate(zip(c_chunks, y_hat, lnw_c, lnb_c)):
                t = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=t[0:cc, 0:rs], data=yh[0:cc, 0:rs], op0=nl.multiply, operand0=w_col[0:cc, :],
                                   op1=nl.add, operand1=b_col[0:cc, :])
                yn.append(t)
                if kd == f32:
                    yhat_k.append(yh)
                else:
                    t = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                    nisa.activation(dst=t[0:cc, 0:rs], op=nl.copy, data=yh[0:cc, 0:rs])
                    yhat_k.append(t)

            dzT = [nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf) for _ in z_chunks]
            g_ps = [nl.ndarray((P, C + 1), dtype=f32, buffer=nl.psum) for _ in z_chunks]
            for t0, ts in _chunks(rs):
                # z = LN(y) p_out^T + b, row-major (rows on partitions), as the forward.
                z_ps = nl.ndarray((P, CZ), dtype=f32, buffer=nl.psum)
                for (c0, cc), t, w in zip(c_chunks, yn, wpoT_t):
                    nisa.nc_matmul(dst=z_ps[0:ts, :], stationary=t[0:cc, t0 : t0 + ts], moving=w[0:cc, 0:CZ])
                do = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.dma_copy(dst=do[0:ts, :], src=dout[b, r0 + t0 : r0 + t0 + ts, :])
                g = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.dma_copy(dst=g[0:ts, :], src=gate[b, r0 + t0 : r0 + t0 + ts, :])
                # dz = dout * gate; d(gate logit) = dz * z * (1 - gate).
                dz = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=dz[0:ts, :], data1=do[0:ts, :], data2=g[0:ts, :], op=nl.multiply)
                omg = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.activation(dst=omg[0:ts, :], op=nl.copy, data=g[0:ts, :], scale=-1.0, bias=ones_col[0:ts, :])
                z = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=z[0:ts, :], data1=z_ps[0:ts, :], data2=bpo_b[0:ts, :], op=nl.add)
                nisa.tensor_tensor(dst=z[0:ts, :], data1=z[0:ts, :], data2=dz[0:ts, :], op=nl.multiply)
                dgl = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=dgl[0:ts, :], data1=z[0:ts, :], data2=omg[0:ts, :], op=nl.multiply)
                nisa.dma_copy(dst=dgl_out[b, r0 + t0 : r0 + t0 + ts, :], src=dgl[0:ts, :])
                if kd == f32:
                    dz_k = dz
                else:
                    dz_k = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
                    nisa.activation(dst=dz_k[0:ts, :], op=nl.copy, data=dz[0:ts, :])
                # dz^T (c_z on partitions) for dyn, collected over the group in SBUF.
                dzT_ps = nl.ndarray((P, len(z_chunks) * P), dtype=kd, buffer=nl.psum)
                for zi, (z0, zc) in enumerate(z_chunks):
                    nisa.nc_transpose(dst=dzT_ps[0:zc, zi * P : zi * P + ts], data=dz_k[0:ts, z0 : z0 + zc])
                for zi, ((z0, zc), t) in enumerate(zip(z_chunks, dzT)):
                    _evacuate(t[:, t0 : t0 + ts], dzT_ps[:, zi * P : zi * P + ts], zc, ts, zi + t0 // P)
                # y_hat^T with a ones column: the stationary dz contracts the rows against it, giving
                # dz^T y_hat (for d p_out and d norm_out weight) and the row sum of dz (d p_out bias).
                yT_ps = nl.ndarray((P, C), dtype=kd, buffer=nl.psum)
                for (c0, cc), yk in zip(c_chunks, yhat_k):
                    nisa.nc_transpose(dst=yT_ps[0:ts, c0 : c0 + cc], data=yk[0:cc, t0 : t0 + ts])
                yT = nl.ndarray((P, C + 1), dtype=kd, buffer=nl.sbuf)
                _evacuate(yT, yT_ps, ts, C, t0 // P)
                nisa.memset(dst=yT[0:ts, C : C + 1], value=1.0, engine=nisa.gpsimd_engine)
                for (z0, zc), ps in zip(z_chunks, g_ps):
                    for f0, fs in _pieces(C + 1):
                        nisa.nc_matmul(dst=ps[0:zc, f0 : f0 + fs], stationary=dz_k[0:ts, z0 : z0 + zc],
                                       moving=yT[0:ts, f0 : f0 + fs])
                del z_ps, yT_ps, dzT_ps
            for (z0, zc), ps, acc in zip(z_chunks, g_ps, g_acc):
                _accumulate(acc, ps, zc, C + 1, first)
            first = False
            del g_ps

            # dyn = p_out^T dz^T (channel-first); LayerNorm backward over the channels:
            # dy = rstd * (dyh - mean_c(dyh) - y_hat * mean_c(dyh * y_hat)), dyh = dyn * lnw.
            dyh, prods = [], []
            for (c0, cc), w_col, yh in zip(c_chunks, lnw_c, y_hat):
                ps = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.psum)
                for (z0, zc), w, dt in zip(z_chunks, wpo_t, dzT):
                    nisa.nc_matmul(dst=ps[0:cc, 0:rs], stationary=w[0:zc, c0 : c0 + cc], moving=dt[0:zc, 0:rs])
                d = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                nisa.activation(dst=d[0:cc, 0:rs], op=nl.copy, data=ps[0:cc, 0:rs], scale=w_col[0:cc, :])
                pr = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=pr[0:cc, 0:rs], data1=d[0:cc, 0:rs], data2=yh[0:cc, 0:rs], op=nl.multiply)
                dyh.append(d)
                prods.append(pr)
                del ps
            del dzT
            means = []
            for tiles in (dyh, prods):
                row = nl.ndarray((1, GROUP), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=row[0:1, 0:rs], data=_channel_sum(tiles, c_chunks, ones_col, rs)[0:1, 0:rs],
                                   op0=nl.multiply, operand0=1.0 / C)
                ps = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.psum)  # broadcast over channels, read from PSUM
                nisa.nc_matmul(dst=ps[0:min(C, P), 0:rs], stationary=ones_row[0:1, 0:min(C, P)], moving=row[0:1, 0:rs])
                means.append(ps)
                del ps
            del prods
            m1_b, m2_b = means
            for (c0, cc), d, yh in zip(c_chunks, dyh, y_hat):
                t = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=t[0:cc, 0:rs], data1=yh[0:cc, 0:rs], data2=m2_b[0:cc, 0:rs], op=nl.multiply)
                nisa.tensor_tensor(dst=t[0:cc, 0:rs], data1=d[0:cc, 0:rs], data2=t[0:cc, 0:rs], op=nl.subtract)
                nisa.tensor_tensor(dst=t[0:cc, 0:rs], data1=t[0:cc, 0:rs], data2=m1_b[0:cc, 0:rs], op=nl.subtract)
                dy = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=dy[0:cc, 0:rs], data1=t[0:cc, 0:rs], data2=rstd_b[0:cc, 0:rs], op=nl.multiply)
                nisa.dma_copy(dst=dy_out[b, c0 : c0 + cc, r0 : r0 + rs], src=dy[0:cc, 0:rs])
            del means, m1_b, m2_b, dyh, y_hat, rstd_b

    # Weight gradients from the accumulated G^T, once.
    lnw_b, lnb_b = _row_broadcast(lnw_o, ones_row, C), _row_broadcast(lnb_o, ones_row, C)
    wpo32_t = _load_rows(wpo32, z_chunks, f32)
    dlnw_ps = nl.ndarray((1, C), dtype=f32, buffer=nl.psum)
    dlnb_ps = nl.ndarray((1, C), dtype=f32, buffer=nl.psum)
    _affine_weight_grads(g_acc, z_chunks, wpo32_t, lnw_b, lnb_b, ones_col, C, dwpo_out, dbpo_out, dlnw_ps, dlnb_ps)
    _store_row(dlnw_out, dlnw_ps, C)
    _store_row(dlnb_out, dlnb_ps, C)
    return dy_out, dgl_out, dwpo_out, dbpo_out, dlnw_out, dlnb_out


@nki.jit
def trimul_in_bwd_kernel(x, mask, da, db, dgl, lnw, lnb, w_inT, w_in32, b_in, wgo32, eps, has_mask):
    """Backward of ``trimul_in_kernel``: from x (B, R, c_z) in the kernel dtype, mask (B, R) fp32,
    da, db (B, c, R) channel-first fp32 (the contraction's backward), the output gate's logit
    gradient dgl (B, R, c_z) in the kernel dtype, lnw/lnb (c_z, 1) fp32, w_inT (c_z, 4c) =
    [p_in; g_in]^T in the kernel dtype, w_in32 (4c, c_z) = [p_in; g_in] and wgo32 (c_z, c_z) = g_out
    in fp32, b_in (4c, 1) fp32:

    dx (B, R, c_z) in the kernel dtype and, reduced over every pair row, fp32: d[p_in; g_in]
    (4c, c_z), their biases (4c, 1), d g_out (c_z, c_z), its bias (c_z, 1), d norm_in weight and bias (1, c_z)."""
    B, R, CZ = x.shape
    C = w_inT.shape[1] // 4
    kd = x.dtype
    f32 = nl.float32
    z_chunks, c_chunks = _chunks(CZ), _chunks(C)
    # The 4c rows of [p_in; g_in] in the order p_a, p_b, g_a, g_b, each chunked like c.
    q_chunks = [(q * C + c0, cc) for q in range(4) for c0, cc in c_chunks]

    dx_out = nl.ndarray((B, R, CZ), dtype=kd, buffer=nl.shared_hbm)
    dwin_out = nl.ndarray((4 * C, CZ), dtype=f32, buffer=nl.shared_hbm)
    dbin_out = nl.ndarray((4 * C, 1), dtype=f32, buffer=nl.shared_hbm)
    dwgo_out = nl.ndarray((CZ, CZ), dtype=f32, buffer=nl.shared_hbm)
    dbgo_out = nl.ndarray((CZ, 1), dtype=f32, buffer=nl.shared_hbm)
    dlnw_out = nl.ndarray((1, CZ), dtype=f32, buffer=nl.shared_hbm)
    dlnb_out = nl.ndarray((1, CZ), dtype=f32, buffer=nl.shared_hbm)

    w_t = _load_rows(w_inT, z_chunks, kd)  # c_z on partitions: the recomputed projections
    lnw_c, lnb_c = _load_columns(lnw, z_chunks), _load_columns(lnb, z_chunks)
    bias_c = [_load_columns(b_in[q * C : (q + 1) * C, :], c_chunks) for q in range(4)]
    neg_bg = []  # -b_g: sigmoid(-(v)) = 1 - sigmoid(v) straight from PSUM on ScalarE
    for q in (2, 3):
        cols = []
        for col, (c0, cc) in zip(bias_c[q], c_chunks):
            t = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=t[0:cc, :], data=col[0:cc, :], op0=nl.multiply, operand0=-1.0)
            cols.append(t)
        neg_bg.append(cols)
    ones_row, ones_col = _ones((1, P)), _ones((P, 1))
    eps_col = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
    nisa.memset(dst=eps_col, value=float(eps))
    lnw_b, lnb_b = _row_broadcast(lnw, ones_row, CZ), _row_broadcast(lnb, ones_row, CZ)
    # dx_hat = dLN(x) * lnw = [du; dv]^T (W_in * lnw) + dgl (g_out * lnw): the LN weight folded into
    # the weights' columns once, so the products come out of PSUM already scaled.
    w_in32_t = _load_rows(w_in32, q_chunks, f32)
    wgo32_t = _load_rows(wgo32, z_chunks, f32)
    w_in_s, wgo_s = [], []
    for src, dst, chunks in ((w_in32_t, w_in_s, q_chunks), (wgo32_t, wgo_s, z_chunks)):
        for (o0, oc), w in zip(chunks, src):
            t = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=t[0:oc, :], data1=w[0:oc, :], data2=lnw_b[0:oc, :], op=nl.multiply)
            dst.append(t)

    # H = sum over rows of [du; dv] [x_hat, 1] (4c, c_z + 1) and Hg = sum of dgl^T [x_hat, 1]
    # (c_z, c_z + 1), fp32, the whole kernel long.
    h_acc = [nl.ndarray((P, CZ + 1), dtype=f32, buffer=nl.sbuf) for _ in q_chunks]
    hg_acc = [nl.ndarray((P, CZ + 1), dtype=f32, buffer=nl.sbuf) for _ in z_chunks]
    first = True

    for b in nl.affine_range(B):
        for r0, rs in _chunks(R, GROUP):
            # Recompute LN(x) per 128-row tile (rows on partitions), keep x_hat (fp32 for the
            # LayerNorm backward; with a ones column in the kernel dtype for the weight gradients),
            # and LN(x)^T (c_z on partitions) for the projections, as the forward.
            xT_ps = [nl.ndarray((P, GROUP), dtype=kd, buffer=nl.psum) for _ in z_chunks]
            tiles = []
            for t0, ts in _chunks(rs):
                xt = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.dma_copy(dst=xt[0:ts, :], src=x[b, r0 + t0 : r0 + t0 + ts, :])
                xaug = nl.ndarray((P, CZ + 1), dtype=kd, buffer=nl.sbuf)
                if kd == f32:
                    rstd = _row_norm(xaug, xt, ts, eps_col)
                    xhat = xaug[:, 0:CZ]
                else:
                    xhat = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                    rstd = _row_norm(xhat, xt, ts, eps_col)
                    nisa.activation(dst=xaug[0:ts, 0:CZ], op=nl.copy, data=xhat[0:ts, :])
                nisa.memset(dst=xaug[0:ts, CZ : CZ + 1], value=1.0, engine=nisa.gpsimd_engine)
                for (z0, zc), ps in zip(z_chunks, xT_ps):
                    nisa.nc_transpose(dst=ps[0:zc, t0 : t0 + ts], data=xaug[0:ts, z0 : z0 + zc])
                tiles.append((t0, ts, xhat, xaug, rstd))
            xnT = _affine_columns(xT_ps, z_chunks, lnw_c, lnb_c, rs, kd)
            del xT_ps
            mask_b = _mask_columns(mask, b, r0, rs, ones_row, min(C, P)) if has_mask else None

            # [du; dv] channel-first: with u = p + b_p, s = sigmoid(g + b_g) recomputed from PSUM,
            # dab = [da; db] * mask: du = dab * s, dv = du * u * (1 - s).
            duv = [None] * len(q_chunks)
            for half, src in ((0, da), (1, db)):
                for ci, (c0, cc) in enumerate(c_chunks):
                    p_ps = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.psum)
                    g_ps = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.psum)
                    pc, gc = half * C + c0, (2 + half) * C + c0
                    for (z0, zc), w, xn in zip(z_chunks, w_t, xnT):
                        nisa.nc_matmul(dst=p_ps[0:cc, 0:rs], stationary=w[0:zc, pc : pc + cc], moving=xn[0:zc, 0:rs])
                        nisa.nc_matmul(dst=g_ps[0:cc, 0:rs], stationary=w[0:zc, gc : gc + cc], moving=xn[0:zc, 0:rs])
                    dab = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                    nisa.dma_copy(dst=dab[0:cc, 0:rs], src=src[b, c0 : c0 + cc, r0 : r0 + rs])
                    if mask_b is not None:
                        nisa.tensor_tensor(dst=dab[0:cc, 0:rs], data1=dab[0:cc, 0:rs], data2=mask_b[0:cc, 0:rs], op=nl.multiply)
                    sig = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                    nisa.activation(dst=sig[0:cc, 0:rs], op=nl.sigmoid, data=g_ps[0:cc, 0:rs], bias=bias_c[2 + half][ci][0:cc, :])
                    oms = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                    nisa.activation(dst=oms[0:cc, 0:rs], op=nl.sigmoid, data=g_ps[0:cc, 0:rs], scale=-1.0,
                                    bias=neg_bg[half][ci][0:cc, :])
                    du = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                    nisa.tensor_tensor(dst=du[0:cc, 0:rs], data1=dab[0:cc, 0:rs], data2=sig[0:cc, 0:rs], op=nl.multiply)
                    duu = nl.ndarray((P, GROUP), dtype=f32, buffer=nl.sbuf)
                    nisa.scalar_tensor_tensor(dst=duu[0:cc, 0:rs], data=p_ps[0:cc, 0:rs], op0=nl.add,
                                              operand0=bias_c[half][ci][0:cc, :], op1=nl.multiply, operand1=du[0:cc, 0:rs])
                    dv = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                    nisa.tensor_tensor(dst=dv[0:cc, 0:rs], data1=duu[0:cc, 0:rs], data2=oms[0:cc, 0:rs], op=nl.multiply)
                    if kd == f32:
                        du_k = du
                    else:
                        du_k = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                        nisa.activation(dst=du_k[0:cc, 0:rs], op=nl.copy, data=du[0:cc, 0:rs])
                    duv[half * len(c_chunks) + ci] = du_k
                    duv[(2 + half) * len(c_chunks) + ci] = dv
                    del p_ps, g_ps
            del xnT, mask_b

            # dx per 128-row tile, row-major: dx_hat = [du; dv]^T (W_in * lnw) + dgl (g_out * lnw)
            # (the channel-first [du; dv] is directly the stationary operand; dgl is transposed on
            # TensorE), then the LayerNorm backward along the free axis:
            # dx = rstd * (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)).
            dgl_tiles = []
            for t0, ts, xhat, xaug, rstd in tiles:
                dg = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
                nisa.dma_copy(dst=dg[0:ts, :], src=dgl[b, r0 + t0 : r0 + t0 + ts, :])
                dgl_tiles.append(dg)
                dgT_ps = nl.ndarray((P, len(z_chunks) * P), dtype=kd, buffer=nl.psum)
                for zi, (z0, zc) in enumerate(z_chunks):
                    nisa.nc_transpose(dst=dgT_ps[0:zc, zi * P : zi * P + ts], data=dg[0:ts, z0 : z0 + zc])
                dgT = nl.ndarray((P, len(z_chunks) * P), dtype=kd, buffer=nl.sbuf)
                for zi, (z0, zc) in enumerate(z_chunks):
                    _evacuate(dgT[:, zi * P : zi * P + ts], dgT_ps[:, zi * P : zi * P + ts], zc, ts, zi + t0 // P)
                del dgT_ps
                dxh_ps = nl.ndarray((P, CZ), dtype=f32, buffer=nl.psum)
                for (q0, qc), d, w in zip(q_chunks, duv, w_in_s):
                    nisa.nc_matmul(dst=dxh_ps[0:ts, :], stationary=d[0:qc, t0 : t0 + ts], moving=w[0:qc, 0:CZ])
                for zi, ((z0, zc), w) in enumerate(zip(z_chunks, wgo_s)):
                    nisa.nc_matmul(dst=dxh_ps[0:ts, :], stationary=dgT[0:zc, zi * P : zi * P + ts], moving=w[0:zc, 0:CZ])
                dxh = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                s1 = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
                nisa.activation(dst=dxh[0:ts, :], op=nl.copy, data=dxh_ps[0:ts, :], reduce_op=nl.add, reduce_res=s1[0:ts, :],
                                reduce_cmd=nisa.reduce_cmd.reset_reduce)
                pr = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=pr[0:ts, :], data1=dxh[0:ts, :], data2=xhat[0:ts, 0:CZ], op=nl.multiply)
                s2 = nl.ndarray((P, 1), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=s2[0:ts, :], op=nl.add, data=pr[0:ts, :], axis=1, keepdims=True)
                nisa.tensor_scalar(dst=s1[0:ts, :], data=s1[0:ts, :], op0=nl.multiply, operand0=1.0 / CZ)
                nisa.tensor_scalar(dst=s2[0:ts, :], data=s2[0:ts, :], op0=nl.multiply, operand0=1.0 / CZ)
                t = nl.ndarray((P, CZ), dtype=f32, buffer=nl.sbuf)
                nisa.scalar_tensor_tensor(dst=t[0:ts, :], data=xhat[0:ts, 0:CZ], op0=nl.multiply, operand0=s2[0:ts, :],
                                          op1=nl.subtract, operand1=dxh[0:ts, :], reverse1=True)
                dxt = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=dxt[0:ts, :], data=t[0:ts, :], op0=nl.subtract, operand0=s1[0:ts, :],
                                   op1=nl.multiply, operand1=rstd[0:ts, :])
                nisa.dma_copy(dst=dx_out[b, r0 + t0 : r0 + t0 + ts, :], src=dxt[0:ts, :])
                del dxh_ps

            # Weight-gradient partial sums of this group on TensorE (rows contracted on partitions):
            # H += [du; dv] [x_hat, 1] through a transpose of each [du; dv] chunk, Hg += dgl^T [x_hat, 1]
            # with the row-major dgl tile as the stationary operand; folded into SBUF once per group.
            for i, ((q0, qc), d) in enumerate(zip(q_chunks, duv)):
                dT_ps = nl.ndarray((P, len(tiles) * P), dtype=kd, buffer=nl.psum)
                for ti, (t0, ts, *_) in enumerate(tiles):
                    nisa.nc_transpose(dst=dT_ps[0:ts, ti * P : ti * P + qc], data=d[0:qc, t0 : t0 + ts])
                dT = nl.ndarray((P, len(tiles) * P), dtype=kd, buffer=nl.sbuf)
                for ti, (t0, ts, *_) in enumerate(tiles):
                    _evacuate(dT[:, ti * P : ti * P + qc], dT_ps[:, ti * P : ti * P + qc], ts, qc, i + ti)
                del dT_ps
                h_ps = nl.ndarray((P, CZ + 1), dtype=f32, buffer=nl.psum)
                for ti, (t0, ts, xhat, xaug, rstd) in enumerate(tiles):
                    for f0, fs in _pieces(CZ + 1):
                        nisa.nc_matmul(dst=h_ps[0:qc, f0 : f0 + fs], stationary=dT[0:ts, ti * P : ti * P + qc],
                                       moving=xaug[0:ts, f0 : f0 + fs])
                _accumulate(h_acc[i], h_ps, qc, CZ + 1, first)
                del h_ps
            for zi, (z0, zc) in enumerate(z_chunks):
                hg_ps = nl.ndarray((P, CZ + 1), dtype=f32, buffer=nl.psum)
                for (t0, ts, xhat, xaug, rstd), dg in zip(tiles, dgl_tiles):
                    for f0, fs in _pieces(CZ + 1):
                        nisa.nc_matmul(dst=hg_ps[0:zc, f0 : f0 + fs], stationary=dg[0:ts, z0 : z0 + zc],
                                       moving=xaug[0:ts, f0 : f0 + fs])
                _accumulate(hg_acc[zi], hg_ps, zc, CZ + 1, first)
                del hg_ps
            first = False
            del duv, tiles, dgl_tiles

    dlnw_ps = nl.ndarray((1, CZ), dtype=f32, buffer=nl.psum)
    dlnb_ps = nl.ndarray((1, CZ), dtype=f32, buffer=nl.psum)
    _affine_weight_grads(h_acc, q_chunks, w_in32_t, lnw_b, lnb_b, ones_col, CZ, dwin_out, dbin_out, dlnw_ps, dlnb_ps)
    _affine_weight_grads(hg_acc, z_chunks, wgo32_t, lnw_b, lnb_b, ones_col, CZ, dwgo_out, dbgo_out, dlnw_ps, dlnb_ps)
    _store_row(dlnw_out, dlnw_ps, CZ)
    _store_row(dlnb_out, dlnb_ps, CZ)
    return dx_out, dwin_out, dbin_out, dwgo_out, dbgo_out, dlnw_out, dlnb_out


# ----------------------------------------------------------------------------- host side


def kernel_dtype(dtype: str) -> str:
    """bfloat16 feeds TensorE natively; float16 and float32 run as float32."""
    return "bfloat16" if dtype == "bfloat16" else "float32"


def _np(name: str):
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _kernel_weights(weights, kd: str, dry: bool = False):
    """The weights in the layout and dtype the kernels read (numpy, or stand-ins when ``dry``)."""
    from ceiling.trainium.emulator import ShapeDtype

    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    k, f32 = _np(kd), np.dtype(np.float32)
    if dry:
        cz, c = wp.shape[1], wp.shape[0] // 2
        return {
            "lnw": ShapeDtype((cz, 1), f32), "lnb": ShapeDtype((cz, 1), f32), "w_inT": ShapeDtype((cz, 4 * c), k),
            "b_in": ShapeDtype((4 * c, 1), f32), "wgoT": ShapeDtype((cz, cz), k), "bgo": ShapeDtype((1, cz), f32),
            "lnw_o": ShapeDtype((c, 1), f32), "lnb_o": ShapeDtype((c, 1), f32), "wpoT": ShapeDtype((c, cz), k),
            "bpo": ShapeDtype((1, cz), f32), "wpo": ShapeDtype((cz, c), k), "wpo32": ShapeDtype((cz, c), f32),
            "w_in32": ShapeDtype((4 * c, cz), f32), "wgo32": ShapeDtype((cz, cz), f32),
        }

    def col(v):
        return np.ascontiguousarray(np.asarray(v, dtype=np.float32).reshape(-1, 1))

    def row(v):
        return np.ascontiguousarray(np.asarray(v, dtype=np.float32).reshape(1, -1))

    def mat(m):
        return np.ascontiguousarray(np.asarray(m, dtype=np.float32).astype(k))

    def f32mat(m):
        return np.ascontiguousarray(np.asarray(m, dtype=np.float32))

    return {
        "lnw": col(lnw), "lnb": col(lnb), "w_inT": mat(np.concatenate([wp, wg], axis=0).T),
        "b_in": col(np.concatenate([bp, bg])), "wgoT": mat(np.asarray(wgo).T), "bgo": row(bgo),
        "lnw_o": col(lnw_o), "lnb_o": col(lnb_o), "wpoT": mat(np.asarray(wpo).T), "bpo": row(bpo),
        # backward: p_out with c_z on partitions, and fp32 copies for the weight-gradient epilogues
        "wpo": mat(wpo), "wpo32": f32mat(wpo), "w_in32": f32mat(np.concatenate([wp, wg], axis=0)), "wgo32": f32mat(wgo),
    }


def _run(kernel, target: str, dry: bool, *args, **consts):
    from ceiling.trainium.emulator import emulate

    if not EMULATED:
        return kernel(*args, **consts), None
    with emulate(target=target, dry=dry) as ctx, np.errstate(over="ignore"):
        result = kernel(*args, **consts)
    return result, ctx


def forward_in_np(x, mask, kw, eps, target, dry=False):
    """(a, b, gate, ctx): x (B, R, c_z) in the kernel dtype, mask (B, R) fp32 or None."""
    from ceiling.trainium.emulator import ShapeDtype

    B, R, _ = x.shape
    placeholder = ShapeDtype((1, 1), np.float32) if dry else np.zeros((1, 1), np.float32)
    (a, b, gate), ctx = _run(trimul_in_kernel, target, dry, x, placeholder if mask is None else mask,
                             kw["lnw"], kw["lnb"], kw["w_inT"], kw["b_in"], kw["wgoT"], kw["bgo"],
                             eps=float(eps), has_mask=mask is not None)
    return a, b, gate, ctx


def forward_out_np(y, gate, kw, eps, out_dtype: str, target, dry=False):
    """(out (B, R, c_z), ctx) from channel-first y (B, c, R) fp32 and the gate."""
    out, ctx = _run(trimul_out_kernel, target, dry, y, gate, kw["lnw_o"], kw["lnb_o"], kw["wpoT"], kw["bpo"],
                    eps=float(eps), out_dtype=getattr(nl, out_dtype))
    return out, ctx


def backward_out_np(y, gate, dout, kw, eps, target, dry=False):
    """(dy, d gate logits, d p_out, d p_out bias, d norm_out weight, d norm_out bias, ctx)."""
    (dy, dgl, dwpo, dbpo, dlnw_o, dlnb_o), ctx = _run(
        trimul_out_bwd_kernel, target, dry, y, gate, dout, kw["lnw_o"], kw["lnb_o"], kw["wpoT"], kw["wpo"], kw["wpo32"],
        kw["bpo"], eps=float(eps))
    return dy, dgl, dwpo, dbpo, dlnw_o, dlnb_o, ctx


def backward_in_np(x, mask, da, db, dgl, kw, eps, target, dry=False):
    """(dx, d[p_in; g_in], their biases, d g_out, its bias, d norm_in weight, d norm_in bias, ctx)."""
    from ceiling.trainium.emulator import ShapeDtype

    placeholder = ShapeDtype((1, 1), np.float32) if dry else np.zeros((1, 1), np.float32)
    outs, ctx = _run(trimul_in_bwd_kernel, target, dry, x, placeholder if mask is None else mask, da, db, dgl,
                     kw["lnw"], kw["lnb"], kw["w_inT"], kw["w_in32"], kw["b_in"], kw["wgo32"], eps=float(eps),
                     has_mask=mask is not None)
    return (*outs, ctx)


def resolve(problem, impl, user):
    """The chip: ``config["target"]`` (the whole of this implementation's config; the contraction
    takes the NKI GEMM's own config for that chip), else the default one."""
    from collections.abc import Mapping

    from ceiling import spaces
    from ceiling.spaces.config import resolve as resolve_space

    if isinstance(user, Mapping):  # a bad key or chip is named before a chip is chosen from it
        spaces.check("triangle_multiplication", "trn2", dict(user), partial=True)
    target = nki_gemm.default_target(user if isinstance(user, Mapping) else None)
    return resolve_space("triangle_multiplication", target, {"target": target}, {}, user, problem.features(), "the chip")


def _bmm(a: torch.Tensor, b: torch.Tensor, target: str) -> torch.Tensor:
    """(Z, M, K) @ (Z, K, N) through the NKI GEMM on ``target``, float32 result."""
    return nki_gemm.gemm(a, b, None, None, torch.float32, config={"target": target})


def _contract_fwd(a, b, direction, target):
    return _bmm(a, b.mT, target) if direction == "outgoing" else _bmm(a.mT, b, target)


def _inputs(problem, x, mask, weights):
    """x and the mask row-major over the pair rows and the weights in the kernels' layout, as numpy."""
    from ceiling.trainium.gemm import _torch_to_numpy

    B, R = problem.batch, problem.n * problem.n
    kd = kernel_dtype(problem.dtype)
    kw = _kernel_weights([_torch_to_numpy(w.float()) for w in weights], kd)
    xr = _torch_to_numpy(x.to(getattr(torch, kd)).reshape(B, R, problem.c_z))
    mr = None if mask is None else np.ascontiguousarray(_torch_to_numpy(mask.float().reshape(B, R)))
    return xr, mr, kw, kd


def _up_to_contraction(problem, x, xr, mr, kw, target):
    """a, b (B*c, N, N) and the gate from the input kernel, and y (B, c, N*N) from the contraction."""
    from ceiling.trainium.gemm import _numpy_to_torch

    B, N, C = problem.batch, problem.n, problem.c
    a, b, gate, _ = forward_in_np(xr, mr, kw, problem.eps, target)
    a_t = _numpy_to_torch(a, x.device).reshape(B * C, N, N)
    b_t = _numpy_to_torch(b, x.device).reshape(B * C, N, N)
    y = _contract_fwd(a_t, b_t, problem.direction, target).reshape(B, C, N * N)
    return a_t, b_t, gate, y


def forward(problem, config, x, mask, *weights):
    """(out, empty ab, empty y) through the NKI kernels: nothing is kept, the backward recomputes."""
    from ceiling.trainium.gemm import _numpy_to_torch, _torch_to_numpy

    target = config["target"]
    xr, mr, kw, kd = _inputs(problem, x, mask, weights)
    _, _, gate, y = _up_to_contraction(problem, x, xr, mr, kw, target)
    out, _ = forward_out_np(_torch_to_numpy(y.contiguous()), gate, kw, problem.eps, kd, target)
    return _numpy_to_torch(out, x.device).reshape(x.shape).to(x.dtype), x.new_empty(0), x.new_empty(0)


# ----------------------------------------------------------------------------- backward


def _contract_bwd(a, b, dy, direction, target):
    """(da, db) float32 of the contraction y = a b^T (outgoing) or a^T b (incoming)."""
    if direction == "outgoing":  # da = dy b, db = dy^T a
        return _bmm(dy, b, target), _bmm(dy.mT, a, target)
    return _bmm(b, dy.mT, target), _bmm(a, dy, target)  # da = b dy^T, db = a dy


def backward(problem, config, saved, grads, needs):
    """(dx, *dweights) in ``ceiling.triangle.TRIMUL_WEIGHTS`` order, through the NKI kernels:
    the forward's input kernel and contraction again (only the inputs are kept), then
    ``trimul_out_bwd_kernel``, the contraction's gradient on the NKI GEMM, and
    ``trimul_in_bwd_kernel``. Every weight gradient comes out of the kernels fully reduced."""
    from ceiling.trainium.gemm import _numpy_to_torch, _torch_to_numpy
    from ceiling.triangle.spec import TRIMUL_WEIGHTS

    target = config["target"]
    x, weights = saved["x"], [saved[n] for n in TRIMUL_WEIGHTS]
    B, N, CZ, C, eps = problem.batch, problem.n, problem.c_z, problem.c, problem.eps
    R = N * N
    xr, mr, kw, kd = _inputs(problem, x, saved["mask"], weights)
    a_t, b_t, gate, y = _up_to_contraction(problem, x, xr, mr, kw, target)

    dr = _torch_to_numpy(grads["out"].to(getattr(torch, kd)).reshape(B, R, CZ))
    dy, dgl, dwpo, dbpo, dlnw_o, dlnb_o, _ = backward_out_np(_torch_to_numpy(y.contiguous()), gate, dr, kw, eps, target)
    dy_t = _numpy_to_torch(dy, x.device).reshape(B * C, N, N)
    da, db = _contract_bwd(a_t, b_t, dy_t, problem.direction, target)
    dx, dw_in, db_in, dwgo, dbgo, dlnw, dlnb, _ = backward_in_np(
        xr, mr, _torch_to_numpy(da.reshape(B, C, R).contiguous()), _torch_to_numpy(db.reshape(B, C, R).contiguous()),
        dgl, kw, eps, target)

    def t(v, shape):
        return _numpy_to_torch(np.asarray(v), x.device).reshape(shape)

    dweights = (
        t(dlnw, (CZ,)), t(dlnb, (CZ,)), t(dw_in[: 2 * C], (2 * C, CZ)), t(db_in[: 2 * C], (2 * C,)),
        t(dw_in[2 * C :], (2 * C, CZ)), t(db_in[2 * C :], (2 * C,)), t(dlnw_o, (C,)), t(dlnb_o, (C,)),
        t(dwpo, (CZ, C)), t(dbpo, (CZ,)), t(dwgo, (CZ, CZ)), t(dbgo, (CZ,)),
    )
    dx_t = _numpy_to_torch(dx, x.device).reshape(x.shape).to(x.dtype)
    return (dx_t, *(g.to(w.dtype) for g, w in zip(dweights, weights)))


# ----------------------------------------------------------------------------- cost model


KERNELS = ("in", "out", "out_bwd", "in_bwd")


def estimate(batch=1, n=384, c_z=128, c=128, dtype="bfloat16", target="trn2", kernel="in"):
    """Cost-model estimate of one per-pair kernel (``kernel`` in ``KERNELS``) from a dry run
    of its instruction stream: (CostReport, context). FLOPs are the kernel's matmuls that do
    the layer's arithmetic (not the transposes, ones-vector sums and broadcasts): forward "in",
    the two 2c-wide projections and the gate; "out", the output projection; "out_bwd", the
    recomputed projection, dy = p_out^T dz^T and dz^T [y_hat, 1]; "in_bwd", the recomputed
    projections, dx = [du; dv]^T W_in + dgl g_out and [du; dv; dgl^T] [x_hat, 1]."""
    from ceiling.trainium.emulator import ShapeDtype, cost

    kd = kernel_dtype(dtype)
    k = _np(kd)
    rows = n * n
    shapes = [(c_z,), (c_z,), (2 * c, c_z), (2 * c,), (2 * c, c_z), (2 * c,), (c,), (c,), (c_z, c), (c_z,), (c_z, c_z), (c_z,)]
    kw = _kernel_weights([ShapeDtype(s, np.float32) for s in shapes], kd, dry=True)
    if kernel == "in":
        *_, ctx = forward_in_np(ShapeDtype((batch, rows, c_z), k), ShapeDtype((batch, rows), np.float32), kw, 1e-5,
                                target, dry=True)
        flops = 2.0 * batch * rows * c_z * (4 * c + c_z)
    elif kernel == "out":
        _, ctx = forward_out_np(ShapeDtype((batch, c, rows), np.float32), ShapeDtype((batch, rows, c_z), k), kw, 1e-5,
                                kd, target, dry=True)
        flops = 2.0 * batch * rows * c * c_z
    elif kernel == "out_bwd":
        *_, ctx = backward_out_np(ShapeDtype((batch, c, rows), np.float32), ShapeDtype((batch, rows, c_z), k),
                                  ShapeDtype((batch, rows, c_z), k), kw, 1e-5, target, dry=True)
        flops = 2.0 * batch * rows * c_z * (3 * c + 1)
    elif kernel == "in_bwd":
        da = ShapeDtype((batch, c, rows), np.float32)
        *_, ctx = backward_in_np(ShapeDtype((batch, rows, c_z), k), ShapeDtype((batch, rows), np.float32), da, da,
                                 ShapeDtype((batch, rows, c_z), k), kw, 1e-5, target, dry=True)
        flops = 2.0 * batch * rows * c_z * (4 * c + 4 * c + c_z + (4 * c + c_z) * (c_z + 1) / c_z)
    else:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    report = cost.estimate(ctx.trace, ctx.target, flops=flops)
    report.notes.append(f"SBUF peak {ctx.sbuf_peak} B/partition of {ctx.target.sbuf_bytes_per_partition}; "
                        f"PSUM peak {ctx.psum_peak} of {ctx.target.psum_banks} banks")
    return report, ctx

