"""Flash attention on CDNA3 (gfx942: MI300X, MI325X), the amd backend's Triton implementation: the
shared kernels (:mod:`ceiling.triton.attention`) launched as aiter's Triton MHA launches them
(pointer loads, V loaded before the softmax math, one stage, one wave per EU so the accumulators
may use the AGPRs, the 16x16 MFMA), its heuristic and table features (tuned tiles in
``tables/gfx942/attention.json``); on the CPU the interpreter runs them."""

from __future__ import annotations

from ceiling.amd import cdna4
from ceiling.triton import attention as flash

JAX = "gpu"  # forward_jax/backward_jax run on a JAX GPU (jax-triton); elsewhere the host callback


def target(problem, user=None) -> str:
    return cdna4.target(problem)


def table_target(problem) -> str | None:
    """The tuned tiles are for CDNA3, and a CDNA4 GPU reads its own target's (its heuristic carries
    the CDNA3 ones fitted to it); on the CPU (interpreted) the heuristic runs."""
    if problem.arch == "gfx942":
        return "gfx942"
    return cdna4.ARCH_TARGETS.get(problem.arch or "")


def features(problem, user=None) -> dict:
    return {"head_dim_pad": flash.head_dim_pad(problem.head_dim), "narrow": problem.biased}


def heuristic(problem, user=None) -> dict:
    """:func:`cdna3_heuristic`; on CDNA4, with the gfx942 table's entries, fitted to gfx950."""
    return cdna4.config("attention", problem, cdna3_heuristic(problem, user),
                        {**problem.features(), **features(problem, user)})


def cdna3_heuristic(problem, user=None) -> dict:
    """aiter-style defaults: 128 x 64 forward tiles for head dims up to 128, 64 x 64 above;
    one stage; V pre-loaded; one wave per EU (the accumulators need the AGPRs); 16x16 MFMA."""
    big = flash.head_dim_pad(problem.head_dim) > 128
    amd = {"waves_per_eu": 1, "matrix_instr_nonkdim": 16, "num_stages": 1}
    return {
        "fwd": {"block_m": 64 if big else 128, "block_n": 64, "num_warps": 4, **amd},
        "dkdv": {"block_m": 32 if big else 64, "block_n": 64, "num_warps": 4, **amd},
        "dq": {"block_m": 64 if big else 128, "block_n": 32, "num_warps": 4 if big else 8, **amd},
        "pre_load_v": True,
        "use_tma": False,
    }


def forward(problem, config, q, k, v, bias, mask):
    return flash.forward(q, k, v, bias, mask, problem.causal, problem.scale, config, use_tma=False, vendor="amd")


def backward(problem, config, saved, grads, needs):
    s = saved
    return flash.backward(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"], s["mask"],
                          problem.causal, problem.scale, needs["bias"], config, use_tma=False, vendor="amd")



def forward_jax(problem, config, q, k, v, bias, mask):
    from ceiling.triton import attention_jax

    return attention_jax.attention_fwd(q, k, v, bias, mask, problem.causal, problem.scale, config, vendor="amd")


def backward_jax(problem, config, saved, grads, needs):
    from ceiling.triton import attention_jax

    s = saved
    return attention_jax.attention_bwd(grads["out"], s["q"], s["k"], s["v"], s["out"], s["lse"], s["bias"],
                                       s["mask"], problem.causal, problem.scale, needs["bias"], config, vendor="amd")
