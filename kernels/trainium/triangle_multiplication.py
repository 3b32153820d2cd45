"""The triangle multiplicative update on Trainium in NKI (on the emulator where no Neuron
toolchain is installed).

Forward: three kernels, every intermediate of the per-pair work on chip.

* ``trimul_in_kernel``, per group of up to 512 pair rows (the moving free size of a
  matmul, one fp32 PSUM bank): each 128-row tile of x (rows on partitions) gets its
  LayerNorm along the free axis (``tensor_reduce`` for the mean on VectorE, the squared
  deviations summed by ScalarE's fused ``activation`` reduction, ``rsqrt`` on ScalarE), is
  transposed on TensorE so that c_z is the contraction (partition) axis, and takes the
  LayerNorm affine as per-partition scalars while PSUM is evacuated. Then on TensorE,
  per 128-channel chunk, ``p = p_in xn^T`` and ``g = g_in xn^T`` land channel-first in
  PSUM (accumulated over 128-deep c_z chunks); ScalarE applies ``sigmoid(g + b_g)``
  reading PSUM, VectorE ``(p + b_p) * mask`` and the product, and a and b leave for HBM
  channel-first, (B, c, N*N), the layout the contraction GEMM reads. The same
  normalized tile, as the stationary operand, gives the output gate
  ``sigmoid(xn g_out^T + b)`` row-major (B, N*N, c_z). The pair mask and the row-wise
  biases are broadcast across partitions by K=1 matmuls against a ones row.
* the contraction y (B*c, N, N) float32 on the NKI GEMM of :mod:`kernels.trainium.gemm`
  (``a b^T`` outgoing, ``a^T b`` incoming).
* ``trimul_out_kernel``, per group of up to 512 pair rows of channel-first y: the output
  LayerNorm runs over the partition (channel) axis, so its sums are TensorE matmuls
  against a ones column (two passes: mean, then the centred squares) and their
  broadcast back over the channels a K=1 matmul against a ones row; the affine is again
  per-partition. The normalized tile is then directly the stationary operand of the
  output projection, whose result comes out row-major (128 rows, c_z) in PSUM, gets its
  bias and the gate, and is stored.

Backward: the contraction's gradient is two more NKI GEMMs (``da = dy b``,
``db = dy^T a`` outgoing; ``da = b dy^T``, ``db = a dy`` incoming). The per-pair
backward (both LayerNorm backwards, the projection and gate gradients, every weight
gradient) is **not** in NKI yet: it is PyTorch float32 autograd through a recompute of
the per-pair forward (``_trimul`` below), the contraction in it being the NKI GEMM.
Only the inputs are kept between forward and backward.

dtypes: bfloat16 operands feed TensorE natively (fp32 PSUM accumulation; LayerNorm,
sigmoid and the elementwise steps in fp32; a, b and the gate stored in bf16); float16
and float32 run as float32 (TensorE at a quarter rate). Widths: c_z <= 512 (the gate's
moving free size), any c.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from kernels.trainium import gemm as nki_gemm
from kernels.trainium.nki_compat import EMULATED, nisa, nki, nl
from kernels.triangle.reference import layer_norm

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
                xhat = nl.ndarray((P, CZ), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=xhat[0:ts, :], data=xc[0:ts, :], op0=nl.multiply, operand0=rstd[0:ts, :])
                for (d0, dc), ps in zip(d_chunks, xT_ps):
                    nisa.nc_transpose(dst=ps[0:dc, t0 : t0 + ts], data=xhat[0:ts, d0 : d0 + dc])
            xnT = []
            for (d0, dc), ps, w_col, b_col in zip(d_chunks, xT_ps, lnw_c, lnb_c):
                t = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=t[0:dc, 0:rs], data=ps[0:dc, 0:rs], op0=nl.multiply, operand0=w_col[0:dc, :],
                                   op1=nl.add, operand1=b_col[0:dc, :])
                xnT.append(t)
            del xT_ps

            mask_b = None
            if has_mask:
                mrow = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=mrow[0:1, 0:rs], src=mask[b : b + 1, r0 : r0 + rs])
                mask_b = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
                _broadcast_rows(mask_b, ones_row, mrow[0:1, 0:rs], min(C, P), rs)

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

    def channel_sum(tiles, rs):
        """(1, rs) sum over every channel chunk: ones-column matmuls accumulated in PSUM."""
        ps = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.psum)
        for (c0, cc), t in zip(c_chunks, tiles):
            nisa.nc_matmul(dst=ps[0:1, 0:rs], stationary=ones_col[0:cc, 0:1], moving=t[0:cc, 0:rs])
        return ps

    for b in nl.affine_range(B):
        for r0, rs in _chunks(R, GROUP):
            ys = []
            for c0, cc in c_chunks:
                t = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t[0:cc, 0:rs], src=y[b, c0 : c0 + cc, r0 : r0 + rs])
                ys.append(t)
            # LayerNorm over channels (the partition axis), two passes on TensorE.
            mean_row = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=mean_row[0:1, 0:rs], data=channel_sum(ys, rs)[0:1, 0:rs], op0=nl.multiply, operand0=1.0 / C)
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
            del ys, mean_b
            rstd_row = nl.ndarray((1, GROUP), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=rstd_row[0:1, 0:rs], op=nl.rsqrt, data=channel_sum(squares, rs)[0:1, 0:rs], scale=1.0 / C,
                            bias=eps_col[0:1, :])
            del squares
            rstd_b = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
            _broadcast_rows(rstd_b, ones_row, rstd_row[0:1, 0:rs], min(C, P), rs)
            yn = []
            for (c0, cc), yc, w_col, b_col in zip(c_chunks, centred, lnw_c, lnb_c):
                yhat = nl.ndarray((P, GROUP), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=yhat[0:cc, 0:rs], data1=yc[0:cc, 0:rs], data2=rstd_b[0:cc, 0:rs], op=nl.multiply)
                t = nl.ndarray((P, GROUP), dtype=kd, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=t[0:cc, 0:rs], data=yhat[0:cc, 0:rs], op0=nl.multiply, operand0=w_col[0:cc, :],
                                   op1=nl.add, operand1=b_col[0:cc, :])
                yn.append(t)
            del centred, rstd_b

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


# ----------------------------------------------------------------------------- host side


def kernel_dtype(dtype: str) -> str:
    """bfloat16 feeds TensorE natively; float16 and float32 run as float32."""
    return "bfloat16" if dtype == "bfloat16" else "float32"


def _np(name: str):
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _kernel_weights(weights, kd: str, dry: bool = False):
    """The weights in the layout and dtype the kernels read (numpy, or stand-ins when ``dry``)."""
    from kernels.trainium.emulator import ShapeDtype

    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    k, f32 = _np(kd), np.dtype(np.float32)
    if dry:
        cz, c = wp.shape[1], wp.shape[0] // 2
        return {
            "lnw": ShapeDtype((cz, 1), f32), "lnb": ShapeDtype((cz, 1), f32), "w_inT": ShapeDtype((cz, 4 * c), k),
            "b_in": ShapeDtype((4 * c, 1), f32), "wgoT": ShapeDtype((cz, cz), k), "bgo": ShapeDtype((1, cz), f32),
            "lnw_o": ShapeDtype((c, 1), f32), "lnb_o": ShapeDtype((c, 1), f32), "wpoT": ShapeDtype((c, cz), k),
            "bpo": ShapeDtype((1, cz), f32),
        }

    def col(v):
        return np.ascontiguousarray(np.asarray(v, dtype=np.float32).reshape(-1, 1))

    def row(v):
        return np.ascontiguousarray(np.asarray(v, dtype=np.float32).reshape(1, -1))

    def mat(m):
        return np.ascontiguousarray(np.asarray(m, dtype=np.float32).astype(k))

    return {
        "lnw": col(lnw), "lnb": col(lnb), "w_inT": mat(np.concatenate([wp, wg], axis=0).T),
        "b_in": col(np.concatenate([bp, bg])), "wgoT": mat(np.asarray(wgo).T), "bgo": row(bgo),
        "lnw_o": col(lnw_o), "lnb_o": col(lnb_o), "wpoT": mat(np.asarray(wpo).T), "bpo": row(bpo),
    }


def _run(kernel, target: str, dry: bool, *args, **consts):
    from kernels.trainium.emulator import emulate

    if not EMULATED:
        return kernel(*args, **consts), None
    with emulate(target=target, dry=dry) as ctx, np.errstate(over="ignore"):
        result = kernel(*args, **consts)
    return result, ctx


def forward_in_np(x, mask, kw, eps, target, dry=False):
    """(a, b, gate, ctx): x (B, R, c_z) in the kernel dtype, mask (B, R) fp32 or None."""
    from kernels.trainium.emulator import ShapeDtype

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


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _bmm(a: torch.Tensor, b: torch.Tensor, config=None) -> torch.Tensor:
    """(Z, M, K) @ (Z, K, N) through the NKI GEMM, float32 result."""
    return nki_gemm.gemm(a, b, None, None, torch.float32, config=_gemm_config(config))


def _gemm_config(config):
    return {"target": config["target"]} if config and config.get("target") else None


def _check_config(config):
    from kernels.errors import InputError

    if config and set(config) - {"target"}:
        raise InputError("config", "only the key 'target' ('trn1' or 'trn2')", f"keys {sorted(config)}")
    if config and config.get("target") not in ("trn1", "trn2"):
        raise InputError("config", "target 'trn1' or 'trn2'", repr(config.get("target")))
    if config is None or "target" not in config:
        return nki_gemm.default_target(config)
    return config["target"]


def _contract_fwd(a, b, direction, config=None):
    return _bmm(a, b.mT, config) if direction == "outgoing" else _bmm(a.mT, b, config)


def trimul_fwd(x, direction, mask, weights, eps, config=None):
    """(out, residuals) through the NKI kernels; no residuals are kept (the backward recomputes).

    ``config`` may set ``target`` ("trn1"/"trn2")."""
    from kernels.trainium.gemm import _numpy_to_torch, _torch_to_numpy

    target = _check_config(config)
    B, N, _, CZ = x.shape
    C = weights[2].shape[0] // 2
    kd = kernel_dtype(_dtype_name(x))
    kw = _kernel_weights([_torch_to_numpy(w.float()) for w in weights], kd)
    xr = _torch_to_numpy(x.to(getattr(torch, kd)).reshape(B, N * N, CZ))
    mr = None if mask is None else np.ascontiguousarray(_torch_to_numpy(mask.float().reshape(B, N * N)))
    a, b, gate, _ = forward_in_np(xr, mr, kw, eps, target)
    a_t = _numpy_to_torch(a, x.device).reshape(B * C, N, N)
    b_t = _numpy_to_torch(b, x.device).reshape(B * C, N, N)
    y = _contract_fwd(a_t, b_t, direction, config).reshape(B, C, N * N)
    out, _ = forward_out_np(_torch_to_numpy(y.contiguous()), gate, kw, eps, kd, target)
    return _numpy_to_torch(out, x.device).reshape(x.shape).to(x.dtype), ()


# ----------------------------------------------------------------------------- backward (torch per-pair)


class _Contract(torch.autograd.Function):
    """Channel-first a, b (Z, N, N) -> y (Z, N, N): outgoing a b^T, incoming a^T b."""

    @staticmethod
    def forward(a, b, direction, config):
        return _contract_fwd(a, b, direction, config)

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b, direction, config = inputs
        ctx.save_for_backward(a, b)
        ctx.direction, ctx.config = direction, config

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        dy = dy.to(a.dtype)
        if ctx.direction == "outgoing":  # y = a b^T: da = dy b, db = dy^T a
            da, db = _bmm(dy, b, ctx.config), _bmm(dy.mT, a, ctx.config)
        else:  # y = a^T b: da = b dy^T, db = a dy
            da, db = _bmm(b, dy.mT, ctx.config), _bmm(a, dy, ctx.config)
        return da.to(a.dtype), db.to(b.dtype), None, None


def _trimul(x, direction, mask, weights, eps, config=None):
    """The per-pair math in PyTorch float32 around the NKI contraction (what the backward differentiates)."""
    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    dt = x.dtype
    B, N, _, _ = x.shape
    C = wp.shape[0] // 2
    f32 = torch.float32

    def linear(t, w, b):
        return F.linear(t, w.to(f32), None if b is None else b.to(f32))

    xn = layer_norm(x.to(f32), lnw.to(f32), lnb.to(f32), eps)
    ab = torch.sigmoid(linear(xn, wg, bg)) * linear(xn, wp, bp)
    if mask is not None:
        ab = ab * mask.to(f32)[..., None]
    ab = ab.to(dt).permute(0, 3, 1, 2)  # (B, 2C, N, N), channel-first
    a = ab[:, :C].reshape(B * C, N, N)
    b = ab[:, C:].reshape(B * C, N, N)
    y = _Contract.apply(a, b, direction, config).reshape(B, C, N, N).permute(0, 2, 3, 1)
    yn = layer_norm(y, lnw_o.to(f32), lnb_o.to(f32), eps)
    return (torch.sigmoid(linear(xn, wgo, bgo)) * linear(yn, wpo, bpo)).to(dt)


def trimul_bwd(x, direction, mask, weights, eps, saved, dout, config=None):
    """(dx, *dweights) in ``kernels.triangle.TRIMUL_WEIGHTS`` order.

    ``torch.func.vjp`` rather than ``torch.autograd``: this runs inside the custom
    op's implementation, below the autograd dispatch key, where only functorch's
    transforms still differentiate."""
    _check_config(config)
    present = [i for i, w in enumerate(weights) if w is not None]

    def forward(x, *ws):
        full = list(weights)
        for i, w in zip(present, ws):
            full[i] = w
        return _trimul(x, direction, mask, full, eps, config)

    out, vjp = torch.func.vjp(forward, x, *(weights[i] for i in present))
    grads = iter(vjp(dout.to(out.dtype)))
    dx = next(grads)
    dw = [None] * len(weights)
    for i in present:
        dw[i] = next(grads).to(weights[i].dtype)
    return (dx.to(x.dtype), *dw)


# ----------------------------------------------------------------------------- cost model


def estimate(batch=1, n=384, c_z=128, c=128, dtype="bfloat16", target="trn2", kernel="in"):
    """Cost-model estimate of one per-pair kernel (``kernel`` "in" or "out") from a dry run
    of its instruction stream: (CostReport, context). FLOPs are the kernel's matmuls
    (the input side's two 2c-wide projections and the gate; the output side's projection)."""
    from kernels.trainium.emulator import ShapeDtype, cost

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
    else:
        raise ValueError(f"kernel: expected 'in' or 'out', got {kernel!r}")
    report = cost.estimate(ctx.trace, ctx.target, flops=flops)
    report.notes.append(f"SBUF peak {ctx.sbuf_peak} B/partition of {ctx.target.sbuf_bytes_per_partition}; "
                        f"PSUM peak {ctx.psum_peak} of {ctx.target.psum_banks} banks")
    return report, ctx

