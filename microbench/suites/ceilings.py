"""Device ceilings on NVIDIA: HBM, L2 and shared-memory bandwidth, FP32 FMA and
tensor-core (mma.sync, wgmma) peaks, and a pointer-chase latency ladder.

Throughput kernels (sources/ceilings.cu) are timed with CUDA events, median of
repeats after a warm-up, NVML sampled throughout. The latency ladder follows a
random single-cycle permutation at 64-byte stride (one line per step) from one
thread, over working sets from 16 KiB to 256 MiB, and records the SM it ran on.
"""

from __future__ import annotations

import numpy as np

from ..records import Record
from .base import Suite, SuiteContext, gpu_runtime, runtime_reason

LINE = 64  # bytes between chain nodes
LADDER_BYTES = (16 << 10, 64 << 10, 192 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20, 64 << 20, 256 << 20)


def cyclic_chain(n_nodes: int, rng: np.random.Generator) -> np.ndarray:
    """next[i] for one random cycle through all n nodes (every node visited once per lap)."""
    order = rng.permutation(n_nodes)
    nxt = np.empty(n_nodes, dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def _check(ctx: SuiteContext) -> str | None:
    return runtime_reason(ctx)


def _throughput_record(rt, dev, op, name, metric, amount, unit_per_s, times, config, sampler_summary, extra=None):
    from ..gpu import spread
    from ..runtimes import gpu_provenance

    rates = [amount / t for t in times]
    s = spread(rates)
    return Record(
        kind="microbench", op=op, name=name, metric=metric, value=s["median"], unit=unit_per_s, backend="cuda",
        config=config, method="cuda-events", repetitions=len(times), **s,
        extra={"seconds": times, "amount": amount, "nvml": sampler_summary.as_dict(), **(extra or {})},
        provenance=gpu_provenance(dev, sampler_summary, rt),
    )


def _run(ctx: SuiteContext) -> list[Record]:
    from ..clocks import ClockSampler
    from ..runtimes import gpu_provenance, time_launches

    rt = gpu_runtime(ctx)
    dev = rt.device(ctx.device_index)
    mod = rt.load_module("ceilings.cu", dev.arch)
    repeats = 5 if ctx.quick else 10
    records: list[Record] = []

    def guarded(label, fn):
        """One failing measurement is recorded and the others go on."""
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            ctx.progress(f"ceilings: {label} failed: {exc}")
            records.append(Record(
                kind="microbench", op="suite-error", name=f"ceilings/{label}", metric="failed", value=1.0,
                unit="bool", extra={"error": f"{exc.__class__.__name__}: {exc}"}, provenance=gpu_provenance(dev, runtime=rt),
            ))

    # ---- HBM: 1 GiB per array (far beyond the L2), grid-stride float4 kernels.
    def hbm():
        nbytes = (256 if ctx.quick else 1024) << 20
        n = nbytes // 16
        a = rt.ones(n * 4, np.float32)
        b = rt.empty(n * 4, np.float32)
        sink = rt.zeros(dev.sm_count * 8, np.float32)
        grid, threads = dev.sm_count * 8, 256
        read, write, copy = (rt.function(mod, k) for k in ("read_f4", "write_f4", "copy_f4"))
        cases = {
            "read": (lambda: rt.launch(read, grid, threads, (a, np.uint64(n), np.int32(1), sink)), nbytes),
            "write": (lambda: rt.launch(write, grid, threads, (b, np.uint64(n), np.float32(2.0))), nbytes),
            "copy": (lambda: rt.launch(copy, grid, threads, (a, b, np.uint64(n))), 2 * nbytes),
        }
        for name, (launch, moved) in cases.items():
            ctx.progress(f"ceilings: HBM {name} {nbytes >> 20} MiB")
            with ClockSampler(dev.index) as s:
                times = time_launches(rt, launch, repeats, per_event=4)
            records.append(_throughput_record(rt, dev, "hbm-bandwidth", name, "bandwidth", moved, "B/s", times,
                                              {"bytes": nbytes, "grid": grid, "threads": threads}, s.summary()))

    # ---- L2: an 8 MiB buffer (well inside the L2) read with ld.global.cg, many passes per launch.
    def l2():
        nbytes = min(8 << 20, dev.l2_bytes // 4)
        n, reps = nbytes // 16, 256
        a = rt.ones(n * 4, np.float32)
        grid, threads = dev.sm_count * 8, 256
        sink = rt.zeros(grid, np.float32)
        read = rt.function(mod, "read_f4")
        launch = lambda: rt.launch(read, grid, threads, (a, np.uint64(n), np.int32(reps), sink))  # noqa: E731
        ctx.progress(f"ceilings: L2 read {nbytes >> 20} MiB x {reps}")
        with ClockSampler(dev.index) as s:
            times = time_launches(rt, launch, repeats, per_event=4)
        records.append(_throughput_record(rt, dev, "l2-bandwidth", "read-cg", "bandwidth", nbytes * reps, "B/s", times,
                                          {"bytes": nbytes, "passes": reps, "grid": grid, "threads": threads}, s.summary()))

    # ---- Shared memory: conflict-free LDS.128 from 1024 threads, one block per SM.
    def smem():
        iters, threads, grid = 64 if ctx.quick else 256, 1024, dev.sm_count
        cycles = rt.zeros(grid, np.uint64)
        sink = rt.zeros(grid, np.float32)
        fn = rt.function(mod, "smem_read")
        launch = lambda: rt.launch(fn, grid, threads, (np.int32(iters), cycles, sink))  # noqa: E731
        per_block = threads * iters * 16 * 16
        ctx.progress("ceilings: shared-memory read bandwidth")
        with ClockSampler(dev.index) as s:
            times = time_launches(rt, launch, repeats)
        c = rt.to_numpy(cycles).astype(np.float64)
        records.append(_throughput_record(
            rt, dev, "smem-bandwidth", "lds128-conflict-free", "bandwidth", per_block * grid, "B/s", times,
            {"grid": grid, "threads": threads, "iters": iters}, s.summary(),
            extra={"bytes_per_clock_per_sm_median": float(np.median(per_block / c))}))

    # ---- FP32 FMA peak.
    def fma():
        iters, grid, threads = (1000 if ctx.quick else 4000), dev.sm_count * 4, 256
        out = rt.zeros(grid, np.float32)
        clk = rt.zeros(2, np.uint64)
        fn = rt.function(mod, "fma_f32")
        flops = 2.0 * 8 * 64 * iters * grid * threads
        ctx.progress("ceilings: FP32 FMA peak")
        with ClockSampler(dev.index) as s:
            times = time_launches(rt, lambda: rt.launch(fn, grid, threads, (np.int32(iters), out, clk)), repeats)
        c, n = rt.to_numpy(clk)
        records.append(_throughput_record(rt, dev, "fp32-fma", "ffma-8-chains", "flops", flops, "FLOP/s", times,
                                          {"grid": grid, "threads": threads, "iters": iters}, s.summary(),
                                          extra={"sm_mhz_in_kernel": 1e3 * float(c) / float(n)}))

    # ---- Tensor cores through mma.sync (HMMA m16n8k16 bf16 -> f32).
    def mma():
        iters, grid, threads = (500 if ctx.quick else 2000), dev.sm_count * 4, 256
        out = rt.zeros(grid, np.float32)
        clk = rt.zeros(2, np.uint64)
        fn = rt.function(mod, "mma_bf16")
        flops = 2.0 * 16 * 8 * 16 * 4 * 16 * iters * grid * (threads // 32)
        ctx.progress("ceilings: tensor cores, mma.sync bf16")
        with ClockSampler(dev.index) as s:
            times = time_launches(rt, lambda: rt.launch(fn, grid, threads, (np.int32(iters), out, clk)), repeats)
        c, n = rt.to_numpy(clk)
        records.append(_throughput_record(rt, dev, "tensor-core", "mma-sync-m16n8k16-bf16-f32", "flops", flops, "FLOP/s",
                                          times, {"grid": grid, "threads": threads, "iters": iters, "instruction": "mma.sync"},
                                          s.summary(), extra={"sm_mhz_in_kernel": 1e3 * float(c) / float(n)}))

    # ---- Latency ladder.
    def ladder():
        fn = rt.function(mod, "pointer_chase")
        rng = np.random.default_rng()
        out = rt.zeros(4, np.uint64)
        sizes = LADDER_BYTES[:-2] if ctx.quick else LADDER_BYTES
        measured = []
        with ClockSampler(dev.index) as s:
            for size in sizes:
                nodes = size // LINE
                buf = rt.zeros(size // 8, np.uint64)
                base = rt.pointer(buf)
                chain = cyclic_chain(nodes, rng)
                host = np.zeros(size // 8, dtype=np.uint64)
                host[:: LINE // 8] = (base + chain * LINE).astype(np.uint64)
                rt.copy_from_host(buf, host)
                warm = nodes if nodes <= (1 << 19) else 0  # a lap brings a cache-sized set in
                steps = 4096 if size > (64 << 20) else 16384
                ctx.progress(f"ceilings: latency ladder {size >> 10} KiB")
                samples = []
                for _ in range(3):
                    rt.launch(fn, 1, 1, (buf, np.int32(warm), np.int32(steps), out))  # node 0 starts the cycle
                    rt.synchronize()
                    cyc, ns, sm, _ = rt.to_numpy(out).tolist()
                    samples.append((cyc / steps, ns / steps, sm))
                del buf
                measured.append((size, warm, steps, samples))
        ladder_prov = gpu_provenance(dev, s.summary(), rt)
        for size, warm, steps, samples in measured:
            cyc_med = float(np.median([x[0] for x in samples]))
            records.append(Record(
                kind="microbench", op="latency", name=f"pointer-chase-{size >> 10}KiB", metric="latency",
                value=cyc_med, unit="cycles", backend="cuda", shape={"bytes": size, "stride": LINE},
                config={"variant": "raw-pointer", "load": "ld.global.ca", "warm_steps": warm, "steps": steps},
                method="clock64", repetitions=len(samples), median=cyc_med,
                p20=float(min(x[0] for x in samples)), p80=float(max(x[0] for x in samples)),
                extra={"ns_per_step": [x[1] for x in samples], "smid": [x[2] for x in samples]},
                provenance=ladder_prov,
            ))

    # ---- Tensor cores through wgmma (Hopper, sm_90a): the path that reaches the datasheet peak.
    def wgmma():
        if dev.major != 9:
            ctx.progress(f"ceilings: wgmma needs sm_90a, this is {dev.arch}; skipped")
            return
        fn = rt.function(rt.load_module("wgmma.cu", dev.arch), "wgmma_bf16")
        iters, grid, threads = (50 if ctx.quick else 200), dev.sm_count * 2, 128
        out = rt.zeros(grid, np.float32)
        clk = rt.zeros(2, np.uint64)
        flops = 2.0 * 64 * 256 * 16 * 16 * iters * grid
        ctx.progress("ceilings: tensor cores, wgmma m64n256k16 bf16")
        with ClockSampler(dev.index) as s:
            times = time_launches(rt, lambda: rt.launch(fn, grid, threads, (np.int32(iters), out, clk)), repeats)
        c, n = rt.to_numpy(clk)
        records.append(_throughput_record(rt, dev, "tensor-core", "wgmma-m64n256k16-bf16-f32", "flops", flops, "FLOP/s",
                                          times, {"grid": grid, "threads": threads, "iters": iters, "instruction": "wgmma"},
                                          s.summary(), extra={"sm_mhz_in_kernel": 1e3 * float(c) / float(n)}))

    # wgmma last: if the device faults on it, every other ceiling is already measured.
    steps = (("hbm", hbm), ("l2", l2), ("smem", smem), ("fma", fma), ("mma", mma), ("latency", ladder), ("wgmma", wgmma))
    for label, step in steps:
        guarded(label, step)
        rt.release_cached()
    return records


SUITE = Suite(
    name="ceilings",
    needs_gpu=True,
    description="HBM/L2/shared bandwidth, FP32 FMA and tensor-core peaks, L1/L2/HBM latency ladder",
    check=_check,
    run=_run,
    timeout_s=180.0,
)
