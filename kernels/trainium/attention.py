"""Flash attention forward and backward on Trainium in NKI, after the public NKI flash attention
(aws-neuron/nki-samples, nki-library): the kernels (queries on the partition axis, key tiles of
``fwd_block_k``/``bwd_block_k`` through TensorE, dK/dV accumulated in PSUM), the op's ``nki``
implementation (its config hooks, ``forward``, ``backward``), the wrappers the triangle layout
calls (``attention_fwd``, ``attention_bwd``) and the cost model's dry-run ``estimate``; run on the
project's emulator of NKI 0.6 unless the real ``nki`` is installed. Their design:
``docs/attention.md``."""

from __future__ import annotations

import math

import numpy as np

from ceiling.trainium.nki_compat import EMULATED, nisa, nki, nl


BIG = 1.0e30  # finite "minus infinity" for masked scores
TILE_Q = 128  # queries per tile: the partition axis
CHUNK = 128  # contraction / transpose chunk on TensorE


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _all_visible(q0, k0, ks, off):
    """Under causal, whether every key of [k0, k0 + ks) is visible to every query from q0 on."""
    return k0 + ks - 1 <= q0 + off


def _evacuate(dst, src, i):
    """PSUM -> SBUF copy, alternating VectorE and ScalarE so neither carries all of them."""
    if i % 2 == 0:
        nisa.tensor_copy(dst=dst, src=src)
    else:
        nisa.activation(dst=dst, op=nl.copy, data=src)


def _scores(s_sb, s_psum, qs, ks, scale, bias_tile, mask_tile, causal_offset):
    """s_sb = scale * s_psum (+ bias), -BIG where the mask is 0 and in the causal upper triangle.

    ``causal_offset`` is None when the whole tile is visible, else q0 + (k_len - q_len) - k0:
    key column j is visible to row p when j <= p + causal_offset."""
    if bias_tile is not None:
        nisa.scalar_tensor_tensor(dst=s_sb, data=s_psum, op0=nl.multiply, operand0=float(scale), op1=nl.add, operand1=bias_tile)
    else:
        nisa.tensor_scalar(dst=s_sb, data=s_psum, op0=nl.multiply, operand0=float(scale))
    if mask_tile is not None:
        # -BIG selected where the mask is 0: an added penalty would keep a NaN score (a NaN k or
        # bias behind a masked key) NaN, and a select removes it.
        nisa.tensor_copy_predicated(dst=s_sb, src=-BIG, predicate=mask_tile, reverse_pred=True)
    if causal_offset is not None:
        nisa.affine_select(
            dst=s_sb,
            pattern=[[-1, ks]],
            channel_multiplier=1,
            on_true_tile=s_sb,
            on_false_value=-BIG,
            cmp_op=nl.greater_equal,
            offset=causal_offset,
        )


def _load_bias_mask(bias, mask, b, h, q0, qs, k0, ks, has_bias, has_mask):
    bias_tile = mask_tile = None
    if has_bias:
        bb, bh = (b if bias.shape[0] > 1 else 0), (h if bias.shape[1] > 1 else 0)
        bias_tile = nl.ndarray((TILE_Q, ks), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=bias_tile[0:qs, 0:ks], src=bias[bb, bh, q0 : q0 + qs, k0 : k0 + ks])
        bias_tile = bias_tile[0:qs, 0:ks]
    if has_mask:
        mb, mh = (b if mask.shape[0] > 1 else 0), (h if mask.shape[1] > 1 else 0)
        mask_tile = nl.ndarray((TILE_Q, ks), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=mask_tile[0:qs, 0:ks], src=mask[mb, mh, q0 : q0 + qs, k0 : k0 + ks])
        mask_tile = mask_tile[0:qs, 0:ks]
    return bias_tile, mask_tile


# ----------------------------------------------------------------------------- forward


def _transpose_p(step):
    """Stage 4 of one key step for the query tiles in ``step``: P^T in 128-key pieces
    (TensorE transposes into one PSUM bank, one copy to SBUF)."""
    dtype = step[0]["p"].dtype
    # Keys must be the contraction (partition) axis of P @ V, so P is transposed; the
    # PSUM -> SBUF copy goes to VectorE for one tile, ScalarE for the next.
    for st in step:
        qs, ks = st["qs"], st["ks"]
        n_chunks = _cdiv(ks, CHUNK)
        st["pT_psum"] = nl.ndarray((CHUNK, n_chunks, TILE_Q), dtype=dtype, buffer=nl.psum)
        for c in range(n_chunks):
            kc = min(CHUNK, ks - c * CHUNK)
            nisa.nc_transpose(dst=st["pT_psum"][0:kc, c, 0:qs], data=st["p"][0:qs, c * CHUNK : c * CHUNK + kc])
        del st["p"]
    for i, st in enumerate(step):
        qs, ks = st["qs"], st["ks"]
        n_full, tail = ks // CHUNK, ks % CHUNK
        n_chunks = n_full + (1 if tail else 0)
        st["pT"] = nl.ndarray((CHUNK, n_chunks, TILE_Q), dtype=dtype, buffer=nl.sbuf)
        if n_full:
            _evacuate(st["pT"][0:CHUNK, 0:n_full, 0:qs], st["pT_psum"][0:CHUNK, 0:n_full, 0:qs], i)
        if tail:
            _evacuate(st["pT"][0:tail, n_full : n_full + 1, 0:qs], st["pT_psum"][0:tail, n_full : n_full + 1, 0:qs], i)
        del st["pT_psum"]


