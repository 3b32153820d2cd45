"""``ceiling::attention_fwd`` and ``ceiling::attention_bwd``: the PyTorch custom ops.

Both take a resolved backend name, so dispatch happens once, in ``kernels.attention``, and
``torch.compile`` sees two opaque nodes (forward, and backward under autograd) with fake
implementations for shape propagation. The log-sum-exp output is not differentiable.
"""

from __future__ import annotations

import json
from typing import Optional

import torch

from kernels import backends

_NO_BIAS_GRAD = (0,)  # shape of the placeholder returned when no bias gradient is wanted


def _impl(backend: str):
    if backend == "reference":
        from kernels.attention import reference

        return reference
    return backends.implementation("attention", backend)


@torch.library.custom_op("ceiling::attention_fwd", mutates_args=())
def attention_fwd_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: Optional[torch.Tensor],
    mask: Optional[torch.Tensor],
    causal: bool,
    scale: float,
    backend: str,
    config: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = json.loads(config) if config else None
    out, lse = _impl(backend).attention_fwd(q, k, v, bias, mask, causal, scale, config=cfg)
    return out.contiguous(), lse.to(torch.float32).contiguous()


@attention_fwd_op.register_fake
def _(q, k, v, bias, mask, causal, scale, backend, config):
    batch, q_len, heads, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((batch, heads, q_len), dtype=torch.float32)


@torch.library.custom_op("ceiling::attention_bwd", mutates_args=())
def attention_bwd_op(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    bias: Optional[torch.Tensor],
    mask: Optional[torch.Tensor],
    causal: bool,
    scale: float,
    bias_grad: bool,
    backend: str,
    config: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    cfg = json.loads(config) if config else None
    dq, dk, dv, dbias = _impl(backend).attention_bwd(do, q, k, v, out, lse, bias, mask, causal, scale, bias_grad, config=cfg)
    if dbias is None:
        dbias = q.new_empty(_NO_BIAS_GRAD)
    return dq.contiguous(), dk.contiguous(), dv.contiguous(), dbias.contiguous()


@attention_bwd_op.register_fake
def _(do, q, k, v, out, lse, bias, mask, causal, scale, bias_grad, backend, config):
    dbias = bias.new_empty(bias.shape) if (bias is not None and bias_grad) else q.new_empty(_NO_BIAS_GRAD)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dbias


def _setup_context(ctx, inputs, output):
    q, k, v, bias, mask, causal, scale, backend, config = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, bias, mask)
    ctx.causal, ctx.scale, ctx.backend, ctx.config = causal, scale, backend, config
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, bias, mask = ctx.saved_tensors
    bias_grad = bias is not None and ctx.needs_input_grad[3]
    dq, dk, dv, dbias = attention_bwd_op(
        grad_out, q, k, v, out, lse, bias, mask, ctx.causal, ctx.scale, bias_grad, ctx.backend, ctx.config
    )
    return dq, dk, dv, (dbias if bias_grad else None), None, None, None, None, None


attention_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def config_json(value) -> str:
    """Canonical JSON of a config (nested dicts of ints, floats, bools, strings), written with
    plain string operations so ``torch.compile`` traces it without a graph break."""
    if isinstance(value, dict):
        return "{" + ",".join(f'"{key}":{config_json(value[key])}' for key in sorted(value)) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return '"' + value + '"'
    return str(value)


def attention(q, k, v, bias, mask, causal, scale, backend, config):
    """(out, lse) through the custom op."""
    return attention_fwd_op(q, k, v, bias, mask, causal, scale, backend, config_json(config) if config else None)
