"""Occupancy on NVIDIA: the calculator against the CUDA API and against blocks counted on the device.

1. API: over >= 1000 random (kernel, threads, dynamic shared memory) configs,
   ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` vs ``ceiling.microbench.occupancy``
   given the kernel's real register count and static shared memory.
2. Device: for a handful of configs, one per limiting resource, the resident
   blocks per SM counted from %smid and %globaltimer intervals
   (sources/occupancy.cu) vs the calculator.
"""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np

from .. import occupancy as occ
from ..records import Record
from .base import Suite, SuiteContext, gpu_runtime, runtime_reason

# Register pressure of the kernel variants (NACC live accumulators, sources/occupancy.cu).
VARIANTS = {"nacc4": 4, "nacc40": 40, "nacc72": 72, "nacc120": 120, "nacc200": 200}

# Configs counted on the device: (variant, threads, dynamic shared bytes), chosen so
# that warps, blocks, registers and shared memory each bind somewhere.
DEVICE_CONFIGS = (
    ("nacc4", 1024, 0),
    ("nacc4", 64, 0),
    ("nacc4", 96, 0),
    ("nacc72", 256, 0),
    ("nacc120", 256, 0),
    ("nacc200", 128, 0),
    ("nacc4", 128, 48 * 1024),
    ("nacc4", 128, 100 * 1024),
    ("nacc4", 256, 30 * 1024),
    ("nacc40", 512, 20 * 1024),
)


def max_overlap(starts: list[int], ends: list[int], sms: list[int]) -> dict[int, int]:
    """Per SM, the most intervals [start, end) open at one instant."""
    events: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for s, e, sm in zip(starts, ends, sms):
        events[sm].append((s, 1))
        events[sm].append((e, -1))
    best: dict[int, int] = {}
    for sm, evs in events.items():
        evs.sort(key=lambda x: (x[0], x[1]))  # an end at t closes before a start at t opens
        cur = peak = 0
        for _, step in evs:
            cur += step
            peak = max(peak, cur)
        best[sm] = peak
    return best