def _pv_accumulate(step, v_t, D):
    """Stage 5 of one key step: P @ V, then the rescaled updates l = l * alpha + rowsum(P) and
    acc = acc * alpha + P @ V."""
    for st in step:
        qs, ks = st["qs"], st["ks"]
        n_chunks = _cdiv(ks, CHUNK)
        st["pv_psum"] = nl.ndarray((TILE_Q, D), dtype=nl.float32, buffer=nl.psum)
        for c in range(n_chunks):
            kc = min(CHUNK, ks - c * CHUNK)
            nisa.nc_matmul(dst=st["pv_psum"][0:qs, :], stationary=st["pT"][0:kc, c, 0:qs], moving=v_t[c][0:kc, :])
        del st["pT"]

    for st in step:
        qs = st["qs"]
        nisa.scalar_tensor_tensor(dst=st["st"]["l"][0:qs, :], data=st["st"]["l"][0:qs, :], op0=nl.multiply, operand0=st["alpha"][0:qs, :], op1=nl.add, operand1=st["row_sum"][0:qs, :])
        nisa.scalar_tensor_tensor(dst=st["st"]["acc"][0:qs, :], data=st["st"]["acc"][0:qs, :], op0=nl.multiply, operand0=st["alpha"][0:qs, :], op1=nl.add, operand1=st["pv_psum"][0:qs, :])
        del st["pv_psum"], st["alpha"]


@nki.jit
def flash_fwd_kernel(qT, kT, v, bias, mask, scale, causal, has_bias, has_mask, BLOCK_K, Q_IN_FLIGHT):
    """out (B, Sq, H, D) like q and lse (B, H, Sq) fp32 from qT (B, H, D, Sq), kT (B, Hk, D, Sk),
    v (B, Hk, Sk, D), bias (Bb, Hb, Sq, Sk) fp32 and mask (Mb, Mh, Sq, Sk) uint8.

    ``Q_IN_FLIGHT`` query tiles advance through the key tiles together, each stage issued for
    all of them before the next stage, so every engine has independent work queued while the
    softmax chain of one tile waits on another engine."""
    B, H, D, Sq = qT.shape
    _, Hk, _, Sk = kT.shape
    group = H // Hk
    off = Sk - Sq  # causal: key j visible to query i when j <= i + off
    d_chunks = [(d0, min(CHUNK, D - d0)) for d0 in range(0, D, CHUNK)]
    n_q = _cdiv(Sq, TILE_Q)

    out = nl.ndarray((B, Sq, H, D), dtype=qT.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((B, H, Sq), dtype=nl.float32, buffer=nl.shared_hbm)

    for b in nl.affine_range(B):
        for h in nl.affine_range(H):
            kvh = h // group
            for qg in nl.affine_range(_cdiv(n_q, Q_IN_FLIGHT)):
                tiles = []  # per query tile in flight: its rows and running state
                for qi in range(qg * Q_IN_FLIGHT, min(n_q, (qg + 1) * Q_IN_FLIGHT)):
                    q0 = qi * TILE_Q
                    qs = min(TILE_Q, Sq - q0)
                    st = {"q0": q0, "qs": qs, "q": []}
                    for d0, dc in d_chunks:
                        t = nl.ndarray((CHUNK, TILE_Q), dtype=qT.dtype, buffer=nl.sbuf)
                        nisa.dma_copy(dst=t[0:dc, 0:qs], src=qT[b, h, d0 : d0 + dc, q0 : q0 + qs])
                        st["q"].append(t)
                    # Running max (kept negated: it is the exp bias), row sum and unnormalized output (fp32).
                    st["nm"] = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=st["nm"][0:qs, :], value=BIG)
                    st["l"] = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=st["l"][0:qs, :], value=0.0)
                    st["acc"] = nl.ndarray((TILE_Q, D), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=st["acc"][0:qs, :], value=0.0)
                    tiles.append(st)

                pending = None
                for kj in nl.sequential_range(_cdiv(Sk, BLOCK_K)):
                    k0 = kj * BLOCK_K
                    ks = min(BLOCK_K, Sk - k0)
                    active = []
                    for st in tiles:
                        # Under causal, a tile works on the keys its last query sees; tiles entirely
                        # above the diagonal are skipped.
                        st["ks"] = min(ks, st["q0"] + st["qs"] + off - k0) if causal else ks
                        if st["ks"] > 0:
                            st["all_visible"] = _all_visible(st["q0"], k0, st["ks"], off) if causal else True
                            active.append(st)
                    if not active:
                        continue
                    k_t = []
                    for d0, dc in d_chunks:
                        t = nl.ndarray((CHUNK, BLOCK_K), dtype=kT.dtype, buffer=nl.sbuf)
                        nisa.dma_copy(dst=t[0:dc, 0:ks], src=kT[b, kvh, d0 : d0 + dc, k0 : k0 + ks])
                        k_t.append(t)
                    v_t = []
                    for c0 in range(0, ks, CHUNK):
                        kc = min(CHUNK, ks - c0)
                        t = nl.ndarray((CHUNK, D), dtype=v.dtype, buffer=nl.sbuf)
                        nisa.dma_copy(dst=t[0:kc, :], src=v[b, kvh, k0 + c0 : k0 + c0 + kc, :])
                        v_t.append(t)

                    # Stage 1 (TensorE): S = q @ k^T, contracted over head_dim chunks in one PSUM bank.
                    for st in active:
                        qs, kss = st["qs"], st["ks"]
                        st["s_psum"] = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.psum)
                        for (d0, dc), q_t, kt in zip(d_chunks, st["q"], k_t):
                            nisa.nc_matmul(dst=st["s_psum"][0:qs, 0:kss], stationary=q_t[0:dc, 0:qs], moving=kt[0:dc, 0:kss])

                    # Stage 2: scores. A plain tile (no bias, mask or diagonal) stays in PSUM and the
                    # scale goes into the exponent; the others are built in SBUF.
                    for st in active:
                        qs, kss = st["qs"], st["ks"]
                        plain = not has_bias and not has_mask and st["all_visible"] and scale > 0
                        if plain:
                            st["src"], st["factor"] = st["s_psum"][0:qs, 0:kss], float(scale)
                        else:
                            bias_tile, mask_tile = _load_bias_mask(bias, mask, b, h, st["q0"], qs, k0, kss, has_bias, has_mask)
                            s_sb = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.sbuf)
                            _scores(s_sb[0:qs, 0:kss], st["s_psum"][0:qs, 0:kss], qs, kss, scale, bias_tile, mask_tile,
                                    None if st["all_visible"] else st["q0"] + off - k0)  # fmt: skip
                            st["src"], st["factor"] = s_sb[0:qs, 0:kss], 1.0

                    if pending is not None:  # stage 4 of the previous key step (see below)
                        _transpose_p(pending[0])

                    # Stage 3: online softmax, each step issued for every tile before the next so the
                    # engines overlap the tiles. With nm = -(running max):
                    # nm_new = min(nm, -factor * rowmax); alpha = exp(nm_new - nm) = exp(m - m_new).
                    for st in active:
                        qs, kss = st["qs"], st["ks"]
                        neg_tile_max = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.tensor_reduce(dst=neg_tile_max[0:qs, :], op=nl.maximum, data=st["src"], axis=1, negate=True, keepdims=True)
                        nm_new = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.scalar_tensor_tensor(dst=nm_new[0:qs, :], data=neg_tile_max[0:qs, :], op0=nl.multiply, operand0=st["factor"], op1=nl.minimum, operand1=st["nm"][0:qs, :])
                        st["alpha"] = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.activation(dst=st["alpha"][0:qs, :], op=nl.exp, data=st["nm"][0:qs, :], scale=-1.0, bias=nm_new[0:qs, :])
                        st["nm"] = nm_new
                    # P = exp(factor * S - m_new) in the input dtype, its row sum fused on ScalarE.
                    for st in active:
                        qs, kss = st["qs"], st["ks"]
                        st["p"] = nl.ndarray((TILE_Q, BLOCK_K), dtype=qT.dtype, buffer=nl.sbuf)
                        st["row_sum"] = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.activation(
                            dst=st["p"][0:qs, 0:kss], op=nl.exp, data=st["src"], bias=st["nm"][0:qs, :], scale=st["factor"],
                            reduce_op=nl.add, reduce_res=st["row_sum"][0:qs, :], reduce_cmd=nisa.reduce_cmd.reset_reduce,
                        )  # fmt: skip
                        del st["src"], st["s_psum"]

                    # Stages 4-5 of a key step run interleaved with stages 1-3 of the next one
                    # (software pipelining: TensorE transposes and multiplies P of step j while the
                    # softmax of step j+1 runs on Vector/Scalar); P, alpha and the row sums leave
                    # the running state for that.
                    if pending is not None:
                        _pv_accumulate(*pending, D)
                    pending = ([{"st": st, "qs": st["qs"], "ks": st["ks"], **{key: st.pop(key) for key in ("p", "alpha", "row_sum")}} for st in active], v_t)
                if pending is not None:
                    _transpose_p(pending[0])
                    _pv_accumulate(*pending, D)

                for st in tiles:
                    q0, qs = st["q0"], st["qs"]
                    nm, l_run, acc = st["nm"], st["l"], st["acc"]
                    # Epilogue: rows that saw a key have m > -BIG/2; the others give 0 and lse = -inf.
                    seen = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_scalar(dst=seen[0:qs, :], data=nm[0:qs, :], op0=nl.less, operand0=0.5 * BIG)
                    # l >= 1 for a row that saw a key (its max contributes exp(0)); a row whose every
                    # key tile was skipped has l = 0, clamped so 1/l and log(l) stay finite.
                    nisa.tensor_scalar(dst=l_run[0:qs, :], data=l_run[0:qs, :], op0=nl.maximum, operand0=1e-30)
                    inv_l = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.activation(dst=inv_l[0:qs, :], op=nl.reciprocal, data=l_run[0:qs, :])
                    nisa.tensor_tensor(dst=inv_l[0:qs, :], data1=inv_l[0:qs, :], data2=seen[0:qs, :], op=nl.multiply)
                    o_t = nl.ndarray((TILE_Q, D), dtype=qT.dtype, buffer=nl.sbuf)
                    nisa.activation(dst=o_t[0:qs, :], op=nl.copy, data=acc[0:qs, :], scale=inv_l[0:qs, :])
                    nisa.dma_copy(dst=out[b, q0 : q0 + qs, h, :], src=o_t[0:qs, :])
                    # lse = m + log(l) + log(seen); log(0) = -inf marks rows that saw nothing.
                    log_l = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.activation(dst=log_l[0:qs, :], op=nl.log, data=l_run[0:qs, :])
                    log_seen = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.activation(dst=log_seen[0:qs, :], op=nl.log, data=seen[0:qs, :])
                    lse_t = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_tensor(dst=lse_t[0:qs, :], data1=log_l[0:qs, :], data2=nm[0:qs, :], op=nl.subtract)
                    nisa.tensor_tensor(dst=lse_t[0:qs, :], data1=lse_t[0:qs, :], data2=log_seen[0:qs, :], op=nl.add)
                    nisa.dma_copy(dst=lse[b, h, q0 : q0 + qs], src=lse_t[0:qs, :])

    return out, lse


