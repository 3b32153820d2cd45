"""The tuning sweep behind ``configs/gemm_fp8.json``: time every candidate FP8 config on each shape of a
suite and scaling on this GPU, next to the vendor's FP8 GEMM, and pick the fastest per shape.

As the bf16 sweep (:mod:`kernels.tuning.gemm`): CUDA-graph replay (median, p20/p80), each
candidate checked against the float32 product of the dequantized inputs before it is timed.
The baseline per scaling is ``torch._scaled_mm`` (cuBLASLt) for ``tensor`` and ``row`` and
dequantize-then-``torch.matmul`` for ``block``. Candidates are the table's ``candidates`` (the
skinny ones for M <= 64), each a point of the sm_90a space (``kernels/spaces/gemm_fp8.json``),
minus those the space rules out for the scaling (a promotion interval that does not divide 128
under block scales). They are a hand-picked list, as the bf16 sweep's are, rather than the
space's compile-filtered grid (``kernels.tuning.space``): that grid holds about two thousand
points that break no constraint, more than the device can compile and time in one sweep's budget.
"""

from __future__ import annotations

import time
from typing import Iterable

import torch

from kernels import spaces
from kernels.nvidia import gemm_fp8
from kernels.scaled_gemm.shapes import SCALINGS
from kernels.scaled_gemm.spec import config_context

MAX_REL_ERROR = 2e-2  # of max|reference|: a config past it is reported, never picked


def candidates(m: int | None = None) -> list[gemm_fp8.Fp8Config]:
    """The sweep's candidate configs (``candidates`` in the table), the skinny ones too for M <= 64,
    each checked against the space (within Hopper's shared memory for a bf16 output)."""
    table = gemm_fp8._config_table()["candidates"]
    entries = table["large"] + (table["skinny"] if m is None or m <= 64 else [])
    return list(dict.fromkeys(gemm_fp8.Fp8Config.from_dict(e) for e in entries))


def why_not(cfg: gemm_fp8.Fp8Config, a_kind: str, b_kind: str) -> str | None:
    """The first constraint of the space ``cfg`` breaks for this scaling (None: it can serve it)."""
    context = config_context(None, None, None, a_kind, b_kind, "bfloat16")
    broken = spaces.get(gemm_fp8.FAMILY, gemm_fp8.TARGET).broken(cfg.as_dict(), context)
    return f"{broken[0][0].id}: {broken[0][0].why}" if broken else None


def _inputs(m: int, n: int, k: int, scaling: str, gen: torch.Generator):
    from kernels import fp8

    a_kind, b_kind = SCALINGS[scaling]
    x = torch.randn(m, k, device="cuda", generator=gen)
    w = torch.randn(n, k, device="cuda", generator=gen)
    aq, sa = fp8.quantize(x, a_kind)
    wq, sw = fp8.quantize(w, b_kind)
    return aq, wq.mT, sa, sw if b_kind == "tensor" else sw.mT


def _baseline(scaling: str, a, b, sa, sb):
    from kernels.scaled_gemm.reference import dequantize_a, dequantize_b

    if scaling in ("tensor", "row"):
        return "torch._scaled_mm", lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    return "dequant+torch.matmul", lambda: torch.matmul(dequantize_a(a, sa, "1x128", torch.bfloat16),
                                                        dequantize_b(b, sb, "128x128", torch.bfloat16))


def sweep(shapes: Iterable[tuple[int, int, int]], scalings: Iterable[str] = tuple(SCALINGS), rep_ms: int = 25,
          budget_s: float | None = None, seed: int = 0) -> list[dict]:
    """One row per (shape, scaling, candidate) and per (shape, scaling, baseline): median/p20/p80 ms, TFLOP/s."""
    from kernels.tuning.timers import time_graph
    from kernels.scaled_gemm.reference import scaled_gemm as reference

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
            for cfg in candidates(m):
                if why_not(cfg, a_kind, b_kind):
                    continue
                run = lambda c=cfg.as_dict(): gemm_fp8.scaled_gemm(a, b, sa, sb, None, None, torch.bfloat16, c)  # noqa: E731
                try:
                    err = ((run().float() - ref).abs().max() / scale).item()
                    ms, p20, p80 = time_graph(run, rep_ms)
                except Exception as exc:  # noqa: BLE001 - a config that fails on this shape is reported, not fatal
                    rows.append(dict(common, impl="ceiling.nvidia", config=cfg.as_dict(),
                                     error=f"{type(exc).__name__}: {exc}"[:300]))
                    continue
                rows.append(dict(common, impl="ceiling.nvidia", config=cfg.as_dict(), median_ms=ms, p20_ms=p20,
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


def table_entries(best: dict[tuple, dict], device: str, date: str, git_commit: str | None) -> list[dict]:
    """Winners as ``configs/gemm_fp8.json`` entries."""
    return [
        {"dtype": r["dtype"], "scales": r["scales"], "shape": r["shape"], "source": "measured",
         "measured": {"device": device, "median_ms": round(r["median_ms"], 5), "baseline": r["baseline"],
                      "baseline_ms": r["baseline_ms"] and round(r["baseline_ms"], 5), "date": date,
                      "git_commit": git_commit},
         "config": r["config"]}
        for r in best.values()
    ]


def apply(device_key: str, entries: list[dict]) -> None:
    """Merge entries into the table, replacing those of the same (dtype, scales, shape)."""
    import json

    path = gemm_fp8.CONFIG_FILE
    table = json.loads(path.read_text())
    current = table["devices"].setdefault(device_key, [])
    fresh = {(e["dtype"], e["scales"], tuple(e["shape"])) for e in entries}
    table["devices"][device_key] = [e for e in current
                                    if (e["dtype"], e["scales"], tuple(e["shape"])) not in fresh] + entries
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    tmp.replace(path)
