"""The triangle multiplicative update on Trainium (on the emulator where no Neuron
toolchain is installed).

The triangular contraction, the op's N^3 part, runs on the NKI GEMM of
:mod:`kernels.trainium.gemm`, batched over (batch, channel) on channel-first
operands with float32 accumulation, and so does its gradient (two more such
GEMMs). The per-pair work around it (LayerNorms, gated projections, mask, output
gate) is plain PyTorch in float32, differentiated by autograd: it is not yet fused
into NKI kernels. The backward recomputes the forward; nothing but the input is
kept between them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.trainium import gemm as nki_gemm
from kernels.triangle.reference import layer_norm


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(Z, M, K) @ (Z, K, N) through the NKI GEMM, float32 result."""
    return nki_gemm.gemm(a, b, None, None, torch.float32)


class _Contract(torch.autograd.Function):
    """Channel-first a, b (Z, N, N) -> y (Z, N, N): outgoing a b^T, incoming a^T b."""

    @staticmethod
    def forward(a, b, direction):
        return _bmm(a, b.mT) if direction == "outgoing" else _bmm(a.mT, b)

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b, direction = inputs
        ctx.save_for_backward(a, b)
        ctx.direction = direction

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        dy = dy.to(a.dtype)
        if ctx.direction == "outgoing":  # y = a b^T: da = dy b, db = dy^T a
            da, db = _bmm(dy, b), _bmm(dy.mT, a)
        else:  # y = a^T b: da = b dy^T, db = a dy
            da, db = _bmm(b, dy.mT), _bmm(a, dy)
        return da.to(a.dtype), db.to(b.dtype), None


def _trimul(x, direction, mask, weights, eps):
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
    y = _Contract.apply(a, b, direction).reshape(B, C, N, N).permute(0, 2, 3, 1)
    yn = layer_norm(y, lnw_o.to(f32), lnb_o.to(f32), eps)
    return (torch.sigmoid(linear(xn, wgo, bgo)) * linear(yn, wpo, bpo)).to(dt)


def trimul_fwd(x, direction, mask, weights, eps, config=None):
    """(out, residuals); no residuals are kept (the backward recomputes)."""
    with torch.no_grad():
        return _trimul(x, direction, mask, weights, eps), ()


def trimul_bwd(x, direction, mask, weights, eps, saved, dout, config=None):
    """(dx, *dweights) in ``kernels.triangle.TRIMUL_WEIGHTS`` order.

    ``torch.func.vjp`` rather than ``torch.autograd``: this runs inside the custom
    op's implementation, below the autograd dispatch key, where only functorch's
    transforms still differentiate."""
    present = [i for i, w in enumerate(weights) if w is not None]

    def forward(x, *ws):
        full = list(weights)
        for i, w in zip(present, ws):
            full[i] = w
        return _trimul(x, direction, mask, full, eps)

    out, vjp = torch.func.vjp(forward, x, *(weights[i] for i in present))
    grads = iter(vjp(dout.to(out.dtype)))
    dx = next(grads)
    dw = [None] * len(weights)
    for i in present:
        dw[i] = next(grads).to(weights[i].dtype)
    return (dx.to(x.dtype), *dw)
