"""Scaled (FP8) GEMM: ``activation((a * a_scale) @ (b * b_scale) + bias)`` on FP8 operands, and
``fp8_gemm``, its trainable form on high-precision operands.

Two entry points, one per job:

* :func:`scaled_gemm` takes operands that are already FP8 with their scales: the contract of
  ``kernels.gemm`` (bias, activation epilogue, ``backend=``, ``config=``) plus two scale
  arguments, modelled on ``torch._scaled_mm`` (same scale shapes, and DeepGEMM's blockwise
  ones). It is a sibling op rather than scale arguments on ``kernels.gemm`` because its
  inputs, layouts, tuned tables, kernels and backward are all different: an FP8 operand
  carries no gradient (autograd would cast one to FP8 without a scale), so the op refuses
  operands that require grad.
* :func:`fp8_gemm` takes bfloat16/float16/float32 operands, quantizes them by a ``recipe``
  (:data:`RECIPES`) with the Triton quantizers of :mod:`kernels.fp8`, runs
  :func:`scaled_gemm`, and differentiates with respect to its high-precision inputs
  (quantization is treated as the identity, the straight-through rule). ``grad_precision``
  picks the backward's two GEMMs: ``"bf16"`` runs ``kernels.gemm`` on the dequantized
  operands saved by the forward (the exact gradient of the function computed), ``"fp8"``
  runs :func:`scaled_gemm` with the output gradient quantized to e5m2 and the operands in
  the transposed layouts the backward needs (see :mod:`kernels.scaled_gemm.torch_op`).
"""

from __future__ import annotations

from typing import Any

from kernels.errors import InputError
from kernels.scaled_gemm.spec import FP8_DTYPES, RECIPES, SCALE_KINDS, ScaledGemmProblem, check

__all__ = ["scaled_gemm", "fp8_gemm", "RECIPES", "GRAD_PRECISIONS", "SCALE_KINDS", "FP8_DTYPES", "ScaledGemmProblem"]

GRAD_PRECISIONS = ("bf16", "fp8")
BACKENDS = ("reference", "nvidia", "amd")


def _backend(backend: str | None, device: str) -> str:
    from kernels.backends import BACKENDS as ALL, default_for_device

    if backend is not None and backend not in ALL:
        raise InputError("backend", f"one of {ALL} or None", repr(backend))
    return backend or default_for_device(device)


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
            per row/column, 1x128 along K, or 128x128 blocks: see :mod:`kernels.scaled_gemm.spec`.
        bias: optional (N,), added in float32 after the scales.
        activation: None, "relu", "gelu" (erf) or "silu".
        out_dtype: bfloat16 (default), float16 or float32.
        backend: "reference", "nvidia" (Hopper, TMA + FP8 wgmma) or "amd" (CDNA3 FP8 MFMA);
            None picks the device's vendor and the reference on the CPU. A Triton backend
            named for CPU tensors runs its kernel under the Triton interpreter. TPU and
            Trainium have no FP8 kernel: ``kernels.backends.report()`` says why.
        config: a kernel config for the chosen backend, whole or partial (the keys it names
            override the table's or the heuristic's entry), checked against the backend's search
            space (``kernels/spaces/gemm_fp8.json``) before anything launches: an unknown key, a
            value outside its domain or a broken constraint (shared memory; block scales need
            ``PROMOTE_STEPS >= 1`` at an interval dividing 128) is an ``InputError`` naming it.

    On ``backend="amd"``, OCP operands are mapped to FNUZ exactly (same bits at half the
    value, scales doubled; :func:`kernels.fp8.ocp_to_fnuz`), one extra pass over a and b:
    quantize to the FNUZ dtypes to skip it. FNUZ operands on ``backend="nvidia"`` are refused.

    Non-finite inputs: a NaN code in a or b makes NaN every output it contributes to (FP8
    has no other way to carry an overflow: e4m3 has no infinity, and the quantizers write
    NaN for one). NaN or infinite scales propagate the same way.
    """
    problem = check(a, b, a_scale, b_scale, bias, activation, out_dtype)
    chosen = _backend(backend, problem.device)
    if chosen not in BACKENDS:
        from kernels.backends import op_availability

        from kernels.errors import BackendUnavailable

        raise BackendUnavailable(f"scaled_gemm on backend={chosen!r}: {op_availability('scaled_gemm', chosen).reason}")
    if chosen == "nvidia" and problem.fnuz:
        raise InputError("a", "OCP FP8 (float8_e4m3fn / float8_e5m2) on backend='nvidia' (Hopper has no FNUZ "
                         "arithmetic)", problem.a_dtype)
    if problem.framework == "torch":
        from kernels.scaled_gemm import torch_op

        return torch_op.scaled_gemm(a, b, a_scale, b_scale, bias, activation, problem.out_dtype, chosen, config)
    from kernels.scaled_gemm import jax_op

    return jax_op.scaled_gemm(a, b, a_scale, b_scale, bias, activation, problem.out_dtype, chosen, config)


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
    from kernels.gemm.spec import check as check_gemm

    problem = check_gemm(a, b, bias, activation, out_dtype)
    if problem.batch is not None:
        raise InputError("a", "a 2-D (M, K) array", f"batch {problem.batch}")
    if recipe not in RECIPES:
        raise InputError("recipe", f"one of {tuple(RECIPES)}", repr(recipe))
    if grad_precision not in GRAD_PRECISIONS:
        raise InputError("grad_precision", f"one of {GRAD_PRECISIONS}", repr(grad_precision))
    chosen = _backend(backend, problem.device)
    if chosen not in BACKENDS:
        from kernels.backends import op_availability

        from kernels.errors import BackendUnavailable

        raise BackendUnavailable(f"fp8_gemm on backend={chosen!r}: {op_availability('scaled_gemm', chosen).reason}")
    if config is not None and chosen != "reference":
        _check_forward_config(chosen, problem, recipe, config, a)
    if problem.framework == "torch":
        from kernels.scaled_gemm import torch_op

        return torch_op.fp8_gemm(a, b, bias, activation, problem.out_dtype, recipe, grad_precision, chosen, config)
    from kernels.scaled_gemm import jax_op

    return jax_op.fp8_gemm(a, b, bias, activation, problem.out_dtype, recipe, grad_precision, chosen, config)


def _check_forward_config(backend: str, problem, recipe: str, config: Any, a: Any) -> None:
    """``fp8_gemm``'s config is its forward GEMM's: resolved against the backend's space (over the
    table's entry for this problem and the recipe's scale kinds) before the quantizers launch."""
    from kernels.backends import implementation

    a_kind, b_kind = RECIPES[recipe]
    impl = implementation("scaled_gemm", backend)
    if backend == "nvidia":
        import torch

        name = torch.cuda.get_device_name(a.device) if getattr(a, "is_cuda", False) else None
        impl.resolve_config(problem.m, problem.n, problem.k, "float8_e4m3fn", a_kind, b_kind, name, config,
                            problem.out_dtype)
    else:
        impl.select_config(problem.m, problem.n, problem.k, a_kind, b_kind, config=config, out_dtype=problem.out_dtype)
