"""The rules a TPU attention config ``{"block_q": ..., "block_k": ...}`` (with optional ``block_q_bwd``
and ``block_k_bwd`` for the two backward kernels, defaulting to the forward blocks) must follow
(:data:`RULES`), and the VMEM each kernel needs. :func:`check_config`, which the wrapper, the tests
and the inspection call, returns the per-kernel estimates or raises :class:`AttentionConfigError`
naming the broken rule.
"""

from __future__ import annotations

from typing import Any

from ceiling.tpu.gemm_rules import ConfigError, check_keys
from ceiling.tpu.generations import LANES, generation
from ceiling.tpu.vmem import VmemEstimate, dtype_name, itemsize, over_budget, sublane_multiple

RULES = {
    "keys": "the keys block_q, block_k and optionally block_q_bwd, block_k_bwd, each a positive integer",
    "lane_tiling": f"block_k and block_k_bwd multiples of {LANES} (the lane dimension of the score, bias and mask tiles)",
    "sublane_tiling": "block_q and block_q_bwd multiples of 8 for 32-bit and of 16 for 16-bit operands or bias "
    "(a bf16 vreg packs (16, 128))",
    "vmem_budget": "each kernel's double-buffered blocks, f32 scratch and f32 score temporaries within 3/4 of the "
    "generation's physical VMEM",
}

REQUIRED = ("block_q", "block_k")
OPTIONAL = ("block_q_bwd", "block_k_bwd")


class AttentionConfigError(ConfigError):
    """A config breaks one of the attention kernels' :data:`RULES`; ``rule`` says which."""

    rules = RULES


def blocks(config: dict) -> tuple[int, int, int, int]:
    """(block_q, block_k, block_q_bwd, block_k_bwd) of a checked config."""
    bq, bk = int(config["block_q"]), int(config["block_k"])
    return bq, bk, int(config.get("block_q_bwd", bq)), int(config.get("block_k_bwd", bk))


def vmem_estimates(
    config: dict, dtype: Any, head_dim: int, bias_dtype: Any = None, has_mask: bool = False
) -> dict[str, VmemEstimate]:
    """VMEM per grid step of the forward, dq and dk/dv kernels (and the dbias
    kernel, which holds what the dq kernel does) for a padded ``head_dim``.
    The bias and mask tiles are counted at full (block_q, block_k) size, the
    most a broadcast bias can take."""
    bq, bk, bqb, bkb = blocks(config)
    ib, d = itemsize(dtype), head_dim
    lse = 128 * 4  # one f32 row of 128 lanes per query

    def extras(q, k):
        out = {}
        if bias_dtype is not None:
            out["bias_blocks"] = 2 * q * k * itemsize(bias_dtype)
        if has_mask:
            out["mask_blocks"] = 2 * q * k * 2  # bfloat16 0 / -inf
        return out

    fwd = VmemEstimate(
        "fwd",
        {
            "q_blocks": 2 * bq * d * ib,
            "kv_blocks": 2 * 2 * bk * d * ib,
            **extras(bq, bk),
            "out_blocks": 2 * bq * d * ib,
            "lse_blocks": 2 * bq * lse,
            "m_l_scratch": 2 * bq * lse,
            "acc_scratch": bq * d * 4,
            "score_temporaries": 2 * bq * bk * 4,  # s and p
        },
    )
    dq = VmemEstimate(
        "dq",
        {
            "q_do_o_blocks": 3 * 2 * bqb * d * ib,
            "kv_blocks": 2 * 2 * bkb * d * ib,
            "lse_blocks": 2 * bqb * lse,
            **extras(bqb, bkb),
            "dq_blocks": 2 * bqb * d * ib,
            "dbias_blocks": 2 * bqb * bkb * 4 if bias_dtype is not None else 0,
            "dq_delta_scratch": bqb * d * 4 + bqb * lse,
            "score_temporaries": 4 * bqb * bkb * 4,  # s, p, dp, ds
        },
    )
    dkv = VmemEstimate(
        "dkv",
        {
            "q_do_o_blocks": 3 * 2 * bqb * d * ib,
            "kv_blocks": 2 * 2 * bkb * d * ib,
            "lse_blocks": 2 * bqb * lse,
            **extras(bqb, bkb),
            "dk_dv_blocks": 2 * 2 * bkb * d * ib,
            "dk_dv_scratch": 2 * bkb * d * 4,
            "score_temporaries": 4 * bqb * bkb * 4,
        },
    )
    return {"fwd": fwd, "dq": dq, "dkv": dkv}


def check_config(
    config: Any, dtype: Any, head_dim: int, target: str, bias_dtype: Any = None, has_mask: bool = False
) -> dict[str, VmemEstimate]:
    """Check ``config`` for kernel operands of ``dtype`` and a padded
    ``head_dim`` on ``target``; return the VMEM estimates or raise."""
    generation(target)  # an unknown target fails here, before the config is looked at
    check_keys(config, REQUIRED, OPTIONAL, AttentionConfigError)
    bq, bk, bqb, bkb = blocks(config)
    for key, value in (("block_k", bk), ("block_k_bwd", bkb)):
        if value % LANES:
            raise AttentionConfigError("lane_tiling", config, f"{key}={value} is not a multiple of {LANES}")
    rows = sublane_multiple(dtype)
    if bias_dtype is not None:
        rows = max(rows, sublane_multiple(bias_dtype))
    for key, value in (("block_q", bq), ("block_q_bwd", bqb)):
        if value % rows:
            raise AttentionConfigError(
                "sublane_tiling",
                config,
                f"{key}={value} is not a multiple of {rows} (operands {dtype_name(dtype)}"
                + (f", bias {dtype_name(bias_dtype)})" if bias_dtype is not None else ")"),
            )
    estimates = vmem_estimates(config, dtype, head_dim, bias_dtype, has_mask)
    for est in estimates.values():
        if (why := over_budget(est, target)) is not None:
            raise AttentionConfigError("vmem_budget", config, why)
    return estimates
