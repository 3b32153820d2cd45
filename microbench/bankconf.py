"""Shared-memory (NVIDIA) and LDS (AMD CDNA3) bank-conflict model.

Given the byte address each lane of a warp/wavefront touches and the access
width, return how many *wavefronts* (bank-cycles) the access costs. The rule,
for both vendors: the lanes are split into phases that the hardware serves
separately; within a phase, each 4-byte bank delivers one distinct 32-bit word
per cycle (lanes reading the same word share it), so a phase costs as many
cycles as the most-loaded bank has distinct words. The total is the sum over
the non-empty phases; the ideal is the number of non-empty phases, and the
conflicts are the difference.

Phases:
- NVIDIA, 32 banks x 4 B: one phase of 32 lanes for 1/2/4-byte accesses, two
  half-warps for 8-byte, four quarter-warps for 16-byte; ``ldmatrix`` serves one
  8x8 b16 matrix (8 rows of 16 B, addressed by 8 lanes) per phase.
- CDNA3 (gfx942) LDS, 32 banks x 4 B, 64 lanes: ds_*_b32 in 2 phases of 32
  lanes, b64 in 4 phases of 16, ds_read_b128 in 8 phases of 8 *swizzled* lanes,
  ds_write_b128 in 8 contiguous groups of 8 lanes.

The swizzle helpers reproduce the layouts CUTLASS (``cute::Swizzle<B,M,S>``) and
Triton (``SwizzledSharedEncoding(vec, perPhase, maxPhase)``, NVMMA 128B) use, so
a layout can be checked for conflicts before it is written into a kernel.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

BANKS = 32
BANK_BYTES = 4

# NVIDIA: lanes served together, per access width in bytes.
_NV_LANES_PER_PHASE = {1: 32, 2: 32, 4: 32, 8: 16, 16: 8}

# CDNA3 ds_read_b128: the eight lane groups served together (nod-ai empirical
# LDS study of MI300X; the same grouping is in Triton's AMD layout code).
_CDNA3_B128_READ_PHASES: tuple[tuple[int, ...], ...] = tuple(
    tuple(list(range(a, a + 4)) + list(range(b, b + 4)))
    for a, b in ((0, 20), (32, 52), (4, 16), (36, 48), (8, 28), (40, 60), (12, 24), (44, 56))
)


@dataclass(frozen=True)
class Wavefronts:
    """Cost of one warp-/wave-wide shared-memory access."""

    wavefronts: int  # bank-cycles the access takes
    ideal: int  # non-empty phases: the cost with no conflicts
    per_phase: tuple[int, ...]  # cycles of each phase (0 for a phase with no active lane)

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.ideal


def _check(addrs: Sequence[int], width: int, lanes: int, widths: Iterable[int]) -> None:
    if width not in widths:
        raise ValueError(f"width must be one of {sorted(widths)} bytes, got {width}")
    if len(addrs) != lanes:
        raise ValueError(f"need one address per lane ({lanes}), got {len(addrs)}")
    for lane, a in enumerate(addrs):
        if a is not None and (a < 0 or a % width):
            raise ValueError(f"lane {lane}: address {a} is not a non-negative multiple of the width {width}")


def _phase_cycles(addrs: Sequence[int | None], lanes: Iterable[int], width: int) -> int:
    """Most distinct 4-byte words any one bank must deliver for these lanes."""
    words: set[int] = set()
    for lane in lanes:
        a = addrs[lane]
        if a is None:  # inactive lane
            continue
        first = a // BANK_BYTES
        words.update(range(first, first + max(1, width // BANK_BYTES)))
    if not words:
        return 0
    return max(Counter(w % BANKS for w in words).values())


def _total(addrs: Sequence[int | None], phases: Sequence[Sequence[int]], width: int) -> Wavefronts:
    per_phase = tuple(_phase_cycles(addrs, p, width) for p in phases)
    return Wavefronts(sum(per_phase), sum(1 for c in per_phase if c), per_phase)


def nvidia_wavefronts(addrs: Sequence[int | None], width: int = 4) -> Wavefronts:
    """Wavefronts for one warp's LDS/STS of ``width`` bytes per lane.

    ``addrs``: 32 byte addresses (None marks an inactive lane).
    """
    _check(addrs, width, 32, _NV_LANES_PER_PHASE)
    n = _NV_LANES_PER_PHASE[width]
    return _total(addrs, [range(i, i + n) for i in range(0, 32, n)], width)


def ldmatrix_wavefronts(row_addrs: Sequence[int], num: int = 4) -> Wavefronts:
    """Wavefronts for ``ldmatrix.m8n8.x{num}.b16``: lane 8*m + r gives row r of matrix m.

    Each matrix (8 rows x 16 B) is one phase; lanes beyond 8*num are ignored.
    """
    if num not in (1, 2, 4):
        raise ValueError(f"num must be 1, 2 or 4, got {num}")
    if len(row_addrs) < 8 * num:
        raise ValueError(f"need {8 * num} row addresses, got {len(row_addrs)}")
    addrs = list(row_addrs[: 8 * num])
    for lane, a in enumerate(addrs):
        if a < 0 or a % 16:
            raise ValueError(f"lane {lane}: ldmatrix row address {a} is not 16-byte aligned")
    return _total(addrs, [range(8 * m, 8 * m + 8) for m in range(num)], 16)


def cdna3_phases(width: int, op: str = "read") -> tuple[tuple[int, ...], ...]:
    """Lane groups that gfx942 LDS serves together for ds_{read,write}_b{32,64,128}."""
    if op not in ("read", "write"):
        raise ValueError(f"op must be 'read' or 'write', got {op!r}")
    if width == 16 and op == "read":
        return _CDNA3_B128_READ_PHASES
    n = {4: 32, 8: 16, 16: 8}.get(width)
    if n is None:
        raise ValueError(f"width must be 4, 8 or 16 bytes, got {width}")
    return tuple(tuple(range(i, i + n)) for i in range(0, 64, n))


def cdna3_wavefronts(addrs: Sequence[int | None], width: int = 4, op: str = "read") -> Wavefronts:
    """Bank-cycles for one 64-lane ds_read/ds_write of ``width`` bytes on gfx942.

    ``Wavefronts.conflicts`` is what rocprof's SQ_LDS_BANK_CONFLICT counts per
    instruction (the first cycle of each phase is not a conflict).
    """
    _check(addrs, width, 64, (4, 8, 16))
    return _total(addrs, cdna3_phases(width, op), width)


# ---------------------------------------------------------------- patterns


def strided(stride: int, width: int, lanes: int = 32, base: int = 0) -> list[int]:
    """Lane i accesses element ``i * stride`` of an array of ``width``-byte elements."""
    return [base + i * stride * width for i in range(lanes)]


def cute_swizzle(bits: int, base: int, shift: int):
    """``cute::Swizzle<B, M, S>`` on an offset: XOR B bits taken S above bit M into bits [M, M+B)."""
    if bits < 0 or base < 0 or abs(shift) < bits:
        raise ValueError("Swizzle needs B >= 0, M >= 0, |S| >= B")
    yyy = ((1 << bits) - 1) << (base + max(0, shift))

    def apply(offset: int) -> int:
        return offset ^ ((offset & yyy) >> shift) if shift >= 0 else offset ^ ((offset & yyy) << -shift)

    return apply


# Hopper GMMA shared-memory atoms in byte-address terms: the 16-byte chunk index
# (bits 4..6) XOR the 128-byte row index mod 8/4/2.
SW128 = cute_swizzle(3, 4, 3)
SW64 = cute_swizzle(2, 4, 3)
SW32 = cute_swizzle(1, 4, 3)


def triton_swizzled_offset(row: int, col: int, row_elems: int, elem_bytes: int, vec: int, per_phase: int, max_phase: int) -> int:
    """Byte offset of element (row, col) under Triton's ``SwizzledSharedEncoding``.

    The column is moved in units of ``vec`` elements: ``(col // vec) ^ phase`` with
    ``phase = (row // per_phase) % max_phase``.
    """
    phase = (row // per_phase) % max_phase
    swizzled = (((col // vec) ^ phase) * vec) + col % vec
    return (row * row_elems + swizzled) * elem_bytes


def ldmatrix_tile_rows(pitch_bytes: int, col_bytes: int = 0, swizzle=None, row0: int = 0) -> list[int]:
    """Row addresses for ldmatrix.x4 reading four 8x8 b16 matrices stacked along rows.

    Lane l supplies row ``row0 + l`` of a tile with ``pitch_bytes`` between rows,
    at byte column ``col_bytes``; ``swizzle`` (if given) maps the linear offset to
    the stored one.
    """
    rows = []
    for lane in range(32):
        offset = (row0 + lane) * pitch_bytes + col_bytes
        rows.append(swizzle(offset) if swizzle else offset)
    return rows
