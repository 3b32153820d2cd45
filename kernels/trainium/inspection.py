"""Static facts of the shipped Trainium GEMM configs, from the emulator (no device needed).

``inspect_trainium("trn2")`` runs each config of ``configs/gemm.json`` for the target over the
representative shape in dry mode (control flow, every hardware-rule check, no arithmetic) and
reports, per config: whether the rules pass, the cost model's time and fraction of TensorE
peak, engine instruction counts, and SBUF/PSUM peaks. Not a measurement.
"""

from __future__ import annotations

from kernels.trainium import gemm
from kernels.trainium.emulator.errors import EmulatorError


def inspect_trainium(target: str, dtype: str = "bfloat16", config: dict | None = None, shape: tuple[int, int, int] | None = None) -> list[dict]:
    """One row per shipped config of ``target`` ("trn1" or "trn2"), or for ``config`` alone
    (a shipped config's name, or block-shape keys as in configs/gemm.json)."""
    m, n, k = shape or gemm.representative_shape()
    cfgs = gemm.configs(target)
    if config is not None:
        picked = [c for c in cfgs if all(c.get(key) == v for key, v in config.items())]
        cfgs = picked or [{"name": "custom", **config}]
    rows = []
    for cfg in cfgs:
        row = {"config": cfg["name"], "shape": [m, n, k]}
        try:
            report, resolved, ctx = gemm.estimate(m, n, k, dtype=dtype, target=target, config=cfg)
        except EmulatorError as exc:
            row.update(rules="fail", error=str(exc), op="gemm", target=target, dtype=dtype)
            rows.append(row)
            continue
        counts = dict(report.instructions)
        counts["total"] = sum(report.instructions.values())
        row.update(
            rules="ok",
            fraction_of_peak=report.fraction_of_peak,
            estimated_s=report.estimated_s,
            bottleneck=report.bottleneck,
            instructions=counts,
            sbuf_peak_bytes_per_partition=ctx.sbuf_peak,
            psum_peak_banks=ctx.psum_peak,
            sbuf_bytes_per_partition=ctx.target.sbuf_bytes_per_partition,
            resolved={key: resolved[key] for key in ("TILES_IN_BLOCK_M", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_K", "RESIDENT_M_BLOCKS")},
            dma_bytes=report.dma_bytes,
            busy_s=dict(report.busy_s),
            tensor_peak_flops=report.tensor_peak_flops,
            op="gemm",
            target=target,
            dtype=dtype,
            method="cost model over the emulator's dry-run instruction trace (not a measurement)",
        )
        rows.append(row)
    return rows
