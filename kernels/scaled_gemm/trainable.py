"""``fp8_gemm``'s implementation, on every backend: its forward quantizes the operands, runs the scaled
GEMM and returns the FP8 operands as extra outputs (FP8 activations saved, as DeepSeek-V3 caches
them); its backward is two GEMMs through the public ops, in bfloat16 on the dequantized operands or
as scaled GEMMs with an e5m2 gradient, the operands re-laid for each contraction (README, "FP8 GEMM").
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ceiling.scaled_gemm.backward import pre_activation_grad, scaled_gemm

JAX = "native"  # fp8_gemm's forward_jax/backward_jax run anywhere: jnp quantizers, GEMMs through the ops

CODES = ("a_codes", "a_scales", "bt_codes", "bt_scales")


def b_scale_of(bt_scale: Any, kind: str) -> Any:
    """The scale of ``b`` (K, N) from the scale of its (N, K) codes ``b.T``."""
    return bt_scale if kind == "tensor" else bt_scale.T


# --------------------------------------------------------------------------- fp8_gemm: forward


def resolve(problem, impl, user) -> Any:
    """``fp8_gemm``'s config is its forward GEMM's: resolved once, on the backend's ``scaled_gemm``
    implementation, for the quantized problem (the recipe's scale kinds), before anything launches."""
    from ceiling.op import get, resolve_config

    return resolve_config(problem.forward_gemm(), get("scaled_gemm").implementation(impl.backend), user)


def _quantize(problem, x, granularity: str, transpose: bool):
    """Codes and scales (logical shape) of ``x`` by the ``fp8_quantize`` implementation of the backend."""
    from ceiling.fp8.spec import QuantizeProblem, scales_view
    from ceiling.op import get

    rows, cols = x.shape
    q = QuantizeProblem(problem.framework, problem.device, gpu=problem.gpu, arch=problem.arch, rows=rows, cols=cols,
                        dtype=problem.dtype, granularity=granularity, fp8=problem.formats[0], transpose=transpose)
    codes, stored = get("fp8_quantize").implementation(problem.backend).load().forward(q, None, x)
    return codes, scales_view(q, stored)


def forward(problem, config, a, b, bias):
    """(out, A codes, A scales, B^T codes, B^T scales): b is quantized as the (N, K) weight ``b.T``."""
    from ceiling.op import get

    ka, kb = problem.kinds
    aq, a_s = _quantize(problem, a, ka, False)
    bq, b_s = _quantize(problem, b, kb, True)
    gemm = get("scaled_gemm").implementation(problem.backend).load()
    (out,) = gemm.forward(problem.forward_gemm(), config, aq, bq.mT, a_s, b_scale_of(b_s, kb), bias)
    return out, aq, a_s, bq, b_s


def forward_jax(problem, config, a, b, bias):
    """The same on JAX arrays: the jnp quantizer, the scaled GEMM through its op's JAX front end."""
    import jax.numpy as jnp

    from ceiling.fp8.reference import quantize_jax
    from ceiling.frontends import jax as front
    from ceiling.op import Call, Run, get

    ka, kb = problem.kinds
    e4 = jnp.dtype(problem.formats[0])
    aq, a_s = quantize_jax(a, ka, e4)
    bq, b_s = quantize_jax(b, kb, e4, transpose=True)
    op = get("scaled_gemm")
    call = Call(op.name, problem.forward_gemm(), Run(op.implementation(problem.backend), config))
    (out,) = front.apply(op, call, aq, bq.T, a_s, b_scale_of(b_s, kb), bias)
    return out, aq, a_s, bq, b_s


# --------------------------------------------------------------------------- fp8_gemm: backward


def _grads(p, saved: dict, grads: dict, needs: dict, fw) -> dict[str, Any]:
    """The backward's GEMMs on either framework (``fw``: its array operations, :func:`_torch` or
    :func:`_jax`), each through the forward ops."""
    from ceiling.gemm import gemm

    s = saved
    aq, a_s, bq, b_s = (s[n] for n in CODES)
    ka, kb = p.kinds
    dz = fw.pre_activation(grads["out"], p.activation, s["out"], lambda: scaled_gemm(
        aq, bq.T, a_s, b_scale_of(b_s, kb), s["bias"], out_dtype="float32", backend=p.backend))
    out: dict[str, Any] = {}
    if needs["bias"] and s["bias"] is not None:
        out["bias"] = fw.cast(fw.f32(dz).sum(0), s["bias"].dtype)
    if p.grad_precision == "bf16":
        lo = fw.cast(dz, "bfloat16")
        if needs["a"]:
            out["a"] = gemm(lo, fw.cast(fw.dequantize(bq, b_s, kb), "bfloat16"), out_dtype=p.dtype, backend=p.backend)
        if needs["b"]:
            out["b"] = gemm(fw.cast(fw.dequantize(aq, a_s, ka), "bfloat16").T, lo, out_dtype=p.dtype, backend=p.backend)
        return out
    e4, e5 = p.formats
    one = fw.one(dz)
    dz = fw.f32(dz)
    if needs["a"]:  # dA = dZ (M, N) @ B^T (N, K), contracting over N
        if kb == "row":  # B's per-channel scales lie along N: fold them into dZ (exact)
            g, w_s = dz * b_s.reshape(1, -1), one
        else:  # tensor and 128x128 scales cover B^T as they cover B
            g, w_s = dz, b_s
        gq, g_s = fw.quantize(g, ka, e5)  # the gradient is an activation: tensor, row or 1x128, like a
        out["a"] = scaled_gemm(gq, bq, g_s, w_s, out_dtype=p.dtype, backend=p.backend)
    if needs["b"]:  # dB = A^T (K, M) @ dZ (M, N), contracting over M
        if ka == "row":  # A's per-token scales lie along M: fold them into dZ (exact)
            g, x, x_s = dz * a_s.reshape(-1, 1), aq.T, one
        elif ka == "tensor":
            g, x, x_s = dz, aq.T, a_s
        else:  # 1x128 tiles along K become 1x128 tiles along M: re-quantize (DeepSeek-V3's 1x128 -> 128x1)
            g = dz
            x, x_s = fw.quantize(fw.dequantize(aq, a_s, ka), "1x128", e4, transpose=True)
        gq, g_s = fw.quantize(g, ka, e5, transpose=True)  # dZ^T (N, M), grouped along M
        out["b"] = scaled_gemm(x, gq.T, x_s, b_scale_of(g_s, ka), out_dtype=p.dtype, backend=p.backend)
    return out


def _torch(backend: str):
    """PyTorch's array operations for :func:`_grads`: the quantizer op on the backend; dZ in the
    gradient's dtype."""
    import torch

    from ceiling.fp8 import quantize
    from ceiling.fp8.reference import dequantize

    def dtype(d):
        return getattr(torch, d) if isinstance(d, str) else d

    return SimpleNamespace(
        f32=lambda x: x.float(), cast=lambda x, d: x.to(dtype(d)), dequantize=dequantize,
        one=lambda like: torch.ones((), dtype=torch.float32, device=like.device), pre_activation=pre_activation_grad,
        quantize=lambda x, kind, fmt, transpose=False: quantize(x, kind, dtype(fmt), transpose=transpose,
                                                                backend=backend))


def _jax():
    """JAX's array operations for :func:`_grads`: the jnp quantizer; dZ in float32."""
    import jax
    import jax.numpy as jnp

    from ceiling.fp8.reference import dequantize_jax, quantize_jax
    from ceiling.gemm.reference import epilogue_jax

    def pre_activation(grad, activation, out, recompute):
        dz = grad.astype(jnp.float32)
        if activation is None:
            return dz
        _, vjp = jax.vjp(lambda z: epilogue_jax(z, None, activation), recompute())
        return vjp(dz)[0]

    return SimpleNamespace(
        f32=lambda x: x.astype(jnp.float32), cast=lambda x, d: x.astype(d), dequantize=dequantize_jax,
        one=lambda like: jnp.ones((), jnp.float32), pre_activation=pre_activation,
        quantize=lambda x, kind, fmt, transpose=False: quantize_jax(x, kind, jnp.dtype(fmt), transpose=transpose))


def fp8_gemm_backward(call, saved: dict, grads: dict, needs: dict) -> dict:
    """``fp8_gemm``'s PyTorch backward (``Op.torch_backward``): GEMMs through the custom ops, so
    ``torch.compile`` traces it without a graph break."""
    return _grads(call.problem, saved, grads, needs, _torch(call.problem.backend))


def backward_jax(problem, config, saved: dict, grads: dict, needs: dict) -> tuple:
    """``fp8_gemm``'s JAX backward (its ``jax.custom_vjp``)."""
    got = _grads(problem, saved, grads, needs, _jax())
    return tuple(got.get(n) for n in ("a", "b", "bias"))