# ----------------------------------------------------------------------------- backward


def _bwd_accumulate(tile, kv, dq_acc, dq_started, D):
    """Stage C of the backward for one query tile against the key tile ``kv``: dS^T in 128-key
    pieces (TensorE transposes into one PSUM bank, one copy to SBUF), dV += P^T dO and
    dK += dS^T Q (P and dS are stationary with queries on partitions), dQ += dS K."""
    qi, qs, ks = tile["qi"], tile["qs"], tile["ks"]
    chunks = [(c0, min(CHUNK, ks - c0)) for c0 in range(0, ks, CHUNK)]
    dtype = tile["ds"].dtype
    n_full, tail = ks // CHUNK, ks % CHUNK
    dsT_psum = nl.ndarray((CHUNK, len(chunks), TILE_Q), dtype=dtype, buffer=nl.psum)
    for c, (c0, kc) in enumerate(chunks):
        nisa.nc_transpose(dst=dsT_psum[0:kc, c, 0:qs], data=tile["ds"][0:qs, c0 : c0 + kc])
    dsT = nl.ndarray((CHUNK, len(chunks), TILE_Q), dtype=dtype, buffer=nl.sbuf)
    if n_full:
        _evacuate(dsT[0:CHUNK, 0:n_full, 0:qs], dsT_psum[0:CHUNK, 0:n_full, 0:qs], qi)
    if tail:
        _evacuate(dsT[0:tail, n_full : n_full + 1, 0:qs], dsT_psum[0:tail, n_full : n_full + 1, 0:qs], qi)
    del dsT_psum
    for c, (c0, kc) in enumerate(chunks):
        nisa.nc_matmul(dst=kv["dv"][0:kc, c * D : (c + 1) * D], stationary=tile["p"][0:qs, c0 : c0 + kc], moving=tile["do"][0:qs, :])
        nisa.nc_matmul(dst=kv["dk"][0:kc, c * D : (c + 1) * D], stationary=tile["ds"][0:qs, c0 : c0 + kc], moving=tile["q"][0:qs, :])
    dq_psum = nl.ndarray((TILE_Q, D), dtype=nl.float32, buffer=nl.psum)
    for c, (c0, kc) in enumerate(chunks):
        nisa.nc_matmul(dst=dq_psum[0:qs, :], stationary=dsT[0:kc, c, 0:qs], moving=kv["k"][c][0:kc, :])
    if dq_started[qi]:
        nisa.tensor_tensor(dst=dq_acc[qi][0:qs, :], data1=dq_acc[qi][0:qs, :], data2=dq_psum[0:qs, :], op=nl.add)
    else:
        nisa.tensor_copy(dst=dq_acc[qi][0:qs, :], src=dq_psum[0:qs, :])
        dq_started[qi] = True
    for key in ("p", "ds", "q", "do"):
        del tile[key]


