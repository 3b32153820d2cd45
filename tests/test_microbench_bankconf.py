"""Bank-conflict model against cases with known answers, and against an independent count."""

import random
from collections import defaultdict

import pytest

from ceiling.microbench import bankconf as bc


@pytest.mark.parametrize("stride, expected", [(1, 1), (2, 2), (4, 4), (8, 8), (16, 16), (32, 32), (33, 1), (64, 32), (3, 1)])
def test_nvidia_4_byte_strides(stride, expected):
    w = bc.nvidia_wavefronts(bc.strided(stride, 4), 4)
    assert w.wavefronts == expected
    assert w.ideal == 1
    assert w.conflicts == expected - 1


def test_nvidia_wide_accesses_stride_1_are_conflict_free():
    for width, phases in ((8, 2), (16, 4)):
        w = bc.nvidia_wavefronts(bc.strided(1, width), width)
        assert (w.wavefronts, w.ideal, w.conflict_free) == (phases, phases, True)
        assert w.per_phase == (1,) * phases


def test_nvidia_wide_conflicts_count_within_phases_only():
    # 16-byte stride 2: each quarter-warp spans 256 B -> every bank holds 2 distinct words
    assert bc.nvidia_wavefronts(bc.strided(2, 16), 16).wavefronts == 8
    # 8-byte stride 16: a half-warp lands on 2 banks, 16 distinct words each
    assert bc.nvidia_wavefronts(bc.strided(16, 8), 8).wavefronts == 32


def test_broadcast_and_inactive_lanes():
    assert bc.nvidia_wavefronts([64] * 32, 4).wavefronts == 1
    addrs = [i * 128 if i < 4 else None for i in range(32)]  # 4 active lanes, same bank
    assert bc.nvidia_wavefronts(addrs, 4).wavefronts == 4
    assert bc.nvidia_wavefronts([None] * 32, 4).wavefronts == 0


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="width"):
        bc.nvidia_wavefronts(bc.strided(1, 4), 3)
    with pytest.raises(ValueError, match="one address per lane"):
        bc.nvidia_wavefronts([0] * 31, 4)
    with pytest.raises(ValueError, match="multiple of the width"):
        bc.nvidia_wavefronts([4] * 32, 16)
    with pytest.raises(ValueError, match="16-byte aligned"):
        bc.ldmatrix_wavefronts([8] * 32)


def _independent_count(addrs, width, lanes_per_phase):
    """Straight from the definition: per phase, per bank, the set of 4-byte words touched."""
    total = 0
    for start in range(0, len(addrs), lanes_per_phase):
        banks = defaultdict(set)
        for a in addrs[start:start + lanes_per_phase]:
            for byte in range(a, a + width, 4):
                banks[(byte // 4) % 32].add(byte // 4)
        total += max((len(v) for v in banks.values()), default=0)
    return total


def test_nvidia_random_patterns_match_an_independent_count():
    rng = random.Random()
    for _ in range(300):
        width = rng.choice([4, 8, 16])
        addrs = [width * rng.randrange(0, 2048) for _ in range(32)]
        expected = _independent_count(addrs, width, {4: 32, 8: 16, 16: 8}[width])
        assert bc.nvidia_wavefronts(addrs, width).wavefronts == expected


def test_swizzles_make_column_reads_conflict_free():
    plain = [lane * 128 + 16 for lane in range(32)]  # chunk 1 of rows 0..31, 128-byte pitch
    assert bc.nvidia_wavefronts(plain, 16).wavefronts == 32  # 8-way in every quarter-warp
    sw = [bc.SW128(a) for a in plain]
    assert bc.nvidia_wavefronts(sw, 16).conflict_free
    triton = [bc.triton_swizzled_offset(r, 8, 64, 2, 8, 1, 8) for r in range(32)]
    assert bc.nvidia_wavefronts(triton, 16).conflict_free
    assert sorted(x % 128 for x in triton[:8]) == list(range(0, 128, 16))  # the same 8 chunks, permuted


def test_cute_swizzle_matches_its_definition():
    sw = bc.cute_swizzle(3, 4, 3)
    for offset in random.Random(0).sample(range(1 << 16), 200):
        assert sw(offset) == offset ^ (((offset >> 7) & 7) << 4)
    assert bc.SW64(0b1_1000_0000) == 0b1_1000_0000 ^ (0b11 << 4)
    with pytest.raises(ValueError):
        bc.cute_swizzle(3, 4, 2)


def test_ldmatrix_pitches_and_swizzle():
    assert bc.ldmatrix_wavefronts(bc.ldmatrix_tile_rows(128)).wavefronts == 32
    assert bc.ldmatrix_wavefronts(bc.ldmatrix_tile_rows(144)).conflict_free
    assert bc.ldmatrix_wavefronts(bc.ldmatrix_tile_rows(128, swizzle=bc.SW128)).conflict_free
    assert bc.ldmatrix_wavefronts(bc.ldmatrix_tile_rows(16), num=2).wavefronts == 2


@pytest.mark.parametrize("width, saturated_conflicts", [(4, 62), (8, 60), (16, 56)])
def test_cdna3_saturated_conflicts(width, saturated_conflicts):
    addrs = [lane * 128 for lane in range(64)]  # every lane on the same bank(s), distinct words
    assert bc.cdna3_wavefronts(addrs, width, "read").conflicts == saturated_conflicts


def test_cdna3_b128_phases():
    contiguous = bc.strided(1, 16, lanes=64)
    read = bc.cdna3_wavefronts(contiguous, 16, "read")
    write = bc.cdna3_wavefronts(contiguous, 16, "write")
    assert (read.wavefronts, read.ideal) == (8, 8)
    assert (write.wavefronts, write.ideal) == (8, 8)
    groups = bc.cdna3_phases(16, "read")
    assert sorted(lane for g in groups for lane in g) == list(range(64))
    assert groups[0] == (0, 1, 2, 3, 20, 21, 22, 23)
    # each 8-lane group covering one 128-byte window: all 32 banks once
    pattern = [(lane % 8) * 16 + (lane // 8) * 128 * 8 for lane in range(64)]
    assert bc.cdna3_wavefronts(pattern, 16, "write").conflict_free
    assert bc.cdna3_wavefronts(bc.strided(1, 8, lanes=64), 8).wavefronts == 4
    assert bc.cdna3_wavefronts(bc.strided(2, 4, lanes=64), 4).wavefronts == 4
