"""Static facts of the shipped Trainium GEMM and attention configs, from the emulator (no device
needed). ``inspect_trainium("trn2")`` runs each config of ``tables/<target>/gemm.json`` over the
representative shape in dry mode (control flow, every hardware-rule check, no arithmetic) and
reports, per config: whether the rules pass, the cost model's time and fraction of TensorE peak,
engine instruction counts, and SBUF/PSUM peaks. Not a measurement.
"""

from __future__ import annotations

from ceiling.trainium import gemm
from ceiling.trainium.emulator.errors import EmulatorError


def inspect_trainium(target: str, dtype: str = "bfloat16", config: dict | None = None, shape: tuple[int, int, int] | None = None) -> list[dict]:
    """One row per shipped config of ``target`` ("trn1" or "trn2"), or for ``config`` alone
    (a shipped config's name, or block-shape keys as in tables/<target>/gemm.json)."""
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
        row.update(
            _estimate_fields(report, ctx),
            resolved={key: resolved[key] for key in ("TILES_IN_BLOCK_M", "TILES_IN_BLOCK_N", "TILES_IN_BLOCK_K", "resident_m_blocks")},
            tensor_peak_flops=report.tensor_peak_flops,
            op="gemm",
            target=target,
            dtype=dtype,
        )
        rows.append(row)
    return rows


def inspect_trainium_attention(target: str, dtype: str = "bfloat16", config: dict | None = None, shape: dict | None = None) -> list[dict]:
    """Flash attention forward and backward, causal and not, at the representative shape of
    the attention table (``tables/<target>/attention.json``: B=1, H=8, S=2048, D=128) on ``target``, with the
    shipped config for that head dim or ``config``: one row per (direction, causal) with rule
    status, engine instruction counts, the cost model's time and fraction of TensorE peak."""
    from ceiling.trainium import attention

    s = {**attention.representative_shape(), **(shape or {})}
    rows = []
    for direction in ("fwd", "bwd"):
        for causal in (False, True):
            row = {"op": "attention", "target": target, "dtype": dtype, "direction": direction, "causal": causal,
                   "shape": {key: s[key] for key in ("batch", "heads", "kv_heads", "seq", "head_dim")}}
            try:
                report, resolved, ctx = attention.estimate(
                    s["batch"], s["heads"], s["kv_heads"], s["seq"], s["head_dim"], causal=causal, direction=direction,
                    dtype=dtype, target=target, config=config,
                )  # fmt: skip
            except EmulatorError as exc:
                row.update(rules="fail", error=str(exc), config=(config or {}).get("name", "custom"))
                rows.append(row)
                continue
            row.update(config=resolved["name"], resolved=resolved, **_estimate_fields(report, ctx),
                       tensor_peak_flops=report.tensor_peak_flops)
            rows.append(row)
    return rows


def _estimate_fields(report, ctx) -> dict:
    """A kernel's row fields from its cost-model report and the emulator context it ran in."""
    counts = dict(report.instructions)
    counts["total"] = sum(report.instructions.values())
    return dict(
        rules="ok",
        fraction_of_peak=report.fraction_of_peak,
        estimated_s=report.estimated_s,
        bound_s=report.bound_s,
        bottleneck=report.bottleneck,
        instructions=counts,
        busy_s=dict(report.busy_s),
        dma_bytes=report.dma_bytes,
        flops=report.flops,
        sbuf_peak_bytes_per_partition=ctx.sbuf_peak,
        psum_peak_banks=ctx.psum_peak,
        sbuf_bytes_per_partition=ctx.target.sbuf_bytes_per_partition,
        method="cost model over the emulator's dry-run instruction trace (not a measurement)",
    )


def inspect_trainium_trimul(target: str, dtype: str = "bfloat16", config: dict | None = None, shape: dict | None = None) -> list[dict]:
    """The four per-pair kernels of the triangle multiplicative update (forward ``in``: input
    LayerNorm, gated projections, mask, output gate; ``out``: output LayerNorm, projection, gate;
    backward ``out_bwd``: dy, the gate-logit gradient and the output side's weight gradients;
    ``in_bwd``: dx and the input side's weight gradients) at AlphaFold 3's shape (N = 384,
    c_z = c = 128, one batch element) on ``target``: one row per kernel with rule status, engine
    instruction counts, SBUF/PSUM peaks and the cost model's time."""
    from ceiling.trainium import triangle_multiplication as trimul

    s = {"batch": 1, "n": 384, "c_z": 128, "c": 128, **(shape or {})}
    rows = []
    for kernel in trimul.KERNELS:
        row = {"op": "triangle_multiplicative_update", "config": f"trimul_{kernel}", "target": target, "dtype": dtype,
               "shape": dict(s)}
        try:
            report, ctx = trimul.estimate(s["batch"], s["n"], s["c_z"], s["c"], dtype=dtype, target=target, kernel=kernel)
        except EmulatorError as exc:
            row.update(rules="fail", error=str(exc))
            rows.append(row)
            continue
        row.update(_estimate_fields(report, ctx))
        rows.append(row)
    return rows