@nki.jit
def flash_bwd_kernel(qT, kT, vT, q, k, do, doT, o, lse, bias, mask, scale, causal, has_bias, has_mask, bias_grad, BLOCK_K):
    """dq (B, Sq, H, D) like q; dk, dv (B, Sk, Hk, D) fp32 (summed over each GQA group);
    dbias (Bb, Hb, Sq, Sk) fp32 (summed over broadcast batch/head) when ``bias_grad``.

    Layouts: qT, doT (B, H, D, Sq); kT, vT (B, Hk, D, Sk); q, do, o (B, Sq, H, D); k (B, Sk, Hk, D);
    lse (B, H, Sq) fp32 with -inf for queries that saw no key."""
    B, H, D, Sq = qT.shape
    _, Hk, _, Sk = kT.shape
    group = H // Hk
    off = Sk - Sq
    n_q = _cdiv(Sq, TILE_Q)
    d_chunks = [(d0, min(CHUNK, D - d0)) for d0 in range(0, D, CHUNK)]

    dq = nl.ndarray((B, Sq, H, D), dtype=q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((B, Sk, Hk, D), dtype=nl.float32, buffer=nl.shared_hbm)
    dv = nl.ndarray((B, Sk, Hk, D), dtype=nl.float32, buffer=nl.shared_hbm)
    dbias = nl.ndarray(bias.shape if bias_grad else (1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    if not bias_grad:
        zero = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=zero, value=0.0)
        nisa.dma_copy(dst=dbias, src=zero)

    for b in nl.affine_range(B):
        for h in nl.affine_range(H):
            kvh = h // group
            first_of_group = h % group == 0
            dbias_first = bias_grad and (bias.shape[0] > 1 or b == 0) and (bias.shape[1] > 1 or h == 0)
            bb = b if has_bias and bias.shape[0] > 1 else 0
            bh = h if has_bias and bias.shape[1] > 1 else 0

            # Per query tile, once per head: delta = rowsum(dO * O) and the exp bias -lse, where
            # rows that saw no key (lse = -inf) get -lse = -BIG so that P = exp(S - lse) is 0 there.
            delta = nl.ndarray((TILE_Q, n_q), dtype=nl.float32, buffer=nl.sbuf)
            neg_lse = nl.ndarray((TILE_Q, n_q), dtype=nl.float32, buffer=nl.sbuf)
            for qi in nl.affine_range(n_q):
                q0 = qi * TILE_Q
                qs = min(TILE_Q, Sq - q0)
                o_t = nl.ndarray((TILE_Q, D), dtype=o.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=o_t[0:qs, :], src=o[b, q0 : q0 + qs, h, :])
                do_t = nl.ndarray((TILE_Q, D), dtype=do.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=do_t[0:qs, :], src=do[b, q0 : q0 + qs, h, :])
                prod = nl.ndarray((TILE_Q, D), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=prod[0:qs, :], data1=do_t[0:qs, :], data2=o_t[0:qs, :], op=nl.multiply)
                nisa.tensor_reduce(dst=delta[0:qs, qi : qi + 1], op=nl.add, data=prod[0:qs, :], axis=1, keepdims=True)
                lse_t = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=lse_t[0:qs, :], src=lse[b, h, q0 : q0 + qs])
                # seen = lse > -BIG/2; neg_lse = -max(lse, -BIG) * seen + (seen - 1) * BIG
                seen = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=seen[0:qs, :], data=lse_t[0:qs, :], op0=nl.greater, operand0=-0.5 * BIG)
                unseen_pen = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=unseen_pen[0:qs, :], data=seen[0:qs, :], op0=nl.subtract, operand0=1.0, op1=nl.multiply, operand1=BIG)
                neg_seen = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=neg_seen[0:qs, :], data=seen[0:qs, :], op0=nl.multiply, operand0=-1.0)
                clamped = nl.ndarray((TILE_Q, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=clamped[0:qs, :], data=lse_t[0:qs, :], op0=nl.maximum, operand0=-BIG)
                nisa.scalar_tensor_tensor(
                    dst=neg_lse[0:qs, qi : qi + 1], data=clamped[0:qs, :], op0=nl.multiply, operand0=neg_seen[0:qs, :],
                    op1=nl.add, operand1=unseen_pen[0:qs, :],
                )  # fmt: skip

            # dQ of every query tile of this head, accumulated across key tiles (fp32, SBUF).
            dq_acc = [nl.ndarray((TILE_Q, D), dtype=nl.float32, buffer=nl.sbuf) for _ in range(n_q)]
            dq_started = [False] * n_q

            for kj in nl.sequential_range(_cdiv(Sk, BLOCK_K)):
                k0 = kj * BLOCK_K
                ks = min(BLOCK_K, Sk - k0)
                k_chunks = [(c * CHUNK, min(CHUNK, ks - c * CHUNK)) for c in range(_cdiv(ks, CHUNK))]
                # Key-side tiles: kT/vT with head_dim on partitions (moving operands of S and dP),
                # K with keys on partitions (moving operand of dQ).
                kT_t, vT_t = [], []
                for d0, dc in d_chunks:
                    a = nl.ndarray((CHUNK, BLOCK_K), dtype=kT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a[0:dc, 0:ks], src=kT[b, kvh, d0 : d0 + dc, k0 : k0 + ks])
                    kT_t.append(a)
                    a = nl.ndarray((CHUNK, BLOCK_K), dtype=vT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a[0:dc, 0:ks], src=vT[b, kvh, d0 : d0 + dc, k0 : k0 + ks])
                    vT_t.append(a)
                k_nat = []
                for c0, kc in k_chunks:
                    a = nl.ndarray((CHUNK, D), dtype=k.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a[0:kc, :], src=k[b, k0 + c0 : k0 + c0 + kc, kvh, :])
                    k_nat.append(a)
                # dV and dK of the key tile: one PSUM region each, 128-key chunks side by side,
                # accumulated by the matmuls over every query tile.
                dv_psum = nl.ndarray((CHUNK, len(k_chunks) * D), dtype=nl.float32, buffer=nl.psum)
                dk_psum = nl.ndarray((CHUNK, len(k_chunks) * D), dtype=nl.float32, buffer=nl.psum)

                # Per query tile three stages, software-pipelined: stage A (S and dP on TensorE) of
                # tile i+1 is issued before stage C (dV, dK, dQ on TensorE) of tile i, so TensorE
                # has work queued while stage B (P on ScalarE, dS on VectorE) of tile i runs.
                kv = {"k": k_nat, "dv": dv_psum, "dk": dk_psum}
                pending = None
                for qi in nl.affine_range(n_q):
                    q0 = qi * TILE_Q
                    qs = min(TILE_Q, Sq - q0)
                    # Under causal, the tile works on the keys its last query sees (kse of them).
                    kse = max(0, min(ks, q0 + qs + off - k0)) if causal else ks
                    if dbias_first and kse < ks:  # the gradient of a bias block no query sees is 0
                        zeros = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.memset(dst=zeros[0:qs, 0 : ks - kse], value=0.0)
                        nisa.dma_copy(dst=dbias[bb, bh, q0 : q0 + qs, k0 + kse : k0 + ks], src=zeros[0:qs, 0 : ks - kse])
                    if kse == 0:
                        continue
                    all_visible = _all_visible(q0, k0, kse, off) if causal else True
                    tile = {"qi": qi, "q0": q0, "qs": qs, "ks": kse}
                    # Stage A: query-side tiles, S = q @ k^T and dP = dO @ V^T.
                    tile["qT"], tile["doT"] = [], []
                    for d0, dc in d_chunks:
                        a = nl.ndarray((CHUNK, TILE_Q), dtype=qT.dtype, buffer=nl.sbuf)
                        nisa.dma_copy(dst=a[0:dc, 0:qs], src=qT[b, h, d0 : d0 + dc, q0 : q0 + qs])
                        tile["qT"].append(a)
                        a = nl.ndarray((CHUNK, TILE_Q), dtype=doT.dtype, buffer=nl.sbuf)
                        nisa.dma_copy(dst=a[0:dc, 0:qs], src=doT[b, h, d0 : d0 + dc, q0 : q0 + qs])
                        tile["doT"].append(a)
                    tile["q"] = nl.ndarray((TILE_Q, D), dtype=q.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=tile["q"][0:qs, :], src=q[b, q0 : q0 + qs, h, :])
                    tile["do"] = nl.ndarray((TILE_Q, D), dtype=do.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=tile["do"][0:qs, :], src=do[b, q0 : q0 + qs, h, :])
                    tile["s_psum"] = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.psum)
                    for (d0, dc), a, kt in zip(d_chunks, tile["qT"], kT_t):
                        nisa.nc_matmul(dst=tile["s_psum"][0:qs, 0:kse], stationary=a[0:dc, 0:qs], moving=kt[0:dc, 0:kse])
                    tile["dp_psum"] = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.psum)
                    for (d0, dc), a, vt in zip(d_chunks, tile["doT"], vT_t):
                        nisa.nc_matmul(dst=tile["dp_psum"][0:qs, 0:kse], stationary=a[0:dc, 0:qs], moving=vt[0:dc, 0:kse])
                    del tile["qT"], tile["doT"]

                    if pending is not None:
                        _bwd_accumulate(pending, kv, dq_acc, dq_started, D)

                    # Stage B: P = exp(scale * S + bias - lse), recomputed (read straight from PSUM
                    # with the scale in the exponent on plain tiles); dS = P * (dP - delta).
                    mask_tile = None
                    if not has_bias and not has_mask and all_visible:
                        src, factor = tile["s_psum"][0:qs, 0:kse], float(scale)
                    else:
                        bias_tile, mask_tile = _load_bias_mask(bias, mask, b, h, q0, qs, k0, kse, has_bias, has_mask)
                        s_sb = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.sbuf)
                        _scores(s_sb[0:qs, 0:kse], tile["s_psum"][0:qs, 0:kse], qs, kse, scale, bias_tile, mask_tile, None if all_visible else q0 + off - k0)
                        src, factor = s_sb[0:qs, 0:kse], 1.0
                    tile["p"] = nl.ndarray((TILE_Q, BLOCK_K), dtype=q.dtype, buffer=nl.sbuf)
                    nisa.activation(dst=tile["p"][0:qs, 0:kse], op=nl.exp, data=src, scale=factor, bias=neg_lse[0:qs, qi : qi + 1])
                    if mask_tile is not None:  # a masked pair's P is 0 even where a NaN row's lse would make it NaN
                        nisa.tensor_copy_predicated(dst=tile["p"][0:qs, 0:kse], src=0.0, predicate=mask_tile, reverse_pred=True)
                    del src, tile["s_psum"]
                    tile["ds"] = nl.ndarray((TILE_Q, BLOCK_K), dtype=q.dtype, buffer=nl.sbuf)
                    if bias_grad:
                        ds32 = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.scalar_tensor_tensor(dst=ds32[0:qs, 0:kse], data=tile["dp_psum"][0:qs, 0:kse], op0=nl.subtract, operand0=delta[0:qs, qi : qi + 1], op1=nl.multiply, operand1=tile["p"][0:qs, 0:kse])
                        if mask_tile is not None:  # 0 * a NaN row's (dP - delta) is NaN: select it out
                            nisa.tensor_copy_predicated(dst=ds32[0:qs, 0:kse], src=0.0, predicate=mask_tile, reverse_pred=True)
                        nisa.tensor_copy(dst=tile["ds"][0:qs, 0:kse], src=ds32[0:qs, 0:kse], engine=nisa.gpsimd_engine)
                        dst_region = dbias[bb, bh, q0 : q0 + qs, k0 : k0 + kse]
                        if not dbias_first:  # another (batch, head) already stored this slot: add to it
                            prev = nl.ndarray((TILE_Q, BLOCK_K), dtype=nl.float32, buffer=nl.sbuf)
                            nisa.dma_copy(dst=prev[0:qs, 0:kse], src=dst_region)
                            nisa.tensor_tensor(dst=ds32[0:qs, 0:kse], data1=ds32[0:qs, 0:kse], data2=prev[0:qs, 0:kse], op=nl.add, engine=nisa.gpsimd_engine)
                        nisa.dma_copy(dst=dst_region, src=ds32[0:qs, 0:kse])
                    else:
                        nisa.scalar_tensor_tensor(dst=tile["ds"][0:qs, 0:kse], data=tile["dp_psum"][0:qs, 0:kse], op0=nl.subtract, operand0=delta[0:qs, qi : qi + 1], op1=nl.multiply, operand1=tile["p"][0:qs, 0:kse])
                        if mask_tile is not None:
                            nisa.tensor_copy_predicated(dst=tile["ds"][0:qs, 0:kse], src=0.0, predicate=mask_tile, reverse_pred=True)
                    del tile["dp_psum"]
                    pending = tile
                if pending is not None:
                    _bwd_accumulate(pending, kv, dq_acc, dq_started, D)
                del kv

                # Key tile done: dK (scaled) and dV to HBM, added to the group's earlier heads.
                for c, (c0, kc) in enumerate(k_chunks):
                    for acc_psum, out_hbm, factor in ((dv_psum, dv, 1.0), (dk_psum, dk, float(scale))):
                        t = nl.ndarray((CHUNK, D), dtype=nl.float32, buffer=nl.sbuf)
                        nisa.activation(dst=t[0:kc, :], op=nl.copy, data=acc_psum[0:kc, c * D : (c + 1) * D], scale=factor)
                        region = out_hbm[b, k0 + c0 : k0 + c0 + kc, kvh, :]
                        if not first_of_group:
                            prev = nl.ndarray((CHUNK, D), dtype=nl.float32, buffer=nl.sbuf)
                            nisa.dma_copy(dst=prev[0:kc, :], src=region)
                            nisa.tensor_tensor(dst=t[0:kc, :], data1=t[0:kc, :], data2=prev[0:kc, :], op=nl.add)
                        nisa.dma_copy(dst=region, src=t[0:kc, :])
                del dv_psum, dk_psum

            # dQ = scale * sum over key tiles; queries that saw no key get 0.
            for qi in nl.affine_range(n_q):
                q0 = qi * TILE_Q
                qs = min(TILE_Q, Sq - q0)
                dq_t = nl.ndarray((TILE_Q, D), dtype=q.dtype, buffer=nl.sbuf)
                if dq_started[qi]:
                    nisa.activation(dst=dq_t[0:qs, :], op=nl.copy, data=dq_acc[qi][0:qs, :], scale=float(scale))
                else:
                    nisa.memset(dst=dq_t[0:qs, :], value=0.0)
                nisa.dma_copy(dst=dq[b, q0 : q0 + qs, h, :], src=dq_t[0:qs, :])

    return dq, dk, dv, dbias


