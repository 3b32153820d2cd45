"""The tuning sweep behind ``kernels/nvidia/tables/<device>/gemm.json``: every candidate config of the
Hopper GEMM (``kernels/spaces/candidates/gemm.sm_90a.json``) timed by CUDA-graph replay on each shape
of a suite on this GPU, next to ``torch.matmul`` (cuBLAS), and the fastest kept per shape, with the
p20/p80 spread that shows a winner within noise of the runner-up (``docs/tuning.md``).
"""

from __future__ import annotations

import time
from typing import Iterable

import torch

import ceiling
from ceiling import autotune, tables
from ceiling.gemm.spec import shipped_problem
from ceiling.timers import time_graph


def sweep(shapes: Iterable[tuple[int, int, int]], dtype: torch.dtype = torch.bfloat16, b_layout: str = "NT",
          rep_ms: int = 60, budget_s: float | None = None, seed: int = 0) -> list[dict]:
    """One row per (shape, candidate) and per (shape, cuBLAS): median/p20/p80 milliseconds and TFLOP/s.

    ``b_layout`` "NT" passes B as an nn.Linear weight (N, K) viewed transposed, the
    layout of a linear layer's forward; "NN" passes a row-major (K, N) B.
    """
    name = str(dtype).removeprefix("torch.")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows: list[dict] = []
    start = time.perf_counter()
    for m, n, k in shapes:
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
        a = torch.randn(m, k, dtype=dtype, device="cuda", generator=gen)
        b = (torch.randn(n, k, dtype=dtype, device="cuda", generator=gen).mT if b_layout == "NT"
             else torch.randn(k, n, dtype=dtype, device="cuda", generator=gen))
        flops = 2.0 * m * n * k
        ref = torch.matmul(a.float(), b.float())
        ms, p20, p80 = time_graph(lambda: torch.matmul(a, b), rep_ms)
        rows.append(dict(shape=[m, n, k], dtype=name, layout=b_layout, impl="torch.matmul", config=None,
                         median_ms=ms, p20_ms=p20, p80_ms=p80, tflops=flops / ms / 1e9))
        for cfg in hopper_candidates(name, m, n, k):
            try:
                out = ceiling.gemm(a, b, backend="nvidia", config=cfg)
                err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
                ms, p20, p80 = time_graph(lambda: ceiling.gemm(a, b, backend="nvidia", config=cfg), rep_ms)
            except Exception as exc:  # noqa: BLE001 - a config that fails on this shape is reported, not fatal
                rows.append(dict(shape=[m, n, k], dtype=name, layout=b_layout, impl="ceiling.nvidia",
                                 config=cfg, error=f"{type(exc).__name__}: {exc}"[:300]))
                continue
            rows.append(dict(shape=[m, n, k], dtype=name, layout=b_layout, impl="ceiling.nvidia", config=cfg,
                             median_ms=ms, p20_ms=p20, p80_ms=p80, tflops=flops / ms / 1e9, rel_error=err))
    return rows


def hopper_candidates(dtype: str, m: int, n: int, k: int) -> list[dict]:
    """The candidates ``config="autotune"`` times for a 2-D (m, n, k) problem of ``dtype``."""
    return autotune.candidates("gemm", "sm_90a", shipped_problem(m, n, k, dtype).features())


def best_per_shape(rows: list[dict]) -> dict[tuple, dict]:
    """The fastest correct ceiling config for each (shape, dtype, layout), with cuBLAS's time beside it."""
    best: dict[tuple, dict] = {}
    cublas: dict[tuple, float] = {}
    for r in rows:
        key = (tuple(r["shape"]), r["dtype"], r["layout"])
        if "median_ms" not in r:
            continue
        if r["impl"] == "torch.matmul":
            cublas[key] = r["median_ms"]
        elif r.get("rel_error", 1.0) < 2e-2 and (key not in best or r["median_ms"] < best[key]["median_ms"]):
            best[key] = r
    for key, r in best.items():
        r["cublas_ms"] = cublas.get(key)
        r["speedup"] = cublas[key] / r["median_ms"] if key in cublas else None
    return best


def table_entries(best: dict[tuple, dict], device: str, date: str, git_commit: str) -> list[dict]:
    """The winners as entries of the device's table: each holds for its exact problem."""
    return [{"when": f"dtype == '{r['dtype']}' and M == {r['shape'][0]} and N == {r['shape'][1]} and K == {r['shape'][2]}",
             "config": r["config"], "source": "measured",
             "measured": {"device": device, "median_ms": round(r["median_ms"], 5),
                          "cublas_ms": r["cublas_ms"] and round(r["cublas_ms"], 5), "date": date,
                          "git_commit": git_commit, "layout": r["layout"]}}
            for r in best.values()]


def apply(device_key: str, entries: list[dict]) -> None:
    """Merge ``entries`` into the table of ``device_key`` (an entry for the same problem is replaced)."""
    path = tables.path("nvidia", device_key, "gemm")
    table = tables.read(path) if path.exists() else {
        "family": "gemm", "device": device_key,
        "about": f"Hopper GEMM configs for the {device_key}, per exact problem (dtype and M, N, K), measured by "
                 "ceiling tune gemm; a shape no entry holds for gets ceiling.nvidia.gemm.heuristic.",
        "entries": []}
    fresh = {e["when"] for e in entries}
    table["entries"] = [e for e in table["entries"] if e.get("when") not in fresh] + entries
    tables.write(path, table)
