"""The triangle-multiplicative-update half of ``ceiling tune``: run the per-stage sweep, save the
rows and records, print each stage's winner, and (``--apply``) write the tuned config as this
device's table, ``kernels/nvidia/tables/<device>/triangle_multiplication.json``, with its
provenance."""

from __future__ import annotations

import json
from pathlib import Path

from ceiling.roofline import tables
from ceiling.roofline.tables import key_table


def tune_trimul(*, n: int, budget_s: float, rep_ms: int, out: Path, apply: bool, driver: str | None,
                c_z: int = 128, dtype: str = "bfloat16", device: str = "cuda", timer=None,
                stages: tuple[str, ...] | None = None, as_json: bool = False) -> list[dict]:
    """The sweep on a GPU. ``device="cpu"`` with a ``timer`` (and small ``n``, ``c_z``) runs the
    same path with interpreted kernels: what the tests check of the bookkeeping around it."""
    import torch
    import triton

    from ceiling.tuning import trimul as T
    from ceiling.microbench.records import Record, append, host_provenance

    tdtype = getattr(torch, dtype)
    rows, best = T.sweep(n=n, c_z=c_z, dtype=tdtype, budget_s=budget_s, rep_ms=rep_ms, device=device, timer=timer,
                         stages=stages)
    (out / "tune-trimul-rows.json").write_text(json.dumps(rows, indent=1))
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    prov = host_provenance(device=device_name, driver=driver)
    records = [
        Record(kind="kernel", op="triangle_multiplicative_update", name=f"ceiling.nvidia:{r['stage']}", metric="time",
               value=r["median_ms"] / 1e3, unit="s", backend="nvidia",
               shape={"n": r["n"], "c_z": r["c_z"], "dtype": r["dtype"], "direction": r["direction"],
                      "timed_on": r["timed_on"]},
               config={"stage": r["stage"], "value": r["config"]}, method="cuda-graph" if device == "cuda" else "host-timer",
               median=r["median_ms"] / 1e3,
               p20=r["p20_ms"] / 1e3, p80=r["p80_ms"] / 1e3, extra={"rel_error": r.get("rel_error")}, provenance=prov)
        for r in rows if "median_ms" in r
    ]
    if records:
        append(out / "records", records)
    table = key_table(f"Triangle multiplicative update tuning on {device_name} ({dtype}, N = {n}, c_z = c = {c_z})",
                      "stage", ["timed on", "first ms", "best ms", "best config"], numeric=["first ms", "best ms"],
                      text=["best config"])
    for stage in T.candidates():
        timed = [r for r in rows if r["stage"] == stage and "median_ms" in r]
        if timed:
            top = min(timed, key=lambda r: r["median_ms"])
            table.add_row(stage, top["timed_on"], f"{timed[0]['median_ms']:.4f}", f"{top['median_ms']:.4f}",
                          json.dumps(top["config"]))
    console = tables.console()
    if not as_json:
        console.print(table)
    (out / "tuned-trimul.json").write_text(json.dumps(best, indent=1))
    # Where one forward + backward spends its time, kernel by kernel, before and after.
    from ceiling.microbench.breakdown import kernel_times

    start = T.start_config(device_name if device == "cuda" else None, dtype)
    breakdown = {label: kernel_times(T.thunk(n, cfgs, c_z=c_z, dtype=tdtype, device=device), device=device, top=25)
                 for label, cfgs in (("start", start), ("tuned", best))}
    (out / "tune-trimul-breakdown.json").write_text(json.dumps(breakdown, indent=1))
    split = key_table("Trimul forward + backward at the tuned config, device time by kernel", "kernel",
                      ["calls", "ms", "share"], numeric=["calls", "ms", "share"])
    for r in breakdown["tuned"][:12]:
        split.add_row(r["name"], str(r["calls"]), f"{r['total_ms']:.3f}", f"{r['share']:.0%}")
    if as_json:
        print(json.dumps({"best": best, "breakdown": breakdown}, indent=1, default=str))
    else:
        console.print(split)
    if apply:
        reached = sorted({r["stage"] for r in rows if "median_ms" in r})
        if not reached:
            print("nothing was timed: the config table is left as it was")
            return rows
        from ceiling import tables as config_tables

        key = config_tables.model("nvidia", device_name)
        measured = {"device": device_name, "date": prov.timestamp[:10], "git_commit": prov.git_commit or "unknown",
                    "torch": torch.__version__, "triton": triton.__version__}
        why = (f"Stages {', '.join(reached)} are the fastest candidates of "
               "kernels/spaces/candidates/triangle_multiplication.sm_90a.json that matched a float32 reference, timed "
               "by CUDA-graph replay (CUDA events where a call could not be captured) with `ceiling tune trimul` at "
               f"B = 1, N = {n}, c_z = c = {c_z}, {dtype}, outgoing, 5% of pairs masked (forward stages on the "
               "forward, backward stages on forward + backward), one stage at a time from the config in force "
               "before. Not measured: the float32 entries (the target's).")
        config_tables.write(config_tables.path("nvidia", key, T.FAMILY), {
            "family": T.FAMILY, "device": key,
            "about": f"The triangle multiplicative update's config on the {key}, tuned on it: merged over the sm_90a "
                     "entries.",
            "entries": T.table_entries(best, measured, why)})
    return rows
