"""Occupancy calculator: the worked examples, the register/shared cliffs on sm_90, VGPR steps on gfx942."""

import random

import pytest

from ceiling.microbench import occupancy as occ

KB = 1024


def test_worked_example_h100():
    o = occ.occupancy("sm_90a", 256, registers=64, dynamic_shared=48 * KB)
    assert (o.blocks, o.warps, o.occupancy) == (4, 32, 0.5)
    assert set(o.limiters) == {"registers", "shared_memory"}
    assert o.allocated["shared_memory"] == 49152 + 1024
    o72 = occ.occupancy("sm_90", 256, registers=72, dynamic_shared=48 * KB)
    assert (o72.blocks, o72.occupancy, o72.limiter) == (3, 0.375, "registers")


@pytest.mark.parametrize(
    "regs, warps",
    [(32, 64), (40, 48), (48, 40), (56, 36), (64, 32), (72, 28), (80, 24), (96, 20), (128, 16), (168, 12), (255, 8)],
)
def test_register_cliffs_sm90(regs, warps):
    o = occ.occupancy("sm_90", 128, registers=regs)  # 4-warp blocks: one warp per sub-partition
    assert o.warps == warps
    assert o.limiter == ("warps" if regs <= 32 else "registers")


def test_register_cliff_is_at_the_allocation_unit():
    assert occ.occupancy("sm_90", 128, registers=64).warps == 32
    assert occ.occupancy("sm_90", 128, registers=65).warps == 28  # 65*32 rounds up to 2304 per warp
    assert occ.occupancy("sm_90", 1024, registers=32).blocks == 2
    assert occ.occupancy("sm_90", 1024, registers=33).blocks == 1
    assert occ.occupancy("sm_90", 1024, registers=64).blocks == 1  # the whole 64K file
    assert occ.occupancy("sm_90", 1024, registers=65).blocks == 0  # a block that cannot fit at all
    assert occ.occupancy("sm_90", 32, registers=257).blocks == 0


@pytest.mark.parametrize(
    "smem, blocks",
    [(57344, 4), (57345, 3), (76800, 3), (76801, 2), (115712, 2), (115713, 1), (232448, 1), (232449, 0)],
)
def test_shared_memory_cliffs_sm90(smem, blocks):
    # blocks = floor(228 KB / roundup(smem + 1 KB reserved, 128))
    o = occ.occupancy("sm_90", 128, registers=32, dynamic_shared=smem)
    assert o.blocks == blocks
    assert o.limiter == "shared_memory"


def test_shared_memory_opt_in_and_carveout():
    # without opting in, dynamic shared memory stops at 48 KB
    assert occ.nvidia_occupancy("sm_90", 128, 32, 0, 49 * KB, max_dynamic_shared=48 * KB).blocks == 0
    # a carveout rounds up to the next legal size: 50% of 228 KB -> 132 KB holds 3 blocks of 41 KB,
    # 25% -> 64 KB holds 1
    assert occ.nvidia_occupancy("sm_90", 128, 32, 0, 40 * KB, carveout_percent=50).blocks == 3
    assert occ.nvidia_occupancy("sm_90", 128, 32, 0, 40 * KB, carveout_percent=25).blocks == 1


