"""Static facts of the shipped Trainium GEMM configs, from the emulator (no device needed).

``inspect_trainium("trn2")`` runs each config of ``configs/gemm.json`` for the target over the
representative shape in dry mode (control flow, every hardware-rule check, no arithmetic) and
reports, per config: whether the rules pass, engine instruction counts, SBUF/PSUM peaks, and
the cost model's time and fraction of TensorE peak.
"""

from __future__ import annotations

from kernels.trainium import gemm
from kernels.trainium.emulator.errors import EmulatorError


def inspect_trainium(target: str, dtype: str = "bfloat16", shape: tuple[int, int, int] | None = None) -> list[dict]:
    m, n, k = shape or gemm.representative_shape()
    rows = []
    for cfg in gemm.configs(target):
        row = {"op": "gemm", "target": target, "dtype": dtype, "config": cfg["name"], "shape": [m, n, k]}
        try:
            report, resolved, ctx = gemm.estimate(m, n, k, dtype=dtype, target=target, config=cfg)
        except EmulatorError as exc:
            row.update(rules="fail", error=str(exc))
            rows.append(row)
            continue
        row.update(
            rules="ok",
            resolved={key: resolved[key] for key in ("TILES_IN_BLOCK_M", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_K", "RESIDENT_M_BLOCKS")},
            instructions=dict(report.instructions),
            sbuf_peak_bytes_per_partition=ctx.sbuf_peak,
            sbuf_bytes_per_partition=ctx.target.sbuf_bytes_per_partition,
            psum_peak_banks=ctx.psum_peak,
            dma_bytes=report.dma_bytes,
            busy_s=dict(report.busy_s),
            estimated_s=report.estimated_s,
            bottleneck=report.bottleneck,
            fraction_of_peak=report.fraction_of_peak,
            tensor_peak_flops=report.tensor_peak_flops,
            method="cost model over the emulator's dry-run instruction trace (not a measurement)",
        )
        rows.append(row)
    return rows
