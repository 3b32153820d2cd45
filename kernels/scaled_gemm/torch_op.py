"""``ceiling::scaled_gemm`` and ``ceiling::fp8_gemm``: the PyTorch custom ops, with fake and
autograd registrations, so ``torch.compile(fullgraph=True)`` sees one opaque node per call.

``scaled_gemm`` differentiates only its bias (FP8 operands carry no gradient; the front end
refuses ones that require it). ``fp8_gemm`` quantizes inside its forward and returns the FP8
operands as extra outputs, which its autograd saves (FP8 activations, as DeepSeek-V3 caches
them) and marks non-differentiable. Its backward, for ``dZ`` the gradient at the
pre-activation:

* ``grad_precision="bf16"``: ``dA = dZ @ deq(B)^T`` and ``dB = deq(A)^T @ dZ`` through
  ``ceiling::gemm`` in bfloat16 on the dequantized saved operands;
* ``grad_precision="fp8"``: both through ``ceiling::scaled_gemm`` with ``dZ`` quantized to
  e5m2 by the recipe's activation granularity along the contraction of each GEMM (so
  ``dZ`` for ``dA`` and ``dZ^T`` for ``dB``), and the operands re-laid for the contraction:
  ``B^T`` is the saved FP8 weight read the other way (its tensor or 128x128 scales are
  the same blocks); per-row scales along the new contraction (B's per-channel scales in
  ``dA``, A's per-token scales in ``dB``) are folded into ``dZ`` before it is quantized,
  which is exact; A's 1x128 tiles are re-quantized from their dequantized values into
  1x128 tiles along M (DeepSeek-V3's 1x128 -> 128x1 conversion).
"""

from __future__ import annotations

from typing import Optional

import torch

from kernels import backends
from kernels.fp8.formats import FORMATS
from kernels.fp8.torch_ops import empty_quantized, quantize_op
from kernels.gemm.reference import activation_grad_torch
from kernels.gemm.torch_op import decode_config, encode_config, gemm_op
from kernels.scaled_gemm.reference import dequantize_a
from kernels.scaled_gemm.spec import RECIPES


def _run(a, b, a_scale, b_scale, bias, activation, out_dtype, backend, config):
    impl = backends.implementation("scaled_gemm", backend)
    cfg = decode_config(config) if config else None
    return impl.scaled_gemm(a, b, a_scale, b_scale, bias, activation, out_dtype, config=cfg)


@torch.library.custom_op("ceiling::scaled_gemm", mutates_args=())
def scaled_gemm_op(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: Optional[torch.Tensor],
    activation: Optional[str],
    out_dtype: torch.dtype,
    backend: str,
    config: Optional[str],
) -> torch.Tensor:
    return _run(a, b, a_scale, b_scale, bias, activation, out_dtype, backend, config)


@scaled_gemm_op.register_fake
def _(a, b, a_scale, b_scale, bias, activation, out_dtype, backend, config):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


def _pre_activation_grad(grad, activation, out, recompute):
    """dL/dz from dL/d(out): relu from the saved output, gelu and silu from a recomputed z."""
    if activation is None:
        return grad
    if activation == "relu":
        return grad * (out > 0)
    z = recompute()
    return (grad.float() * activation_grad_torch(z, activation)).to(grad.dtype)


def _scaled_setup(ctx, inputs, output):
    a, b, a_scale, b_scale, bias, activation, out_dtype, backend, config = inputs
    ctx.save_for_backward(a, b, a_scale, b_scale, bias, output if activation == "relu" else None)
    ctx.activation, ctx.backend = activation, backend


def _scaled_backward(ctx, grad):
    a, b, a_scale, b_scale, bias, out = ctx.saved_tensors
    dbias = None
    if bias is not None and ctx.needs_input_grad[4]:
        dz = _pre_activation_grad(grad, ctx.activation, out, lambda: scaled_gemm_op(
            a, b, a_scale, b_scale, bias, None, torch.float32, ctx.backend, None))
        dbias = dz.float().sum(dim=0).to(bias.dtype)
    return None, None, None, None, dbias, None, None, None, None


scaled_gemm_op.register_autograd(_scaled_backward, setup_context=_scaled_setup)


def scaled_gemm(a, b, a_scale, b_scale, bias, activation, out_dtype, backend, config):
    dtype = getattr(torch, out_dtype)
    return scaled_gemm_op(a, b, a_scale, b_scale, bias, activation, dtype, backend, encode_config(config))


# --------------------------------------------------------------------------- fp8_gemm

def formats(backend: str) -> tuple[torch.dtype, torch.dtype]:
    """(operand, gradient) FP8 dtypes: e4m3 / e5m2, FNUZ on AMD CDNA3."""
    if backend == "amd":
        return FORMATS["float8_e4m3fnuz"].dtype, FORMATS["float8_e5m2fnuz"].dtype
    return torch.float8_e4m3fn, torch.float8_e5m2


def _recipe(recipe: str) -> tuple[str, str]:
    return RECIPES[recipe]


def b_scale_of(bt_scale: torch.Tensor, kind: str) -> torch.Tensor:
    """The scale of ``b`` (K, N) from the scale of its (N, K) codes ``b.T``."""
    return bt_scale if kind == "tensor" else bt_scale.mT


