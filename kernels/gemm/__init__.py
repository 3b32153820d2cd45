"""GEMM: ``activation(a @ b + bias)`` on every backend."""

from __future__ import annotations

from typing import Any

from ceiling.errors import InputError
from ceiling.gemm.spec import ACTIVATIONS, DTYPES, GemmProblem, check, default_backend

__all__ = ["gemm", "ACTIVATIONS", "DTYPES", "GemmProblem"]


def gemm(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    out_dtype: Any = None,
    backend: str | None = None,
    config: dict | None = None,
) -> Any:
    """``activation(a @ b + bias)`` with float32 accumulation.

    Args:
        a: (M, K) or (batch, M, K), float16, bfloat16 or float32; PyTorch or JAX.
            Row-major or a transposed view (``x.mT``).
        b: (K, N), or (batch, K, N) when ``a`` is batched; same dtype as ``a``.
        bias: optional (N,) vector, added in float32 before the activation.
        activation: None, "relu", "gelu" (exact erf form) or "silu".
        out_dtype: dtype of the result; defaults to ``a``'s.
        backend: "reference", "nvidia", "amd", "tpu" or "trainium". None picks
            the device's vendor, and the reference for CPU arrays. A Triton
            backend named for CPU tensors runs its kernel under the Triton
            interpreter; see ``ceiling.backends``.
        config: a kernel config for the chosen backend (block sizes, stages...),
            overriding the tuned table and the heuristic; its keys, their domains and the
            constraints between them are the backend's space (``kernels/spaces/gemm.json``),
            checked before anything launches. On the Triton and Trainium backends a partial
            config overrides the keys it names; TPU configs give bm, bn and bk together.
            ``"autotune"`` (nvidia, PyTorch tensors on the GPU): the fastest of the candidate
            configs for this problem on this GPU, timed the first time and remembered on disk
            (``ceiling.autotune``).

    float32 inputs run on the tensor cores as TF32 on the GPU backends
    (10-bit mantissa products, float32 accumulation); use the reference backend
    for full float32 products.

    Returns the same kind of array as ``a``, of shape (M, N) or (batch, M, N).
    Raises ``ceiling.errors.InputError`` naming the argument for bad input.
    """
    from ceiling.gemm.op import GEMM

    problem = check(a, b, bias, activation, out_dtype)
    GEMM.check_backend(backend)
    chosen = backend or default_backend(problem)
    autotune = config == "autotune" and chosen == "nvidia" and problem.framework == "torch"
    if config is not None and not isinstance(config, dict) and not autotune:
        raise InputError("config", 'a dict of the backend\'s config keys, None, or "autotune" (nvidia, PyTorch)',
                         repr(config))
    static = {"activation": activation, "out_dtype": problem.out_dtype, "backend": backend}
    (out,) = GEMM.run(problem, chosen, config, (a, b, bias), static)
    return out
