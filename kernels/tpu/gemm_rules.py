"""The rules a TPU GEMM config ``{"bm": ..., "bn": ..., "bk": ...}`` must follow (:data:`RULES`), in one
place: the kernel reads an (bm, bk) block of ``a`` and a (bk, bn) block of ``b`` per grid step and
writes an (bm, bn) block of the output. :func:`check_config`, which the kernel, the tests and the
inspection call, returns the VMEM estimate or raises :class:`ConfigError` naming the broken rule, the
config and the numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ceiling.errors import InputError
from ceiling.tpu.generations import LANES, SUBLANES, generation
from ceiling.tpu.vmem import VmemEstimate, dtype_name, itemsize, over_budget, sublane_multiple

RULES = {
    "keys": "exactly the keys bm, bn, bk, each a positive integer",
    "lane_tiling": f"bn and bk multiples of {LANES} (the lane dimension of a VMEM tile)",
    "sublane_tiling": "bm a multiple of 8 for 32-bit and of 16 for 16-bit operands or output (a bf16 vreg packs (16, 128))",
    "vmem_budget": "double-buffered blocks plus the f32 accumulator within 3/4 of the generation's physical VMEM",
}

# dtypes the kernel body computes on; float16 is widened to float32 by the wrapper.
KERNEL_DTYPES = ("bfloat16", "float32")


class ConfigError(InputError):
    """A config breaks one of the kernel's rules (:data:`RULES` here); ``rule`` says which."""

    rules: dict[str, str] = RULES

    def __init__(self, rule: str, config: Any, detail: str):
        self.rule = rule
        self.config = config
        super().__init__("config", f"{self.rules[rule]} [rule {rule}]", f"{config!r}: {detail}")


def vmem_estimate(bm: int, bn: int, bk: int, dtype: Any, out_dtype: Any, has_bias: bool) -> VmemEstimate:
    """VMEM per grid step: every blocked operand double-buffered by the Pallas pipeline,
    the f32 accumulator, and the f32 product of one step's dot before it is added."""
    ib, ob = itemsize(dtype), itemsize(out_dtype)
    return VmemEstimate("gemm", {
        "a_blocks": 2 * bm * bk * ib,
        "b_blocks": 2 * bk * bn * ib,
        "bias_blocks": 2 * SUBLANES * bn * 4 if has_bias else 0,  # (1, bn) f32 padded to 8 sublanes
        "out_blocks": 2 * bm * bn * ob,
        "accumulator": bm * bn * 4,
        "product": bm * bn * 4,
    })


def check_keys(config: Any, required: tuple[str, ...], optional: tuple[str, ...], error: type[ConfigError]) -> None:
    """The ``keys`` rule every TPU config shares: the required keys, perhaps some optional ones,
    nothing else, and each value a positive integer; raises ``error`` (a ConfigError) if not."""
    if not isinstance(config, dict) or not set(required) <= set(config) or not set(config) <= {*required, *optional}:
        if not isinstance(config, dict):
            raise error("keys", config, f"a {type(config).__name__}")
        missing = sorted(set(required) - set(config))
        unknown = sorted(set(config) - {*required, *optional})
        raise error("keys", config, f"keys {sorted(config)}" + (f"; missing {missing}" if missing else "")
                    + (f"; unknown {unknown}" if unknown else ""))
    for key, value in config.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise error("keys", config, f"{key}={value!r}")


def copied(config: Any) -> Any:
    """A copy of a dict config; anything else as it is, for the ``keys`` rule to name."""
    return dict(config) if isinstance(config, dict) else config


def check_config(config: Any, dtype: Any, out_dtype: Any, target: str, has_bias: bool = True) -> VmemEstimate:
    """Check ``config`` for a GEMM with kernel operands of ``dtype`` writing
    ``out_dtype`` on ``target``; return its VMEM estimate or raise ConfigError."""
    generation(target)  # an unknown target fails here, before the config is looked at
    check_keys(config, ("bm", "bn", "bk"), (), ConfigError)
    bm, bn, bk = (int(config[k]) for k in ("bm", "bn", "bk"))
    # Mosaic accepts a block whose last two dims are multiples of (8, 128) or equal the array's;
    # the wrapper pads every array to block multiples, so "equal" never applies.
    for key, value in (("bn", bn), ("bk", bk)):
        if value % LANES:
            raise ConfigError("lane_tiling", config, f"{key}={value} is not a multiple of {LANES}")
    # bm is the second-minor dim of the a and output blocks; bk, that of b's block, is a multiple
    # of 128 already.
    rows = max(sublane_multiple(dtype), sublane_multiple(out_dtype))
    if bm % rows:
        raise ConfigError(
            "sublane_tiling",
            config,
            f"bm={bm} is not a multiple of {rows} (operands {dtype_name(dtype)}, output {dtype_name(out_dtype)})",
        )
    estimate = vmem_estimate(bm, bn, bk, dtype, out_dtype, has_bias)
    if (why := over_budget(estimate, target)) is not None:
        raise ConfigError("vmem_budget", config, why)
    return estimate