# ----------------------------------------------------------------------------- configs


def _table(target: str) -> dict:
    from ceiling import tables

    if target not in TARGETS:
        raise ValueError(f"target: expected one of {list(TARGETS)}, got {target!r}")
    return tables.read(tables.path("trainium", target, "attention"))


TARGETS = ("trn2", "trn1")


def representative_shape() -> dict:
    return dict(_table("trn2")["representative_shape"])


def configs(target: str) -> list[dict]:
    """The shipped configs of ``target`` ("trn1"/"trn2"), one per head-dim bucket, with the bucket's
    largest head dim (the op's largest for the entry that serves head dims above every bucket)."""
    from ceiling.attention.spec import HEAD_DIM_RANGE

    return [{"head_dim": int(e["when"].split("<=")[1]) if "when" in e else HEAD_DIM_RANGE[1], **e["config"]}
            for e in _table(target)["entries"]]


CONFIG_KEYS = ("target", "name", "fwd_block_k", "bwd_block_k", "q_in_flight")
TILE_KEYS = ("fwd_block_k", "bwd_block_k", "q_in_flight")


def default_target(config: dict | None = None) -> str:
    from ceiling.trainium.gemm import default_target as gemm_default_target

    return gemm_default_target(config)


# ceiling.op's hooks: the target a config names, a shipped config by name, the table's entry by
# head-dim bucket.


