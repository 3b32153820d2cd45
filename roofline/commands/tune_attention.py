"""The attention and triangle-attention half of ``ceiling tune``: run the sweep, save the rows and
records, print the winners next to the baselines, and (``--apply``) write them into the tuned
tables, each entry with the provenance of what was measured, where and when."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from ceiling.roofline import tables
from ceiling.roofline.tables import key_table


def tune_attention(op: str, *, budget_s: float, rep_ms: int, out: Path, apply: bool, workers: int,
                   driver: str | None, as_json: bool = False) -> list[dict]:
    import torch
    import triton

    from ceiling import tables as config_tables
    from ceiling.tuning.attention import results, sweep as attention_sweep
    from ceiling.microbench.records import Record, append, host_provenance

    sweep = attention_sweep.Sweep(op, budget_s=budget_s, rep_ms=rep_ms,
                                  workers=workers or attention_sweep.default_workers())
    rows = sweep.run()
    (out / f"tune-{op.replace('_', '-')}-rows.json").write_text(json.dumps(rows, indent=1))
    device = torch.cuda.get_device_name()
    prov = host_provenance(device=device, driver=driver)
    records = [
        Record(kind="kernel", op=op, name=f"{r['impl']}:{r['kernel']}", metric="time", value=r["median_ms"] / 1e3,
               unit="s", backend="nvidia" if r["impl"].startswith("ceiling") else r["impl"],
               shape={"dims": r["shape"], "causal": r.get("causal", False), "dtype": r["dtype"], "group": r["group"]},
               config=r.get("config") or {}, method=r["method"], median=r["median_ms"] / 1e3,
               p20=r["p20_ms"] / 1e3, p80=r["p80_ms"] / 1e3,
               extra={"tflops": r.get("tflops"), "error": r.get("error"), "bound": r.get("bound"),
                      "shipped": r.get("shipped")},
               provenance=prov)
        for r in rows if "median_ms" in r
    ]
    if records:
        append(out / "records", records)
    summary = results.speedups(rows)
    (out / f"tune-{op.replace('_', '-')}-summary.json").write_text(json.dumps(summary, indent=1))
    if as_json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        tables.console().print(_table(summary, f"{op} tuning on {device} (bf16)"))
    if apply:
        measured = [r for r in rows if r.get("impl") == "ceiling.nvidia" and "median_ms" in r]
        if not measured:
            print("nothing was timed: the config table is left as it was")
            return rows
        versions = f"torch {torch.__version__}, triton {triton.__version__}"
        stamp = f"{device}, {prov.timestamp[:10]}, commit {prov.git_commit or 'unknown'}, {versions}"
        if op == "attention":
            measured = {"device": device, "date": prov.timestamp[:10], "git_commit": prov.git_commit or "unknown",
                        "torch": torch.__version__, "triton": triton.__version__,
                        "method": "CUDA-graph replay, ceiling tune attention, B*H*D = 8192, S = 4096, bf16"}
            results.apply_attention(rows, _attention_about(rows, stamp), measured)
        else:
            results.apply_triangle(rows, _triangle_provenance(rows, stamp),
                                   {"device": device, "date": prov.timestamp[:10],
                                    "git_commit": prov.git_commit or "unknown", "torch": torch.__version__,
                                    "triton": triton.__version__}, config_tables.model("nvidia", device))
    return rows


def _reached(rows: list[dict]) -> dict:
    """group -> kernel -> (timed, listed) candidate counts."""
    reached: dict = {}
    for r in rows:
        if r.get("impl") != "ceiling.nvidia":
            continue
        timed, listed = reached.setdefault(r["group"], {}).get(r["kernel"], (0, 0))
        reached[r["group"]][r["kernel"]] = (timed + ("median_ms" in r), listed + 1)
    return reached


def _describe(reached: dict) -> str:
    return "; ".join(f"{group}: " + ", ".join(f"{k} {t}/{n}" for k, (t, n) in kernels.items())
                     for group, kernels in reached.items())


def _attention_about(rows: list[dict], stamp: str) -> str:
    from ceiling.tuning.attention.results import attention_entries

    heads = sorted(attention_entries(rows), key=int)
    return (
        "Flash attention tiles on Hopper (H100, H200) per padded head dim. fwd: one program per block_m queries "
        "looping over block_n keys; dkdv: block_n keys looping over block_m queries; dq: block_m queries looping over "
        "block_n keys; pre_load_v and warp_specialize are kernel switches, other keys Triton compile options; "
        "entries keyed on 'causal' apply to causal attention, on 'narrow' when a bias or mask tile is live or loads "
        "go through pointers, on 'pointer_bias' when both hold. "
        f"Measured: head dims {', '.join(heads)} (fwd, dkdv, dq; non-causal and causal) are the fastest candidates "
        "that matched a float32 reference, timed by CUDA-graph replay with `ceiling tune attention` at B*H*D = 8192, "
        f"S = 4096, bf16, no bias or mask, on {stamp} (candidates timed/listed: {_describe(_reached(rows))}). "
        "Not measured: the 'narrow' entries (pinned to the configs that compiled for sm_90a without spills), the "
        "'pointer_bias' entries and every other head dim, which keep the tilings narrowed until they compile "
        "without spills."
    )


def _triangle_provenance(rows: list[dict], stamp: str) -> str:
    return (
        "H200 head dim <= 32 bf16 fwd/fwd_rows/bwd_dkdv/bwd_dq/bwd_dbias are the fastest candidates that matched a "
        "float32 reference, timed by CUDA-graph replay with `ceiling tune triangle-attention` at B=1, N=384, 4 heads "
        f"of 32, key mask, fp32 bias, on {stamp} (candidates timed/listed: {_describe(_reached(rows))}); fwd is the "
        "faster of the plain and the row-sharing forward (ROWS > 1 shares each fp32 bias tile between pair rows); "
        "bwd_dkdv has DQ_ATOMIC when the dK/dV kernel with dQ in it (bwd_dkdv_dq) beat bwd_dkdv plus bwd_dq; "
        "ROW_SPLIT in bwd_dbias is searched with its tiles. Not measured: the float32 entries (pinned to the configs "
        "in force before) and head dims above 32."
    )


def _table(summary: list[dict], title: str) -> Table:
    t = key_table(title, ["group", "kernel"], ["shipped ms", "tuned ms", "baseline", "baseline ms", "TFLOP/s", "config"],
                  numeric=["shipped ms", "tuned ms", "baseline ms", "TFLOP/s"], text=["config"])
    for s in summary:
        f = (lambda v, p=4: "" if v is None else f"{v:.{p}f}")
        t.add_row(s["group"], s["kernel"], f(s["shipped_ms"]), f(s["tuned_ms"]), s["baseline"] or "",
                  f(s["baseline_ms"]), f(s["tflops"], 0), json.dumps(s["config"]))
    return t
