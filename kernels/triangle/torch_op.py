"""``ceiling::triangle_attention`` and ``ceiling::triangle_multiplicative_update``:
PyTorch custom ops with fake and autograd registrations.

Each op takes a resolved backend name, so dispatch happens once, in
``kernels.triangle``, and ``torch.compile`` sees one opaque node per op. The
backward goes through the same backend (the reference skips the custom op and
uses plain autograd through its float32 math): triangle attention saves only (out, lse)
and recomputes the probabilities; the triangle multiplicative update saves what
its backend returns as residuals (nothing for the reference, which recomputes).
"""

from __future__ import annotations

import json
from typing import Optional

import torch

from kernels import backends
from kernels.triangle import reference


def _reference_dtype(x: torch.Tensor) -> torch.dtype:
    """The reference computes in float32, or in float64 for float64 inputs."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _config(config: Optional[str]):
    return json.loads(config) if config else None


# ----------------------------------------------------------------------------- triangle attention


@torch.library.custom_op("ceiling::triangle_attention", mutates_args=())
def triangle_attention_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, mask: Optional[torch.Tensor],
    scale: float, backend: str, config: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor]:
    impl = backends.implementation("triangle_attention", backend)
    out, lse = impl.triangle_attention_fwd(q, k, v, bias, mask, scale, config=_config(config))
    return out, lse


@triangle_attention_op.register_fake
def _(q, k, v, bias, mask, scale, backend, config):
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("ceiling::triangle_attention_bwd", mutates_args=())
def triangle_attention_bwd_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, mask: Optional[torch.Tensor],
    scale: float, out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor, backend: str, config: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    impl = backends.implementation("triangle_attention", backend)
    dq, dk, dv, dbias = impl.triangle_attention_bwd(q, k, v, bias, mask, scale, out, lse, dout, config=_config(config))
    return dq, dk, dv, dbias


@triangle_attention_bwd_op.register_fake
def _(q, k, v, bias, mask, scale, out, lse, dout, backend, config):
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format),
            torch.empty_like(bias, memory_format=torch.contiguous_format))


def _attn_setup(ctx, inputs, output):
    q, k, v, bias, mask, scale, backend, config = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, bias, mask, out, lse)
    ctx.scale, ctx.backend, ctx.config = scale, backend, config
    ctx.mark_non_differentiable(lse)


def _attn_backward(ctx, dout, dlse):
    q, k, v, bias, mask, out, lse = ctx.saved_tensors
    dq, dk, dv, dbias = triangle_attention_bwd_op(
        q, k, v, bias, mask, ctx.scale, out, lse, dout.contiguous(), ctx.backend, ctx.config)
    return dq, dk, dv, dbias, None, None, None, None


triangle_attention_op.register_autograd(_attn_backward, setup_context=_attn_setup)


def triangle_attention(q, k, v, bias, mask, scale, backend, config):
    if backend == "reference":  # plain autograd through the oracle, in float64 for float64 inputs
        return reference.attention(q, k, v, bias, mask, scale, compute_dtype=_reference_dtype(q))
    out, lse = triangle_attention_op(q, k, v, bias, mask, float(scale), backend,
                                     json.dumps(config, sort_keys=True) if config else None)
    return out, lse


# ----------------------------------------------------------------------------- triangle multiplicative update

# The twelve weight tensors, in kernels.triangle.reference.TRIMUL_WEIGHTS order,
# are passed as one list; absent biases arrive as zeros and LayerNorm affine
# parameters as ones/zeros, so the op's schema has no optional weights.


@torch.library.custom_op("ceiling::triangle_multiplicative_update", mutates_args=())
def trimul_op(
    x: torch.Tensor, direction: str, mask: Optional[torch.Tensor], weights: list[torch.Tensor], eps: float,
    backend: str, config: Optional[str],
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    impl = backends.implementation("triangle_multiplicative_update", backend)
    out, saved = impl.trimul_fwd(x, direction, mask, tuple(weights), eps, config=_config(config))
    return out, list(saved)


@trimul_op.register_fake
def _(x, direction, mask, weights, eps, backend, config):
    impl = backends.implementation("triangle_multiplicative_update", backend)
    shapes = impl.trimul_saved_shapes(x, weights[2].shape[0] // 2, _config(config)) \
        if hasattr(impl, "trimul_saved_shapes") else []
    return torch.empty_like(x, memory_format=torch.contiguous_format), [x.new_empty(s) for s in shapes]


@torch.library.custom_op("ceiling::triangle_multiplicative_update_bwd", mutates_args=())
def trimul_bwd_op(
    x: torch.Tensor, direction: str, mask: Optional[torch.Tensor], weights: list[torch.Tensor], eps: float,
    saved: list[torch.Tensor], dout: torch.Tensor, backend: str, config: Optional[str],
) -> list[torch.Tensor]:
    impl = backends.implementation("triangle_multiplicative_update", backend)
    return list(impl.trimul_bwd(x, direction, mask, tuple(weights), eps, tuple(saved), dout, config=_config(config)))


@trimul_bwd_op.register_fake
def _(x, direction, mask, weights, eps, saved, dout, backend, config):
    return [torch.empty_like(x, memory_format=torch.contiguous_format)] + [torch.empty_like(w) for w in weights]


def _trimul_setup(ctx, inputs, output):
    x, direction, mask, weights, eps, backend, config = inputs
    out, saved = output
    ctx.save_for_backward(x, mask, *weights, *saved)
    ctx.n_weights, ctx.direction, ctx.eps, ctx.backend, ctx.config = len(weights), direction, eps, backend, config
    ctx.mark_non_differentiable(*saved)


def _trimul_backward(ctx, dout, dsaved):
    x, mask, *rest = ctx.saved_tensors
    weights, saved = rest[: ctx.n_weights], rest[ctx.n_weights:]
    grads = trimul_bwd_op(x, ctx.direction, mask, list(weights), ctx.eps, list(saved), dout.contiguous(),
                          ctx.backend, ctx.config)
    return grads[0], None, None, list(grads[1:]), None, None, None


trimul_op.register_autograd(_trimul_backward, setup_context=_trimul_setup)


def triangle_multiplicative_update(x, direction, mask, weights, eps, backend, config):
    if backend == "reference":
        return reference.trimul(x, direction, mask, *weights, eps=eps, compute_dtype=_reference_dtype(x))
    out, _ = trimul_op(x, direction, mask, list(weights), float(eps), backend,
                       json.dumps(config, sort_keys=True) if config else None)
    return out