def target(problem, user=None) -> str:
    return default_target(user)


def heuristic(problem, user=None) -> dict:
    return {}  # the table's first entry holds for every head dim


def own(user) -> dict | None:
    """``config["name"]`` expanded to that shipped config; tile keys over it make a ``custom`` one.
    The keys and values are checked first, against the space of the target the config names (the
    default target's when it names none or one that is not a Trainium target)."""
    if not user or not isinstance(user, dict):
        return user
    from ceiling import spaces

    spaces.check("attention", user["target"] if user.get("target") in TARGETS else default_target(), user,
                 partial=True)
    out = dict(user)
    named = [c for c in configs(default_target(user)) if c["name"] == user.get("name")]
    if named:
        out = {k: v for k, v in named[0].items() if k != "head_dim"} | out
    elif any(key in user for key in TILE_KEYS):
        out.setdefault("name", "custom")
    return out


def resolve_config(head_dim: int, target: str, config: dict | None = None) -> dict:
    """The config a problem of ``head_dim`` runs with on ``target`` (outside the op: inspection,
    the cost model, the triangle layout): the op's resolution for a problem of that head dim."""
    from ceiling.attention.op import ATTENTION
    from ceiling.attention.spec import shipped_problem
    from ceiling.op import resolve_tabled

    problem = shipped_problem(head_dim, "bfloat16", causal=False)
    cfg = resolve_tabled(problem, ATTENTION.implementation("trainium"), own({**(config or {}), "target": target}))
    return {k: v for k, v in cfg.items() if k != "target"}


