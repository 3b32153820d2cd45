"""Flash attention on Hopper (sm_90a), the nvidia backend's Triton implementation: its heuristic
and table features, the TMA decision, and the launches of the shared Triton kernels
(:mod:`ceiling.triton.attention`; tuned tiles in ``tables/sm_90a/attention.json``). Through TMA,
head dims that are not a power of two and strided inputs are first copied, zero-padded, into the
TMA layout; the interpreter and jax-triton run the pointer path."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ceiling.nvidia import blackwell
from ceiling.nvidia import tma_descriptors as td
from ceiling.triton import attention as flash

JAX = "gpu"  # forward_jax/backward_jax run on a JAX GPU (jax-triton); elsewhere the host callback


def target(problem, user=None) -> str:
    return blackwell.target(problem)


def table_target(problem) -> str | None:
    """The tuned tiles are for Hopper, and a Blackwell GPU reads its own target's (its heuristic
    carries the Hopper ones fitted to it); on the CPU (interpreted) and other GPUs the heuristic
    runs."""
    if problem.arch == "sm_90":
        return "sm_90a"
    return blackwell.ARCH_TARGETS.get(problem.arch or "")


def uses_tma(problem, user=None) -> bool:
    """TMA on an sm_90+ GPU from PyTorch, pointer loads elsewhere (the interpreter; jax-triton,
    which builds no descriptors), unless ``config`` says ``use_tma``; pointer loads too for a
    problem whose descriptors cannot hold it (a dim of 2^31 or more, Triton's i32 descriptor shapes)."""
    wanted = user.get("use_tma") if isinstance(user, Mapping) else None  # anything else: refused by the resolution
    if wanted is None:
        wanted = problem.framework == "torch" and (problem.arch or "").startswith("sm_") and int(problem.arch[3:]) >= 90
    return bool(wanted) and bool(td.attention_fits(problem.batch, problem.q_len, problem.k_len, problem.heads,
                                                   flash.head_dim_pad(problem.head_dim)))


def features(problem, user=None) -> dict:
    """``narrow``: more registers live per tile (a bias or mask tile next to the scores, or pointer
    loads), so narrower tiles; ``pointer_bias``: both at once (the JAX path)."""
    tma = uses_tma(problem, user)
    return {"head_dim_pad": flash.head_dim_pad(problem.head_dim), "narrow": problem.biased or not tma,
            "pointer_bias": problem.biased and not tma}


def heuristic(problem, user=None) -> dict:
    """:func:`hopper_heuristic`; on Blackwell, with the sm_90a table's entries, fitted to the
    Blackwell space."""
    return blackwell.config("attention", problem, hopper_heuristic(problem, user),
                            {**problem.features(), **features(problem, user)})


def hopper_heuristic(problem, user=None) -> dict:
    """Tiles for a device or head dim nobody tuned: 128-row query tiles while the accumulators fit
    in registers, narrower key tiles and fewer stages as the head dim grows; narrower still where
    a bias or mask tile is live or loads go through pointers."""
    pad = flash.head_dim_pad(problem.head_dim)
    big = pad > 128
    base = {
        "fwd": {"block_m": 64 if big else 128, "block_n": 64 if pad >= 128 else 128,
                "num_warps": 8 if pad >= 64 else 4, "num_stages": 2 if big else 3},
        "dkdv": {"block_m": 32 if big else 64, "block_n": 64 if big else 128, "num_warps": 8, "num_stages": 2},
        "dq": {"block_m": 64 if big else 128, "block_n": 32 if big else 64, "num_warps": 8, "num_stages": 2},
    }
    if features(problem, user)["narrow"]:
        base = flash.merge_config(base, {"fwd": {"block_n": 32}, "dkdv": {"block_m": 16}, "dq": {"block_n": 32}})
    return base


def _for_tma(t: torch.Tensor, pad: int) -> torch.Tensor:
    """``t`` as a 16-byte-aligned contiguous (batch, seq, heads, pad) tensor."""
    if t.shape[-1] != pad:
        t = torch.nn.functional.pad(t, (0, pad - t.shape[-1]))
    if not t.is_contiguous():
        t = t.contiguous()
    if t.data_ptr() % 16:
        t = t.clone()
    return t


def forward(problem, config, q, k, v, bias, mask):
    if not uses_tma(problem, config):
        return flash.forward(q, k, v, bias, mask, problem.causal, problem.scale, config, False)
    pad = flash.head_dim_pad(problem.head_dim)
    o, lse = flash.forward(_for_tma(q, pad), _for_tma(k, pad), _for_tma(v, pad), bias, mask, problem.causal,
                           problem.scale, config, True)
    return o[..., :problem.head_dim], lse


def backward(problem, config, saved, grads, needs):
    s = saved
    args = (problem.causal, problem.scale, needs["bias"], config)
    if not uses_tma(problem, config):
        return flash.backward(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"], s["mask"],
                              *args, False)
    d, pad = problem.head_dim, flash.head_dim_pad(problem.head_dim)
    padded = [_for_tma(t, pad) for t in (grads["out"], s["q"], s["k"], s["v"], s["out"])]
    dq, dk, dv, dbias = flash.backward(*padded, s["lse"], s["bias"], s["mask"], *args, True)
    return dq[..., :d], dk[..., :d], dv[..., :d], dbias


def forward_jax(problem, config, q, k, v, bias, mask):
    from ceiling.triton import attention_jax

    return attention_jax.attention_fwd(q, k, v, bias, mask, problem.causal, problem.scale, config, vendor="nvidia")


def backward_jax(problem, config, saved, grads, needs):
    from ceiling.triton import attention_jax

    s = saved
    return attention_jax.attention_bwd(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"],
                                       s["mask"], problem.causal, problem.scale, needs["bias"], config,
                                       vendor="nvidia")
