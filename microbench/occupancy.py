"""Occupancy calculator for NVIDIA (sm_80 ... sm_100) and AMD CDNA (gfx90a, gfx942).

NVIDIA follows ``cuda_occupancy.h`` (CUDA 12/13), the header behind
``cudaOccupancyMaxActiveBlocksPerMultiprocessor``: registers are allocated per
warp in units of 256 and split over four sub-partitions, shared memory per
block is rounded up to 128 B after adding the 1 KB the driver reserves per
block (sm_80+), and the SM's shared-memory carveout grows to the smallest legal
size that fits one block.

AMD follows the LLVM AMDGPU rules for gfx90a/gfx942: 64-lane waves, four SIMDs
per CU with at most 8 waves each, a unified 512-entry VGPR file (arch VGPRs +
AGPRs) allocated in granules of 8, an SGPR occupancy table, and 64 KB of LDS
per CU allocated in 512-byte granules.

``occupancy(arch, threads, registers=..., shared_bytes=...)`` answers both; the
result names every limit and which one binds. ``from_static(profile, arch,
threads)`` does the same from a compiled kernel's static facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

INT_MAX = 2**31 - 1
KB = 1024


@dataclass(frozen=True)
class NvidiaArch:
    name: str
    major: int
    minor: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm: int  # cudaDevAttrMaxSharedMemoryPerMultiprocessor
    shared_per_block_optin: int  # cudaDevAttrMaxSharedMemoryPerBlockOptin
    carveout_steps_kb: tuple[int, ...]  # legal shared-memory sizes per SM
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_threads_per_block: int = 1024
    shared_per_block: int = 48 * KB  # without opt-in
    reserved_shared_per_block: int = 1 * KB
    warp_size: int = 32
    reg_alloc_unit: int = 256  # registers per warp
    max_regs_per_thread: int = 256  # cudaOccRegAllocationMaxPerThread (ptxas caps at 255)
    sub_partitions: int = 4
    shared_alloc_unit: int = 128
    barriers_per_block_limit: int = 2  # named-barrier budget, x max_blocks_per_sm

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


_A100_STEPS = (0, 8, 16, 32, 64, 100, 132, 164)
_GA10X_STEPS = (0, 8, 16, 32, 64, 100)
_H100_STEPS = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)

NVIDIA: dict[str, NvidiaArch] = {
    a.name: a
    for a in (
        NvidiaArch("sm_80", 8, 0, 2048, 32, 164 * KB, 163 * KB, _A100_STEPS),
        NvidiaArch("sm_86", 8, 6, 1536, 16, 100 * KB, 99 * KB, _GA10X_STEPS, barriers_per_block_limit=1),
        NvidiaArch("sm_89", 8, 9, 1536, 24, 100 * KB, 99 * KB, _GA10X_STEPS, barriers_per_block_limit=1),
        NvidiaArch("sm_90", 9, 0, 2048, 32, 228 * KB, 227 * KB, _H100_STEPS),
        NvidiaArch("sm_100", 10, 0, 2048, 32, 228 * KB, 227 * KB, _H100_STEPS),
    )
}


@dataclass(frozen=True)
class AmdArch:
    name: str
    cus_simds: int = 4  # SIMDs per CU
    wave_size: int = 64
    max_waves_per_simd: int = 8
    vgprs_per_simd_lane: int = 512  # unified arch VGPR + AGPR file
    vgpr_granule: int = 8
    max_arch_vgprs: int = 256
    max_agprs: int = 256
    max_sgprs: int = 102  # addressable, without VCC/FLAT_SCRATCH/XNACK
    lds_per_cu: int = 64 * KB
    lds_granule: int = 512
    max_workgroups_per_cu: int = 16  # multi-wave workgroups
    max_threads_per_block: int = 1024

    @property
    def max_waves_per_cu(self) -> int:
        return self.cus_simds * self.max_waves_per_simd


AMD: dict[str, AmdArch] = {a.name: a for a in (AmdArch("gfx90a"), AmdArch("gfx942"))}

ARCHS = tuple(NVIDIA) + tuple(AMD)


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks (workgroups) per SM (CU) and what limits them."""

    arch: str
    threads: int
    blocks: int  # resident blocks per SM / workgroups per CU
    warps: int  # resident warps per SM / waves per CU
    max_warps: int  # the SM's (CU's) warp (wave) slots
    limiter: str  # the binding resource (first among equals, in the order of `limits`)
    limits: dict[str, int] = field(default_factory=dict)  # blocks each resource alone allows
    allocated: dict[str, int] = field(default_factory=dict)  # per-block allocations after rounding

    @property
    def occupancy(self) -> float:
        return self.warps / self.max_warps

    @property
    def limiters(self) -> list[str]:
        """Every resource that binds (ties included)."""
        return [k for k, v in self.limits.items() if v == self.blocks]

    def as_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "threads": self.threads,
            "blocks": self.blocks,
            "warps": self.warps,
            "max_warps": self.max_warps,
            "occupancy": self.occupancy,
            "limiter": self.limiter,
            "limiters": self.limiters,
            "limits": {k: (None if v >= INT_MAX else v) for k, v in self.limits.items()},
            "allocated": dict(self.allocated),
        }