# ----------------------------------------------------------------------------- host side


def _np_dtype(name: str):
    import ml_dtypes

    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def _as4(x: np.ndarray) -> np.ndarray:
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


def _pair_operand(x, sq: int, sk: int, dtype, dry: bool):
    """A bias or mask as (Bb, Hb, Sq, Sk): batch/head keep their broadcast 1s, rows are expanded."""
    from ceiling.trainium.emulator import ShapeDtype

    if dry:
        shape = _as4_shape(x.shape)
        return ShapeDtype((shape[0], shape[1], sq, sk), dtype)
    x4 = _as4(x)
    return np.ascontiguousarray(np.broadcast_to(x4, (x4.shape[0], x4.shape[1], sq, sk)).astype(dtype))


def _as4_shape(shape) -> tuple[int, ...]:
    return (1,) * (4 - len(shape)) + tuple(shape)


def _placeholder(dry: bool):
    from ceiling.trainium.emulator import ShapeDtype

    return ShapeDtype((1, 1, 1, 1), np.float32) if dry else np.zeros((1, 1, 1, 1), np.float32)


def _arranged(x, axes, dry: bool):
    """``x`` with its axes permuted, contiguous (a shape/dtype stand-in when ``dry``)."""
    from ceiling.trainium.emulator import ShapeDtype

    if dry:
        return ShapeDtype(tuple(x.shape[a] for a in axes), x.dtype)
    return np.ascontiguousarray(x.transpose(axes))


HEADS_MAJOR = (0, 2, 3, 1)  # (B, S, H, D) -> (B, H, D, S): head_dim on partitions, as qT and kT
AS_IS = (0, 1, 2, 3)


def _run(kernel, target: str, dry: bool, *args, **consts):
    """Run ``kernel`` on the emulator for ``target`` (or on the real toolchain); (result, ctx)."""
    from ceiling.trainium.emulator import emulate

    if not EMULATED:
        return kernel(*args, **consts), None
    # Fully masked rows take log(0) = -inf on purpose; numpy would warn about it.
    with emulate(target=target, dry=dry) as ctx, np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        result = kernel(*args, **consts)
    return result, ctx


def forward_np(q, k, v, bias, mask, causal, scale, target, cfg, dry=False):
    """(out, lse, ctx) on numpy arrays (or shape/dtype stand-ins when ``dry``) with the resolved ``cfg``."""
    sq, sk, d = q.shape[1], k.shape[1], q.shape[3]
    args = (
        _arranged(q, HEADS_MAJOR, dry),
        _arranged(k, HEADS_MAJOR, dry),
        _arranged(v, (0, 2, 1, 3), dry),  # (B, Hk, Sk, D)
        _pair_operand(bias, sq, sk, np.float32, dry) if bias is not None else _placeholder(dry),
        _pair_operand(mask, sq, sk, np.uint8, dry) if mask is not None else _placeholder(dry),
    )
    (out, lse), ctx = _run(
        flash_fwd_kernel, target, dry, *args,
        scale=float(scale), causal=bool(causal), has_bias=bias is not None, has_mask=mask is not None,
        BLOCK_K=cfg["fwd_block_k"], Q_IN_FLIGHT=cfg["q_in_flight"],
    )  # fmt: skip
    return out, lse, ctx


def backward_np(do, q, k, v, o, lse, bias, mask, causal, scale, bias_grad, target, cfg, dry=False):
    """(dq, dk, dv, dbias or None, ctx); dk/dv in k's dtype, dbias reduced to bias's shape (fp32)."""
    sq, sk, d = q.shape[1], k.shape[1], q.shape[3]
    bias_grad = bool(bias_grad and bias is not None)
    args = (
        _arranged(q, HEADS_MAJOR, dry),
        _arranged(k, HEADS_MAJOR, dry),
        _arranged(v, HEADS_MAJOR, dry),
        _arranged(q, AS_IS, dry),
        _arranged(k, AS_IS, dry),
        _arranged(do, AS_IS, dry),
        _arranged(do, HEADS_MAJOR, dry),
        _arranged(o, AS_IS, dry),
        _arranged(lse, (0, 1, 2), dry),
        _pair_operand(bias, sq, sk, np.float32, dry) if bias is not None else _placeholder(dry),
        _pair_operand(mask, sq, sk, np.uint8, dry) if mask is not None else _placeholder(dry),
    )
    (dq, dk, dv, dbias), ctx = _run(
        flash_bwd_kernel, target, dry, *args,
        scale=float(scale), causal=bool(causal), has_bias=bias is not None, has_mask=mask is not None,
        bias_grad=bias_grad, BLOCK_K=cfg["bwd_block_k"],
    )  # fmt: skip
    if dry:
        return None, None, None, None, ctx
    if bias_grad:
        # The kernel summed over broadcast batch/head; sum over broadcast query/key rows here.
        shape4 = _as4_shape(bias.shape)
        axes = tuple(ax for ax in (2, 3) if shape4[ax] == 1)
        dbias = dbias.sum(axis=axes, keepdims=True).reshape(bias.shape) if axes else dbias.reshape(bias.shape)
    else:
        dbias = None
    dtype = k.dtype
    return dq, dk.astype(dtype), dv.astype(dtype), dbias, ctx


