"""Triangle attention on Trainium: the NKI flash attention of
:mod:`kernels.trainium.attention` in the triangle's layout (runs on the emulator
where no Neuron toolchain is installed).

Per batch element b, triangle attention is an attention whose batch is the N rows
i of the pair tensor, whose bias (1, H, N, N) is shared by every row and whose mask
(N, 1, 1, N) is a key mask per row. The NKI flash attention takes those broadcast
patterns as they are: its backward sums the bias gradient over the broadcast rows
in float32 inside the kernel, so dbias is never larger than the bias. This module
only moves axes: q, k, v (B, N, H, N, D) become per-b (rows, keys, heads, D), and
the results move back.

The log-sum-exp of a row with no valid key is +inf in the triangle ops'
convention and -inf in the flash attention's; it is mapped at the boundary.
"""

from __future__ import annotations

import torch

from kernels.trainium import attention as flash


def _rows_major(t: torch.Tensor, b: int) -> torch.Tensor:
    """(B, N, H, N, D)[b] -> (rows, keys, heads, D), the flash attention's layout."""
    return t[b].transpose(1, 2)


def triangle_attention_fwd(q, k, v, bias, mask, scale, config=None):
    """(out (B, N, H, N, D), lse (B, N, H, N) float32) through the NKI forward kernel."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        out, lse = flash.attention_fwd(_rows_major(q, b), _rows_major(k, b), _rows_major(v, b), bias[b],
                                       None if mask is None else mask[b], False, scale, config)
        outs.append(out.transpose(1, 2))
        lses.append(lse)
    lse = torch.stack(lses)
    return torch.stack(outs).contiguous(), torch.where(torch.isneginf(lse), torch.inf, lse)


def triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, config=None):
    """(dq, dk, dv, dbias (B, 1, H, N, N)) through the NKI backward kernel."""
    grads = []
    for b in range(q.shape[0]):
        lse_b = torch.where(torch.isposinf(lse[b]), -torch.inf, lse[b])
        dq, dk, dv, dbias = flash.attention_bwd(
            _rows_major(dout.to(q.dtype), b), _rows_major(q, b), _rows_major(k, b), _rows_major(v, b),
            _rows_major(out, b), lse_b, bias[b], None if mask is None else mask[b], False, scale, True, config)
        grads.append((dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), dbias.float()))
    dq, dk, dv, dbias = (torch.stack(g).contiguous() for g in zip(*grads))
    return dq, dk, dv, dbias.to(bias.dtype)