@torch.library.custom_op("ceiling::fp8_gemm", mutates_args=())
def fp8_gemm_op(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: Optional[torch.Tensor],
    activation: Optional[str],
    out_dtype: torch.dtype,
    recipe: str,
    grad_precision: str,
    backend: str,
    config: Optional[str],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, A codes, A scales, B^T codes, B^T scales)."""
    ka, kb = _recipe(recipe)
    e4, _ = formats(backend)
    aq, a_s = quantize_op(a, ka, e4, False, False, backend)
    bq, b_s = quantize_op(b, kb, e4, True, False, backend)  # the (N, K) weight b.T
    out = _run(aq, bq.mT, a_s, b_scale_of(b_s, kb), bias, activation, out_dtype, backend,
               config)
    return out, aq, a_s, bq, b_s


@fp8_gemm_op.register_fake
def _(a, b, bias, activation, out_dtype, recipe, grad_precision, backend, config):
    ka, kb = _recipe(recipe)
    e4, _ = formats(backend)
    aq, a_s = empty_quantized(a, ka, e4, False)
    bq, b_s = empty_quantized(b, kb, e4, True)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype), aq, a_s, bq, b_s


def _fp8_setup(ctx, inputs, output):
    a, b, bias, activation, out_dtype, recipe, grad_precision, backend, config = inputs
    out, aq, a_s, bq, b_s = output
    ctx.mark_non_differentiable(aq, a_s, bq, b_s)
    ctx.save_for_backward(aq, a_s, bq, b_s, bias, out if activation == "relu" else None)
    ctx.activation, ctx.recipe, ctx.grad_precision, ctx.backend = activation, recipe, grad_precision, backend
    ctx.dtypes = (a.dtype, b.dtype)


def _fp8_backward(ctx, grad, *_unused):
    aq, a_s, bq, b_s, bias, out = ctx.saved_tensors
    ka, kb = _recipe(ctx.recipe)
    backend = ctx.backend
    dz = _pre_activation_grad(grad, ctx.activation, out, lambda: scaled_gemm_op(
        aq, bq.mT, a_s, b_scale_of(b_s, kb), bias, None, torch.float32, backend, None))
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if ctx.grad_precision == "bf16":
        da, db = _bf16_grads(dz, aq, a_s, bq, b_s, ka, kb, backend, ctx.dtypes, need_a, need_b)
    else:
        da, db = _fp8_grads(dz, aq, a_s, bq, b_s, ka, kb, backend, ctx.dtypes, need_a, need_b)
    dbias = dz.float().sum(dim=0).to(bias.dtype) if bias is not None and ctx.needs_input_grad[2] else None
    return da, db, dbias, None, None, None, None, None, None


def _bf16_grads(dz, aq, a_s, bq, b_s, ka, kb, backend, dtypes, need_a, need_b):
    """dA = dZ deq(B)^T and dB = deq(A)^T dZ, bfloat16 GEMMs with float32 accumulation."""
    lo = torch.bfloat16
    dz = dz.to(lo)
    da = db = None
    if need_a:
        bt = dequantize_a(bq, b_s, kb).to(lo)  # (N, K)
        da = gemm_op(dz, bt, None, None, dtypes[0], backend, None)
    if need_b:
        a = dequantize_a(aq, a_s, ka).to(lo)  # (M, K)
        db = gemm_op(a.mT, dz, None, None, dtypes[1], backend, None)
    return da, db


def _fp8_grads(dz, aq, a_s, bq, b_s, ka, kb, backend, dtypes, need_a, need_b):
    """dA and dB as scaled GEMMs: e5m2 output gradients against the e4m3 operands re-laid for
    each contraction (module docstring)."""
    e4, e5 = formats(backend)
    one = torch.ones((), dtype=torch.float32, device=dz.device)
    grad_kind = ka  # the gradient is an activation: tensor, row or 1x128, like a
    dz = dz.float()
    da = db = None
    if need_a:  # dA = dZ (M, N) @ B^T (N, K), contracting over N
        if kb == "row":  # B's per-channel scales lie along N: fold them into dZ
            g, w, w_s = dz * b_s.reshape(1, -1), bq, one
        else:  # tensor and 128x128 scales cover B^T as they cover B
            g, w, w_s = dz, bq, b_s
        gq, g_s = quantize_op(g, grad_kind, e5, False, False, backend)
        da = scaled_gemm_op(gq, w, g_s, w_s, None, None, dtypes[0], backend, None)
    if need_b:  # dB = A^T (K, M) @ dZ (M, N), contracting over M
        if ka == "row":  # A's per-token scales lie along M: fold them into dZ
            g, x, x_s = dz * a_s.reshape(-1, 1), aq.mT, one
        elif ka == "tensor":
            g, x, x_s = dz, aq.mT, a_s
        else:  # 1x128 tiles along K become 1x128 tiles along M: re-quantize
            g = dz
            x, x_s = quantize_op(dequantize_a(aq, a_s, ka), "1x128", e4, True, False, backend)
        gq, g_s = quantize_op(g, grad_kind, e5, True, False, backend)  # dZ^T (N, M), grouped along M
        db = scaled_gemm_op(x, gq.mT, x_s, b_scale_of(g_s, grad_kind), None, None, dtypes[1], backend, None)
    return da, db


fp8_gemm_op.register_autograd(_fp8_backward, setup_context=_fp8_setup)


def fp8_gemm(a, b, bias, activation, out_dtype, recipe, grad_precision, backend, config):
    dtype = getattr(torch, out_dtype)
    return fp8_gemm_op(a, b, bias, activation, dtype, recipe, grad_precision, backend, encode_config(config))[0]