class _Shape:
    """A stand-in array (shape and dtype) for dry runs."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)


# ----------------------------------------------------------------------------- torch entry points


def _to_numpy(x):
    from ceiling.trainium.gemm import _torch_to_numpy

    return None if x is None else _torch_to_numpy(x)


def _to_torch(x, device):
    from ceiling.trainium.gemm import _numpy_to_torch

    return _numpy_to_torch(x, device)


def forward(problem, config, q, k, v, bias, mask):
    """(out like q, lse (B, H, Sq) float32) through the NKI forward kernel (emulated here)."""
    target = config.target
    out, lse, _ = forward_np(
        _to_numpy(q), _to_numpy(k), _to_numpy(v),
        None if bias is None else _to_numpy(bias.float()), None if mask is None else _to_numpy(mask),
        problem.causal, problem.scale, target, config,
    )  # fmt: skip
    return _to_torch(out, q.device), _to_torch(lse, q.device)


def backward(problem, config, saved, grads, needs):
    """(dq, dk, dv, dbias or None) through the NKI backward kernel (emulated here)."""
    s = saved
    q, k, v, bias = s["q"], s["k"], s["v"], s["bias"]
    dq, dk, dv, dbias, _ = backward_np(
        _to_numpy(grads["out"].to(q.dtype)), _to_numpy(q), _to_numpy(k), _to_numpy(v), _to_numpy(s["out"].to(q.dtype)),
        _to_numpy(s["lse"].float()),
        None if bias is None else _to_numpy(bias.float()), None if s["mask"] is None else _to_numpy(s["mask"]),
        problem.causal, problem.scale, needs["bias"], config.target, config,
    )  # fmt: skip
    out = [_to_torch(dq, q.device), _to_torch(dk, k.device), _to_torch(dv, v.device)]
    out.append(None if dbias is None else _to_torch(np.ascontiguousarray(dbias), q.device).to(bias.dtype))
    return tuple(out)


def attention_fwd(q, k, v, bias, mask, causal, scale, config=None):
    """:func:`forward` from torch tensors and a caller's ``config`` (the triangle layout's entry)."""
    problem = _problem_of(q, k, v, bias, mask, causal, scale)
    return forward(problem, _resolved(problem, config), q, k, v, bias, mask)


def attention_bwd(do, q, k, v, out, lse, bias, mask, causal, scale, bias_grad, config=None):
    """:func:`backward` from torch tensors and a caller's ``config`` (the triangle layout's entry)."""
    problem = _problem_of(q, k, v, bias, mask, causal, scale)
    saved = {"q": q, "k": k, "v": v, "bias": bias, "mask": mask, "out": out, "lse": lse}
    return backward(problem, _resolved(problem, config), saved, {"out": do}, {"bias": bool(bias_grad)})


def _problem_of(q, k, v, bias, mask, causal, scale):
    """The problem of a triangle-layout call, whose op checked its inputs (float32 among them: the
    emulator computes it), so with the attention spec's shape rules but not its kernel dtypes."""
    from ceiling.attention.spec import check

    return check(q, k, v, causal=causal, scale=scale, bias=bias, mask=mask)


def _resolved(problem, config):
    from ceiling.attention.op import ATTENTION
    from ceiling.op import resolve_config

    return resolve_config(problem, ATTENTION.implementation("trainium"), config)


# ----------------------------------------------------------------------------- cost model


def estimate(batch=1, heads=8, kv_heads=None, seq=2048, head_dim=128, causal=False, direction="fwd",
             dtype="bfloat16", target="trn2", config=None, k_len=None):
    """Cost-model estimate of one attention call from a dry run of the kernel's instruction stream.

    Returns (CostReport, resolved config, context). FLOPs follow the FlashAttention convention:
    4 B H Sq Sk D forward (halved when causal), 2.5x that backward (5 matmuls of the same size)."""
    from ceiling.trainium.emulator import cost

    kv_heads = kv_heads or heads
    k_len = k_len or seq
    dt = _np_dtype(dtype)
    cfg = resolve_config(head_dim, target, config)
    q = _Shape((batch, seq, heads, head_dim), dt)
    k = _Shape((batch, k_len, kv_heads, head_dim), dt)
    scale = 1.0 / math.sqrt(head_dim)
    if direction == "fwd":
        *_, ctx = forward_np(q, k, k, None, None, causal, scale, target, cfg, dry=True)
    elif direction == "bwd":
        lse = _Shape((batch, heads, seq), np.float32)
        *_, ctx = backward_np(q, q, k, k, q, lse, None, None, causal, scale, False, target, cfg, dry=True)
    else:
        raise ValueError(f"direction: expected 'fwd' or 'bwd', got {direction!r}")
    flops = 4.0 * batch * heads * seq * k_len * head_dim * (0.5 if causal else 1.0) * (2.5 if direction == "bwd" else 1.0)
    report = cost.estimate(ctx.trace, ctx.target, flops=flops)
    report.notes.append(f"SBUF peak {ctx.sbuf_peak} B/partition of {ctx.target.sbuf_bytes_per_partition}; PSUM peak {ctx.psum_peak} of {ctx.target.psum_banks} banks")
    return report, cfg, ctx
