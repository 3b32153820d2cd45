"""SM clock on NVIDIA: estimated in-kernel, cross-checked with NVML, idle and under load.

- idle: one warp per SM spins on %globaltimer for a few ms; clock64 cycles over
  elapsed ns is the SM frequency (sources/clocks.cu).
- under load: the FP32 FMA kernel (sources/ceilings.cu) runs for a few hundred
  ms; its block 0 reports cycles and ns over the run.
NVML is sampled throughout; throttle reasons seen are recorded with the
measurement, and a record says whether the run was throttled. Nothing here
changes a device setting.
"""

from __future__ import annotations

import numpy as np

from ..records import Record
from .base import Suite, SuiteContext, gpu_runtime, runtime_reason


def _check(ctx: SuiteContext) -> str | None:
    return runtime_reason(ctx)


def _run(ctx: SuiteContext) -> list[Record]:
    from ..clocks import ClockSampler
    from ..gpu import spread
    from ..runtimes import gpu_provenance, time_launches

    rt = gpu_runtime(ctx)
    dev = rt.device(ctx.device_index)
    records: list[Record] = []

    # Idle-ish: a spinning warp per SM.
    fn = rt.function(rt.load_module("clocks.cu", dev.arch), "sm_frequency")
    window_ns = 2_000_000 if ctx.quick else 5_000_000
    repeats = 3 if ctx.quick else 7
    blocks = dev.sm_count
    cycles = rt.zeros(blocks, np.uint64)
    nanos = rt.zeros(blocks, np.uint64)
    sms = rt.zeros(blocks, np.uint32)
    ctx.progress("clocks: clock64 vs globaltimer, one warp per SM")
    per_block_mhz: list[float] = []
    with ClockSampler(dev.index, interval_s=0.002) as sampler:
        for _ in range(repeats):
            rt.launch(fn, blocks, 32, (np.uint64(window_ns), cycles, nanos, sms))
            rt.synchronize()
            c, n = rt.to_numpy(cycles), rt.to_numpy(nanos)
            per_block_mhz += [1e3 * float(ci) / float(ni) for ci, ni in zip(c, n) if ni > 0]
    idle = sampler.summary()
    s = spread(per_block_mhz)
    records.append(Record(
        kind="microbench", op="sm-clock", name="spin-one-warp-per-sm", metric="frequency",
        value=s["median"], unit="MHz", backend="cuda", config={"window_ns": window_ns, "blocks": blocks},
        method="clock64/globaltimer", repetitions=len(per_block_mhz), **s,
        extra={"nvml": idle.as_dict(), "min_mhz": min(per_block_mhz), "max_mhz": max(per_block_mhz),
               "ratio_to_nvml_median": s["median"] / idle.sm_mhz["median"] if idle.sm_mhz else None},
        provenance=gpu_provenance(dev, idle, rt),
    ))

    # Under load: the FMA kernel, long enough for power limits to act.
    fma = rt.function(rt.load_module("ceilings.cu", dev.arch), "fma_f32")
    iters = 2000 if ctx.quick else 8000
    grid, threads = dev.sm_count * 4, 256
    out = rt.zeros(grid, np.float32)
    clk = rt.zeros(2, np.uint64)
    ctx.progress("clocks: under FP32 FMA load")
    load_mhz: list[float] = []
    with ClockSampler(dev.index, interval_s=0.002) as sampler:
        times = time_launches(rt, lambda: rt.launch(fma, grid, threads, (np.int32(iters), out, clk)), repeats=repeats,
                              warmup=1)
        c, n = rt.to_numpy(clk)
        load_mhz.append(1e3 * float(c) / float(n))
    loaded = sampler.summary()
    records.append(Record(
        kind="microbench", op="sm-clock", name="under-fma-load", metric="frequency",
        value=load_mhz[-1], unit="MHz", backend="cuda", config={"grid": grid, "threads": threads, "iters": iters},
        method="clock64/globaltimer", repetitions=1,
        extra={"nvml": loaded.as_dict(), "kernel_seconds": times,
               "ratio_to_nvml_median": load_mhz[-1] / loaded.sm_mhz["median"] if loaded.sm_mhz else None,
               "ratio_to_nvml_max": load_mhz[-1] / loaded.max_sm_mhz if loaded.max_sm_mhz else None},
        provenance=gpu_provenance(dev, loaded, rt),
    ))
    for label, summary in (("idle", idle), ("under-fma-load", loaded)):
        records.append(Record(
            kind="microbench", op="sm-clock", name=f"throttled-{label}", metric="throttled",
            value=1.0 if summary.throttled else 0.0, unit="bool", backend="nvml",
            method="nvml-sampler", repetitions=summary.samples,
            extra={"reasons": summary.reasons, "nvml": summary.as_dict()},
            provenance=gpu_provenance(dev, summary, rt),
        ))
    return records


SUITE = Suite(
    name="clocks",
    needs_gpu=True,
    description="SM frequency from clock64/globaltimer, NVML clocks and throttle reasons, idle and under load",
    check=_check,
    run=_run,
    timeout_s=90.0,
)
