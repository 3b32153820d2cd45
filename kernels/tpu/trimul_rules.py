"""The rules a TPU triangle-multiplication config ``{"block_rows": ..., "block_rows_bwd": ...}`` must
follow (:data:`RULES`), and the VMEM each of its four per-pair kernels needs: ``block_rows`` pair rows
(i, j) per grid step of the two forward kernels, ``block_rows_bwd`` (default ``block_rows``) of the two
backward ones. :func:`check_config`, which the wrapper, the tests and the inspection call, returns the
per-kernel estimates or raises :class:`TrimulConfigError` naming the broken rule.
"""

from __future__ import annotations

from typing import Any

from ceiling.tpu.gemm_rules import ConfigError, check_keys
from ceiling.tpu.generations import LANES, SUBLANES, generation
from ceiling.tpu.vmem import VmemEstimate, itemsize, over_budget

RULES = {
    "keys": "the key block_rows and optionally block_rows_bwd, each a positive integer",
    "lane_tiling": f"block_rows and block_rows_bwd multiples of {LANES} (the lane dimension of the channel-first "
    "a, b, y and dy blocks)",
    "nesting": "the larger of block_rows and block_rows_bwd a multiple of the smaller (one padding serves all kernels)",
    "vmem_budget": "each kernel's double-buffered blocks and weights, f32 accumulators and f32 temporaries within 3/4 "
    "of the generation's physical VMEM",
}

REQUIRED = ("block_rows",)
OPTIONAL = ("block_rows_bwd",)


class TrimulConfigError(ConfigError):
    """A config breaks one of the triangle-multiplication kernels' :data:`RULES`."""

    rules = RULES


def blocks(config: dict) -> tuple[int, int]:
    """(block_rows, block_rows_bwd) of a checked config."""
    bm = int(config["block_rows"])
    return bm, int(config.get("block_rows_bwd", bm))


def _col(rows: int) -> int:
    """Bytes of an (rows, 1) float32 column in VMEM: one (8, 128) tile per 8 rows."""
    return -(-rows // SUBLANES) * SUBLANES * LANES * 4


def _row(cols: int) -> int:
    """Bytes of a (1, cols) float32 row in VMEM: padded to 8 sublanes."""
    return SUBLANES * -(-cols // LANES) * LANES * 4


def vmem_estimates(config: dict, dtype: Any, c_z: int, c: int) -> dict[str, VmemEstimate]:
    """VMEM per grid step of the four kernels for pair width ``c_z``, hidden width ``c``
    and kernel operands of ``dtype`` (bfloat16 or float32)."""
    bm, bmb = blocks(config)
    ib = itemsize(dtype)
    # Weights are blocks whose index never changes, double-buffered like the others.
    weights_in = 2 * (4 * c * c_z * ib + _col(4 * c) + c_z * c_z * ib + 3 * _row(c_z))
    weights_out = 2 * (c * c_z * ib + 2 * _col(c) + _row(c_z))
    fwd_in = VmemEstimate("fwd_in", {
        "x_mask_blocks": 2 * (bm * c_z * ib + _row(bm)),
        "weights": weights_in,
        "ab_gate_blocks": 2 * (2 * c * bm + bm * c_z) * ib,
        "f32_temporaries": (bm * c_z + 4 * c * bm + 2 * c * bm + bm * c_z) * 4,  # xn, [u; v], ab, gate
    })
    fwd_out = VmemEstimate("fwd_out", {
        "y_gate_blocks": 2 * (c * bm * 4 + bm * c_z * ib),
        "weights": weights_out,
        "out_blocks": 2 * bm * c_z * ib,
        "f32_temporaries": (2 * c * bm + 2 * bm * c_z) * 4,  # y_hat, yn, z, out
    })
    bwd_out = VmemEstimate("bwd_out", {
        "y_gate_dout_blocks": 2 * (c * bmb * 4 + 2 * bmb * c_z * ib),
        "weights": weights_out,
        "dy_dgate_blocks": 2 * (c * bmb + bmb * c_z) * ib,
        "grad_accumulators": 2 * (c * c_z * 4 + _row(c_z) + 2 * _col(c)),
        "f32_temporaries": (4 * c * bmb + 4 * bmb * c_z) * 4,  # y_hat, yn, dyn, dy; z, gate, dz, dgate
    })
    bwd_in = VmemEstimate("bwd_in", {
        "x_mask_da_db_dgate_blocks": 2 * (bmb * c_z * ib + _row(bmb) + 2 * c * bmb * ib + bmb * c_z * ib),
        "weights": weights_in,
        "dx_blocks": 2 * bmb * c_z * ib,
        "grad_accumulators": 2 * (4 * c * c_z * 4 + _col(4 * c) + c_z * c_z * 4 + 3 * _row(c_z)),
        "f32_temporaries": (3 * bmb * c_z + 4 * 4 * c * bmb) * 4,  # xn, dxn, dx; [u; v], s, [du; dv], dab
    })
    return {e.kernel: e for e in (fwd_in, fwd_out, bwd_out, bwd_in)}


def check_config(config: Any, dtype: Any, c_z: int, c: int, target: str) -> dict[str, VmemEstimate]:
    """Check ``config`` for kernel operands of ``dtype`` at widths (c_z, c) on ``target``;
    return the VMEM estimates or raise :class:`TrimulConfigError`."""
    generation(target)  # an unknown target is an InputError before anything else
    check_keys(config, REQUIRED, OPTIONAL, TrimulConfigError)
    bm, bmb = blocks(config)
    # A row block is the lane dim of the channel-first a, b, y and dy blocks and the second-minor
    # dim of the row-major x, gate, out and dout blocks: a multiple of 128 covers both.
    for key, value in (("block_rows", bm), ("block_rows_bwd", bmb)):
        if value % LANES:
            raise TrimulConfigError("lane_tiling", config, f"{key}={value} is not a multiple of {LANES}")
    if max(bm, bmb) % min(bm, bmb):
        raise TrimulConfigError("nesting", config, f"{max(bm, bmb)} is not a multiple of {min(bm, bmb)}")
    estimates = vmem_estimates(config, dtype, c_z, c)
    for est in estimates.values():
        why = over_budget(est, target)
        if why:
            raise TrimulConfigError("vmem_budget", config, why)
    return estimates
