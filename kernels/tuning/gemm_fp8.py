"""The tuning sweep behind the Hopper FP8 tables (``ceiling/nvidia/tables/<device>/gemm_fp8.json``): time
every candidate FP8 config (``ceiling/spaces/candidates/gemm_fp8.sm_90a.json``, hand-picked points
of the sm_90a space, minus those it rules out for the scaling) on each shape of a suite and scaling
on this GPU, next to the vendor's FP8 GEMM (``torch._scaled_mm`` for tensor and row scales,
dequantize-then-``torch.matmul`` for block ones), by CUDA-graph replay, each checked against the
float32 product of the dequantized inputs first; the fastest correct one per shape becomes a
measured table entry (``apply``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

import torch

from ceiling import spaces, tables
from ceiling.scaled_gemm.shapes import SCALINGS

FAMILY, TARGET = "gemm_fp8", "sm_90a"
MAX_REL_ERROR = 2e-2  # of max|reference|: a config past it is reported, never picked


def candidates(m: int | None = None) -> list[dict[str, Any]]:
    """The sweep's candidate configs, the skinny ones too for M <= 64, each checked against the space
    (within Hopper's shared memory for a bf16 output)."""
    table = json.loads(spaces.candidates_file(FAMILY, TARGET).read_text())["candidates"]
    entries = table["large"] + (table["skinny"] if m is None or m <= 64 else [])
    space = spaces.get(FAMILY, TARGET)
    out: list[dict[str, Any]] = []
    for e in entries:
        space.check(e, {"dtype_bytes": 1, "out_dtype_bytes": 2})
        if e not in out:
            out.append(e)
    return out


def why_not(cfg: dict[str, Any], a_kind: str, b_kind: str) -> str | None:
    """The first constraint of the space ``cfg`` breaks for this scaling (None: it can serve it)."""
    context = {"dtype_bytes": 1, "out_dtype_bytes": 2, "SCALES": f"{a_kind}/{b_kind}"}
    broken = spaces.get(FAMILY, TARGET).broken(cfg, context)
    return f"{broken[0][0].id}: {broken[0][0].why}" if broken else None


def _inputs(m: int, n: int, k: int, scaling: str, gen: torch.Generator):
    from ceiling import fp8

    a_kind, b_kind = SCALINGS[scaling]
    x = torch.randn(m, k, device="cuda", generator=gen)
    w = torch.randn(n, k, device="cuda", generator=gen)
    aq, sa = fp8.quantize(x, a_kind)
    wq, sw = fp8.quantize(w, b_kind)
    return aq, wq.mT, sa, sw if b_kind == "tensor" else sw.mT


def _baseline(scaling: str, a, b, sa, sb):
    from ceiling.scaled_gemm.reference import dequantize_a, dequantize_b

    if scaling in ("tensor", "row"):
        return "torch._scaled_mm", lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    return "dequant+torch.matmul", lambda: torch.matmul(dequantize_a(a, sa, "1x128", torch.bfloat16),
                                                        dequantize_b(b, sb, "128x128", torch.bfloat16))


def sweep(shapes: Iterable[tuple[int, int, int]], scalings: Iterable[str] = tuple(SCALINGS), rep_ms: int = 25,
          budget_s: float | None = None, seed: int = 0) -> list[dict]:
    """One row per (shape, scaling, candidate) and per (shape, scaling, baseline): median/p20/p80 ms, TFLOP/s."""
    from ceiling.op import get, resolve_config
    from ceiling.scaled_gemm.reference import scaled_gemm as reference
    from ceiling.scaled_gemm.spec import check
    from ceiling.timers import time_graph

    impl = get("scaled_gemm").implementation("nvidia")
    launcher = impl.load()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows: list[dict] = []
    start = time.perf_counter()
    for m, n, k in shapes:
        for scaling in scalings:
            if budget_s is not None and time.perf_counter() - start > budget_s:
                return rows
            a, b, sa, sb = _inputs(m, n, k, scaling, gen)
            a_kind, b_kind = SCALINGS[scaling]
            flops = 2.0 * m * n * k
            ref = reference(a, b, sa, sb, None, None, torch.float32)
            scale = ref.abs().max().item() or 1.0
            common = dict(shape=[m, n, k], dtype=str(a.dtype).removeprefix("torch."), scales=f"{a_kind}/{b_kind}",
                          scaling=scaling)
            name, fn = _baseline(scaling, a, b, sa, sb)
            ms, p20, p80 = time_graph(fn, rep_ms)
            rows.append(dict(common, impl=name, config=None, median_ms=ms, p20_ms=p20, p80_ms=p80,
                             tflops=flops / ms / 1e9))
            problem = check(a, b, sa, sb)
            for cfg in candidates(m):
                if why_not(cfg, a_kind, b_kind):
                    continue
                config = resolve_config(problem, impl, cfg)
                run = lambda c=config: launcher.forward(problem, c, a, b, sa, sb, None)[0]  # noqa: E731
                try:
                    err = ((run().float() - ref).abs().max() / scale).item()
                    ms, p20, p80 = time_graph(run, rep_ms)
                except Exception as exc:  # noqa: BLE001 - a config that fails on this shape is reported, not fatal
                    rows.append(dict(common, impl="ceiling.nvidia", config=cfg,
                                     error=f"{type(exc).__name__}: {exc}"[:300]))
                    continue
                rows.append(dict(common, impl="ceiling.nvidia", config=cfg, median_ms=ms, p20_ms=p20,
                                 p80_ms=p80, tflops=flops / ms / 1e9, rel_error=err))
    return rows


def best_per_shape(rows: list[dict]) -> dict[tuple, dict]:
    """The fastest correct config per (shape, dtype, scales), with the baseline's time and our speedup."""
    best: dict[tuple, dict] = {}
    base: dict[tuple, tuple[str, float]] = {}
    for r in rows:
        if "median_ms" not in r:
            continue
        key = (tuple(r["shape"]), r["dtype"], r["scales"])
        if r["impl"] != "ceiling.nvidia":
            base[key] = (r["impl"], r["median_ms"])
        elif r.get("rel_error", 1.0) < MAX_REL_ERROR and (key not in best or r["median_ms"] < best[key]["median_ms"]):
            best[key] = r
    for key, r in best.items():
        name, ms = base.get(key, (None, None))
        r["baseline"], r["baseline_ms"] = name, ms
        r["speedup"] = ms / r["median_ms"] if ms else None
    return best


def when(shape, dtype: str, scales: str) -> str:
    """The condition of a table entry for one exact shape, operand dtype and scaling."""
    m, n, k = shape
    return f"M == {m} and N == {n} and K == {k} and dtype == '{dtype}' and SCALES == '{scales}'"


def pinned(condition: str) -> dict[str, Any]:
    """The names an entry's condition pins to one value each (``M == 8192 and SCALES == 'row/row'``):
    the inverse of :func:`when`."""
    return tables.pinned({"when": condition})


def table_entries(best: dict[tuple, dict], device: str, date: str, git_commit: str | None) -> list[dict]:
    """Winners as table entries, with their provenance."""
    return [
        {"when": when(r["shape"], r["dtype"], r["scales"]), "config": r["config"], "source": "measured",
         "measured": {"device": device, "date": date, "git_commit": git_commit, "median_ms": round(r["median_ms"], 5),
                      "baseline": r["baseline"], "baseline_ms": r["baseline_ms"] and round(r["baseline_ms"], 5)}}
        for r in best.values()
    ]


def device_key(name: str) -> str:
    """The folder a device's tables are filed under ("NVIDIA H200" -> "H200")."""
    return tables.model("nvidia", name)


def apply(device_key: str, entries: list[dict]) -> None:
    """Merge entries into the device's table (``ceiling.tables``), replacing those of the same condition."""
    path = tables.path("nvidia", device_key, FAMILY)
    table = tables.read(path) if path.exists() else {
        "family": FAMILY, "device": device_key, "about": f"Hopper FP8 GEMM configs measured on the {device_key}.",
        "entries": []}
    fresh = {e["when"] for e in entries}
    table = dict(table, entries=[e for e in table["entries"] if e.get("when") not in fresh] + entries)
    tables.write(path, table)
