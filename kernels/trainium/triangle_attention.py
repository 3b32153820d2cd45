"""Triangle attention on Trainium: the NKI flash attention of :mod:`ceiling.trainium.attention` in the
triangle's layout (on the emulator where no Neuron toolchain is installed), one attention per batch
element whose batch is the pair tensor's rows, its config resolved once (the chip from
``config["target"]``, else the default) and its axes moved at the boundary, where a key the mask
removes has its k and v rows and gradients zeroed (``docs/triangle.md``).
"""

from __future__ import annotations

import torch

from ceiling.trainium import attention as flash
from ceiling.triangle.spec import rows_attention


def resolve(problem, impl, user):
    """The flash attention's config for the per-element problem: its table's entry for the head
    dim on the chip, a shipped config by ``name``, and ``config=``'s keys over it."""
    from ceiling.attention.op import ATTENTION
    from ceiling.op import resolve_tabled
    from ceiling.spaces.config import Config

    config = resolve_tabled(rows_attention(problem), ATTENTION.implementation("trainium"), flash.own(user))
    return Config(config.as_dict(), "triangle_attention", config.target, config.source)


def _rows_major(t: torch.Tensor, b: int) -> torch.Tensor:
    """(B, N, H, N, D)[b] -> (rows, keys, heads, D), the flash attention's layout."""
    return t[b].transpose(1, 2)


def _key_rows(mask, b: int):
    """Row b's valid keys as (rows, keys, 1, 1), to select k, v and their gradients by."""
    return mask[b, :, 0, 0, :, None, None]


def _kept(t, mask, b: int):
    """``t``'s rows-major slice b with the keys the mask removes set to 0."""
    t = _rows_major(t, b)
    return t if mask is None else torch.where(_key_rows(mask, b), t, 0)


def forward(problem, config, q, k, v, bias, mask):
    """(out (B, N, H, N, D), lse (B, N, H, N) float32) through the NKI forward kernel."""
    rows = rows_attention(problem)
    outs, lses = [], []
    for b in range(problem.batch):
        out, lse = flash.forward(rows, config, _rows_major(q, b), _kept(k, mask, b), _kept(v, mask, b), bias[b],
                                 None if mask is None else mask[b])
        outs.append(out.transpose(1, 2))
        lses.append(lse)
    return torch.stack(outs).contiguous(), torch.stack(lses)


def backward(problem, config, saved, grads, needs):
    """(dq, dk, dv, dbias (B, 1, H, N, N)) through the NKI backward kernel."""
    s, rows = saved, rows_attention(problem)
    dout = grads["out"].to(s["q"].dtype)
    out = []
    for b in range(problem.batch):
        mask = s["mask"]
        per_row = {"q": _rows_major(s["q"], b), "k": _kept(s["k"], mask, b), "v": _kept(s["v"], mask, b),
                   "out": _rows_major(s["out"], b), "bias": s["bias"][b], "lse": s["lse"][b],
                   "mask": None if mask is None else mask[b]}
        dq, dk, dv, dbias = flash.backward(rows, config, per_row, {"out": _rows_major(dout, b)}, {"bias": True})
        if mask is not None:  # a removed key's gradients are 0 (0 times a NaN query is not)
            dk, dv = (torch.where(_key_rows(mask, b), g, 0) for g in (dk, dv))
        out.append((dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), dbias.float()))
    dq, dk, dv, dbias = (torch.stack(g).contiguous() for g in zip(*out))
    return dq, dk, dv, dbias.to(s["bias"].dtype)
