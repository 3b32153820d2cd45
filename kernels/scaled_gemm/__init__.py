"""Scaled (FP8) GEMM: ``activation((a * a_scale) @ (b * b_scale) + bias)`` on FP8 operands
(:func:`scaled_gemm`, modelled on ``torch._scaled_mm``), and :func:`fp8_gemm`, its trainable form on
high-precision operands, quantized inside by a recipe and differentiated straight through the
quantization (README, "FP8 GEMM"; the ops in :mod:`ceiling.scaled_gemm.op`).
"""

from __future__ import annotations

from typing import Any

from ceiling.errors import BackendUnavailable, InputError
from ceiling.scaled_gemm.spec import (FP8_DTYPES, GRAD_PRECISIONS, RECIPES, SCALE_KINDS, Fp8GemmProblem,
                                      ScaledGemmProblem, check, check_fp8_gemm)

__all__ = ["scaled_gemm", "fp8_gemm", "RECIPES", "GRAD_PRECISIONS", "SCALE_KINDS", "FP8_DTYPES", "ScaledGemmProblem",
           "Fp8GemmProblem"]


def _refuse_jax_gpu(framework: str, op: str, backend: str) -> None:
    """The FP8 kernels have no jax-triton launcher: on a JAX GPU only the reference runs."""
    if framework != "jax" or backend not in ("nvidia", "amd"):
        return
    import jax

    if jax.default_backend() != "cpu":
        raise BackendUnavailable(
            f"{op} on JAX arrays on a {jax.default_backend()} device with backend={backend!r}: the FP8 "
            "kernels have no jax-triton launcher (they read their operands through TMA descriptors or, on "
            "CDNA3, FNUZ conversions PyTorch does); use backend='reference', which XLA runs on the device")


def scaled_gemm(
    a: Any,
    b: Any,
    a_scale: Any,
    b_scale: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    out_dtype: Any = None,
    backend: str | None = None,
    config: dict | None = None,
) -> Any:
    """``activation(deq(a) @ deq(b) + bias)`` with float32 accumulation, FP8 operands.

    Args:
        a: (M, K) FP8 (e4m3fn/e5m2, or e4m3fnuz/e5m2fnuz for AMD CDNA3); PyTorch or JAX.
        b: (K, N) FP8 of a's family; ``w.mT`` of a weight ``w`` stored (N, K) is read in place.
        a_scale, b_scale: float32 dequantization scales (value = code * scale), per tensor,
            per row/column, 1x128 along K, or 128x128 blocks: see :mod:`ceiling.scaled_gemm.spec`.
        bias: optional (N,), added in float32 after the scales.
        activation: None, "relu", "gelu" (erf) or "silu".
        out_dtype: bfloat16 (default), float16 or float32.
        backend: "reference", "nvidia" (Hopper, TMA + FP8 wgmma) or "amd" (CDNA3 FP8 MFMA);
            None picks the device's vendor and the reference on the CPU. A Triton backend
            named for CPU tensors runs its kernel under the Triton interpreter. TPU and
            Trainium have no FP8 kernel: ``ceiling.backends.report()`` says why.
        config: a kernel config for the chosen backend, whole or partial (the keys it names
            override the table's or the heuristic's entry), checked against the backend's search
            space (``kernels/spaces/gemm_fp8.json``) before anything launches: an unknown key, a
            value outside its domain or a broken constraint (shared memory; block scales need
            ``PROMOTE_STEPS >= 1`` at an interval dividing 128) is an ``InputError`` naming it.

    On ``backend="amd"``, OCP operands are mapped to FNUZ exactly (same bits at half the
    value, scales doubled; :func:`ceiling.fp8.ocp_to_fnuz`), one extra pass over a and b:
    quantize to the FNUZ dtypes to skip it. FNUZ operands on ``backend="nvidia"`` are refused.

    Non-finite inputs: a NaN code in a or b makes NaN every output it contributes to (FP8
    has no other way to carry an overflow: e4m3 has no infinity, and the quantizers write
    NaN for one). NaN or infinite scales propagate the same way.
    """
    from ceiling.backends import default_for_device
    from ceiling.scaled_gemm.op import SCALED_GEMM

    SCALED_GEMM.check_backend(backend)
    problem = check(a, b, a_scale, b_scale, bias, activation, out_dtype)
    chosen = backend or default_for_device(problem.device)
    if chosen == "nvidia" and problem.fnuz:
        raise InputError("a", "OCP FP8 (float8_e4m3fn / float8_e5m2) on backend='nvidia' (Hopper has no FNUZ "
                         "arithmetic)", problem.a_dtype)
    _refuse_jax_gpu(problem.framework, "scaled_gemm", chosen)
    static = {"activation": activation, "out_dtype": problem.out_dtype}
    (out,) = SCALED_GEMM.run(problem, chosen, config, (a, b, a_scale, b_scale, bias), static)
    return out


def fp8_gemm(
    a: Any,
    b: Any,
    *,
    recipe: str = "block",
    bias: Any = None,
    activation: str | None = None,
    out_dtype: Any = None,
    grad_precision: str = "bf16",
    backend: str | None = None,
    config: dict | None = None,
) -> Any:
    """``activation(a @ b + bias)`` computed in FP8: quantize a and b by ``recipe``, then
    :func:`scaled_gemm`; differentiable with respect to a, b and bias.

    Args:
        a: (M, K) and b: (K, N), float16/bfloat16/float32, the same dtype; PyTorch or JAX.
            b is quantized as the (N, K) weight ``b.T`` (read in place for ``b = w.mT``).
        recipe: "tensor", "row" or "block" (:data:`RECIPES`). Operands become e4m3 (e4m3fnuz
            on AMD).
        grad_precision: "bf16" (the backward GEMMs in bfloat16 on the dequantized forward
            operands) or "fp8" (e5m2 output gradients, e4m3 operands re-laid for the
            backward: ``dA = q(dY) q(B)^T``, ``dB = q(A)^T q(dY)``).
        out_dtype: defaults to a's dtype. bias, activation, backend, config: as in
            :func:`scaled_gemm` (config applies to the forward GEMM).
    """
    from ceiling.scaled_gemm.op import FP8_GEMM

    FP8_GEMM.check_backend(backend)
    problem = check_fp8_gemm(a, b, bias, recipe=recipe, activation=activation, out_dtype=out_dtype,
                             grad_precision=grad_precision, backend=backend)
    _refuse_jax_gpu(problem.framework, "fp8_gemm", problem.backend)
    static = {"recipe": recipe, "activation": activation, "out_dtype": problem.out_dtype,
              "grad_precision": grad_precision, "backend": problem.backend}
    return FP8_GEMM.run(problem, problem.backend, config, (a, b, bias), static)[0]
