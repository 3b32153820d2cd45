"""The triangle multiplicative update on JAX arrays on a GPU: the kernels of
:mod:`ceiling.triton.triangle_multiplication` through jax-triton, with the torch launcher's glue in
``jnp``; the launchers (:func:`forward`, :func:`backward`) take the problem and its resolved config.
Why the wrappers are as they are is in ``docs/triangle.md``.
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ceiling import jax_bridge
from ceiling.triangle.spec import TRIMUL_WEIGHTS
from ceiling.triton.triangle_attention_jax import multiple_of_16
from ceiling.triton.triangle_multiplication import (
    channel_gemm_kernel,
    ln_gate_proj_bwd_kernel,
    ln_gate_proj_kernel,
    ln_out_bwd_kernel,
    ln_out_gate_kernel,
    out_gate_bwd_kernel,
)

LAUNCH_OPTIONS = ("num_warps", "num_stages")


# ----------------------------------------------------------------------------- kernels in jax-triton's order


@triton.jit
def ln_gate_proj_kernel_jax(X, Mask, Lw, Lb, Wp, Bp, Wg, Bg, M, NN, eps, AB,
                            CZ: tl.constexpr, C2: tl.constexpr, NN_16: tl.constexpr, HAS_MASK: tl.constexpr,
                            PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            CZ_BLOCK: tl.constexpr):
    ln_gate_proj_kernel(X, Mask, Lw, Lb, Wp, Bp, Wg, Bg, AB, M, multiple_of_16(NN, NN_16), CZ, C2, eps,
                        HAS_MASK, PRECISION, BLOCK_M, BLOCK_N, CZ_BLOCK)


@triton.jit
def channel_gemm_kernel_jax(A, B, N, Y,
                            C: tl.constexpr, A_CHANNELS: tl.constexpr, A_FIRST: tl.constexpr, A_T: tl.constexpr,
                            B_CHANNELS: tl.constexpr, B_FIRST: tl.constexpr, B_T: tl.constexpr, N_16: tl.constexpr,
                            PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr):
    """Y (B, C, N, N) = A_z @ B_z per (batch, channel) z. A holds A_CHANNELS channels per
    batch element and the operand starts at channel A_FIRST, read transposed if A_T; B alike."""
    n = multiple_of_16(N, N_16)
    nn = n * n
    if A_T:
        s_am = 1
        s_ak = n
    else:
        s_am = n
        s_ak = 1
    if B_T:
        s_bk = 1
        s_bn = n
    else:
        s_bk = n
        s_bn = 1
    channel_gemm_kernel(A + A_FIRST * nn, B + B_FIRST * nn, Y, N, C,
                        A_CHANNELS * nn, nn, s_am, s_ak, B_CHANNELS * nn, nn, s_bk, s_bn, C * nn, nn, n, 1,
                        PRECISION, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def ln_out_gate_kernel_jax(X, Yc, Lw_in, Lb_in, Lw_out, Lb_out, Wpo, Bpo, Wgo, Bgo, M, NN, eps, Out,
                           CZ: tl.constexpr, C: tl.constexpr, NN_16: tl.constexpr, PRECISION: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CZ_BLOCK: tl.constexpr,
                           C_BLOCK: tl.constexpr):
    ln_out_gate_kernel(X, Yc, Lw_in, Lb_in, Lw_out, Lb_out, Wpo, Bpo, Wgo, Bgo, Out, M, multiple_of_16(NN, NN_16),
                       CZ, C, eps, PRECISION, BLOCK_M, BLOCK_N, CZ_BLOCK, C_BLOCK)


@triton.jit
def out_gate_bwd_kernel_jax(X, Yc, DOut, Lw_in, Lb_in, Lw_out, Lb_out, Wpo, Bpo, Wgo, Bgo, M, NN, eps,
                            DU, DGz, Yn, Xn,
                            CZ: tl.constexpr, C: tl.constexpr, NN_16: tl.constexpr, PRECISION: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CZ_BLOCK: tl.constexpr,
                            C_BLOCK: tl.constexpr):
    out_gate_bwd_kernel(X, Yc, DOut, Lw_in, Lb_in, Lw_out, Lb_out, Wpo, Bpo, Wgo, Bgo, DU, DGz, Yn, Xn,
                        0, M, multiple_of_16(NN, NN_16), CZ, C, eps, PRECISION, BLOCK_M, BLOCK_N, CZ_BLOCK, C_BLOCK)


@triton.jit
def ln_out_bwd_kernel_jax(Yc, DU, Lw_out, Lb_out, Wpo, M, NN, eps, DYc, Part,
                          CZ: tl.constexpr, C: tl.constexpr, NN_16: tl.constexpr, PRECISION: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, C_BLOCK: tl.constexpr):
    ln_out_bwd_kernel(Yc, DU, Lw_out, Lb_out, Wpo, DYc, Part, 0, M, multiple_of_16(NN, NN_16), CZ, C, eps,
                      PRECISION, BLOCK_M, BLOCK_K, C_BLOCK)


@triton.jit
def ln_gate_proj_bwd_kernel_jax(X, Mask, DABc, DGz, Lw, Lb, Wp, Bp, Wg, Bg, Wgo, M, NN, eps, DX, DP, DG, Xn, Part,
                                CZ: tl.constexpr, C2: tl.constexpr, NN_16: tl.constexpr, HAS_MASK: tl.constexpr,
                                PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                CZ_BLOCK: tl.constexpr):
    ln_gate_proj_bwd_kernel(X, Mask, DABc, DGz, Lw, Lb, Wp, Bp, Wg, Bg, Wgo, DX, DP, DG, Xn, Part,
                            0, M, multiple_of_16(NN, NN_16), CZ, C2, eps, HAS_MASK, PRECISION, BLOCK_M, BLOCK_N,
                            CZ_BLOCK)


# ----------------------------------------------------------------------------- launchers


class _Launches:
    """Shapes, configs and the compile-time arguments every launch shares."""

    def __init__(self, x, mask, weights, cfgs):
        import jax.numpy as jnp

        self.B, self.N, _, self.CZ = x.shape
        self.C2 = weights[2].shape[0]
        self.C = self.C2 // 2
        self.M, self.NN = self.B * self.N * self.N, self.N * self.N
        self.cfgs = cfgs
        from ceiling.amd import cdna4

        self.prec = cdna4.input_precision(x.dtype == jnp.float32, getattr(cfgs, "target", None))
        self.has_mask = mask is not None
        self.mask_rows = mask.reshape(-1).astype(jnp.float32) if mask is not None else jnp.zeros((1,), jnp.float32)
        self.czb, self.cb = triton.next_power_of_2(self.CZ), triton.next_power_of_2(self.C)

    def launch(self, kernel, section, *args, out_shape, grid, **meta):
        cfg = self.cfgs[section]
        tiles = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in kernel.arg_names}
        opts = {k: v for k, v in cfg.items() if k in LAUNCH_OPTIONS}
        return jax_bridge.triton_call(*args, kernel=kernel, out_shape=out_shape, grid=grid(cfg), PRECISION=self.prec,
                                      **tiles, **meta, **opts)


def _project_and_contract(p: _Launches, x, direction, weights, eps):
    """Stages 1 and 2: ab (B, 2c, N, N) and y (B, c, N, N), channel-first."""
    import jax

    lnw, lnb, wp, bp, wg, bg = weights[:6]
    ab = p.launch(ln_gate_proj_kernel_jax, "ln_gate_proj", x, p.mask_rows, lnw, lnb, wp, bp, wg, bg, p.M, p.NN,
                  np.float32(eps), out_shape=jax.ShapeDtypeStruct((p.B, p.C2, p.N, p.N), x.dtype),
                  grid=lambda c: (triton.cdiv(p.M, c["BLOCK_M"]) * triton.cdiv(p.C2, c["BLOCK_N"]),),
                  CZ=p.CZ, C2=p.C2, NN_16=p.NN % 16 == 0, HAS_MASK=p.has_mask, CZ_BLOCK=p.czb)
    # outgoing: y = a b^T; incoming: y = a^T b (a = channels [0, c), b = [c, 2c) of ab)
    outgoing = direction == "outgoing"
    y = _contract(p, ab, (2 * p.C, 0, not outgoing), ab, (2 * p.C, p.C, outgoing), x.dtype)
    return ab, y


def _contract(p: _Launches, a, a_spec, b, b_spec, dtype):
    """(B, c, N, N) = A @ B per (batch, channel); a spec is (channels per batch, first channel, transposed)."""
    import jax

    return p.launch(channel_gemm_kernel_jax, "contract", a, b, p.N,
                    out_shape=jax.ShapeDtypeStruct((p.B, p.C, p.N, p.N), dtype),
                    grid=lambda c: (triton.cdiv(p.N, c["BLOCK_M"]), triton.cdiv(p.N, c["BLOCK_N"]), p.B * p.C),
                    C=p.C, A_CHANNELS=a_spec[0], A_FIRST=a_spec[1], A_T=bool(a_spec[2]),
                    B_CHANNELS=b_spec[0], B_FIRST=b_spec[1], B_T=bool(b_spec[2]), N_16=p.N % 16 == 0)


def forward(problem, config, x, mask, *weights):
    """(out (B, N, N, c_z) like x, empty ab, empty y): the backward recomputes [a; b] and y."""
    import jax
    import jax.numpy as jnp

    p = _Launches(x, mask, weights, config)
    eps = problem.eps
    lnw, lnb, _, _, _, _, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    _, y = _project_and_contract(p, x, problem.direction, weights, eps)
    empty = jnp.zeros((0,), x.dtype)
    return p.launch(ln_out_gate_kernel_jax, "ln_out_gate", x, y, lnw, lnb, lnw_o, lnb_o, wpo, bpo, wgo, bgo,
                    p.M, p.NN, np.float32(eps), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                    grid=lambda c: (triton.cdiv(p.M, c["BLOCK_M"]) * triton.cdiv(p.CZ, c["BLOCK_N"]),),
                    CZ=p.CZ, C=p.C, NN_16=p.NN % 16 == 0, CZ_BLOCK=p.czb, C_BLOCK=p.cb), empty, empty


def _wgrad(d, inp):
    """d^T @ inp in float32 (a weight gradient over all pair rows), without TF32 for float32."""
    import jax
    import jax.numpy as jnp

    return jnp.matmul(d.T, inp, preferred_element_type=jnp.float32, precision=jax.lax.Precision.HIGHEST)


def backward(problem, config, saved, grads, needs):
    """(dx, d norm_in_w, d norm_in_b, dWp, dbp, dWg, dbg, d norm_out_w, d norm_out_b, dWpo, dbpo, dWgo, dbgo)."""
    import jax
    import jax.numpy as jnp

    x, mask, weights = saved["x"], saved["mask"], tuple(saved[n] for n in TRIMUL_WEIGHTS)
    direction, eps = problem.direction, problem.eps
    p = _Launches(x, mask, weights, config)
    lnw, lnb, wp, bp, wg, bg, lnw_o, lnb_o, wpo, bpo, wgo, bgo = weights
    dout = grads["out"].astype(x.dtype)
    f32, dt, nn16 = jnp.float32, x.dtype, p.NN % 16 == 0
    ab, y = _project_and_contract(p, x, direction, weights, eps)

    # Stage 3 backward: the output gating, then LayerNorm_out to dy (channel-first).
    du, dgz, yn, xn = p.launch(
        out_gate_bwd_kernel_jax, "out_gate_bwd", x, y, dout, lnw, lnb, lnw_o, lnb_o, wpo, bpo, wgo, bgo,
        p.M, p.NN, np.float32(eps),
        out_shape=tuple(jax.ShapeDtypeStruct(s, dt) for s in ((p.M, p.CZ), (p.M, p.CZ), (p.M, p.C), (p.M, p.CZ))),
        grid=lambda c: (triton.cdiv(p.M, c["BLOCK_M"]),), CZ=p.CZ, C=p.C, NN_16=nn16, CZ_BLOCK=p.czb, C_BLOCK=p.cb)
    programs = triton.cdiv(p.M, p.cfgs["ln_out_bwd"]["BLOCK_M"])
    dy, part_out = p.launch(
        ln_out_bwd_kernel_jax, "ln_out_bwd", y, du, lnw_o, lnb_o, wpo, p.M, p.NN, np.float32(eps),
        out_shape=(jax.ShapeDtypeStruct(y.shape, dt), jax.ShapeDtypeStruct((programs, 2 * p.C), f32)),
        grid=lambda c: (programs,), CZ=p.CZ, C=p.C, NN_16=nn16, C_BLOCK=p.cb)
    dwpo, dwgo = _wgrad(du, yn), _wgrad(dgz, xn)
    dbpo, dbgo = du.astype(f32).sum(0), dgz.astype(f32).sum(0)
    dlno = part_out.sum(0)

    # Contraction backward into [da; db], channel-first.
    C2 = 2 * p.C
    if direction == "outgoing":  # y = a b^T:  da = dy b,  db = dy^T a
        da = _contract(p, dy, (p.C, 0, False), ab, (C2, p.C, False), dt)
        db = _contract(p, dy, (p.C, 0, True), ab, (C2, 0, False), dt)
    else:  # y = a^T b:  da = b dy^T,  db = a dy
        da = _contract(p, ab, (C2, p.C, False), dy, (p.C, 0, True), dt)
        db = _contract(p, ab, (C2, 0, False), dy, (p.C, 0, False), dt)
    dab = jnp.concatenate([da, db], axis=1)

    # Stage 1 backward.
    programs = triton.cdiv(p.M, p.cfgs["ln_gate_proj_bwd"]["BLOCK_M"])
    dx, dp, dg, xn, part_in = p.launch(
        ln_gate_proj_bwd_kernel_jax, "ln_gate_proj_bwd", x, p.mask_rows, dab, dgz, lnw, lnb, wp, bp, wg, bg, wgo,
        p.M, p.NN, np.float32(eps),
        out_shape=(jax.ShapeDtypeStruct(x.shape, dt), jax.ShapeDtypeStruct((p.M, C2), dt),
                   jax.ShapeDtypeStruct((p.M, C2), dt), jax.ShapeDtypeStruct((p.M, p.CZ), dt),
                   jax.ShapeDtypeStruct((programs, 2 * p.CZ), f32)),
        grid=lambda c: (programs,), CZ=p.CZ, C2=C2, NN_16=nn16, HAS_MASK=p.has_mask, CZ_BLOCK=p.czb)
    dlni = part_in.sum(0)
    grads = (dlni[:p.CZ], dlni[p.CZ:], _wgrad(dp, xn), dp.astype(f32).sum(0), _wgrad(dg, xn), dg.astype(f32).sum(0),
             dlno[:p.C], dlno[p.C:], dwpo, dbpo, dwgo, dbgo)
    return (dx, *(g.astype(w.dtype) for g, w in zip(grads, weights)))