def _ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def _round_up(x: int, y: int) -> int:
    return _ceil_div(x, y) * y


def _nv_align_up_shared(arch: NvidiaArch, size: int) -> int | None:
    """Smallest legal per-SM shared-memory size >= size (cudaOccAlignUpShmemSizeVoltaPlus)."""
    for step in arch.carveout_steps_kb:
        if size <= step * KB:
            return step * KB
    return None


def nvidia_occupancy(
    arch: str | NvidiaArch,
    threads: int,
    registers: int = 0,
    shared_bytes: int = 0,
    dynamic_shared: int = 0,
    *,
    max_dynamic_shared: int | None = None,
    carveout_percent: int | None = None,
    block_barriers: int = 1,
) -> Occupancy:
    """Resident blocks per SM, as ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` computes them.

    ``shared_bytes`` is the kernel's static shared memory, ``dynamic_shared`` the
    launch's. ``max_dynamic_shared`` is the function's
    ``cudaFuncAttributeMaxDynamicSharedMemorySize`` (None: raised to the opt-in
    maximum, as a kernel that needs it would do). ``carveout_percent`` is the
    preferred carveout (None: the driver default, all of it).
    """
    a = NVIDIA[arch] if isinstance(arch, str) else arch
    if threads <= 0:
        raise ValueError(f"threads must be positive, got {threads}")
    if registers < 0 or shared_bytes < 0 or dynamic_shared < 0:
        raise ValueError("registers and shared-memory sizes must be non-negative")

    warps_per_block = _ceil_div(threads, a.warp_size)

    # Warp slots.
    lim_warps = 0 if threads > a.max_threads_per_block else a.max_warps_per_sm // warps_per_block

    # Registers: per warp in units of 256, four sub-partitions each holding whole warps.
    regs_per_warp = _round_up(registers * a.warp_size, a.reg_alloc_unit)
    regs_per_block = regs_per_warp * warps_per_block
    regs_assumed = regs_per_warp * _round_up(warps_per_block, a.sub_partitions)
    if a.regs_per_block < regs_assumed or a.regs_per_block < regs_per_block or registers > a.max_regs_per_thread:
        lim_regs = 0
    elif regs_per_warp == 0:
        lim_regs = INT_MAX
    else:
        warps_per_sub = (a.regs_per_sm // a.sub_partitions) // regs_per_warp
        lim_regs = (warps_per_sub * a.sub_partitions) // warps_per_block

    # Shared memory.
    static = shared_bytes + a.reserved_shared_per_block
    smem_block = _round_up(static + dynamic_shared, a.shared_alloc_unit)
    max_dyn = (a.shared_per_block_optin - shared_bytes) if max_dynamic_shared is None else max_dynamic_shared
    optin = static + max_dyn > a.shared_per_block  # cudaOccSMemPerBlock with FUNC_SHMEM_LIMIT_OPTIN
    per_block_cap = (a.shared_per_block_optin if optin else a.shared_per_block) + a.reserved_shared_per_block
    if dynamic_shared > max_dyn or smem_block > per_block_cap:
        lim_smem = 0
    else:
        if carveout_percent is None:
            preferred = a.shared_per_sm
        else:
            if not 0 <= carveout_percent <= 100:
                raise ValueError(f"carveout_percent must be in [0, 100], got {carveout_percent}")
            preferred = _nv_align_up_shared(a, carveout_percent * a.shared_per_sm // 100)
        per_sm = preferred if preferred >= smem_block else _nv_align_up_shared(a, smem_block)
        lim_smem = INT_MAX if smem_block == 0 else per_sm // smem_block

    lim_blocks = a.max_blocks_per_sm
    limits = {"warps": lim_warps, "registers": lim_regs, "shared_memory": lim_smem, "blocks": lim_blocks}
    if block_barriers > 0:
        limits["barriers"] = (a.max_blocks_per_sm * a.barriers_per_block_limit) // block_barriers
    blocks = min(limits.values())
    limiter = next(k for k, v in limits.items() if v == blocks)
    return Occupancy(
        arch=a.name,
        threads=threads,
        blocks=blocks,
        warps=blocks * warps_per_block,
        max_warps=a.max_warps_per_sm,
        limiter=limiter,
        limits=limits,
        allocated={"registers": regs_per_block, "shared_memory": smem_block, "warps": warps_per_block},
    )


def amd_total_vgprs(arch_vgprs: int, agprs: int = 0) -> int:
    """VGPRs a wave occupies in the unified file: arch VGPRs rounded to 4, then the AGPRs."""
    if agprs <= 0:
        return arch_vgprs
    return _round_up(arch_vgprs, 4) + agprs


def amd_waves_per_simd_vgpr(arch: AmdArch, total_vgprs: int) -> int:
    if total_vgprs <= arch.vgpr_granule:
        return arch.max_waves_per_simd
    return min(arch.max_waves_per_simd, arch.vgprs_per_simd_lane // _round_up(total_vgprs, arch.vgpr_granule))


def amd_waves_per_simd_sgpr(arch: AmdArch, sgprs: int) -> int:
    """LLVM ``getNumWavesPerEUWithNumSGPRs`` for GFX8+ (capped at the arch's wave limit)."""
    if sgprs <= 80:
        waves = 10
    elif sgprs <= 88:
        waves = 9
    elif sgprs <= 100:
        waves = 8
    else:
        waves = 7
    return min(arch.max_waves_per_simd, waves)


def amd_occupancy(
    arch: str | AmdArch,
    threads: int,
    vgprs: int = 0,
    lds_bytes: int = 0,
    *,
    agprs: int = 0,
    sgprs: int = 0,
) -> Occupancy:
    """Resident workgroups (and waves) per CU on gfx90a/gfx942.

    A workgroup's waves are spread round-robin over the CU's four SIMDs, so a
    per-SIMD wave budget of ``k`` admits ``floor(4k / waves_per_workgroup)``
    workgroups.
    """
    a = AMD[arch] if isinstance(arch, str) else arch
    if threads <= 0:
        raise ValueError(f"threads must be positive, got {threads}")
    if vgprs > a.max_arch_vgprs:
        raise ValueError(f"vgprs must be at most {a.max_arch_vgprs} on {a.name}, got {vgprs}")
    if agprs > a.max_agprs:
        raise ValueError(f"agprs must be at most {a.max_agprs} on {a.name}, got {agprs}")
    waves = _ceil_div(threads, a.wave_size)
    total = amd_total_vgprs(vgprs, agprs)

    def by_simd_budget(per_simd: int) -> int:
        return (a.cus_simds * per_simd) // waves

    lds_alloc = _round_up(lds_bytes, a.lds_granule)
    limits = {
        "waves": 0 if threads > a.max_threads_per_block else by_simd_budget(a.max_waves_per_simd),
        "workgroups": a.max_waves_per_cu if waves == 1 else a.max_workgroups_per_cu,
        "vgprs": by_simd_budget(amd_waves_per_simd_vgpr(a, total)),
        "sgprs": by_simd_budget(amd_waves_per_simd_sgpr(a, sgprs)),
        "lds": 0 if lds_alloc > a.lds_per_cu else (INT_MAX if lds_alloc == 0 else a.lds_per_cu // lds_alloc),
    }
    blocks = min(limits.values())
    limiter = next(k for k, v in limits.items() if v == blocks)
    return Occupancy(
        arch=a.name,
        threads=threads,
        blocks=blocks,
        warps=blocks * waves,
        max_warps=a.max_waves_per_cu,
        limiter=limiter,
        limits=limits,
        allocated={"vgprs": _round_up(total, a.vgpr_granule), "lds": lds_alloc, "waves": waves},
    )


def occupancy(
    arch: str,
    threads: int,
    registers: int = 0,
    shared_bytes: int = 0,
    dynamic_shared: int = 0,
    *,
    agprs: int = 0,
    sgprs: int = 0,
    **nvidia_options: Any,
) -> Occupancy:
    """One entry point: ``registers`` are per-thread registers (NVIDIA) or arch VGPRs (AMD);
    ``shared_bytes`` + ``dynamic_shared`` is shared memory (NVIDIA) or LDS (AMD)."""
    arch = normalize_arch(arch)
    if arch in NVIDIA:
        return nvidia_occupancy(arch, threads, registers, shared_bytes, dynamic_shared, **nvidia_options)
    if arch in AMD:
        return amd_occupancy(arch, threads, registers, shared_bytes + dynamic_shared, agprs=agprs, sgprs=sgprs)
    raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")


def normalize_arch(arch: str) -> str:
    """``sm_90a`` -> ``sm_90``, ``9.0`` -> ``sm_90``, ``gfx942:sramecc+:xnack-`` -> ``gfx942``."""
    s = str(arch).strip().lower()
    if s.startswith("gfx"):
        return s.split(":")[0]
    if s.startswith("sm_") or s.startswith("sm"):
        digits = "".join(ch for ch in s[2:].lstrip("_") if ch.isdigit())
        return f"sm_{digits}"
    if "." in s:
        major, minor = s.split(".", 1)
        return f"sm_{int(major)}{int(minor)}"
    return s


def _fact(profile: Any, *names: str, default: int = 0) -> int:
    """First of ``names`` present on the profile, or in its ``extra`` mapping (AGPRs, SGPRs, ...)."""
    extra = (profile.get("extra") if isinstance(profile, Mapping) else getattr(profile, "extra", None)) or {}
    for source in (profile, extra):
        for name in names:
            value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
            if value is not None:
                return int(value)
    return default


def from_static(profile: Any, arch: str, threads: int | None = None, dynamic_shared: int = 0) -> Occupancy:
    """Occupancy of a compiled kernel from its static facts.

    ``profile`` is a mapping or object with the facts a compiler reports:
    registers (``registers``/``num_regs``/``vgprs``), AGPRs and SGPRs on AMD,
    static shared memory/LDS (``shared_bytes``/``shared``/``lds_bytes``) and,
    if ``threads`` is not given, ``threads`` or ``num_warps`` (x32 on NVIDIA,
    x64 on AMD).
    """
    arch = normalize_arch(arch)
    amd = arch in AMD
    if threads is None:
        threads = _fact(profile, "threads", "block_threads")
        if not threads:
            warps = _fact(profile, "num_warps", "warps")
            threads = warps * (64 if amd else 32)
    if not threads:
        raise ValueError("threads per block is not in the profile; pass threads=")
    regs = (_fact(profile, "vgprs", "arch_vgprs", "registers", "num_regs") if amd
            else _fact(profile, "registers", "num_regs", "n_regs", "regs"))
    shared = _fact(profile, "lds_bytes", "shared_bytes", "shared", "smem_bytes", "lds")
    if amd:
        return amd_occupancy(
            arch, threads, regs, shared + dynamic_shared, agprs=_fact(profile, "agprs"), sgprs=_fact(profile, "sgprs")
        )
    return nvidia_occupancy(arch, threads, regs, shared, dynamic_shared)


def from_static_profile(profile: Any, target: str) -> dict[str, Any]:
    """Compact occupancy of a ``ceiling.isa.StaticProfile`` (or its ``as_dict()``) for ``ceiling inspect``.

    Returns blocks per SM (workgroups per CU), resident warps (waves), the
    fraction of warp (wave) slots, and the binding resource.
    """
    o = from_static(profile, target)
    return {"blocks": o.blocks, "warps": o.warps, "occupancy": round(o.occupancy, 4), "limiter": o.limiter}