def test_per_arch_limits():
    assert occ.occupancy("sm_86", 32, registers=16).blocks == 16
    assert occ.occupancy("sm_89", 32, registers=16).blocks == 24
    assert occ.occupancy("sm_80", 32, registers=16).blocks == 32
    assert occ.occupancy("sm_86", 1024, registers=32).blocks == 1  # 48 warps per SM
    assert occ.occupancy("sm_80", 128, dynamic_shared=100 * KB).blocks == 1
    assert occ.occupancy("sm_86", 128, dynamic_shared=99 * KB).blocks == 1
    assert occ.occupancy("sm_86", 128, dynamic_shared=100 * KB).blocks == 0
    assert occ.occupancy("sm_100", 2048 // 2, registers=32).blocks == 2
    assert occ.occupancy("sm_90", 1025).blocks == 0


def _spreadsheet_rule(threads, regs, smem):
    """The classic occupancy-spreadsheet formulas for sm_90, written independently."""
    w = -(-threads // 32)
    by_warps = 64 // w
    rpw = -(-regs * 32 // 256) * 256
    if regs == 0:
        by_regs = 10**9
    elif rpw * (-(-w // 4) * 4) > 65536:
        by_regs = 0
    else:
        by_regs = ((65536 // rpw) // 4 * 4) // w
    alloc = -(-(smem + 1024) // 128) * 128
    by_smem = 0 if alloc > 227 * KB + 1024 else 233472 // alloc
    return min(by_warps, by_regs, by_smem, 32)


def test_random_configs_match_the_spreadsheet_rule():
    rng = random.Random()
    for _ in range(2000):
        threads, regs, smem = rng.randint(1, 1024), rng.randint(0, 255), rng.randint(0, 227 * KB)
        assert occ.occupancy("sm_90", threads, regs, 0, smem).blocks == _spreadsheet_rule(threads, regs, smem)


@pytest.mark.parametrize(
    "vgprs, waves", [(8, 8), (64, 8), (65, 7), (72, 7), (80, 6), (96, 5), (128, 4), (168, 3), (256, 2)]
)
def test_vgpr_steps_gfx942(vgprs, waves):
    o = occ.occupancy("gfx942", 256, registers=vgprs)  # 4 waves: one per SIMD
    assert o.warps // 4 == waves
    assert o.limiter == ("waves" if waves == 8 else "vgprs")


def test_amd_agprs_lds_sgprs():
    o = occ.amd_occupancy("gfx942", 64, 124, agprs=4)  # rocprof-compute tutorial: 128 -> 4 waves/SIMD
    assert o.warps == 16 and o.allocated["vgprs"] == 128
    assert occ.amd_occupancy("gfx942", 64, 256, agprs=256).warps == 4  # the whole 512-entry file: 1 wave/SIMD
    assert occ.amd_total_vgprs(122, 8) == 132
    lds = occ.amd_occupancy("gfx942", 256, 32, 40 * KB)
    assert (lds.blocks, lds.limiter) == (1, "lds")
    assert occ.amd_occupancy("gfx942", 256, 32, 32 * KB).blocks == 2
    assert occ.amd_occupancy("gfx942", 256, 32, 64 * KB + 1).blocks == 0
    assert occ.amd_occupancy("gfx90a", 64, 32, sgprs=104).warps == 28
    assert occ.amd_occupancy("gfx942", 64, 32).blocks == 32  # single-wave workgroups: 32 per CU
    assert occ.amd_occupancy("gfx942", 128, 32).blocks == 16  # multi-wave: 16 per CU
    with pytest.raises(ValueError, match="vgprs"):
        occ.amd_occupancy("gfx942", 64, 300)


def test_arch_names_and_static_facts():
    assert occ.normalize_arch("sm_90a") == "sm_90"
    assert occ.normalize_arch("9.0") == "sm_90"
    assert occ.normalize_arch("gfx942:sramecc+:xnack-") == "gfx942"
    with pytest.raises(ValueError, match="arch"):
        occ.occupancy("sm_75", 128)
    o = occ.from_static({"registers": 168, "shared": 0, "num_warps": 8}, "sm_90a", dynamic_shared=96 * KB)
    assert (o.threads, o.blocks) == (256, 1)
    a = occ.from_static({"vgprs": 128, "agprs": 0, "lds_bytes": 16 * KB, "num_warps": 4}, "gfx942")
    assert (a.threads, a.blocks, a.warps) == (256, 4, 16)
    with pytest.raises(ValueError, match="threads"):
        occ.from_static({"registers": 32}, "sm_90")


def test_static_profile_rows_as_ceiling_inspect_passes_them():
    row = {"name": "gemm_128x256", "target": "sm_90a", "registers": 168, "spill_bytes": 0,
           "shared_bytes": 160 * KB, "threads": 256, "num_warps": 8, "extra": {}}
    assert occ.from_static_profile(row, "sm_90a") == {"blocks": 1, "warps": 8, "occupancy": 0.125, "limiter": "registers"}
    amd = {"registers": 128, "shared_bytes": 32 * KB, "threads": 256, "extra": {"agprs": 128, "sgprs": 40}}
    got = occ.from_static_profile(amd, "gfx942")
    assert got == {"blocks": 2, "warps": 8, "occupancy": 0.25, "limiter": "vgprs"}
