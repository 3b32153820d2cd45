"""``ceiling tune gemm|attention|triangle-attention|trimul``: the tuning sweeps that produce a device's
entries in the config tables."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ceiling.roofline import arguments, tables
from ceiling.roofline.tables import key_table


def tune(
    op: str = typer.Argument("gemm", help="The op to tune: gemm, gemm-fp8, attention, triangle-attention, trimul."),
    shapes: str = typer.Option(None, help="Shape suite: ceiling.gemm.shapes for gemm (default gemm-llm), "
                               "ceiling.scaled_gemm.shapes for gemm-fp8 (default fp8-device)."),
    scalings: str = typer.Option("tensor,row,block", help="gemm-fp8: the scalings to tune, comma-separated."),
    dtype: str = typer.Option("bfloat16", help="Input dtype."),
    layout: str = typer.Option("NT", help="NT: B is an nn.Linear weight viewed transposed; NN: row-major B."),
    rep_ms: int = typer.Option(60, help="Milliseconds of timed CUDA-graph replays per candidate."),
    budget_s: float = typer.Option(240.0, help="Stop starting new shapes (candidates, for attention) after this many seconds."),
    out: Path = typer.Option(Path("ceiling-tune"), "--out", "-o", help="Folder for rows, records and the table."),
    apply: bool = typer.Option(False, help="Merge the winners into the op's config table of this device (kernels/nvidia/tables/)."),
    workers: int = typer.Option(0, help="Attention ops: processes that compile and check candidates (0: CPUs - 2, at most 14)."),
    n: int = typer.Option(768, help="trimul: the pair dimension N it is tuned at."),
    as_json: bool = typer.Option(False, "--json", help="Print the winners as JSON instead of a table."),
) -> None:
    """Time every candidate config of a Hopper kernel on this GPU next to its baseline: the GEMM
    on each shape of a suite against torch.matmul (cuBLAS); the FP8 GEMM (gemm-fp8) per shape and
    scaling against torch._scaled_mm (cuBLASLt) or, for block scales, dequantize-then-cuBLAS; attention (head dims 64 and 128,
    S = 4096, then causal) and triangle attention (N = 384, then 768; 4 heads of 32) kernel by
    kernel, forward and each backward kernel, against SDPA and the eager PyTorch op; the triangle
    multiplicative update (trimul) stage by stage at N = 768, c_z = 128. Write every
    timing as a record, the winners as table entries, and print speedups. Needs an NVIDIA GPU."""
    import torch

    from ceiling import tables as op_tables
    from ceiling.backends import gpu_vendor
    from ceiling.gemm.shapes import suite
    from ceiling.tuning import gemm as gemm_sweep
    from ceiling.microbench.records import Record, append, host_provenance

    _check(op, shapes, scalings, dtype, layout, rep_ms, budget_s, n)
    if gpu_vendor() != "nvidia":
        typer.echo("ceiling tune needs an NVIDIA GPU: none is visible to PyTorch here.", err=True)
        raise typer.Exit(2)
    out.mkdir(parents=True, exist_ok=True)
    if op == "trimul":
        from ceiling.roofline.commands.tune_trimul import tune_trimul

        tune_trimul(n=n, budget_s=budget_s, rep_ms=rep_ms, out=out, apply=apply, driver=_driver(), as_json=as_json)
        return
    if op == "gemm-fp8":
        tune_fp8(shapes or "fp8-device", scalings.split(","), rep_ms, budget_s, out, apply, as_json)
        return
    if op != "gemm":
        from ceiling.roofline.commands.tune_attention import tune_attention

        tune_attention(op.replace("-", "_"), budget_s=budget_s, rep_ms=rep_ms, out=out, apply=apply, workers=workers,
                       driver=_driver(), as_json=as_json)
        return
    rows = gemm_sweep.sweep(suite(shapes or "gemm-llm"), getattr(torch, dtype), layout, rep_ms=rep_ms,
                            budget_s=budget_s)
    (out / "tune-rows.json").write_text(json.dumps(rows, indent=1))
    device = torch.cuda.get_device_name()
    prov = host_provenance(device=device, driver=_driver())
    records = [
        Record(kind="kernel", op="gemm", name=r["impl"], metric="time", value=r["median_ms"] / 1e3, unit="s",
               backend="nvidia" if r["impl"] != "torch.matmul" else "cublas",
               shape=dict(zip("mnk", r["shape"]), dtype=r["dtype"], layout=r["layout"]), config=r["config"] or {},
               method="cuda-graph", median=r["median_ms"] / 1e3, p20=r["p20_ms"] / 1e3,
               p80=r["p80_ms"] / 1e3, extra={"tflops": r["tflops"], "rel_error": r.get("rel_error")}, provenance=prov)
        for r in rows if "median_ms" in r
    ]
    append(out / "records", records)
    best = gemm_sweep.best_per_shape(rows)
    key = op_tables.model("nvidia", device)
    entries = gemm_sweep.table_entries(best, device, prov.timestamp[:10], prov.git_commit)
    (out / f"tuned-gemm-{key}.json").write_text(json.dumps(entries, indent=1))
    if apply:
        gemm_sweep.apply(key, entries)
    if as_json:
        typer.echo(json.dumps(list(best.values()), indent=1, default=str))
        return
    table = key_table(f"GEMM tuning on {device} ({dtype}, {layout})", ["M", "N", "K"],
                      ["cuBLAS ms", "ours ms", "speedup", "ours TFLOP/s", "config"],
                      numeric=["cuBLAS ms", "ours ms", "speedup", "ours TFLOP/s"])
    for r in best.values():
        c = r["config"]
        table.add_row(*map(str, r["shape"]), f"{r['cublas_ms']:.4f}", f"{r['median_ms']:.4f}", f"{r['speedup']:.3f}",
                      f"{r['tflops']:.0f}", f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']}")
    tables.console().print(table)


OPS = ("gemm", "gemm-fp8", "attention", "triangle-attention", "trimul")


def _check(op: str, shapes: str | None, scalings: str, dtype: str, layout: str, rep_ms: int, budget_s: float,
           n: int) -> None:
    """Every argument checked before the GPU is asked for, so a typo is named wherever the command runs."""
    from ceiling.gemm import shapes as gemm_shapes
    from ceiling.scaled_gemm import shapes as fp8_shapes

    arguments.choice(op, OPS, "OP")
    suites = {"gemm": gemm_shapes.SUITES, "gemm-fp8": fp8_shapes.SUITES}.get(op)
    if shapes is not None:
        if suites is None:
            raise typer.BadParameter(f"no shape suite for {op} (its sweep has its own problems), got {shapes!r}",
                                     param_hint="--shapes")
        arguments.choice(shapes, sorted(suites), "--shapes")
    if op == "gemm-fp8":
        for scaling in scalings.split(","):
            arguments.choice(scaling, sorted(fp8_shapes.SCALINGS), "--scalings")
    arguments.choice(dtype, ("bfloat16", "float16", "float32"), "--dtype")
    arguments.choice(layout, ("NT", "NN"), "--layout")
    for value, hint in ((rep_ms, "--rep-ms"), (budget_s, "--budget-s"), (n, "--n")):
        if not value > 0:
            raise typer.BadParameter(f"expected a positive number, got {value}", param_hint=hint)


def tune_fp8(shapes: str, scalings: list[str], rep_ms: int, budget_s: float, out: Path, apply: bool,
             as_json: bool = False) -> None:
    """The FP8 sweep (ceiling.tuning.gemm_fp8): rows and records under ``out``, winners as table entries.
    A record's config holds ``SCALES`` (the scale kinds, as the gemm_fp8 space names them), so the
    FP8 templates cite the sweep's timings."""
    import torch

    from ceiling.tuning import gemm_fp8 as fp8_sweep
    from ceiling.scaled_gemm.shapes import SCALINGS, suite
    from ceiling.microbench.records import Record, append, host_provenance

    unknown = [s for s in scalings if s not in SCALINGS]
    if unknown:
        raise typer.BadParameter(f"expected scalings among {sorted(SCALINGS)}, got {unknown}", param_hint="--scalings")
    rows = fp8_sweep.sweep(suite(shapes), scalings, rep_ms=rep_ms, budget_s=budget_s)
    (out / "tune-fp8-rows.json").write_text(json.dumps(rows, indent=1))
    device = torch.cuda.get_device_name()
    prov = host_provenance(device=device, driver=_driver())
    records = [
        Record(kind="kernel", op="scaled_gemm", name=r["impl"], metric="time", value=r["median_ms"] / 1e3, unit="s",
               backend="nvidia" if r["impl"] == "ceiling.nvidia" else "cublas",
               shape=dict(zip("mnk", r["shape"]), dtype=r["dtype"], out_dtype="bfloat16"),
               config={**(r["config"] or {}), "SCALES": r["scales"]}, method="cuda-graph", median=r["median_ms"] / 1e3,
               p20=r["p20_ms"] / 1e3, p80=r["p80_ms"] / 1e3,
               extra={"tflops": r["tflops"], "rel_error": r.get("rel_error"), "scaling": r["scaling"]}, provenance=prov)
        for r in rows if "median_ms" in r
    ]
    append(out / "records", records)
    best = fp8_sweep.best_per_shape(rows)
    key = fp8_sweep.device_key(device)
    entries = fp8_sweep.table_entries(best, device, prov.timestamp[:10], prov.git_commit)
    (out / f"tuned-gemm-fp8-{key}.json").write_text(json.dumps(entries, indent=1))
    if apply:
        fp8_sweep.apply(key, entries)
    if as_json:
        typer.echo(json.dumps(list(best.values()), indent=1, default=str))
        return
    table = key_table(f"FP8 GEMM tuning on {device}", ["M", "N", "K", "scales"],
                      ["baseline", "baseline ms", "ours ms", "speedup", "ours TFLOP/s", "config"],
                      numeric=["baseline ms", "ours ms", "speedup", "ours TFLOP/s"])
    for r in best.values():
        c = r["config"]
        table.add_row(*map(str, r["shape"]), r["scales"], str(r["baseline"]), f"{r['baseline_ms'] or 0:.4f}",
                      f"{r['median_ms']:.4f}", f"{r['speedup'] or 0:.3f}", f"{r['tflops']:.0f}",
                      f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']} "
                      f"p{c['PROMOTE_STEPS']}{' sk' if c['STREAM_K'] else ''}")
    tables.console().print(table)


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # noqa: BLE001 - NVML is optional
        return None


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
