"""CDNA4 (MI355X, MI350X: gfx950) for the Triton kernels: which compile target a problem's GPU is,
and the config it runs with where no table of that target or device holds an entry: the CDNA3
heuristic and the gfx942 table's entries (never an MI300X measurement) fitted to the gfx950 space
(:mod:`ceiling.spaces.derive`), whose LDS is 160 KB where CDNA3 has 64 KB."""

from __future__ import annotations

from typing import Any

from ceiling.spaces.derive import derived

CDNA3 = "gfx942"
ARCH_TARGETS = {"gfx950": "gfx950"}


# CDNA4 has no XF32 matrix instruction: Triton refuses input_precision="tf32" when compiling for it
NO_TF32 = frozenset(ARCH_TARGETS.values())


# CDNA4's FP8 matrix instructions (v_mfma_*_f8f6f4) take the OCP formats; given CDNA3's FNUZ codes
# the compiler widens them to FP16 (compiled for gfx950, 4x the MFMA instructions of OCP operands)
OCP_FP8 = frozenset(ARCH_TARGETS.values())


def input_precision(float32: bool, target: str | None) -> str:
    """``tl.dot``'s input precision in the kernels that take float32 operands: full fp32 ("ieee")
    for float32 inputs (to match the reference with TF32 off) and on a target without TF32,
    "tf32" otherwise (16-bit inputs ignore it)."""
    return "ieee" if float32 or target in NO_TF32 else "tf32"


def target(problem) -> str:
    """The compile target of ``problem``'s GPU: gfx950 on CDNA4, else CDNA3's."""
    return ARCH_TARGETS.get((problem.arch or "").split(":")[0], CDNA3)


def config(family: str, problem, heuristic: dict[str, Any], features: dict[str, Any]) -> dict[str, Any]:
    """``heuristic`` on CDNA3; on CDNA4, derived from it and the gfx942 table for gfx950."""
    where = target(problem)
    if where == CDNA3:
        return heuristic
    return derived("amd", family, CDNA3, where, heuristic, features)
