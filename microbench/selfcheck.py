"""Run every suite once and check the measurements against the models and against each other.

    python -m ceiling.microbench.selfcheck --out records/microbench-h200

Runs all suites (GPU ones only where a GPU is visible), writes the records,
then prints one PASS/FAIL line per check and exits non-zero if any fails:
- bank conflicts: measured cycles per access track the model's wavefronts;
- occupancy: the calculator equals the CUDA API on every random config, and
  the blocks counted on the device;
- clocks: the in-kernel frequency agrees with NVML;
- ceilings: latencies rise L1 < L2 < HBM; HBM, L2, shared bandwidth and the
  compute peaks are ordered as a GPU's must be;
- host: every host ceiling is positive.
The checks compare measurements with models and with each other; no expected
figure for a particular device is written here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from .records import Record
from .runner import SuiteOutcome, run


def _spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else 0.0


def checks(records: list[Record]) -> list[tuple[str, bool, str]]:
    """(name, passed, detail) for every check the records allow."""
    out: list[tuple[str, bool, str]] = []
    by_op: dict[str, list[Record]] = {}
    for r in records:
        by_op.setdefault(r.op, []).append(r)

    bank = by_op.get("bank-conflicts", [])
    if bank:
        measured = [r.value for r in bank]
        model = [float(r.extra["model_wavefronts"]) for r in bank]
        rho = _spearman(measured, model)
        out.append(("bank-conflicts: rank correlation of cycles/access with model wavefronts >= 0.9", rho >= 0.9, f"rho={rho:.3f}"))
        free = [r.value for r in bank if r.extra["model_wavefronts"] == r.extra["model_ideal"]]
        worst = [r.value for r in bank if r.extra["model_wavefronts"] == 32]
        if free and worst:
            ratio = statistics.median(worst) / statistics.median(free)
            out.append(("bank-conflicts: 32-wavefront cases cost >= 4x the conflict-free ones", ratio >= 4.0, f"ratio={ratio:.2f}"))
        per_wave = [r.value / r.extra["model_wavefronts"] for r in bank if r.config.get("kernel", "").startswith("lds")]
        if per_wave:
            spread_ = max(per_wave) / min(per_wave)
            out.append(("bank-conflicts: LDS cycles per model wavefront vary < 3x across all patterns", spread_ < 3.0,
                        f"min={min(per_wave):.2f} max={max(per_wave):.2f}"))

    occ = by_op.get("occupancy", [])
    api = [r for r in occ if r.name == "api-agreement"]
    if api:
        r = api[0]
        alt = r.extra.get("fraction_agreeing_static_less_reserve")
        out.append(("occupancy: calculator == cuOccupancyMaxActiveBlocksPerMultiprocessor on every config",
                    r.value == 1.0, f"agree={r.value:.4f} (static net of reserve: {alt}) mismatches={r.extra['mismatches'][:2]}"))
    counted = [r for r in occ if r.metric == "resident-blocks"]
    if counted:
        bad = [(r.name, r.value, r.extra["model_blocks"]) for r in counted if r.value != r.extra["model_blocks"]]
        out.append(("occupancy: resident blocks counted on the device == calculator", not bad, f"mismatches={bad}"))

    clk = {r.name: r for r in by_op.get("sm-clock", [])}
    loaded = clk.get("under-fma-load")
    if loaded and loaded.extra.get("ratio_to_nvml_median"):
        ratio = loaded.extra["ratio_to_nvml_median"]
        out.append(("clocks: under load, clock64/globaltimer within 10% of NVML's SM clock", 0.9 <= ratio <= 1.1,
                    f"ratio={ratio:.3f}, in-kernel {loaded.value:.0f} MHz"))
    spin = clk.get("spin-one-warp-per-sm")
    if spin:
        out.append(("clocks: one spinning warp per SM (informational)", True,
                    f"in-kernel {spin.value:.0f} MHz, NVML {spin.extra['nvml'].get('sm_mhz')}"))
    for name in ("throttled-idle", "throttled-under-fma-load"):
        if name in clk:
            out.append((f"clocks: {name} recorded (informational)", True, f"reasons={clk[name].extra['reasons']}"))

    lat = sorted(by_op.get("latency", []), key=lambda r: r.shape["bytes"])
    if len(lat) >= 3:
        first, last = lat[0].value, lat[-1].value
        mid = [r.value for r in lat if 1 << 20 <= r.shape["bytes"] <= 16 << 20]
        ok = bool(mid) and first < min(mid) and max(mid) < last
        out.append(("latency: L1 < L2 < HBM by pointer chase", ok, " ".join(f"{r.shape['bytes'] >> 10}K:{r.value:.0f}" for r in lat)))
    bw = {r.op + "/" + r.name: r.value for r in records if r.unit == "B/s" and r.kind == "microbench"}
    if {"hbm-bandwidth/read", "l2-bandwidth/read-cg", "smem-bandwidth/lds128-conflict-free"} <= bw.keys():
        ok = bw["hbm-bandwidth/read"] < bw["l2-bandwidth/read-cg"] < bw["smem-bandwidth/lds128-conflict-free"]
        out.append(("ceilings: HBM < L2 < shared-memory bandwidth", ok,
                    ", ".join(f"{k}={v / 1e12:.2f} TB/s" for k, v in bw.items())))
    flops = {r.name: r.value for r in records if r.unit == "FLOP/s" and r.kind == "microbench"}
    fma_peak = flops.get("ffma-8-chains")
    mma_peak = flops.get("mma-sync-m16n8k16-bf16-f32")
    wgmma_peak = flops.get("wgmma-m64n256k16-bf16-f32")
    detail = ", ".join(f"{k}={v / 1e12:.1f} TFLOP/s" for k, v in flops.items())
    if fma_peak and mma_peak:
        out.append(("ceilings: mma.sync bf16 peak > FP32 FMA peak", mma_peak > fma_peak, detail))
    if mma_peak and wgmma_peak:
        out.append(("ceilings: wgmma bf16 peak > mma.sync bf16 peak", wgmma_peak > mma_peak, detail))
    errors = by_op.get("suite-error", [])
    out.append(("no single measurement failed", not errors, "; ".join(r.extra.get("error", "") for r in errors)[:300]))

    host = [r for r in records if r.kind == "host"]
    if host:
        out.append(("host: every ceiling positive", all(r.value > 0 for r in host), f"{len(host)} records"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="records/microbench", help="record store to append to")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runtime", default="auto", choices=("auto", "cupy", "pycuda"),
                        help="library the GPU suites run on (auto: CuPy if it can use the GPU, else PyCUDA)")
    parser.add_argument("--require-gpu", action="store_true",
                        help="fail if a GPU suite could not run (for the run on the GPU machine)")
    parser.add_argument("suites", nargs="*")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()

    def show(o: SuiteOutcome) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {o.suite}: {o.status} ({len(o.records)} records, {o.seconds:.1f} s)"
              + (f" -- {o.reason}" if o.reason else ""), flush=True)

    outcomes = run(args.suites or None, args.out, args.device, quick=args.quick, runtime=args.runtime,
                   progress=lambda m: print(f"[{time.perf_counter() - t0:6.1f}s]   {m}", flush=True), on_outcome=show)
    results = checks([r for o in outcomes for r in o.records])
    failed = [o for o in outcomes if o.status == "failed"]
    if args.require_gpu:
        from .suites import get

        failed += [o for o in outcomes if o.status == "unavailable" and get(o.suite).needs_gpu]
    for name, ok, detail in results:
        print(f"{'PASS' if ok else 'FAIL'}  {name}  [{detail}]")
    print(f"total {time.perf_counter() - t0:.1f} s; suites failed: {[o.suite for o in failed]}")
    return 1 if failed or not all(ok for _, ok, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