def random_configs(n: int, max_dynamic: int, seed: int | None = None) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    names = list(VARIANTS)
    out = []
    for _ in range(n):
        threads = rng.choice([rng.randint(1, 1024), 32 * rng.randint(1, 32)])
        dyn = rng.choice([0, rng.randint(0, max_dynamic), 1024 * rng.randint(0, max_dynamic // 1024)])
        out.append((rng.choice(names), threads, dyn))
    return out


def _check(ctx: SuiteContext) -> str | None:
    return runtime_reason(ctx)


def _run(ctx: SuiteContext) -> list[Record]:
    from ..clocks import ClockSampler
    from ..runtimes import gpu_provenance

    rt = gpu_runtime(ctx)
    dev = rt.device(ctx.device_index)
    arch = occ.normalize_arch(dev.occupancy_arch)
    if arch not in occ.NVIDIA:
        from .base import Unavailable

        raise Unavailable(f"the calculator has no table for {arch}")
    kernels = {}
    facts = {}  # registers, static and max dynamic shared memory of each variant, after the opt-in
    for name, nacc in VARIANTS.items():
        ctx.progress(f"occupancy: building variant {name}")
        fn = rt.function(rt.load_module("occupancy.cu", dev.arch, (("NACC", nacc),)), "resident")
        rt.set_max_dynamic_shared(fn, dev.shared_per_block_optin - rt.kernel_facts(fn).static_shared)
        kernels[name], facts[name] = fn, rt.kernel_facts(fn)

    def model(name: str, threads: int, dyn: int, static_less_reserve: bool = False) -> occ.Occupancy:
        f = facts[name]
        static = f.static_shared
        if static_less_reserve:  # if the attribute already counts the driver's 1 KB reserve
            static = max(0, static - occ.NVIDIA[arch].reserved_shared_per_block)
        return occ.nvidia_occupancy(arch, threads, f.registers, static, dyn, max_dynamic_shared=f.max_dynamic_shared)

    # 1. API agreement
    n_configs = 1000 if ctx.quick else 2000
    ctx.progress(f"occupancy: API vs calculator over {n_configs} configs")
    max_dyn = dev.shared_per_block_optin
    mismatches = []
    agree = 0
    agree_less_reserve = 0  # the same calculator, reading the static size net of the 1 KB reserve
    by_limiter: dict[str, int] = defaultdict(int)
    for name, threads, dyn in random_configs(n_configs, max_dyn):
        fn, f = kernels[name], facts[name]
        dyn = min(dyn, f.max_dynamic_shared)  # beyond it a launch is invalid, not just unoccupied
        try:
            api = rt.occupancy(fn, threads, dyn)
        except Exception as exc:  # noqa: BLE001 - recorded as a disagreement with the reason
            api = f"error: {exc}"
        m = model(name, threads, dyn)
        by_limiter[m.limiter] += 1
        agree_less_reserve += api == model(name, threads, dyn, static_less_reserve=True).blocks
        if api == m.blocks:
            agree += 1
        elif len(mismatches) < 50:
            mismatches.append({"variant": name, "regs": f.registers, "static_smem": f.static_shared,
                               "threads": threads, "dynamic_smem": dyn, "api": api, "model": m.blocks,
                               "limits": m.as_dict()["limits"]})
    records = []
    provenance = gpu_provenance(dev, runtime=rt)
    records.append(Record(
        kind="microbench", op="occupancy", name="api-agreement", metric="fraction-agreeing",
        value=agree / n_configs, unit="fraction", backend="cuda",
        config={"arch": arch, "configs": n_configs, "variants": {k: facts[k].registers for k in kernels}},
        method="cuOccupancyMaxActiveBlocksPerMultiprocessor", repetitions=n_configs,
        extra={"mismatches": mismatches, "limiters_covered": dict(by_limiter),
               "fraction_agreeing_static_less_reserve": agree_less_reserve / n_configs},
        provenance=provenance,
    ))

    # 2. Resident blocks counted on the device.
    spin_ns = 200_000 if ctx.quick else 400_000
    with ClockSampler(dev.index) as sampler:
        for name, threads, dyn in DEVICE_CONFIGS:
            fn, f = kernels[name], facts[name]
            m = model(name, threads, dyn)
            api = rt.occupancy(fn, threads, dyn)
            ctx.progress(f"occupancy: counting resident blocks, {name} threads={threads} smem={dyn} (model {m.blocks})")
            if m.blocks == 0:
                continue
            grid = dev.sm_count * (m.blocks + 1)
            start = rt.zeros(grid, np.uint64)
            end = rt.zeros(grid, np.uint64)
            sm = rt.zeros(grid, np.uint32)
            sink = rt.zeros(grid, np.float32)
            rt.launch(fn, grid, threads, (np.uint64(spin_ns), np.uint32(dyn), start, end, sm, sink), shared_bytes=dyn)
            rt.synchronize()
            peaks = max_overlap(rt.to_numpy(start).tolist(), rt.to_numpy(end).tolist(), rt.to_numpy(sm).tolist())
            values = sorted(peaks.values())
            records.append(Record(
                kind="microbench", op="occupancy", name=f"resident-{name}-t{threads}-s{dyn}", metric="resident-blocks",
                value=float(values[len(values) // 2]), unit="blocks", backend="cuda",
                shape={"threads": threads, "dynamic_smem": dyn},
                config={"arch": arch, "variant": name, "registers": f.registers, "static_smem": f.static_shared,
                        "grid": grid, "spin_ns": spin_ns},
                method="smid+globaltimer", repetitions=len(values),
                median=float(values[len(values) // 2]), p20=float(values[len(values) // 5]),
                p80=float(values[(4 * len(values)) // 5]),
                extra={"model_blocks": m.blocks, "model_limiter": m.limiter, "api_blocks": api,
                       "min_per_sm": values[0], "max_per_sm": values[-1], "sms_seen": len(values)},
                provenance=provenance,
            ))
    counted = gpu_provenance(dev, sampler.summary(), rt)
    for r in records[1:]:
        r.provenance = counted
    return records


SUITE = Suite(
    name="occupancy",
    needs_gpu=True,
    description="occupancy calculator vs cudaOccupancyMaxActiveBlocksPerMultiprocessor and vs blocks counted on the device",
    check=_check,
    run=_run,
    timeout_s=150.0,
)
