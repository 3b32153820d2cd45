"""Attention, forward and backward: ``softmax(scale * q @ k^T + bias, mask) @ v``."""

from __future__ import annotations

from typing import Any

from ceiling.attention.spec import AttentionProblem, check, default_backend

__all__ = ["attention", "AttentionProblem", "implementation_for"]


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    scale: float | None = None,
    bias: Any = None,
    mask: Any = None,
    return_lse: bool = False,
    backend: str | None = None,
    config: dict | None = None,
) -> Any:
    """Scaled dot-product attention with float32 softmax and accumulation.

    Args:
        q: (batch, q_len, heads, head_dim), float16 or bfloat16 (float32/float64 on the
            reference backend); PyTorch or JAX.
        k, v: (batch, k_len, kv_heads, head_dim), same dtype and device; ``kv_heads``
            divides ``heads`` (GQA/MQA).
        causal: mask keys right of the diagonal aligned to the bottom right
            (key j seen by query i when j <= i + k_len - q_len).
        scale: multiplies q @ k^T; default 1 / sqrt(head_dim).
        bias: additive, broadcastable to (batch, heads, q_len, k_len); differentiable,
            its gradient summed over the broadcast dimensions.
        mask: boolean, broadcastable likewise; True = attend.
        return_lse: also return the log-sum-exp, (batch, heads, q_len) float32, natural log.
        backend: "reference", "nvidia" or "amd"; None picks the GPU vendor for GPU
            arrays and the reference otherwise. A Triton backend named for CPU tensors
            runs its kernels under the Triton interpreter.
        config: tiles for the chosen backend, overriding its tuned table, e.g.
            ``{"fwd": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2},
            "dkdv": {...}, "dq": {...}, "use_tma": False}`` on the Triton backends (a partial
            config overrides the keys it names, section by section). Its keys, domains and
            constraints are the backend's space (``kernels/spaces/attention.json``), checked
            before anything launches. On "nvidia", ``"implementation": "gluon"`` asks for the
            warp-specialized Gluon kernels (Hopper, Triton 3.6/3.9; problems they do not take
            run the Triton kernels, and :func:`implementation_for` says which runs and why), their tiles under ``"gluon"`` (checked against
            ``kernels/spaces/attention_gluon.json``), with ``"deterministic": True`` for a
            bitwise-reproducible backward; see ``ceiling.nvidia.gluon.attention``.

    Queries that see no key get output 0 and lse -inf, and zero gradients.
    Returns ``out`` like q, or ``(out, lse)``. Raises ``ceiling.errors.InputError`` naming
    the argument for bad input.
    """
    from ceiling.attention.op import ATTENTION

    ATTENTION.check_backend(backend)
    problem = check(q, k, v, causal=causal, scale=scale, bias=bias, mask=mask, backend=backend)
    chosen = backend or default_backend(problem)
    static = {"causal": problem.causal, "scale": problem.scale, "backend": backend}
    out, lse = ATTENTION.run(problem, chosen, config, (q, k, v, bias, mask), static)
    return (out, lse) if return_lse else out


def implementation_for(problem: AttentionProblem, config: dict | None = None, direction: str = "fwd",
                       backend: str = "nvidia") -> tuple[str, str]:
    """(name, why): the implementation ``backend`` runs ``problem`` with in ``direction`` ("fwd" or
    "bwd") under ``config``, as :meth:`ceiling.op.Op.select` chooses it ("gluon" or "triton" on
    "nvidia"), and why; ``config`` is checked as a call checks it."""
    from ceiling.attention.op import ATTENTION

    call = ATTENTION.select(problem, backend, config)
    run = {"fwd": call.forward, "bwd": call.backward}[direction]
    return run.implementation.name, run.why
