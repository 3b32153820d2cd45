"""``ceiling tune gemm|attention|triangle-attention|trimul``: the tuning sweeps that produce a device's
entries in the config tables."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from roofline import tables
from roofline.tables import key_table


def tune(
    op: str = typer.Argument("gemm", help="The op to tune: gemm, attention, triangle-attention, trimul."),
    shapes: str = typer.Option("gemm-llm", help="Shape suite from kernels.gemm.shapes."),
    dtype: str = typer.Option("bfloat16", help="Input dtype."),
    layout: str = typer.Option("NT", help="NT: B is an nn.Linear weight viewed transposed; NN: row-major B."),
    rep_ms: int = typer.Option(60, help="Milliseconds of timed CUDA-graph replays per candidate."),
    budget_s: float = typer.Option(240.0, help="Stop starting new shapes (candidates, for attention) after this many seconds."),
    out: Path = typer.Option(Path("ceiling-tune"), "--out", "-o", help="Folder for rows, records and the table."),
    apply: bool = typer.Option(False, help="Merge the winners into the op's config table under kernels/nvidia/configs/."),
    workers: int = typer.Option(0, help="Attention ops: processes that compile and check candidates (0: CPUs - 2, at most 14)."),
    n: int = typer.Option(768, help="trimul: the pair dimension N it is tuned at."),
    as_json: bool = typer.Option(False, "--json", help="Print the winners as JSON instead of a table."),
) -> None:
    """Time every candidate config of a Hopper kernel on this GPU next to its baseline: the GEMM
    on each shape of a suite against torch.matmul (cuBLAS); attention (head dims 64 and 128,
    S = 4096, then causal) and triangle attention (N = 384, then 768; 4 heads of 32) kernel by
    kernel, forward and each backward kernel, against SDPA and the eager PyTorch op; the triangle
    multiplicative update (trimul) stage by stage at N = 768, c_z = 128. Write every
    timing as a record, the winners as table entries, and print speedups. Needs an NVIDIA GPU."""
    import torch

    from kernels.backends import gpu_vendor
    from kernels.gemm.shapes import suite
    from kernels.nvidia import gemm as hopper
    from kernels.tuning.gemm import best_per_shape, sweep
    from microbench.records import Record, append, host_provenance

    if op not in ("gemm", "attention", "triangle-attention", "trimul"):
        raise typer.BadParameter(f"expected gemm, attention, triangle-attention or trimul, got {op!r}", param_hint="op")
    if gpu_vendor() != "nvidia":
        typer.echo("ceiling tune needs an NVIDIA GPU: none is visible to PyTorch here.", err=True)
        raise typer.Exit(2)
    out.mkdir(parents=True, exist_ok=True)
    if op == "trimul":
        from roofline.commands.tune_trimul import tune_trimul

        tune_trimul(n=n, budget_s=budget_s, rep_ms=rep_ms, out=out, apply=apply, driver=_driver(), as_json=as_json)
        return
    if op != "gemm":
        from roofline.commands.tune_attention import tune_attention

        tune_attention(op.replace("-", "_"), budget_s=budget_s, rep_ms=rep_ms, out=out, apply=apply, workers=workers,
                       driver=_driver(), as_json=as_json)
        return
    rows = sweep(suite(shapes), getattr(torch, dtype), layout, rep_ms=rep_ms, budget_s=budget_s)
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
    best = best_per_shape(rows)
    key = hopper.device_key(device) or device
    entries = [
        {"dtype": r["dtype"], "shape": r["shape"], "layout": r["layout"], "source": "measured",
         "measured": {"device": device, "median_ms": round(r["median_ms"], 5), "cublas_ms": r["cublas_ms"] and round(r["cublas_ms"], 5),
                      "date": prov.timestamp[:10], "git_commit": prov.git_commit},
         "config": r["config"]}
        for r in best.values()
    ]
    (out / f"tuned-gemm-{key}.json").write_text(json.dumps(entries, indent=1))
    if apply:
        _apply(key, entries)
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


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # noqa: BLE001 - NVML is optional
        return None


def _apply(device_key: str, entries: list[dict]) -> None:
    from kernels.nvidia.gemm import CONFIG_FILE

    table = json.loads(CONFIG_FILE.read_text())
    current = table["devices"].setdefault(device_key, [])
    fresh = {(e["dtype"], tuple(e["shape"])) for e in entries}
    table["devices"][device_key] = [e for e in current if (e["dtype"], tuple(e["shape"])) not in fresh] + entries
    tmp = CONFIG_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1))
    tmp.replace(CONFIG_FILE)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
